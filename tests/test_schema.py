"""The tidy sweep table contract."""

import numpy as np
import pandas as pd
import pytest

from bayeslat.data import schema
from bayeslat.errors import SchemaError


def make_rows(n=3, k=2):
    rows = []
    for i in range(n):
        rows.append(dict(
            verifier="llama-8b", verifier_params_b=8.0, drafter="eagle3-8b" if k else "none",
            drafter_params_b=0.25 if k else 0.0, method="eagle3" if k else "none",
            hardware="H100", moe_experts_active=0, moe_experts_total=0, prefill_tokens=512.0,
            decode_tokens=256.0, k=k, alpha=0.7 if k else np.nan,
            alpha_source="forced" if k else "none", strategy="constant", rate_target=1.0 + i,
            rps=0.98 + i, latency_mean=2.0 + 0.1 * i, latency_std=0.3, latency_p50=1.9,
            latency_p95=2.5, latency_p99=2.9, ttft_mean=0.05, itl_mean=0.007,
            n_successful=100, n_errored=0, n_incomplete=1, duration_s=60.0, saturated=False,
            saturation_reason="", source=f"run.json#{i}",
        ))
    return pd.DataFrame(rows)


def test_round_trip_is_lossless(tmp_path):
    df = pd.concat([make_rows(k=0), make_rows(k=3).assign(source=lambda d: d.source + "b")])
    path = schema.write_table(df, tmp_path / "t.parquet")
    back = schema.read_table(path)
    pd.testing.assert_frame_equal(back, schema.validate(df))
    assert list(back.columns) == list(schema.COLUMN_NAMES)


def test_labels():
    df = make_rows(k=3)
    assert schema.config_labels(df).iloc[0] == "llama-8b H100 p512 g256 eagle3:eagle3-8b a0.7 k3"
    assert schema.config_labels(make_rows(k=0)).iloc[0] == "llama-8b H100 p512 g256 k0"
    assert schema.draft_labels(df).iloc[0] == "llama-8b H100 p512 g256 eagle3:eagle3-8b"
    assert schema.drafter_labels(df).iloc[0] == "eagle3:eagle3-8b"
    assert schema.group_labels(make_rows(k=0)).iloc[0] == "llama-8b H100 p512 g256"


@pytest.mark.parametrize(
    "column, value, needle",
    [
        ("latency_mean", np.nan, "finite"),
        ("latency_mean", -1.0, "positive"),
        ("rps", -0.5, "negative"),
        ("alpha", 1.5, "[0, 1]"),
        ("k", 1.5, "whole number"),
        ("strategy", "warp", "one of"),
        ("n_successful", 0, "at least one"),
    ],
)
def test_bad_values_name_the_column(column, value, needle):
    df = make_rows().astype({column: object})
    df.loc[1, column] = value
    with pytest.raises(SchemaError) as info:
        schema.validate(df, "x.parquet")
    msg = str(info.value)
    assert msg.startswith("x.parquet: field '" + column + "'")
    assert needle in msg and "run.json#1" in msg


def test_missing_column_and_duplicates():
    with pytest.raises(SchemaError, match="missing column"):
        schema.validate(make_rows().drop(columns="rps"))
    dup = pd.concat([make_rows(), make_rows()])
    with pytest.raises(SchemaError, match="duplicate benchmark"):
        schema.validate(dup)


