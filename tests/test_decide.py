"""Decisions from posterior draws."""

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayeslat import decide, theory
from bayeslat.models.base import scatter_draws

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


def test_nanquantile_is_numpys_to_the_last_bit():
    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = tuple(rng.integers(1, 5, size=rng.integers(1, 4))) + (int(rng.integers(1, 30)),)
        x = rng.standard_normal(shape)
        x[rng.random(shape) < rng.random()] = np.nan  # saturated draws, some slices all NaN
        x[rng.random(shape) < 0.05] = np.inf
        x[rng.random(shape) < 0.02] = -np.inf
        axis = int(rng.integers(0, x.ndim))
        x = np.moveaxis(x, -1, axis)
        for q in (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0):
            with np.errstate(all="ignore"), pytest.warns() if np.isnan(x).all(
                    axis=axis).any() else np.errstate():
                want = np.nanquantile(x, q, axis=axis)
            np.testing.assert_array_equal(decide.nanquantile(x, q, axis), want)
        qs = [0.05, 0.5, 0.95]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = np.nanquantile(x, qs, axis=axis)
        np.testing.assert_array_equal(decide.nanquantile(x, qs, axis), want)


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
    # k = 6 saturates at 12 req/s (1/C2 = 11.8) in every draw: no regret to average, and said so
    assert np.isnan(out["regret"].sel(k=6, rps=12.0))
    assert out["p_saturated"].sel(k=6, rps=12.0) == 1.0
    assert out["p_saturated"].sel(k=6, rps=10.0) == 0.0
    assert np.isfinite(out["regret"].sel(k=2, rps=12.0))
    np.testing.assert_allclose(out["capacity"].sel(stat="q50"), 1 / np.array(C2))


def wide_posterior(seed: int, n: int = 2000):
    """Draws of ``C1``, ``C2`` about the worked example's, the big k's load cost uncertain."""
    rng = np.random.default_rng(seed)
    coords = {"sample": np.arange(n), "k": KS}
    c1 = xr.DataArray(np.array(C1) * np.exp(rng.normal(0, 0.03, (n, 3))), dims=("sample", "k"),
                      coords=coords)
    c2 = xr.DataArray(np.array(C2) * np.exp(rng.normal(0, [0.02, 0.05, 0.25], size=(n, 3))),
                      dims=("sample", "k"), coords=coords)
    return c1, c2


def test_risk_aware_never_larger_and_sometimes_smaller():
    lat = decide.latency_draws(*wide_posterior(1), np.linspace(0, 12, 25))
    neutral = decide.risk_neutral_k(lat)
    for kwargs in ({"epsilon": 0.05}, {"quantile": 0.05}):
        aware = decide.risk_aware_k(lat, **kwargs)
        assert (aware <= neutral).all()
        assert (aware < neutral).any()


def test_risk_aware_k_has_the_lowest_tail_latency_of_the_eligible_ks():
    """The risk-aware k is the eligible k whose latency is lowest at probability 1 - epsilon,
    whichever k, no SD included, carries the risk."""
    lat = decide.latency_draws(*wide_posterior(2), np.linspace(0, 12, 25))
    aware = decide.risk_aware_k(lat, epsilon=0.05)
    tail = decide.tail_latency(lat, 0.05).where(decide.eligible(lat))
    np.testing.assert_array_equal(aware, tail.fillna(np.inf).idxmin("k"))
    # the baseline near its own wall, its load cost uncertain; k = 2 cheaper per request and
    # sure of it, though slower than the baseline in a quarter of the draws
    rng, n = np.random.default_rng(3), 4000
    lat = xr.concat([xr.DataArray(rng.lognormal(np.log(1.0), 0.25, n), dims="sample"),
                     xr.DataArray(rng.lognormal(np.log(0.9), 0.05, n), dims="sample")],
                    dim=xr.DataArray([0, 2], dims="k", name="k"))
    assert 0.2 < decide.p_sd_hurts(lat).sel(k=2) < 0.4
    assert decide.risk_aware_k(lat, epsilon=0.05) == 2
    # and where SD is the uncertain one, the baseline
    assert decide.risk_aware_k(lat.assign_coords(k=[2, 0]).sortby("k"), epsilon=0.05) == 0


