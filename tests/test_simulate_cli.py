"""``bayeslat simulate`` and the shipped example sweep."""

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bayeslat.cli import app
from bayeslat.data.schema import read_table
from bayeslat.simulate import presets
from bayeslat.simulate.protocol import Protocol

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example" / "sweep.parquet"


@pytest.fixture
def tiny_preset(monkeypatch):
    tiny = presets.Preset("tiny", "one group, one SD configuration",
                          (presets.eagle("llama-1b", "H100"),), pairs=((128, 32),),
                          alphas=(0.8,), ks=(2,), protocol=Protocol(requests=30, measure=4.0))
    monkeypatch.setitem(presets.PRESETS, "tiny", tiny)
    return tiny


def test_simulate_writes_a_valid_table_and_refuses_to_overwrite(tiny_preset, tmp_path):
    out = tmp_path / "tiny.parquet"
    result = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = read_table(out)
    assert len(table) == 2 * 11 and set(table["k"]) == {0, 2}
    assert "llama-1b H100 p128 g32" in result.output and "wrote 22 rows" in result.output
    again = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output
    seeded = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out), "--seed", "0",
                                 "--overwrite"])
    assert seeded.exit_code == 0
    pd.testing.assert_frame_equal(read_table(out), table)


def test_unknown_preset_is_one_line_exit_2(tmp_path):
    result = runner.invoke(app, ["simulate", "--preset", "nope", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "--preset" in result.output and "dense-8b-h100" in result.output


def test_help_names_the_options():
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    for option in ("--preset", "--seed", "--output", "--reports", "--overwrite"):
        assert option in result.output


def test_shipped_example_is_valid_and_fit_friendly():
    table = read_table(EXAMPLE)
    assert 1000 <= len(table) <= 5000
    assert table["verifier"].nunique() >= 2
    assert table.groupby("verifier")[["prefill_tokens", "decode_tokens"]].apply(
        lambda g: len(g.drop_duplicates())).min() == 4
    assert 0 in set(table["k"]) and table["k"].nunique() >= 3
    assert table["alpha"].dropna().nunique() >= 3
    assert (~table["saturated"]).mean() > 0.8


@pytest.mark.slow
def test_shipped_example_is_what_its_readme_command_writes(tmp_path):
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "bayeslat simulate --preset example --seed 0" in readme
    out = tmp_path / "sweep.parquet"
    result = runner.invoke(app, ["simulate", "--preset", "example", "--seed", "0", "-o",
                                 str(out)])
    assert result.exit_code == 0, result.output
    # floats to 1e-12 (another CPU's libm can change the last bit of a few rates), everything
    # else exactly
    new, shipped = read_table(out), read_table(EXAMPLE)
    floats = [c for c in shipped.columns if pd.api.types.is_float_dtype(shipped[c])]
    pd.testing.assert_frame_equal(new.drop(columns=floats), shipped.drop(columns=floats),
                                  check_exact=True)
    pd.testing.assert_frame_equal(new[floats], shipped[floats], check_exact=False, rtol=1e-12,
                                  atol=0.0)


def test_reports_round_trip_through_ingest(tiny_preset, tmp_path):
    from bayeslat.data.ingest import ingest

    out, folder = tmp_path / "tiny.parquet", tmp_path / "reports"
    result = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out), "--reports",
                                 str(folder)])
    assert result.exit_code == 0, result.output
    assert len(list(folder.glob("*.json"))) == 2 and len(list(folder.glob("*.toml"))) == 2
    table = read_table(out)
    back = ingest([folder])
    assert len(back) == len(table)
    key = ["k", "strategy", "rate_target"]
    merged = table.merge(back, on=key, suffixes=("", "_in"))
    assert len(merged) == len(table)
    for column in ("rps", "latency_mean", "latency_p95", "ttft_mean", "itl_mean", "alpha"):
        pd.testing.assert_series_equal(merged[column], merged[f"{column}_in"],
                                       check_names=False, rtol=1e-9)
    for column in ("verifier", "drafter", "method", "hardware", "prefill_tokens", "n_successful"):
        assert (merged[column] == merged[f"{column}_in"]).all()
    assert (merged["saturated"] == merged["saturated_in"]).all()


def test_poisson_arrivals_option(tiny_preset, tmp_path):
    out = tmp_path / "p.parquet"
    result = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out), "--arrivals",
                                 "poisson"])
    assert result.exit_code == 0, result.output
    assert set(read_table(out)["strategy"]) == {"synchronous", "throughput", "poisson"}
    bad = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(out), "--arrivals",
                              "bursty", "--overwrite"])
    assert bad.exit_code == 2 and "--arrivals" in bad.output


def test_non_empty_reports_folder_is_refused_before_simulating(tiny_preset, tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "old.json").write_text("{}")
    result = runner.invoke(app, ["simulate", "--preset", "tiny", "-o", str(tmp_path / "x.parquet"),
                                 "--reports", str(folder)])
    assert result.exit_code == 2 and "not empty" in result.output
    assert not (tmp_path / "x.parquet").exists()