def test_failed_write_leaves_existing_file(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"precious")
    bad = make_rows()
    bad.loc[0, "latency_mean"] = -1
    with pytest.raises(SchemaError):
        schema.write_table(bad, path)
    assert path.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_unreadable_file(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_text("not parquet")
    with pytest.raises(SchemaError, match="not a readable Parquet"):
        schema.read_table(path)


def test_written_file_has_ordinary_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        path = schema.write_table(make_rows(), tmp_path / "t.parquet")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


# --- tidy CSV tables --------------------------------------------------------------------------


def _csv(tmp_path, df, name="t.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_csv_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(1)
    df = pd.concat([make_rows(k=0), make_rows(k=3).assign(source=lambda d: d.source + "b")])
    df["latency_mean"] = rng.random(len(df)) * 3 + 0.1  # 17 significant digits
    df.loc[df.index[0], "latency_p99"] = np.nan
    df.loc[df.index[1], ["saturated", "saturation_reason"]] = [True, "because; and a comma, too"]
    path = schema.write_table(df, tmp_path / "t.csv")
    assert path.read_text().splitlines()[0] == ",".join(schema.COLUMN_NAMES)
    back = schema.read_table(path)
    pd.testing.assert_frame_equal(back, schema.validate(df), check_exact=True)
    parquet = schema.read_table(schema.write_table(df, tmp_path / "t.parquet"))
    pd.testing.assert_frame_equal(back, parquet, check_exact=True)


def test_csv_and_parquet_fill_the_optional_columns_alike(tmp_path):
    df = make_rows(k=0).assign(strategy=["synchronous", "throughput", "constant"])
    df.loc[2, "rps"] = 0.5  # below 95% of its target 3.0
    bare = df[list(schema.REQUIRED_COLUMNS)]
    from_csv = schema.read_table(_csv(tmp_path, bare))
    parquet = tmp_path / "t.parquet"
    bare.to_parquet(parquet, index=False)
    from_parquet = schema.read_table(parquet)
    pd.testing.assert_frame_equal(from_csv.drop(columns="source"),
                                  from_parquet.drop(columns="source"))
    assert list(from_csv["source"]) == ["t.csv#0", "t.csv#1", "t.csv#2"]
    assert (from_csv[["drafter", "method", "alpha_source"]] == "none").all().all()
    assert from_csv["alpha"].isna().all() and from_csv["latency_std"].isna().all()
    assert (from_csv[["n_errored", "n_incomplete", "moe_experts_total"]] == 0).all().all()
    # no saturation columns: the package's rules decide (rate_target is NaN: not filled)
    assert list(from_csv["saturated"]) == [False, True, False]
    assert from_csv.loc[1, "saturation_reason"] == "throughput strategy (measures the ceiling)"


def test_csv_saturation_flags_without_reasons_are_kept(tmp_path):
    df = make_rows(k=0).drop(columns="saturation_reason").assign(saturated=[False, True, False])
    table = schema.read_table(_csv(tmp_path, df))
    assert list(table["saturated"]) == [False, True, False]
    assert table.loc[1, "saturation_reason"] == "flagged saturated in the input table"


@pytest.mark.parametrize(
    "column, value, needle",
    [
        ("rps", "fast", "'fast' on line 3 is not a number"),
        ("k", "1.5", "'1.5' on line 3 is not a whole number"),
        ("n_successful", "", "'' on line 3 is not a whole number"),
        ("saturated", "maybe", "'maybe' on line 3 is not true or false"),
        ("latency_mean", "-1", "must be positive"),
    ],
)
def test_csv_bad_cells_name_the_file_and_the_column(tmp_path, column, value, needle):
    df = make_rows().astype({column: object})
    df.loc[1, column] = value
    path = _csv(tmp_path, df)
    with pytest.raises(SchemaError) as info:
        schema.read_table(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: field '{column}'"), msg
    assert needle in msg


def test_csv_missing_required_column(tmp_path):
    path = _csv(tmp_path, make_rows().drop(columns=["latency_mean", "rps"]))
    with pytest.raises(SchemaError) as info:
        schema.read_table(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: field 'rps'") and "missing column(s) rps, latency_mean" in msg


def test_csv_sd_rows_need_their_drafter_columns(tmp_path):
    path = _csv(tmp_path, make_rows(k=2).drop(columns=["alpha", "alpha_source"]))
    with pytest.raises(SchemaError) as info:
        schema.read_table(path)
    assert str(info.value).startswith(f"{path}: field 'alpha'")
    assert "k > 0" in str(info.value) and "run.json#0" in str(info.value)


def test_csv_unreadable_or_empty(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(SchemaError, match="not a readable CSV"):
        schema.read_table(empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text(",".join(schema.COLUMN_NAMES) + "\n")
    with pytest.raises(SchemaError, match="no rows"):
        schema.read_table(header_only)


def test_is_csv_table_tells_a_tidy_table_from_a_guidellm_csv(tmp_path):
    from pathlib import Path

    guidellm_csv = Path(__file__).parent / "fixtures" / "guidellm" / "mock-gl08" / "sweep.csv"
    assert not schema.is_csv_table(guidellm_csv)
    assert schema.is_csv_table(_csv(tmp_path, make_rows()[list(schema.REQUIRED_COLUMNS)]))
    assert not schema.is_csv_table(_csv(tmp_path, make_rows().drop(columns="k"), "nok.csv"))
    assert not schema.is_csv_table(schema.write_table(make_rows(), tmp_path / "t.parquet"))