def test_decision_table_says_what_kept_the_risk_aware_k_off_the_neutral_one():
    """Where the policies differ, the table carries the risk-neutral k's latency at
    probability 1 - epsilon, above the risk-aware k's (that is why), and ``decide``'s note
    says so."""
    from bayeslat.cli.decide import _decision_cells

    ds = decide.analyse(*wide_posterior(1), np.linspace(0, 12, 25))
    ds = ds.expand_dims(setup=["s"], alpha=[0.7])
    table = decide.decision_table(ds)
    differ = table["k_neutral"] != table["k_risk"]
    assert differ.any() and (~differ).any()
    tails = ds["latency_tail"].sel(setup="s", alpha=0.7)
    for column, k in (("latency_tail", "k_risk"), ("latency_tail_neutral", "k_neutral")):
        want = [tails.sel(k=int(getattr(r, k)), rps=r.rps).item() for r in table.itertuples()]
        np.testing.assert_array_equal(table[column], want)
    assert (table.loc[differ, "latency_tail_neutral"] > table.loc[differ, "latency_tail"]).all()
    for r in table.itertuples():
        note = _decision_cells(r, 0.05)[-1]
        assert note == (f"k {int(r.k_neutral)}: {r.latency_tail_neutral:.3g} s"
                        if r.k_neutral != r.k_risk else "")


def test_stack_draws_and_summary_dims():
    da = xr.DataArray(np.random.default_rng(0).normal(size=(2, 30, 3)),
                      dims=("chain", "draw", "k"), coords={"k": KS})
    stacked = decide.stack_draws(da)
    assert stacked.dims == ("k", "sample") and stacked.sizes["sample"] == 60
    summary = decide.summarize(stacked)
    assert summary.dims == ("stat", "k")
    assert list(summary["stat"].values) == ["mean", "q05", "q25", "q50", "q75", "q95"]
    q = {s: summary.sel(stat=s) for s in ("q05", "q50", "q95")}
    assert (q["q05"] <= q["q50"]).all() and (q["q50"] <= q["q95"]).all()
    np.testing.assert_allclose(summary.sel(stat="mean"), stacked.mean("sample"))


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


# The capacity form: a compute wall C3 and the compute curve's share Q per draft length
# (DESIGN.md §2a).
# k = 6 hits its compute wall (1/C3 = 10 req/s) before its memory wall (1/C2 = 11.8 req/s).
C3 = [0.045, 0.055, 0.1]
Q = [0.01, 0.01, 0.02]


def capacity_point_mass(n=20):
    c1, c2 = point_mass(n)
    c3 = xr.DataArray(np.tile(C3, (n, 1)), dims=c1.dims, coords=c1.coords)
    q = xr.DataArray(np.tile(Q, (n, 1)), dims=c1.dims, coords=c1.coords)
    return c1, c2, c3, q, theory.soft_power(c1["k"])


def test_capacity_form_point_mass_equals_theory():
    c1, c2, c3, q, p = capacity_point_mass()
    rps = np.array([0.0, 4.0, 8.0, 9.5, 10.5, 13.0])
    out = decide.analyse(c1, c2, rps, c3=c3, q=q, p=p)
    for k, c1k, c2k, c3k, qk in zip(KS, C1, C2, C3, Q, strict=True):
        pk = theory.soft_power(k)
        extras = (C3[0], Q[0], c3k, qk, 2.0, pk)
        want = theory.speedup(rps, C1[0], C2[0], c1k, c2k, *extras)
        ok = np.isfinite(want)
        np.testing.assert_allclose(out["speedup"].sel(stat="q50", k=k).values[ok], want[ok],
                                   rtol=1e-12)
        star = theory.break_even_rps(C1[0], C2[0], c1k, c2k, *extras)
        np.testing.assert_allclose(out["rps_star"].sel(stat="q50", k=k), star, rtol=1e-9)
        assert out["capacity"].sel(stat="q50", k=k) == pytest.approx(
            float(theory.capacity(c2k, c3k)))
        lat = theory.latency(rps, c1k, c2k, c3k, qk, pk)
        np.testing.assert_array_equal(out["p_saturated"].sel(k=k).values, ~np.isfinite(lat))
    # the compute wall moves RPS* below the paper's closed form, and the alert line with it
    star6 = theory.break_even_rps(C1[0], C2[0], C1[2], C2[2], C3[0], Q[0], C3[2], Q[2], 2.0,
                                  theory.soft_power(6))
    assert star6 < theory.break_even_rps(C1[0], C2[0], C1[2], C2[2]) - 0.1
    assert out["rps_alert"].sel(k=6) == pytest.approx(star6, rel=1e-9)
    # past k = 6's compute wall (10 req/s) it is never chosen
    assert (out["k_neutral"].sel(rps=[10.5, 13.0]) != 6).all()
    assert out["p_saturated"].sel(k=6, rps=10.5) == 1.0


