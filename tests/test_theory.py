"""The closed-form model: the worked example of DESIGN.md §2 and its properties."""

import numpy as np
import pytest
import xarray as xr
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from bayeslat import theory

C1_D, C2_D = 1.20, 0.07
CONFIG_A = dict(c1_sd=0.78, c2_sd=0.085)
CONFIG_B = dict(c1_sd=0.92, c2_sd=0.072)


def sig3(x):
    return float(f"{x:.3g}")


class TestWorkedExample:
    def test_baseline_latency(self):
        lat = theory.latency(np.array([10.0, 12.0]), C1_D, C2_D)
        assert [sig3(v) for v in lat] == [4.00, 7.50]

    @pytest.mark.parametrize(
        "cfg, s0, s8, star",
        [(CONFIG_A, 1.54, 1.12, 8.86), (CONFIG_B, 1.30, 1.26, 12.7)],
    )
    def test_speedup_and_break_even(self, cfg, s0, s8, star):
        s = theory.speedup(np.array([0.0, 8.0]), C1_D, C2_D, cfg["c1_sd"], cfg["c2_sd"])
        assert sig3(s[0]) == s0
        assert sig3(s[1]) == s8
        assert sig3(theory.break_even_rps(C1_D, C2_D, cfg["c1_sd"], cfg["c2_sd"])) == star

    def test_ratios_and_tokens_per_cycle(self):
        c1r, c2r = theory.ratios(C1_D, C2_D, **{"c1_sd": 0.78, "c2_sd": 0.085})
        assert (round(c1r, 3), round(c2r, 3)) == (0.650, 1.214)
        assert theory.tokens_per_cycle(0.75, 6) == pytest.approx(3.466, abs=5e-4)
        assert theory.tokens_per_cycle(0.75, 2) == pytest.approx(2.3125)


class TestEdgeCases:
    def test_tokens_per_cycle_exact_ends(self):
        assert theory.tokens_per_cycle(1.0, 7) == 8.0
        assert theory.tokens_per_cycle(0.3, 0) == 1.0
        assert theory.tokens_per_cycle(0.0, 5) == 1.0
        assert theory.tokens_per_cycle(1 - 1e-12, 4) == pytest.approx(5.0, rel=1e-9)

    def test_latency_is_inf_at_and_past_saturation(self):
        lat = theory.latency(np.array([1 / 0.07, 20.0, 1e9]), C1_D, C2_D)
        assert np.all(np.isposinf(lat))

    def test_break_even_absent_is_nan(self):
        assert np.isnan(theory.break_even_rps(1.2, 0.07, 0.8, 0.06))  # SD always better
        assert np.isnan(theory.break_even_rps(1.2, 0.07, 1.3, 0.08))  # SD always worse
        assert np.isnan(theory.break_even_rps(1.2, 0.07, 1.2, 0.07))  # identical

    def test_reverse_break_even(self):
        # SD slower at zero load but cheaper per request: it wins above RPS*.
        star = theory.break_even_rps(1.0, 0.1, 1.2, 0.05)
        assert 0 < star < 10
        assert theory.speedup(star, 1.0, 0.1, 1.2, 0.05) == pytest.approx(1.0)
        assert theory.speedup(star * 1.1, 1.0, 0.1, 1.2, 0.05) > 1

    def test_effective_coefficients_baseline(self):
        c1, c2 = theory.effective_coefficients(0.1, 0.02, 0.005, 0.01, 0.001, 0.0005, 0.8, 0, 100)
        assert c1 == pytest.approx(0.1 + 100 * 0.02)
        assert c2 == pytest.approx(0.01 + 100 * 0.001)

    def test_xarray_dims_are_kept(self):
        alpha = xr.DataArray([0.5, 0.9], dims="alpha")
        k = xr.DataArray([0, 2, 4], dims="k")
        e = theory.tokens_per_cycle(alpha, k)
        assert set(e.dims) == {"alpha", "k"}
        rps = xr.DataArray(np.linspace(0, 20, 5), dims="rps")
        assert theory.latency(rps, C1_D, C2_D).dims == ("rps",)
        star = theory.break_even_rps(C1_D, C2_D, xr.DataArray([0.78, 0.92], dims="config"),
                                     xr.DataArray([0.085, 0.072], dims="config"))
        assert star.dims == ("config",)

    def test_pytensor_graph_matches_numpy(self):
        pt = pytest.importorskip("pytensor.tensor")
        a = pt.dvector("a")
        expr = theory.effective_coefficients(0.1, 0.02, 0.005, 0.01, 0.001, 0.0005, a, 3, 128)[1]
        alphas = np.array([0.0, 0.4, 0.9, 1.0])
        np.testing.assert_allclose(
            expr.eval({a: alphas}),
            theory.effective_coefficients(0.1, 0.02, 0.005, 0.01, 0.001, 0.0005, alphas, 3, 128)[1],
        )


