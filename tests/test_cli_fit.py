"""``bayeslat fit`` with a mocked sampler: files, overwrite, --strict, errors."""

import pymc as pm
import pytest
from pymc.testing import mock_sample
from typer.testing import CliRunner

import bayeslat
from bayeslat.cli import app
from bayeslat.data import schema
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
    assert bayeslat.load(out).variant == "hierarchical"
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_strict_exits_non_zero_when_not_converged(sweep, tmp_path, mocked):
    result = runner.invoke(app, ["fit", str(sweep), "--sampler", "pymc", "--draws", "10",
                                 "--chains", "2", "--model", "dense", "--strict",
                                 "-o", str(tmp_path / "d.nc")])
    assert result.exit_code == 2
    assert "did not converge" in result.output and "R-hat" in result.output


@pytest.mark.parametrize("args, message", [
    (["--model", "gaussian"], "unknown model"),
    (["--sampler", "stan"], "unknown sampler"),
    (["--sampler", "numpyro"], "numpyro"),
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
