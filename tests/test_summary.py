"""The fast likelihood's curve summaries (bayeslat.models.summary): stage 1 against the truth
and the rows, stage 2 against the rows' own log likelihood, and when sampling.sample uses them.
Fast against exact with real NUTS: test_fit_slow.py."""

import json

import numpy as np
import pandas as pd
import pymc as pm
import pytest
from pymc.testing import mock_sample

from bayeslat import fitting
from bayeslat.data import schema
from bayeslat.models import get, sampling
from bayeslat.models.base import BARRIER_WIDTH, prepare
from bayeslat.models.summary import NU_GAUSSIAN, summarise
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

# 14 curves of nine loads: enough rows for stage 1 to tell t(2.5) noise from normal noise
SPEC = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,),
                   alphas=(0.6, 0.75, 0.9), ks=(2, 4), n_rates=9, sigma=0.02)


def _curve_truth(rows, truth):
    """The true ``C1``, ``C2`` of each curve, in the order of the model's curves."""
    labels = schema.config_labels(truth.configs)
    return truth.configs.set_index(labels.to_numpy()).loc[pd.unique(rows["config"])]


def test_stage_one_recovers_each_curve_and_the_scatter():
    table, truth = sample_sweep(SPEC, seed=3)
    rows = prepare(table)
    s = summarise(rows)
    want = _curve_truth(rows, truth)
    assert len(s.curve) == len(want) and len(s.exact) == 0  # nine loads each, no sync rows
    c1 = np.exp(s.theta[:, 0])
    c2 = (1 - np.exp(s.theta[:, 1])) / s.top  # (the barrier's shift is far below the noise)
    # each curve to within a few of its own standard errors (sigma 2%, nine points)
    np.testing.assert_allclose(c1, want["C1"], rtol=0.06)
    np.testing.assert_allclose(c2, want["C2"], rtol=0.15)
    assert s.sigma == pytest.approx(0.02, rel=0.25)
    assert s.nu >= NU_GAUSSIAN and s.gaussian
    # the fit is the weighted optimum: the step it would still take is negligible
    assert np.abs(np.linalg.solve(s.A, s.b[..., None])).max() < 1e-4
    assert (np.linalg.eigvalsh(s.A) > 0).all()


def test_heavy_tails_are_seen_by_stage_one():
    table, _ = sample_sweep(SamplerSpec(**{**SPEC.__dict__, "nu": 2.5}), seed=3)
    s = summarise(prepare(table))
    assert s.nu < NU_GAUSSIAN and not s.gaussian


def test_summary_log_likelihood_is_the_rows_weighted_gaussian_near_the_fit():
    """At the fit and a small step away, the summary equals the weighted Gaussian log
    likelihood of the rows (EM weights) up to the curvature correction and O(step³)."""
    table, _ = sample_sweep(SamplerSpec(**{**SPEC.__dict__, "nu": None}), seed=4)
    rows = prepare(table)
    s = summarise(rows)
    sigma = 0.03
    n_curves = len(s.curve)

    def summary_at(step):
        c1 = np.exp(s.theta[:, 0] + step[0])
        # theta's headroom is the saturation barrier's h, of the headroom d = h − w²/h
        h = np.exp(s.theta[:, 1] + step[1])
        c2 = (1 - (h - BARRIER_WIDTH**2 / h)) / s.top
        return float(s.log_likelihood(c1, c2, sigma).eval())

    base = summary_at((0.0, 0.0))
    want_base = np.sum(-0.5 * s.n * np.log(sigma**2 + s.se2) - s.W / (2 * (sigma**2 + s.se2)))
    assert base == pytest.approx(want_base, rel=1e-9)
    # moving log C1 of every curve by d costs d² Σ A00 / (2 s²) exactly (mu is linear in a)
    d = 0.01
    drop = base - summary_at((d, 0.0))
    assert drop == pytest.approx(np.sum(d**2 * s.A[:, 0, 0] / (2 * (sigma**2 + s.se2))),
                                 rel=1e-6)
    assert n_curves == rows["config"].nunique()


@pytest.fixture
def mocked(monkeypatch):
    monkeypatch.setattr(pm, "sample", mock_sample)


@pytest.mark.parametrize("nu, exact, want", [(None, False, "summary"), (None, True, "exact"),
                                             (2.2, False, "exact")])
def test_sample_uses_the_summaries_where_they_hold(mocked, nu, exact, want):
    table, _ = sample_sweep(SamplerSpec(**{**SPEC.__dict__, "nu": nu}), seed=3)
    model = get("hierarchical")(table)
    idata = sampling.sample(model, draws=10, chains=2, sampler="pymc", progressbar=False,
                       exact=exact)
    info = json.loads(idata.posterior.attrs["sampler"])
    assert info["likelihood"] == want
    line = fitting.likelihood_line(idata)
    post = idata.posterior
    # either way the posterior reads as an exact fit's: nu, and every row's log-likelihood
    assert float(post["nu"].min()) >= 2.0
    assert idata.log_likelihood["log_latency"].sizes["obs"] == len(model.rows)
    if want == "summary":
        assert "curve summaries" in line and float(post["nu"].std()) == 0.0
        assert info["summary_nu"] >= NU_GAUSSIAN
    else:
        assert "every row" in line
        assert ("--exact" in line) if exact else ("heavy-tailed" in line)


def test_variants_with_the_compute_wall_are_not_summarised():
    assert get("hierarchical").parts == ("C1", "C2")
    table, _ = sample_sweep(SPEC, seed=3)
    assert get("hierarchical")(table).summarises
    assert not get("capacity")(table).summarises


def test_curves_with_too_few_loads_keep_their_rows():
    table, _ = sample_sweep(SamplerSpec(**{**SPEC.__dict__, "n_rates": 2}), seed=3)
    rows = prepare(table)
    s = summarise(rows)
    assert len(s.curve) == 0 and not s.gaussian
    np.testing.assert_array_equal(s.exact, np.arange(len(rows)))
    note = sampling._likelihood_note(s, False, get("hierarchical")(table))
    assert note["likelihood"] == "exact" and "loads" in note["why"]