class TestBestK:
    coeffs = dict(c1p=0.05, c1v=0.01, c1d=0.002, c2p=0.002, c2v=0.0005, c2d=0.0003)

    def test_small_k_wins_at_high_load(self):
        rps = np.array([0.1, 5.0, 12.0])
        ks = theory.best_k(rps, **self.coeffs, alpha=0.8, decode_tokens=128)
        assert ks[0] > ks[-1]
        assert np.all(np.diff(ks) <= 0)

    def test_matches_brute_force(self):
        rps = np.linspace(0, 14, 15)
        got = theory.best_k(rps, **self.coeffs, alpha=0.7, decode_tokens=256, ks=range(8))
        for r, kstar in zip(rps, got, strict=True):
            lats = [theory.latency(r, *theory.effective_coefficients(
                *self.coeffs.values(), 0.7, k, 256)) for k in range(8)]
            if np.all(np.isinf(lats)):
                assert np.isnan(kstar)
            else:
                assert kstar == int(np.argmin(lats))

    def test_zero_acceptance_means_no_speculation(self):
        assert theory.best_k(1.0, **self.coeffs, alpha=0.0, decode_tokens=128) == 0

    def test_xarray(self):
        rps = xr.DataArray([0.1, 5.0, 12.0, 1e3], dims="rps")
        out = theory.best_k(rps, **self.coeffs, alpha=0.8, decode_tokens=128)
        assert out.dims == ("rps",)
        np.testing.assert_array_equal(
            out.values[:3], theory.best_k(rps.values[:3], **self.coeffs, alpha=0.8,
                                          decode_tokens=128))
        assert np.isnan(out.values[3])


positive = st.floats(1e-3, 1e2, allow_nan=False, allow_infinity=False)
unit = st.floats(0.0, 1.0, allow_nan=False)


class TestProperties:
    @given(c1=positive, c2=positive)
    def test_latency_tends_to_c1_at_zero_load(self, c1, c2):
        assert theory.latency(0.0, c1, c2) == c1
        assert theory.latency(1e-9 / c2, c1, c2) == pytest.approx(c1, rel=1e-8)

    @given(c1=positive, c2=positive, x=st.lists(st.floats(0, 0.999), min_size=2, max_size=20))
    def test_latency_increases_with_load(self, c1, c2, x):
        rps = np.sort(np.array(x)) / c2
        lat = theory.latency(rps, c1, c2)
        assert np.all(np.isfinite(lat))
        assert np.all(np.diff(lat) >= 0)

    @given(c1d=positive, c2d=positive, c1s=positive, c2s=positive)
    def test_speedup_at_zero_load_is_inverse_c1r(self, c1d, c2d, c1s, c2s):
        c1r, _ = theory.ratios(c1d, c2d, c1s, c2s)
        assert theory.speedup(0.0, c1d, c2d, c1s, c2s) == pytest.approx(1 / c1r, rel=1e-12)

    @given(c1d=positive, c2d=positive, c1r=st.floats(0.2, 0.98), c2r=st.floats(1.02, 3.0))
    def test_speedup_is_one_at_break_even(self, c1d, c2d, c1r, c2r):
        star = theory.break_even_rps(c1d, c2d, c1r * c1d, c2r * c2d)
        assert 0 < star < 1 / c2d
        assert theory.speedup(star, c1d, c2d, c1r * c1d, c2r * c2d) == pytest.approx(1, rel=1e-9)

    @given(c1d=positive, c2d=positive, c1r=st.floats(0.2, 3.0), c2r=st.floats(0.2, 3.0),
           r=st.floats(0.0, 0.99))
    def test_speedup_matches_closed_form(self, c1d, c2d, c1r, c2r, r):
        assume(r * c2r < 0.999)
        s = theory.speedup(r / c2d, c1d, c2d, c1r * c1d, c2r * c2d)
        assert s == pytest.approx((1 / c1r) * (1 + (1 - c2r) * r / (1 - r)), rel=1e-9)

    @given(alpha=unit, k=st.integers(0, 20))
    def test_tokens_per_cycle_bounds(self, alpha, k):
        e = theory.tokens_per_cycle(alpha, k)
        assert 1.0 <= e <= k + 1
        assert e == pytest.approx(sum(alpha**i for i in range(k + 1)), rel=1e-9)

    @given(a1=unit, a2=unit, k=st.integers(0, 20))
    def test_tokens_per_cycle_increases_in_alpha(self, a1, a2, k):
        lo, hi = sorted((a1, a2))
        assert theory.tokens_per_cycle(lo, k) <= theory.tokens_per_cycle(hi, k) * (1 + 1e-12)

    @given(alpha=unit, k=st.integers(0, 20))
    def test_tokens_per_cycle_increases_in_k(self, alpha, k):
        assert theory.tokens_per_cycle(alpha, k) <= theory.tokens_per_cycle(alpha, k + 1) * (
            1 + 1e-12)


