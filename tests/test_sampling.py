"""The sampler sized to the convergence bar: nutpie draws until the bar holds, checked at fixed
draw counts so that a seed gives the same trace on any machine."""

import json

import numpy as np
import nutpie  # an extra, in the dev install
import pymc as pm
import pytest

from bayeslat import fitting
from bayeslat.models import sampling


@pytest.fixture(scope="module")
def compiled():
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0, shape=3)
    return nutpie.compile_pymc_model(model)


def settings(**kw):
    return {"draws": 2000, "tune": 200, "chains": 4, "cores": 4, "seed": 3,
            "progress_bar": False, "save_warmup": False} | kw


def test_checkpoints_grow_by_a_quarter_and_end_at_the_most():
    points = sampling.checkpoints(2000)
    assert points[0] == sampling.FIRST_CHECK and points[-1] == 2000
    steps = np.diff(points[:-1]) / np.array(points[:-2])
    assert ((steps >= 0.15) & (steps <= 0.35)).all(), points
    assert sampling.checkpoints(60) == [60]


def test_sampling_stops_at_the_first_checkpoint_that_meets_the_bar(compiled):
    trace, draws = sampling._sample_to_bar(nutpie, compiled, settings())
    assert draws in sampling.checkpoints(2000) and draws < 2000
    assert trace.posterior.sizes["draw"] == draws
    assert np.isfinite(trace.posterior["x"].values).all()
    diag = sampling.diagnostics(trace)
    assert diag.converged and min(diag.min_ess_bulk, diag.min_ess_tail) >= 500, diag
    # the first checkpoint did not meet it (4 chains of 100 draws cannot give an ESS of 500)
    first = sampling.diagnostics(trace.isel(draw=slice(0, sampling.FIRST_CHECK)))
    assert min(first.min_ess_bulk, first.min_ess_tail) < 500, first
    # the same seed, the same trace, whatever the timing
    again, n = sampling._sample_to_bar(nutpie, compiled, settings())
    assert n == draws
    np.testing.assert_array_equal(again.posterior["x"].values, trace.posterior["x"].values)


def test_the_trace_sampled_to_the_bar_is_nutpies_own_cut_at_the_checkpoint():
    """The chains are watched through nutpie's raw Arrow trace; what comes back is the
    InferenceData nutpie itself gives for that many draws: the same variables (the
    unconstrained ones dropped), dims, coords, dtypes and values, statistics too."""
    with pm.Model(coords={"i": ["a", "b", "c"]}) as model:
        pm.Normal("x", 0.0, 1.0, dims="i")
        pm.Deterministic("y", 2.0 * pm.HalfNormal("s"))
        pm.Normal("z", 0.0, 1.0, shape=(2, 3))
    one = nutpie.compile_pymc_model(model)
    trace, draws = sampling._sample_to_bar(nutpie, one, settings())
    own = sampling._drop_unconstrained(nutpie.sample(one, **settings(draws=draws)))
    for group in ("posterior", "sample_stats"):
        mine, theirs = getattr(trace, group), getattr(own, group)
        assert set(mine.data_vars) == set(theirs.data_vars), group
        for name, value in theirs.data_vars.items():
            assert mine[name].dims == value.dims and mine[name].dtype == value.dtype, name
            np.testing.assert_array_equal(mine[name].values, value.values, err_msg=name)
        assert mine.coords.to_dataset().equals(theirs.coords.to_dataset()), group
    assert trace.posterior["x"].coords["i"].values.tolist() == ["a", "b", "c"]


def test_sampling_ends_at_the_most_draws_when_the_bar_is_not_met(compiled):
    # 2 chains of 60 draws cannot give a tail ESS of 500
    trace, draws = sampling._sample_to_bar(nutpie, compiled, settings(draws=60, chains=2, cores=2))
    assert draws == 60 and trace.posterior.sizes == {"chain": 2, "draw": 60, "x_dim_0": 3}