def test_risk_neutral_minimises_expected_latency_not_mean_speedup():
    # k = 1 is slower in 80% of draws (speedup 0.77) and much faster in 20% (speedup 10): its
    # mean speedup is 2.6, but its expected latency (1.06 s) is above the baseline's (1.0 s)
    n = 100
    ks = [0, 1]
    coords = {"sample": np.arange(n), "k": ks}
    fast = np.arange(n) < 20
    c1 = xr.DataArray(np.stack([np.ones(n), np.where(fast, 0.1, 1.3)], axis=1),
                      dims=("sample", "k"), coords=coords)
    c2 = xr.DataArray(np.full((n, 2), 1e-3), dims=("sample", "k"), coords=coords)
    lat = decide.latency_draws(c1, c2, [0.0])
    spd = decide.speedup_draws(lat)
    assert spd.sel(k=1).mean("sample") > 2.0  # mean of the ratio says k = 1
    assert spd.sel(k=1).median("sample") < 1.0
    assert lat.sel(k=0).mean("sample") < lat.sel(k=1).mean("sample")  # ratio of means: k = 0
    out = decide.analyse(c1, c2, [0.0])
    assert out["k_neutral"].item() == 0
    assert out["k_risk"].item() == 0
    assert out["p_sd_hurts"].sel(k=1).item() == pytest.approx(0.8)
    # the reported mean speedup is the ratio of expectations, 1.0/1.06, not the mean ratio
    assert out["speedup"].sel(k=1, stat="mean").item() == pytest.approx(1.0 / 1.06)
    # the same posterior with the slow draws only 1.1 s: now k = 1 has the lower expectation
    c1_better = c1.copy(data=np.stack([np.ones(n), np.where(fast, 0.1, 1.1)], axis=1))
    assert decide.analyse(c1_better, c2, [0.0])["k_neutral"].item() == 1


def test_regret_finite_and_saturating_k_not_chosen():
    # k = 6 is far faster where it keeps up, but saturates at 6 req/s in 30% of the draws
    n = 100
    ks = [0, 6]
    coords = {"sample": np.arange(n), "k": ks}
    wall = np.arange(n) < 30
    c1 = xr.DataArray(np.tile([1.2, 0.5], (n, 1)), dims=("sample", "k"), coords=coords)
    c2 = xr.DataArray(np.stack([np.full(n, 0.07), np.where(wall, 0.2, 0.05)], axis=1),
                      dims=("sample", "k"), coords=coords)
    out = decide.analyse(c1, c2, [0.0, 6.0])
    at = {"rps": 6.0}
    assert out["p_saturated"].sel(k=6, **at) == pytest.approx(0.3)
    assert np.isfinite(out["regret"].sel(**at)).all()
    # k = 6 is the best in every draw where it keeps up; the baseline loses to it in 70%
    assert out["regret"].sel(k=6, **at) == pytest.approx(0.0)
    l0, l6 = 1.2 / (1 - 6 * 0.07), 0.5 / (1 - 6 * 0.05)
    assert out["regret"].sel(k=0, **at) == pytest.approx(0.7 * (l0 / l6 - 1))
    assert out["k_neutral"].sel(**at) == 0 and out["k_risk"].sel(**at) == 0
    assert out["k_neutral"].sel(rps=0.0) == 6
    # the rule, not the latencies, keeps k = 6 out: tolerate 30% saturation and it is chosen
    assert decide.analyse(c1, c2, [6.0], max_saturated=0.5)["k_neutral"].item() == 6
    # nothing eligible: an empty choice, not a saturated one
    past = decide.analyse(c1, c2, [20.0])
    assert np.isnan(past["k_neutral"].item()) and np.isnan(past["k_risk"].item())
    table = decide.decision_table(past.expand_dims(setup=["s"], alpha=[0.7]))
    assert np.isnan(table["speedup"]).all() and np.isnan(table["regret"]).all()