def _largest_root(rps, c1u, c1s, c2u, c2s, m, big_m, k):
    """Brute force: scan L for sign changes of f(L) - L and refine the largest with brentq."""

    def g(lat):
        phi = 1 - (1 - m / big_m) ** (rps * lat * (k + 1))
        denom = 1 - rps * (c2u + phi * c2s)
        return (c1u + phi * c1s) / denom - lat if denom > 0 else np.inf

    top = theory.latency(rps, c1u + c1s, c2u + c2s)
    grid = np.linspace(c1u * 0.999, top * 1.001, 20001)
    vals = np.array([g(x) for x in grid])
    sign_change = np.nonzero(np.sign(vals[:-1]) != np.sign(vals[1:]))[0]
    i = sign_change[-1]
    return brentq(g, grid[i], grid[i + 1], xtol=1e-14)


class TestMoE:
    def test_coverage_ends(self):
        assert theory.moe_coverage(0.0, 8, 128) == 0.0
        assert theory.moe_coverage(1.0, 8, 128) == pytest.approx(8 / 128)
        assert theory.moe_coverage(1e5, 8, 128) == pytest.approx(1.0)

    @settings(max_examples=30, deadline=None)
    @given(rps=st.floats(0.05, 30), c1u=st.floats(0.1, 2), c1s=st.floats(0.1, 3),
           c2u=st.floats(1e-3, 0.02), c2s=st.floats(1e-3, 0.05), k=st.integers(0, 6),
           m=st.integers(1, 16))
    def test_fixed_point_equation_and_brute_force(self, rps, c1u, c1s, c2u, c2s, k, m):
        assume(rps * (c2u + c2s) < 0.95)
        lat = theory.moe_latency(rps, c1u, c1s, c2u, c2s, m, 128, k=k)
        phi = theory.moe_coverage(rps * lat * (k + 1), m, 128)
        rhs = (c1u + phi * c1s) / (1 - rps * (c2u + phi * c2s))
        assert lat == pytest.approx(rhs, rel=1e-8)
        assert lat == pytest.approx(_largest_root(rps, c1u, c1s, c2u, c2s, m, 128, k), rel=1e-6)

    def test_below_dense_at_low_load_and_converging_to_it(self):
        rps = np.array([0.01, 1.0, 10.0])
        moe = theory.moe_latency(rps, 0.5, 1.0, 0.01, 0.03, 8, 128)
        dense = theory.latency(rps, 1.5, 0.04)
        assert np.all(moe < dense)
        gap = 1 - moe / dense
        assert gap[0] > gap[-1]

    def test_saturated_is_inf(self):
        assert np.isposinf(theory.moe_latency(1e3, 0.5, 1.0, 0.01, 0.03, 8, 128))


wall = dict(c3=st.floats(1e-3, 0.1), q=st.floats(0.0, 0.5))
# C1 = 1, C2 = 0.01, C3 = 0.02, Q = 0.1 at rps 40: the compute curve's intercept A = Q·B·C3
# and its load (1 − Q)·rps·C3 = 0.72
A = 0.1 * theory.BATCH_CAP * 0.02
L_MEM, L_COMP = 1 / 0.6, A / 0.28