def test_sampling_stops_at_the_first_checkpoint_with_a_divergence():
    """Divergences stay in every longer trace: sampling stops at the first checkpoint that has
    one (Neal's funnel diverges within a few hundred draws)."""
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2), shape=9)
    funnel = nutpie.compile_pymc_model(model)
    trace, draws = sampling._sample_to_bar(nutpie, funnel, settings(chains=2, cores=2))
    assert draws < 2000 and trace.sample_stats["diverging"].any()
    earlier = [n for n in sampling.checkpoints(2000) if n < draws]
    if earlier:  # the checkpoint before had none
        assert not trace.sample_stats["diverging"].isel(draw=slice(0, earlier[-1])).any()
    assert sampling._stop_reason(trace) == "divergences"


def test_default_chains_are_one_per_core_from_two_to_eight(monkeypatch):
    for cores, chains in ((1, 2), (2, 2), (6, 6), (64, 8)):
        monkeypatch.setattr(sampling.os, "cpu_count", lambda c=cores: c)
        assert sampling.default_chains() == chains


@pytest.mark.parametrize(("info", "says"), [
    ({"draws": 475, "max_draws": 2000}, "stopped where the bar held"),
    ({"draws": 2000, "max_draws": 2000}, "the most allowed"),
    ({"draws": 150, "max_draws": 2000, "stopped": "divergences"}, "divergent transitions"),
    ({"draws": 1000}, "1000 draws each"),
    ({"draws": 1500, "max_draws": 2000, "target_accept": 0.95, "diverged_at": 0.9},
     "sampled again with smaller steps, target_accept 0.95: at 0.9 it met a divergence"),
])
def test_sampler_line_says_how_many_draws_and_why(info, says):
    import arviz as az

    idata = az.from_dict(posterior={"a": np.zeros((1, 2))})
    idata.posterior.attrs["sampler"] = json.dumps(
        {"sampler": "nutpie", "chains": 4, "tune": 1000, "cores": 2} | info)
    line = fitting.sampler_line(idata)
    assert says in line and "4 chains on 2 cores" in line, line


def test_the_verbs_tune_as_fit_does():
    from bayeslat.cli import options

    assert options.TUNE.default == sampling.TUNE


def test_sampling_to_the_bar_that_diverges_samples_again_with_smaller_steps(monkeypatch):
    """A first run that stops at a divergence is sampled again from the start at
    RETRY_ACCEPT with the same compiled model, and the fit says so; a second divergence is
    kept (the fit is then not converged)."""
    from support.sweeps import table

    from bayeslat.models import get

    seen, real = [], sampling._sample_to_bar

    def first_diverges(backend, compiled, settings):
        seen.append((settings["target_accept"], compiled))
        trace, draws = real(backend, compiled, settings | {"draws": 30, "tune": 30})
        if len(seen) == 1:
            trace.sample_stats["diverging"][0, 5] = True
        return trace, draws

    monkeypatch.setattr(sampling, "_sample_to_bar", first_diverges)
    model = get("hierarchical")(table("hierarchical"))
    idata = sampling.sample(model, seed=1, progressbar=False, log_likelihood=False)
    assert [a for a, _ in seen] == [sampling.TARGET_ACCEPT, sampling.RETRY_ACCEPT]
    assert seen[0][1] is seen[1][1]  # compiled once
    info = json.loads(idata.posterior.attrs["sampler"])
    assert info["target_accept"] == sampling.RETRY_ACCEPT
    assert info["diverged_at"] == sampling.TARGET_ACCEPT and info["stopped"] == "bar"
    assert not idata.sample_stats["diverging"].any()
    # asked for the smaller steps already: one run, its divergence kept
    seen.clear()
    idata = sampling.sample(model, seed=1, progressbar=False, log_likelihood=False,
                            target_accept=sampling.RETRY_ACCEPT)
    assert len(seen) == 1 and json.loads(idata.posterior.attrs["sampler"])["stopped"] == (
        "divergences")