def test_measured_range_and_beyond_capacity_flags():
    c1, c2 = point_mass(10)
    rps = np.array([0.0, 5.0, 9.0, 11.0])
    out = decide.analyse(c1, c2, rps, measured=9.0, ceiling=10.0)
    np.testing.assert_array_equal(out["extrapolated"].values, rps > 9.0)
    # RPS* is 8.86 (k = 6) and 12.73 (k = 2): only the latter lies beyond the 10 req/s ceiling
    assert not out["rps_star_beyond_capacity"].sel(k=6)
    assert out["rps_star_beyond_capacity"].sel(k=2)
    assert out["alert_beyond_capacity"].sel(k=2) and not out["alert_beyond_capacity"].sel(k=6)
    table = decide.break_even_table(out.expand_dims(setup=["s"]).expand_dims(alpha=[0.7]))
    assert table.set_index("k")["rps_star_beyond_capacity"].to_dict() == {2: True, 6: False}
    unlabelled = decide.analyse(c1, c2, rps)
    assert not unlabelled["extrapolated"].any()
    assert not unlabelled["rps_star_beyond_capacity"].any()


def test_a_speedup_is_extrapolated_past_its_own_configurations_measured_loads():
    """Each k's speedup is extrapolated past the load measured with that k, or without SD;
    a decision row is extrapolated as its chosen k's speedup, and says whose range it left."""
    c1, c2 = point_mass(10)
    rps = [0.0, 4.0, 9.0, 13.5, 15.0]
    own = xr.DataArray([14.0, 8.0, 5.0], dims="k", coords={"k": KS})
    out = decide.analyse(c1, c2, rps, measured=14.0, ceiling=15.0, measured_config=own)
    past = out["speedup_extrapolated"].transpose("k", "rps").values
    np.testing.assert_array_equal(past, [[False, False, False, False, True],
                                         [False, False, True, True, True],
                                         [False, False, True, True, True]])
    v = decide.verdicts(out.expand_dims(setup=["s"], alpha=[0.7])).set_index("rps")
    # k = 6 idle, k = 2 at 9 req/s (measured to 8), no SD at 13.5, nothing at 15
    assert v["extrapolated"].to_list() == [False, False, True, False, True]
    assert v["rps_measured_k"].to_list() == [5.0, 5.0, 8.0, 14.0, 14.0]
    assert v.loc[9.0, "reason"].startswith(
        "extrapolated past k = 2's highest measured load, 8 req/s: ")
    assert v.loc[15.0, "reason"].startswith("extrapolated past no SD's highest measured load, ")
    # the other ks that could be chosen (below their capacity: k = 2 to 13.9 req/s, k = 6 to
    # 11.8) but were measured only at lower loads
    assert v["unmeasured_ks"].to_list() == [[], [], [6], [2], []]
    assert v.loc[9.0, "reason"].endswith("; k = 6 measured only at lower loads")
    # a misfit configuration marks the rows that choose it, and through the baseline every k
    bad = xr.DataArray([False, True, False], dims="k", coords={"k": KS})
    out = decide.analyse(c1, c2, rps, measured=14.0, ceiling=15.0, measured_config=own,
                         misfit=bad)
    v = decide.verdicts(out.expand_dims(setup=["s"], alpha=[0.7])).set_index("rps")
    assert v["misfit"].to_list() == [False, False, True, False, False]
    assert v.loc[9.0, "reason"].endswith("the fit misses the measurements this answer rests on "
                                         "(bayeslat report, adequacy section)")
    out = decide.analyse(c1, c2, rps, misfit=~bad)
    assert out["misfit"].all()
    # the chosen k measured at the load, the baseline not
    own = xr.DataArray([8.5, 10.0, 5.0], dims="k", coords={"k": KS})
    out = decide.analyse(c1, c2, [9.0], measured=14.0, ceiling=15.0, measured_config=own)
    v = decide.verdicts(out.expand_dims(setup=["s"], alpha=[0.7]))
    assert v["answer"].item() == "SD on, k = 2" and v["extrapolated"].item()
    assert v["reason"].item().startswith("extrapolated past no SD's highest measured load: ")


