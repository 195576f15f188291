"""Decisions from posterior draws."""

import numpy as np
import pytest
import xarray as xr

from bayeslat import decide, theory

KS = [0, 2, 6]
C1 = [1.20, 0.92, 0.78]  # DESIGN.md §2: baseline, config B (k=2), config A (k=6)
C2 = [0.07, 0.072, 0.085]
RPS = np.array([0.0, 4.0, 8.0, 10.0, 12.0, 13.5])


def point_mass(n=50):
    dims = ("sample", "k")
    coords = {"sample": np.arange(n), "k": KS}
    c1 = xr.DataArray(np.tile(C1, (n, 1)), dims=dims, coords=coords)
    c2 = xr.DataArray(np.tile(C2, (n, 1)), dims=dims, coords=coords)
    return c1, c2


def test_point_mass_equals_theory():
    c1, c2 = point_mass()
    out = decide.analyse(c1, c2, RPS)
    for stat in ("mean", "q05", "q50", "q95"):
        for k, c1k, c2k in zip(KS, C1, C2, strict=True):
            want = theory.speedup(RPS, C1[0], C2[0], c1k, c2k)
            got = out["speedup"].sel(stat=stat, k=k).values
            np.testing.assert_allclose(got, want, rtol=1e-12)
            star = theory.break_even_rps(C1[0], C2[0], c1k, c2k)
            np.testing.assert_allclose(out["rps_star"].sel(stat=stat, k=k), star, rtol=1e-12)
    # the worked example's figures
    assert out["speedup"].sel(stat="q50", k=6, rps=8.0) == pytest.approx(1.119, abs=5e-4)
    assert out["rps_star"].sel(stat="q50", k=6) == pytest.approx(8.86, abs=5e-3)
    assert out["rps_star"].sel(stat="q50", k=2) == pytest.approx(12.73, abs=5e-3)
    assert out["c1r"].sel(stat="mean", k=6) == pytest.approx(0.650, abs=5e-4)
    assert out["c2r"].sel(stat="mean", k=6) == pytest.approx(1.214, abs=5e-4)
    assert out["p_break_even"].sel(k=6) == 1.0 and out["p_break_even"].sel(k=0) == 0.0
    # k* is the theory's argmin in every draw, so P(k* = k) is one-hot
    lat = np.array([theory.latency(RPS, a, b) for a, b in zip(C1, C2, strict=True)])
    kstar = np.array(KS)[np.argmin(lat, axis=0)]
    np.testing.assert_array_equal(out["p_best_k"].idxmax("k").values, kstar)
    assert set(np.unique(out["p_best_k"].values)) <= {0.0, 1.0}
    np.testing.assert_array_equal(out["k_neutral"].values, kstar)
    np.testing.assert_allclose(out["regret"].sel(k=6, rps=0.0), 0.0)
    assert out["regret"].sel(k=6, rps=12.0) == np.inf  # k = 6 saturates at 12 req/s


def test_risk_aware_never_larger_and_sometimes_smaller():
    rng = np.random.default_rng(1)
    n = 2000
    # wide posterior: the big-k configuration's load cost is uncertain
    scale = np.exp(rng.normal(0, [0.02, 0.05, 0.25], size=(n, 3)))
    coords = {"sample": np.arange(n), "k": KS}
    c1 = xr.DataArray(np.array(C1) * np.exp(rng.normal(0, 0.03, (n, 3))), dims=("sample", "k"),
                      coords=coords)
    c2 = xr.DataArray(np.array(C2) * scale, dims=("sample", "k"), coords=coords)
    spd = decide.speedup_draws(decide.latency_draws(c1, c2, np.linspace(0, 12, 25)))
    neutral = decide.risk_neutral_k(spd)
    for kwargs in ({"epsilon": 0.05}, {"quantile": 0.05}):
        aware = decide.risk_aware_k(spd, **kwargs)
        assert (aware <= neutral).all()
        assert (aware < neutral).any()


def test_stack_draws_and_summary_dims():
    da = xr.DataArray(np.random.default_rng(0).normal(size=(2, 30, 3)),
                      dims=("chain", "draw", "k"), coords={"k": KS})
    stacked = decide.stack_draws(da)
    assert stacked.dims == ("k", "sample") and stacked.sizes["sample"] == 60
    summary = decide.summarize(stacked)
    assert set(summary.data_vars) == {"mean", "q05", "q25", "q50", "q75", "q95"}
    assert (summary["q05"] <= summary["q50"]).all() and (summary["q50"] <= summary["q95"]).all()


def test_vllm_batch_ranges():
    rps = np.array([0.5, 2, 4, 6, 8])
    ks = np.array([6, 6, 4, 2, 2])
    lat = np.array([1.0, 1.0, 1.5, 2.0, 3.0])  # B = 0.5, 2, 6, 12, 24
    ranges = decide.vllm_batch_ranges(rps, ks, lat, max_batch=64)
    assert ranges == [[1, 4, 6], [5, 9, 4], [10, 64, 2]]
    # contiguous and complete
    assert ranges[0][0] == 1 and ranges[-1][1] == 64
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def test_alert_line_is_the_load_where_sd_starts_to_hurt():
    ks = [0, 1, 2, 6]
    n = 10
    coords = {"sample": np.arange(n), "k": ks}
    # k=1: never hurts (C2R < 1); k=2: slower even idle (C1R > 1); k=6: config A, RPS* 8.86
    c1 = xr.DataArray(np.tile([1.2, 1.0, 1.3, 0.78], (n, 1)), dims=("sample", "k"), coords=coords)
    c2 = xr.DataArray(np.tile([0.07, 0.06, 0.08, 0.085], (n, 1)), dims=("sample", "k"),
                      coords=coords)
    alert = decide.analyse(c1, c2, [0.0, 5.0])["rps_alert"]
    assert alert.sel(k=0) == np.inf and alert.sel(k=1) == np.inf
    assert alert.sel(k=2) == 0.0
    assert alert.sel(k=6) == pytest.approx(theory.break_even_rps(1.2, 0.07, 0.78, 0.085))
