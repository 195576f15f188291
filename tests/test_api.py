"""The Python API (``bayeslat.fit``, ``bayeslat.load``, :class:`bayeslat.Fit`) on fits whose
sampler is mocked (every draw at the start point): structure, agreement with the stages it
wraps, and errors that name the parameter (and, through the CLI, the option)."""

import copy

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from support.point_mass import point_mass
from typer.testing import CliRunner

import bayeslat
from bayeslat import api, decide
from bayeslat.cli import app
from bayeslat.errors import FitError, InputError, SchemaError
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

SPEC = SamplerSpec(verifiers=(("llama-8b", 8.0),), prefill_tokens=(128.0, 512.0),
                   decode_tokens=(64.0,), alphas=(0.6, 0.9), ks=(2, 4), n_rates=4)
SETUP = "llama-8b H100 p128 g64"


@pytest.fixture(scope="module")
def table():
    return sample_sweep(SPEC, seed=5)[0]


@pytest.fixture(scope="module")
def fitted(table):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pm, "sample", point_mass)
        return bayeslat.fit(table, "hierarchical", draws=10, chains=2, sampler="pymc",
                            progressbar=False)


def test_the_package_exports_the_api():
    for name in bayeslat.__all__:
        assert getattr(bayeslat, name) is not None
    assert bayeslat.fit is api.fit and bayeslat.Fit is api.Fit


def test_fit_saves_and_loads_the_same_posterior(fitted, tmp_path):
    assert isinstance(fitted, bayeslat.Fit) and fitted.path is None
    assert "NOT converged" in repr(fitted) and "not saved" in repr(fitted)
    assert not fitted.converged and fitted.diagnostics.max_rhat != fitted.diagnostics.max_rhat
    path = fitted.save(tmp_path / "fit.nc")
    assert fitted.path == path and str(path) in repr(fitted)
    loaded = bayeslat.load(path)
    assert loaded.variant == "hierarchical" and len(loaded.table) == len(fitted.table)
    xr.testing.assert_allclose(loaded.posterior.drop_attrs(), fitted.posterior.drop_attrs())
    with pytest.raises(InputError, match="overwrite=True"):
        fitted.save(path)


def test_decide_is_the_decide_stage(fitted):
    found = fitted.decide([0.6, 0.9], rps=[0.0, 1.0, 2.0], k=[2, 4], allow_unconverged=True)
    assert set(found.info["setup"]) == set(fitted.setups()["setup"])
    assert any("did not converge" in w for w in found.warnings)
    direct = decide.from_model(fitted.model, fitted.setups(), [0.6, 0.9], [2, 4],
                               [0.0, 1.0, 2.0])
    xr.testing.assert_allclose(found.dataset()["speedup"], direct["speedup"])
    pd.testing.assert_frame_equal(found.table(), decide.decision_table(direct))
    pd.testing.assert_frame_equal(found.break_even(), decide.break_even_table(direct))
    assert list(found.verdicts()["answer"].str.split(",").str[0].unique()) != []
    neutral = found.table("neutral")
    assert len(neutral) == 2 * 2 * 3 and neutral["k_neutral"].notna().all()


def test_speedup_and_break_even_of_one_setup(fitted):
    speed = fitted.speedup(SETUP, 0.9, k=[2, 4], allow_unconverged=True)
    assert speed.dims == ("alpha", "rps", "k", "stat")
    assert list(speed["k"].values) == [0, 2, 4]
    # the default loads: 0 to the setup's measured ceiling
    top = fitted.table.loc[fitted.table["prefill_tokens"] == 128.0, "rps"].max()
    assert speed["rps"].values[0] == 0 and speed["rps"].values[-1] == pytest.approx(top)
    assert (speed.sel(k=0, stat="q50") == 1).all()  # no SD against itself
    be = fitted.break_even(SETUP, [0.6, 0.9], k=[2, 4], allow_unconverged=True)
    assert list(be["k"]) == [2, 4, 2, 4] and be["setup"].str.startswith(SETUP).all()
    config = fitted.decide(0.9, setup=SETUP, k=[2, 4], allow_unconverged=True).vllm_config()
    assert config["method"] == "eagle3" and config["num_speculative_tokens"] in (2, 4)


def test_an_unconverged_fit_is_refused_unless_allowed(fitted):
    with pytest.raises(FitError, match="allow_unconverged=True"):
        fitted.decide(0.7)


@pytest.mark.parametrize("call, field", [
    (lambda f: f.decide(1.5), "alpha"),
    (lambda f: f.decide(0.7, k=[1.5]), "k"),
    (lambda f: f.decide(0.7, rps=[-1.0]), "rps"),
    (lambda f: f.decide(0.7, risk=2.0), "risk"),
    (lambda f: f.decide(0.7, max_saturated=1.0), "max_saturated"),
    (lambda f: f.decide(0.7, prefill=0.0, allow_unconverged=True), "prefill"),
    (lambda f: f.speedup("no such setup", 0.7, allow_unconverged=True), "setup"),
    (lambda f: f.speedup("llama-8b", 0.7, allow_unconverged=True), "setup"),  # two setups
])
def test_errors_name_the_parameter(fitted, call, field):
    with pytest.raises(InputError) as info:
        call(fitted)
    assert info.value.field == field and "--" not in str(info.value)


def test_fit_refuses_a_bad_table_naming_the_column(table):
    with pytest.raises(SchemaError, match="alpha"):
        bayeslat.fit(table.assign(alpha=np.where(table["k"] > 0, 1.5, np.nan)))
    with pytest.raises(InputError, match="unknown model 'nope'") as info:
        bayeslat.fit(table, "nope")
    assert info.value.field == "model"


def test_the_cli_names_options_not_parameters(fitted, tmp_path):
    path = tmp_path / "fit.nc"
    fitted.model.save(path)
    runner = CliRunner()
    for args, flag in ((["--alpha", "0.7", "--setup", "nowhere"], "--setup"),
                       (["--alpha", "0.7", "--rps", "5:1:3"], "--rps"),
                       (["--alpha", "0.7", "--max-saturated", "1"], "--max-saturated"),
                       (["--alpha", "0.7", "--format", "xml"], "--format")):
        result = runner.invoke(app, ["decide", str(path), *args, "--allow-unconverged"])
        assert result.exit_code == 2, result.output
        assert f"field '{flag}'" in result.output, result.output
    result = runner.invoke(app, ["fit", "--model", "nope"])
    assert result.exit_code == 2 and "field '--model'" in result.output, result.output


def test_report_of_an_unsaved_fit(fitted, tmp_path):
    model = copy.copy(fitted.model)
    model.path = None  # as fitted, before any save
    path = bayeslat.Fit(model).report(tmp_path / "r.html", allow_unconverged=True, jobs=1)
    html = path.read_text(encoding="utf-8")
    assert "hierarchical fit" in html and "did not converge" in html


def test_an_error_line_keeps_its_brackets(capsys):
    """rich reads ``[numpyro]`` as markup; the error boundary prints it as written."""
    import typer

    from bayeslat.cli.app import guarded

    def fails():
        raise FitError("the numpyro sampler is not installed; pip install 'bayeslat[numpyro]'")

    with pytest.raises(typer.Exit):
        guarded(fails)()
    assert "pip install 'bayeslat[numpyro]'" in capsys.readouterr().err