def test_discrepancy_widens_the_bands_and_leaves_the_expectations():
    """With the true latency scattering about the curve, the speedup bands and P(SD hurts)
    take the scatter; the expectations, the risk-neutral k and RPS* stay on the curve."""
    c1, c2 = point_mass(4000)
    rps = np.array([0.0, 8.0])
    curve = decide.analyse(c1, c2, rps)
    scale = xr.DataArray(np.full((4000, 3, 2), 0.05), dims=("sample", "k", "rps"),
                         coords={"sample": np.arange(4000), "k": KS, "rps": rps})
    d = scatter_draws(scale, xr.DataArray(np.full(4000, 1e6), dims="sample"), 0)
    true = decide.analyse(c1, c2, rps, discrepancy=d)
    spd = true["speedup"].sel(k=6, rps=8.0)
    want = theory.speedup(8.0, C1[0], C2[0], C1[2], C2[2])
    # the ratio of two independent lognormal scatters of 5%: log sd 0.05·√2
    half = np.log(spd.sel(stat="q95") / spd.sel(stat="q05")) / 2
    assert float(half) == pytest.approx(1.645 * 0.05 * np.sqrt(2), rel=0.1)
    assert float(spd.sel(stat="q50")) == pytest.approx(want, rel=0.01)
    assert 0.0 < float(true["p_sd_hurts"].sel(k=6, rps=8.0)) < 0.05  # curve: 0 exactly
    assert float(curve["p_sd_hurts"].sel(k=6, rps=8.0)) == 0.0
    for name in ("expected_latency", "regret", "k_neutral", "rps_star", "rps_alert"):
        xr.testing.assert_equal(true[name], curve[name])
    np.testing.assert_allclose(spd.sel(stat="mean"), want, rtol=1e-12)


def test_verdicts_say_on_or_off_which_k_and_why():
    """At the worked example's loads: k = 6 while idle (it stops paying at RPS* 8.86), k = 2
    near 9 req/s (its RPS* 12.73 lies past the 10 req/s ceiling), no SD at 13.5 (every draft
    length is slower), nothing at 15 (the baseline saturates too)."""
    c1, c2 = point_mass(10)
    out = decide.analyse(c1, c2, [0.0, 9.0, 13.5, 15.0], measured=9.0, ceiling=10.0)
    v = decide.verdicts(out.expand_dims(setup=["s"], alpha=[0.7])).set_index("rps")
    assert v["answer"].to_list() == ["SD on, k = 6", "SD on, k = 2", "SD off", "saturated"]
    assert v.loc[0.0, "rps_star"] == pytest.approx(8.86, abs=5e-3)
    assert "stops paying at about 8.86 req/s" in v.loc[0.0, "reason"]
    assert v.loc[9.0, "rps_star_beyond_capacity"]
    assert "only beyond the measured ceiling" in v.loc[9.0, "reason"]
    assert v.loc[13.5, "reason"].startswith("extrapolated")
    lat = [theory.latency(13.5, C1[i], C2[i]) for i in (0, 1)]
    assert v.loc[13.5, "reason"].endswith(
        f"no SD has the lowest latency at 95% probability, {lat[0]:.3g} s (best SD: k = 2, "
        f"{lat[1]:.3g} s)")
    assert v.loc[0.0, "reason"].startswith(
        f"the lowest latency at 95% probability, {C1[2]:.3g} s (no SD: {C1[0]:.3g} s)")
    assert np.isnan(v.loc[15.0, "k"]) and "does not keep up" in v.loc[15.0, "reason"]
    assert v.loc[0.0, "speedup"] == pytest.approx(C1[0] / C1[2])


def test_arrivals_are_those_of_the_rated_benchmarks_below_saturation():
    """What a load means: the strategy of the unsaturated constant or Poisson rows."""
    table = pd.DataFrame({"strategy": ["synchronous", "constant", "poisson", "throughput"],
                          "saturated": [False, False, True, True]})
    assert decide.arrivals(table) == "constant"
    assert decide.arrivals(table.assign(saturated=False)) == "mixed"
    assert decide.arrivals(table.assign(strategy="poisson")) == "poisson"
    assert decide.arrivals(table.iloc[[0, 3]]) == "none"
    assert decide.arrivals_note("none") == ""
    assert "fit each kind of sweep on its own" in decide.arrivals_note("mixed")