class TestCapacity:
    """The compute wall: L² = L_m² + L_c² − A², L_c = A/(1 − (1 − Q)·rps·C3), A = Q·B·C3."""

    def test_reduces_to_the_paper_without_the_wall(self):
        rps = np.array([0.0, 5.0, 12.0, 20.0])
        np.testing.assert_array_equal(theory.latency(rps, C1_D, C2_D, 0.0, 0.0),
                                      theory.latency(rps, C1_D, C2_D))
        assert theory.capacity(C2_D) == pytest.approx(1 / C2_D)

    def test_hand_computed_value_and_capacity(self):
        assert theory.latency(40.0, 1.0, 0.01, 0.02, 0.1) == pytest.approx(
            np.sqrt(L_MEM**2 + L_COMP**2 - A**2))
        assert theory.latency(0.0, 1.0, 0.01, 0.02, 0.1) == pytest.approx(1.0)  # C1 at idle
        assert theory.capacity(0.01, 0.02) == pytest.approx(50.0)
        # a full batch at the capacity: the compute curve has reached B·C3, then the cliff
        assert theory.compute_latency(50.0 * (1 - 1e-12), 0.02, 0.1) == pytest.approx(
            theory.BATCH_CAP * 0.02)
        assert np.isposinf(theory.latency(50.0, 1.0, 0.01, 0.02, 0.1))
        assert np.isposinf(theory.latency(60.0, 1.0, 0.01, 0.02, 0.0))  # past the wall, Q = 0

    def test_compute_share(self):
        assert theory.compute_share(40.0, 1.0, 0.01, 0.02, 0.1) == pytest.approx(
            L_COMP**2 / (L_MEM**2 + L_COMP**2 - A**2))
        assert theory.compute_share(0.0, 1.0, 0.01, 0.02, 0.1) == pytest.approx(A**2)
        assert theory.compute_share(40.0, 1.0, 0.01) == 0.0  # the paper's model has no wall
        assert theory.compute_share(50.0, 1.0, 0.01, 0.02, 0.1) == 1.0  # at the wall

    def test_wall_sensitivity_is_the_share_over_the_batch_headroom(self):
        # the compute curve's share over 1 − rps·C3: more than log L moves with C3 at a fixed
        # share Q (whose headroom, 1 − (1 − Q)·rps·C3, is the larger), unbounded at the wall
        def log_latency(eps, rps):
            return np.log(theory.latency(rps, 1.0, 0.01, 0.02 * np.exp(eps), 0.1))

        for rps in (10.0, 40.0, 49.0):
            slope = (log_latency(1e-6, rps) - log_latency(-1e-6, rps)) / 2e-6
            got = theory.wall_sensitivity(rps, 1.0, 0.01, 0.02, 0.1)
            share = theory.compute_share(rps, 1.0, 0.01, 0.02, 0.1)
            assert got == pytest.approx(share / (1.0 - rps * 0.02))
            assert got > slope > 0
        assert theory.wall_sensitivity(40.0, 1.0, 0.01) == 0.0  # no wall, nothing moves
        assert np.isposinf(theory.wall_sensitivity(50.0, 1.0, 0.01, 0.02, 0.1))
        assert np.isposinf(theory.wall_sensitivity(60.0, 1.0, 0.01, 0.02, 0.1))

    def test_compute_coefficient(self):
        # prefill plus g/E cycles, each scoring k + 1 tokens and reading the KV cache of
        # p + g/2 tokens on average; E = 2.3125 at alpha 0.75, k 2
        got = theory.compute_coefficient(0.01, 1e-4, 1e-5, 2e-8, 0.75, 2, 256, 128)
        assert got == pytest.approx(0.01 + 128 / 2.3125 * (3 * 1e-4 + 2 * 1e-5 + 320 * 2e-8))
        assert theory.compute_coefficient(0.01, 1e-4, 1e-5, 0.0, 0.9, 0, 256, 128) == (
            pytest.approx(0.0228))
        # the reads shrink with the cycles as the acceptance grows
        reads = [theory.compute_coefficient(0.0, 0.0, 0.0, 1e-8, a, 4, 256, 128)
                 for a in (0.5, 0.9)]
        assert reads[1] / reads[0] == pytest.approx(theory.tokens_per_cycle(0.5, 4)
                                                    / theory.tokens_per_cycle(0.9, 4))

    def test_numeric_break_even_matches_the_closed_form(self):
        # a wall far above the baseline's capacity changes nothing: the numeric path agrees
        for cfg in (CONFIG_A, CONFIG_B):
            closed = theory.break_even_rps(C1_D, C2_D, cfg["c1_sd"], cfg["c2_sd"])
            numeric = theory.break_even_rps(C1_D, C2_D, cfg["c1_sd"], cfg["c2_sd"],
                                            1e-6, 1.0, 1e-6, 1.0)
            assert numeric == pytest.approx(closed, rel=1e-8)

    def test_an_sd_wall_below_the_baselines_creates_a_break_even(self):
        # the paper's coefficients say SD always helps (C2R < 1), but SD's compute wall is lower
        assert np.isnan(theory.break_even_rps(0.88, 0.005, 0.6, 0.004))
        star = theory.break_even_rps(0.88, 0.005, 0.6, 0.004, 1 / 78, 0.1, 1 / 51, 0.1)
        assert 0 < star < 51
        assert theory.speedup(star, 0.88, 0.005, 0.6, 0.004, 1 / 78, 0.1, 1 / 51, 0.1) == (
            pytest.approx(1.0, rel=1e-8))

    def test_break_even_keeps_xarray_dims(self):
        c3 = xr.DataArray([1 / 51, 1 / 60, 1e-6], dims="k")
        star = theory.break_even_rps(0.88, 0.005, 0.6, 0.004, 1 / 78, 0.1, c3, 0.1)
        assert star.dims == ("k",)
        assert np.isfinite(star.values[:2]).all() and np.isnan(star.values[2])
        assert star.values[0] < star.values[1]

    @settings(max_examples=60, deadline=None)
    @given(c1=positive, c2=st.floats(1e-4, 0.1), x=st.lists(st.floats(0, 0.999), min_size=2,
                                                             max_size=20), **wall)
    def test_latency_increases_with_load_up_to_capacity(self, c1, c2, x, c3, q):
        rps = np.sort(np.array(x)) * theory.capacity(c2, c3)
        lat = theory.latency(rps, c1, c2, c3, q)
        assert np.all(np.isfinite(lat))
        assert np.all(np.diff(lat) >= 0)
        assert np.all(lat >= theory.latency(rps, c1, c2) * (1 - 1e-12))

    @settings(max_examples=60, deadline=None)
    @given(c1d=positive, c2d=st.floats(1e-4, 0.1), c1r=st.floats(0.2, 0.98),
           c2r=st.floats(0.2, 3.0), c3d=st.floats(1e-4, 0.1), c3r=st.floats(1.01, 3.0),
           q=st.floats(0.01, 0.5))
    def test_speedup_is_one_at_the_numeric_break_even(self, c1d, c2d, c1r, c2r, c3d, c3r, q):
        # SD helps idle and its capacity is lower: it must cross below its own capacity
        assume(theory.capacity(c2r * c2d, c3r * c3d) < 0.999 * theory.capacity(c2d, c3d))
        args = (c1d, c2d, c1r * c1d, c2r * c2d, c3d, q, c3r * c3d, q)
        star = theory.break_even_rps(*args)
        top = theory.capacity(c2r * c2d, c3r * c3d)
        assert 0 < star < top * (1 + 1e-9)

        def gap(rps):  # SD's latency less the baseline's: inf past SD's capacity
            return (theory.latency(rps, c1r * c1d, c2r * c2d, c3r * c3d, q)
                    - theory.latency(rps, c1d, c2d, c3d, q))

        # the curves cross within the documented precision, or SD's batch fills first (its
        # latency jumps to inf there); a latency's slope at a crossing near zero load can be
        # steep, so the test brackets the sign change rather than comparing the latencies
        width = 1e-10 * theory.capacity(c2d, c3d)
        assert gap(max(star - width, 0.0)) <= 0.0 <= gap(star + width)
        assert theory.speedup(0.5 * star, *args[:4], c3d, q, c3r * c3d, q) > 1


