"""``bayeslat decide`` on fits made with a mocked sampler (structure, formats, errors)."""

import json

import pymc as pm
import pytest
from pymc.testing import mock_sample
from typer.testing import CliRunner

from bayeslat import decide, fit
from bayeslat.cli import app
from bayeslat.models import get
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

SPEC = SamplerSpec(verifiers=(("llama-8b", 8.0), ("llama-70b", 70.0)),
                   prefill_tokens=(128.0, 512.0),
                   decode_tokens=(64.0,), alphas=(0.6, 0.9), ks=(2, 4), n_rates=4)
MOE_SPEC = SamplerSpec(prefill_tokens=(128.0,), decode_tokens=(64.0,), alphas=(0.7,),
                       ks=(2,), n_rates=4, moe=(8, 128, 0.6, 0.3))
runner = CliRunner()


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    original = pm.sample
    pm.sample = mock_sample
    out = {}
    try:
        for variant, spec in (("hierarchical", SPEC), ("dense", SPEC), ("moe", MOE_SPEC)):
            model = get(variant)(sample_sweep(spec, seed=3)[0])
            fit.sample(model, draws=10, chains=2, sampler="pymc", progressbar=False)
            out[variant] = model.save(tmp_path_factory.mktemp("fits") / f"{variant}.nc")
    finally:
        pm.sample = original
    return out


def invoke(*args):
    return runner.invoke(app, ["decide", *map(str, args)])


def test_table_lists_every_setup(fits):
    result = invoke(fits["hierarchical"], "--alpha", "0.7", "--rps", "0,1", "--k", "0:4:5")
    assert result.exit_code == 0, result.output
    for verifier in ("llama-8b", "llama-70b"):
        for p in (128, 512):
            assert f"{verifier} H100 p{p} g64" in result.output
    assert "break-even per draft length" in result.output


def test_json_has_one_decision_per_setup_alpha_and_load(fits):
    result = invoke(fits["hierarchical"], "--alpha", "0.6,0.9", "--rps", "0:2:3", "--format",
                    "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["decisions"]) == 4 * 2 * 3  # setups x alphas x loads
    assert {"k_neutral", "k_risk", "speedup", "p_sd_hurts", "regret"} <= set(out["decisions"][0])
    assert all(row["k"] > 0 for row in out["break_even"])


def test_unmeasured_length_predicted_by_hierarchical_not_dense(fits):
    args = ["--alpha", "0.7", "--rps", "0,1", "--setup", "llama-8b H100 p128", "--prefill", "2048",
            "--format", "json"]
    result = invoke(fits["hierarchical"], *args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["decisions"][0]["setup"].startswith("llama-8b H100 p2048")
    result = invoke(fits["dense"], *args)
    assert result.exit_code == 2
    assert "hierarchical" in result.output


def test_moe_solves_the_fixed_point(fits):
    model = fit.load(fits["moe"])
    ds = decide.from_model(model, decide.setups(model.table), [0.7], [0, 2], [0.0, 1.0])
    assert ds["speedup"].dims == ("setup", "alpha", "rps", "k", "stat")
    assert (ds["speedup"].sel(k=0, stat="q50") == 1.0).all()  # the baseline against itself
    assert ds["latency"].sel(stat="q50").notnull().any()


@pytest.mark.parametrize("args, field", [
    (["--alpha", "1.5"], "--alpha"),
    (["--alpha", "0.7", "--format", "xml"], "--format"),
    (["--alpha", "0.7", "--risk", "2"], "--risk"),
    (["--alpha", "0.7", "--setup", "no-such"], "--setup"),
    (["--alpha", "0.7", "--format", "vllm"], "--setup"),
])
def test_bad_options(fits, args, field):
    result = invoke(fits["hierarchical"], *args)
    assert result.exit_code == 2
    assert field in result.output and "Traceback" not in result.output


def test_missing_model_file(tmp_path):
    result = invoke(tmp_path / "nope.nc", "--alpha", "0.7")
    assert result.exit_code == 2
    assert "nope.nc" in result.output
