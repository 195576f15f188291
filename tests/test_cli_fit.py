"""``bayeslat fit`` with a mocked sampler: files, overwrite, --strict, errors, the stored
convergence diagnostics; the headline of the capacity form."""

import json

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from pymc.testing import mock_sample
from typer.testing import CliRunner

import bayeslat
from bayeslat import decide, fitting, theory
from bayeslat.cli import app
from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models import choose, resolve, sampling
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

runner = CliRunner()
SPEC = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,), alphas=(0.6, 0.9),
                   ks=(2, 4), n_rates=4)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "sweep.parquet"
    schema.write_table(sample_sweep(SPEC, seed=1)[0], path)
    return path


@pytest.fixture()
def mocked(monkeypatch):
    monkeypatch.setattr(pm, "sample", mock_sample)


def test_help_lists_the_options():
    result = runner.invoke(app, ["fit", "--help"])
    assert result.exit_code == 0
    for option in ("--model", "--draws", "--sampler", "--overwrite", "--strict", "--config"):
        assert option in result.output


def test_fit_writes_a_loadable_file_and_refuses_to_overwrite(sweep, tmp_path, mocked):
    out = tmp_path / "fit.nc"
    args = ["fit", str(sweep), "--sampler", "pymc", "--draws", "10", "--chains", "2",
            "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "max R-hat" in result.output and "RPS*" in result.output
    assert "did not converge" in result.output  # prior draws: a mocked fit cannot converge
    # two groups: their spreads fixed, and what to try (benchmarks/few_groups.py)
    assert "spreads fixed at tau = 0.25" in " ".join(result.output.split()), result.output
    assert "with 2 groups, sample the slowest coefficients non-centred" in " ".join(
        result.output.split()), result.output
    # auto: no throughput benchmark in the model sampler's sweep, so the paper's model
    assert bayeslat.load(out).variant == "hierarchical"
    assert "model: hierarchical (auto: no throughput benchmark" in result.output
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_auto_fits_the_compute_wall_where_the_sweep_measured_its_ceilings():
    table = sample_sweep(SPEC, seed=1)[0]
    assert choose(table)[0] == "hierarchical" and resolve("dense", table) == ("dense", None)
    assert choose(table[table["k"] == 0])[0] == "dense"
    table.loc[0, ["strategy", "saturated"]] = ["throughput", True]
    variant, why = choose(table)
    assert variant == "capacity" and "ceilings" in why
    assert choose(table[table["k"] == 0])[0] == "dense-capacity"
    assert resolve("auto", table) == (variant, why)


def test_strict_exits_non_zero_when_not_converged(sweep, tmp_path, mocked):
    result = runner.invoke(app, ["fit", str(sweep), "--sampler", "pymc", "--draws", "10",
                                 "--chains", "2", "--model", "dense", "--strict",
                                 "-o", str(tmp_path / "d.nc")])
    assert result.exit_code == 2
    assert "did not converge" in result.output and "R-hat" in result.output


@pytest.mark.parametrize("args, message", [
    (["--model", "gaussian"], "unknown model"),
    (["--sampler", "stan"], "unknown sampler"),
    (["--sampler", "numpyro"], "pip install 'bayeslat[numpyro]'"),
])
def test_bad_choices_are_one_line_errors(sweep, tmp_path, args, message):
    result = runner.invoke(app, ["fit", str(sweep), "-o", str(tmp_path / "x.nc"), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_bad_config_file_names_it(sweep, tmp_path):
    config = tmp_path / "priors.toml"
    config.write_text("[design]\nc1p = ['colour']\n")
    result = runner.invoke(app, ["fit", str(sweep), "--config", str(config),
                                 "-o", str(tmp_path / "x.nc")])
    assert result.exit_code == 2
    assert "priors.toml" in result.output and "colour" in result.output


def test_fit_stores_its_diagnostics_and_decide_can_refuse_it(sweep, tmp_path, mocked):
    out = tmp_path / "fit.nc"
    result = runner.invoke(app, ["fit", str(sweep), "--sampler", "pymc", "--draws", "10",
                                 "--chains", "2", "--model", "dense", "-o", str(out)])
    assert result.exit_code == 0, result.output
    model = fitting.load(out)
    stored = json.loads(model.idata.posterior.attrs["diagnostics"])
    assert stored["converged"] is False and stored["max_rhat"] > sampling.MAX_RHAT
    diag = fitting.convergence(model)
    assert diag.max_rhat == pytest.approx(stored["max_rhat"]) and not diag.converged
    assert diag.min_ess_bulk == pytest.approx(stored["min_ess_bulk"])
    with pytest.raises(FitError, match="did not converge.*--allow-unconverged") as err:
        fitting.require_converged(model, allow=False)
    assert str(out) in str(err.value)
    assert fitting.require_converged(model, allow=True) == diag
    # a file without the stored diagnostics (older fits): computed from the draws
    del model.idata.posterior.attrs["diagnostics"]
    again = fitting.convergence(model)
    assert again.max_rhat == pytest.approx(diag.max_rhat)
    assert again.divergences == diag.divergences


def test_fit_records_its_misfit_configurations_and_decide_warns_of_them(sweep, tmp_path,
                                                                        mocked):
    """The adequacy check's misfit configurations are stored in the fit; decide names them
    for the setups it decides, and says nothing where the fit has no record."""
    out = tmp_path / "fit.nc"
    result = runner.invoke(app, ["fit", str(sweep), "--sampler", "pymc", "--draws", "10",
                                 "--chains", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    fit = bayeslat.load(out)
    stored = json.loads(fit.model.posterior.attrs["misfit"])
    check = fit.adequacy(seed=0)  # prior draws (mocked): most configurations miss
    assert set(stored) == set(check.misfit) and stored
    label = check.misfit[0]
    assert stored[label] == pytest.approx(
        float(check.configs.set_index("config").loc[label, "inside_90"]))
    found = fit.decide(0.6, rps=[1.0], allow_unconverged=True)
    lines = [w for w in found.warnings if "misses its own measurements" in w]
    setups = fit.setups()["setup"]
    hit = [s for s in setups if any(c.startswith(f"{s} ") or c == f"{s.rsplit(' ', 1)[0]} k0"
                                    for c in stored)]
    assert [w.split(": the fit")[0] for w in lines] == hit and hit
    # each decision row is marked as its chosen k's configuration (or the baseline) is
    rows = found.table()
    assert rows["misfit"].any()
    for r in rows.itertuples():
        group = r.setup.rsplit(" ", 1)[0]
        own = (f"{r.setup} a0.6 k{int(r.k_risk)}" if r.k_risk > 0 else None)
        assert r.misfit == (own in stored or f"{group} k0" in stored)
    del fit.model.posterior.attrs["misfit"]
    assert fitting.misfit_warnings(fit.model, fit.setups()) == []
    assert not fit.decide(0.6, rps=[1.0], allow_unconverged=True).table()["misfit"].any()


class _CapacityStub:
    """A fitted model stand-in whose predict returns fixed capacity-form parts per k."""

    parts = ("C1", "C2", "C3", "Q", "P")
    per_configuration = False
    implicit = False
    # k: (C1, C2, C3, Q, P); k = 6 meets its compute wall (1/C3 = 10 req/s) first
    PARTS = {k: (*v, theory.soft_power(k)) for k, v in {
        0: (1.2, 0.07, 0.045, 0.01), 2: (0.92, 0.072, 0.055, 0.01),
        6: (0.78, 0.085, 0.1, 0.02)}.items()}

    def __init__(self):
        self.rows = pd.DataFrame({"config": ["a k2", "a k6"], "k": [2, 6], "alpha": 0.75,
                                  "method": "eagle3", "drafter": "d", "drafter_params_b": 0.1})
        # Poisson benchmarks: the smooth curve (no staircase of evenly spaced requests)
        self.table = self.rows.assign(strategy="poisson", saturated=False)

    def thinned(self, max_draws, rng):  # six draws: nothing to thin
        return self

    def predict(self, rows, seed=0):
        values = np.array([self.PARTS[int(k)] for k in rows["k"]])  # obs x part
        draws = np.broadcast_to(values, (2, 3, *values.shape))
        return xr.Dataset({name: (("chain", "draw", "obs"), draws[..., j])
                           for j, name in enumerate(self.parts)})


def test_headline_uses_the_compute_wall():
    head = decide.headline(_CapacityStub()).set_index("config")
    base = _CapacityStub.PARTS[0]
    for config, k in (("a k2", 2), ("a k6", 6)):
        c1, c2, c3, q, p = _CapacityStub.PARTS[k]
        want = theory.break_even_rps(base[0], base[1], c1, c2, base[2], base[3], c3, q,
                                     base[4], p)
        assert head.loc[config, "rps_star"] == pytest.approx(float(want), rel=1e-9)
        assert head.loc[config, "speedup0"] == pytest.approx(base[0] / c1)
    # the paper's closed form (no wall) would put k = 6's RPS* at 8.86 req/s
    assert head.loc["a k6", "rps_star"] < theory.break_even_rps(1.2, 0.07, 0.78, 0.085) - 0.1


def test_a_sweep_without_sd_prints_its_server(sweep, tmp_path, mocked):
    """No SD rows, no speedup to show: C1, C2 and the capacity of each baseline instead."""
    table = schema.read_table(sweep)
    base = tmp_path / "base.parquet"
    schema.write_table(table[table["k"] == 0], base)
    result = runner.invoke(app, ["fit", str(base), "--model", "dense", "--sampler", "pymc",
                                 "--draws", "10", "--chains", "2", "-o", str(tmp_path / "b.nc")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "RPS*" not in result.output and "capacity (req/s)" in result.output
    for label in schema.config_labels(table[table["k"] == 0]).unique():
        assert label in result.output
    found = bayeslat.load(tmp_path / "b.nc").baselines()
    # the paper's model: capacity = 1/C2, so its median lies in 1/C2's interval
    assert found["capacity"].between(1 / found["c2_hi"], 1 / found["c2_lo"]).all()
    assert (found["c1_lo"] <= found["c1"]).all() and (found["c1"] <= found["c1_hi"]).all()