class TestEvenlySpaced:
    """Evenly spaced requests: one prefill stall per request arriving during a request's life,
    ``L = b + s·n``, ``n = ⌊rps·L⌋``, about the smooth curve through the steps' midpoints."""

    def test_hand_computed_steps(self):
        # a lone request takes b = 1 s and a prefill stalls it by s = 0.085 s (70B, p1024): the
        # smooth curve L̄ = b + s(rps·L̄ − 1/2) at rps = 2 is 0.9575/0.83; two arrivals overlap
        smooth = (1 - 0.0425) / (1 - 2 * 0.085)
        assert theory.evenly_spaced(smooth, 2.0, 0.085) == pytest.approx(1.17)
        # alone (rps·L < 1) a request's latency is b, whatever the rate
        for rps in (0.0, 0.3, 0.8):
            smooth = (1 - 0.0425) / (1 - rps * 0.085)
            assert theory.evenly_spaced(smooth, rps, 0.085) == pytest.approx(1.0)

    def test_lone_requests_an_offset_and_where_two_counts_are_consistent(self):
        # the hand-computed steps: b = 1 s, s = 0.085 s; the smooth curve runs half a stall
        # below a lone request at zero load, and a synchronous benchmark measured 1.01 s
        def smooth(rps):
            return (1 - 0.0425) / (1 - rps * 0.085)

        for rps in (0.0, 0.5, 0.98):  # never meeting: the lone latency, offset or not
            got = theory.evenly_spaced(smooth(rps), rps, 0.085, offset=0.02, lone=1.01)
            assert got == 1.01
        assert theory.evenly_spaced(smooth(2.0), 2.0, 0.085, offset=0.02,
                                    lone=1.01) == pytest.approx(1.19)
        # at 6 req/s two counts are consistent (rps·s = 0.51): the smooth curve, no offset
        assert theory.evenly_spaced(smooth(6.0), 6.0, 0.085, 0.02, 1.01,
                                    theory.UNIQUE_COUNT) == smooth(6.0)
        assert theory.evenly_spaced(smooth(5.8), 5.8, 0.085, 0.02, 1.01,
                                    theory.UNIQUE_COUNT) != smooth(5.8)
        # counts n and n + 1 are consistent at once where 1/(1 − rps·s) ≥ 2
        b, rps = 1.0, 6.0
        consistent = [n for n in range(40) if n <= rps * (b + 0.085 * n) < n + 1]
        assert len(consistent) >= 2

    @settings(max_examples=200, deadline=None)
    @given(smooth=positive, x=st.floats(0.0, 50.0),
           share=st.one_of(st.just(0.0), st.floats(1e-3, 0.9)))
    def test_the_count_is_the_smallest_consistent_with_its_own_latency(self, smooth, x, share):
        rps = x / smooth
        stall = share * smooth / max(x, 1.0)  # rps·stall < 1
        assume(rps * stall < 0.99)
        got = theory.evenly_spaced(smooth, rps, stall)
        b = smooth - stall * (rps * smooth - 0.5)
        n = round((got - b) / stall) if stall > 0 else 0
        assert got == pytest.approx(b + stall * n, rel=1e-9, abs=1e-12)
        if stall > 0:
            # n requests arrive during it (either count where rps·L is an integer to rounding)
            assert n in (np.floor(rps * got * (1 - 1e-12)), np.floor(rps * got * (1 + 1e-12)))
            # n − 1 would not be: that latency would see at least n arrivals
            assert n == 0 or rps * (b + stall * (n - 1)) >= n - 1e-9
            # within half a stall of the smooth curve, but for the count's own feedback
            assert abs(got - smooth) <= stall * (0.5 + rps * stall / (1 - rps * stall)) + 1e-9

    def test_no_stall_infinite_latency_and_xarray_dims(self):
        smooth = xr.DataArray([[1.0, 2.0, np.inf]], dims=("draw", "rps"))
        stall = xr.DataArray([[0.0, np.nan, 0.1]], dims=("draw", "rps"))
        got = theory.evenly_spaced(smooth, xr.DataArray([1.0, 1.0, 1.0], dims="rps"), stall)
        assert got.dims == ("draw", "rps")
        np.testing.assert_array_equal(got.values, smooth.values)

    def test_the_offset_centres_the_staircase_on_the_measured_points(self):
        rates = xr.DataArray([[0.5, 1.0, 1.5, 2.0], [0.8, np.nan, np.nan, np.nan],
                              [np.nan] * 4], dims=("config", "rate"))
        smooth = theory.latency(rates, 1.0, 0.1)
        stall = xr.DataArray([0.08, 0.08, 0.08], dims="config")
        offset = theory.staircase_offset(smooth, rates, stall, "rate")
        stairs = theory.evenly_spaced(smooth, rates, stall) + offset
        np.testing.assert_allclose((stairs - smooth).mean("rate", skipna=True)[:2], 0.0,
                                   atol=1e-12)
        assert offset[0] != 0 and offset[2] == 0  # never measured: the midpoints
        assert theory.staircase_offset(smooth, rates, 0.0 * stall, "rate").values.tolist() == [
            0.0, 0.0, 0.0]


def test_a_prefill_past_its_knee_costs_its_excess_tokens_and_below_it_nothing():
    """``prefill_excess`` is the smoothed ``max(p − κ, 0)``: ``w·log 2`` at the knee
    (``w = κ/8``), the excess well above it, nearly 0 well below, rising with ``p`` and the same
    through PyTensor."""
    import pytensor.tensor as pt

    knee = 200.0
    width = theory.KNEE_SOFTNESS * knee
    p = np.array([0.0, 100.0, knee, 400.0, 1024.0])
    got = theory.prefill_excess(p, knee)
    assert got[2] == pytest.approx(width * np.log(2.0))
    np.testing.assert_allclose(got[3:], p[3:] - knee, atol=0.01)  # a knee past it: 0.008
    assert got[0] < 0.01 and got[1] < 0.5  # half a token at half the knee
    assert (np.diff(got) > 0).all()
    tensor = theory.prefill_excess(pt.as_tensor(p), pt.as_tensor(knee)).eval()
    np.testing.assert_allclose(tensor, got, rtol=1e-12)


@pytest.fixture(params=["rounded", "sharp"])
def corners(request, monkeypatch):
    """The roofline form as the models use it (its corners rounded), or in its sharp limit,
    the form checked against the engine (tests/test_simulate_theory.py)."""
    if request.param == "sharp":
        monkeypatch.setattr(theory, "HINGE_WIDTH", 1e-9)
        monkeypatch.setattr(theory, "COUNT_WIDTH", 1e-9)
    return request.param


def _root_by_scan(rps, c1, c2, f, knee, cycles, k, prefill, f_d, arrivals, corners):
    """The smallest root of ``roofline_latency``'s fixed point by a fine scan of its gap
    (``inf`` where the gap never falls to 0 below the batch cap), refined by bisection."""
    grid = np.linspace(c1, theory.BATCH_CAP / rps, 20001)

    def gap(lat):
        args = (rps * lat / cycles, prefill, arrivals, corners)
        return c1 + c2 * rps * lat + cycles * (
            f * _excess(rps * lat * (k + 1) - knee, *args)
            + f_d * _excess(rps * lat - knee, *args)) - lat

    values = gap(grid)
    below = np.flatnonzero(values <= 0)
    if not below.size:
        return np.inf
    lo, hi = grid[max(below[0] - 1, 0)], grid[below[0]]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return hi


def _excess(x, m, prefill, arrivals, corners):
    """``E[(x + m'·p)^+]`` written out: the prompts per step between ``floor(m)`` and its next
    integer, or Poisson. Rounded: ``(·)^+`` a softplus, and the line between the counts with
    each whole count's corner ``c_n·(m − n)^+`` replaced by ``c_n·w·softplus((m − n)/w)``."""
    from scipy.stats import poisson

    def plus(t, width=theory.HINGE_WIDTH):
        return width * np.logaddexp(0, t / width) if corners == "rounded" else np.maximum(t, 0)

    x, m = np.broadcast_arrays(np.asarray(x, float), np.asarray(m, float))
    if arrivals == "constant":
        lo = np.floor(m)
        out = (1 - (m - lo)) * plus(x + lo * prefill) + (m - lo) * plus(x + (lo + 1) * prefill)
        if corners == "rounded":
            for n in range(1, int(m.max()) + 3):
                corner = (plus(x + (n + 1) * prefill) - 2 * plus(x + n * prefill)
                          + plus(x + (n - 1) * prefill))
                out = out + corner * (plus(m - n, theory.COUNT_WIDTH) - np.maximum(m - n, 0))
        return out
    j = np.arange(80)
    return (poisson.pmf(j, m[..., None]) * plus(x[..., None] + j * prefill)).sum(-1)


def test_the_roofline_form_without_arithmetic_past_the_knee_is_the_papers_curve():
    """The paper's curve, and a full batch completing at ``B/(C1 + C2·B)``; arithmetic past
    the knee slows the full batch."""
    rps = np.array([0.5, 20.0, 150.0, 199.0, 250.0])
    paper = theory.latency(rps, 0.5, 0.005)
    for f, knee in ((0.0, 221.0), (3e-5, 1e12)):  # no arithmetic cost, or a knee never reached
        got = theory.roofline_latency(rps, 0.5, 0.005, f, knee, 73.1, 1, 256, batch_cap=1e9)
        np.testing.assert_allclose(got, paper, rtol=1e-12)
        assert np.isinf(got[-1])
        full = theory.roofline_throughput(0.5, 0.005, f, knee, 73.1, 1, 256)
        assert full == pytest.approx(256 / (0.5 + 0.005 * 256), rel=1e-12)
    assert theory.roofline_throughput(0.5, 0.005, 3e-5, 221.0, 73.1, 1, 256) < 256 / 1.78


@pytest.mark.parametrize("arrivals", theory.ARRIVALS)
def test_the_roofline_latency_is_the_smallest_root_of_its_fixed_point(arrivals, corners):
    """Against a scan of the fixed point's gap: random memory lines, compute costs, knees,
    draft lengths and prompts, up to and past the capacity."""
    rng, steady = np.random.default_rng(7), 0
    for _ in range(40):
        k = int(rng.integers(0, 7))
        c1, c2 = rng.uniform(0.2, 3.0), rng.uniform(1e-4, 0.02)
        f, knee = rng.uniform(1e-6, 3e-4), rng.uniform(60, 300)
        prefill, cycles = rng.choice([128.0, 256.0, 1024.0]), 128 / (1 + 0.8 * k)
        f_d = 0.0 if k == 0 else rng.uniform(0, 0.05) * f
        top = 1 / (c2 + cycles * f * (k + 1) + f * prefill)
        rps = rng.uniform(0.05, 1.2) * top
        got = theory.roofline_latency(rps, c1, c2, f, knee, cycles, k, prefill, f_d,
                                      arrivals=arrivals)
        want = _root_by_scan(rps, c1, c2, f, knee, cycles, k, prefill, f_d, arrivals, corners)
        if np.isinf(want):
            assert np.isinf(got)
        else:
            assert got == pytest.approx(want, rel=1e-6)
            steady += 1
    assert 10 <= steady <= 35  # both answers met


def test_random_prompts_cost_more_than_evenly_spaced_ones_and_dims_are_kept():
    """Past the knee the excess is convex in the prompts a step carries: a Poisson count of
    the same mean costs more (Jensen), and nothing below the knee; xarray in, xarray out."""
    rps = xr.DataArray(np.linspace(5, 60, 12), dims="rps")
    k = xr.DataArray([0, 1, 4], dims="k")
    cycles = 128 / theory.tokens_per_cycle(0.75, k)
    args = (rps, 0.5, 0.003, 2.7e-5, 221.0, cycles, k, 256.0)
    constant = theory.roofline_latency(*args)
    poisson = theory.roofline_latency(*args, arrivals="poisson")
    assert constant.dims == ("rps", "k") and poisson.dims == ("rps", "k")
    finite = np.isfinite(constant) & np.isfinite(poisson)
    assert (poisson.where(finite) >= constant.where(finite) * (1 - 1e-12)).all()
    assert (poisson.where(finite) > constant.where(finite) * 1.01).any()
    rising = np.diff(constant.values, axis=0)
    assert (rising[np.isfinite(rising)] >= 0).all()
    for rate in (theory.roofline_throughput, theory.roofline_capacity):
        assert rate(*args[1:]).dims == ("k",)
    with pytest.raises(ValueError, match="arrivals"):
        theory.roofline_latency(1.0, 0.5, 0.003, 2.7e-5, 221.0, 128, 0, 256, arrivals="burst")
    # a mean of 1e5 prompts a step: the Poisson sum spans its own window, not every count
    assert np.isinf(theory.roofline_latency(np.full(500, 2e5), 0.5, 0.0, 2.7e-5, 221.0, 1.0, 0,
                                            256, arrivals="poisson", batch_cap=1e9)).all()


@pytest.mark.parametrize("arrivals", theory.ARRIVALS)
def test_the_roofline_capacity_is_where_the_batch_fills(arrivals, corners):
    """Just below ``roofline_capacity`` there is a steady state, just above none. With these
    constants the drafts' batch fills (it is the cap just below), while the baseline meets its
    fold first (evenly spaced, at 128 running requests in the sharp form, where each of its
    steps takes a whole prompt and past which its right side rises faster than ``L``; the
    rounded corner brings the fold a few requests sooner)."""
    k = np.array([0, 1, 2, 6])
    cycles = 128 / theory.tokens_per_cycle(0.75, k)
    args = (0.5, 0.003, 2.7e-5, 221.0, cycles, k, 256.0, np.where(k > 0, 1.35e-6, 0.0))
    cap = theory.roofline_capacity(*args, arrivals=arrivals)
    below = theory.roofline_latency(cap * (1 - 1e-9), *args, arrivals=arrivals)
    assert np.isfinite(below).all()
    assert np.isinf(theory.roofline_latency(cap * (1 + 1e-6), *args, arrivals=arrivals)).all()
    batch = cap * below
    assert (batch <= theory.BATCH_CAP).all()
    np.testing.assert_allclose(batch[1:], theory.BATCH_CAP, rtol=1e-6)
    assert batch[0] < 200
    if arrivals == "constant":
        assert batch[0] == pytest.approx(128.0, rel=1e-3 if corners == "sharp" else 0.03)
