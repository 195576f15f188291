"""Does the engine, which knows nothing of the formula, produce curves the formula describes?

Slow: each test sweeps on the engine (seconds to half a minute).

Results at seed 0 (per-configuration least-squares fits of ``L = C1/(1 − rps·C2)`` to the
unsaturated rows), with the per-kernel roofline of :mod:`bayeslat.simulate.hardware` (a pass
costs its weight GEMMs and its attention one after the other, each the slower of its memory and
its compute time):

- ``example`` preset, 156 curves: median R² 0.983, worst 0.60; 40% of the curves above 0.99, 69%
  above 0.95. Per group the median runs from 0.89 (``llama-8b H100 p256 g128``) to 0.997 (70B,
  ``p1024``). The worst curves are all short prompts with long drafts:
  ``llama-70b-fp8 H200 p256 g512 eagle3 a0.6 k6`` (0.60), ``a0.75 k6`` (0.63), ``a0.6 k4`` (0.69),
  ``a0.9 k6`` (0.70), then ``llama-8b H100 p256 g512 a0.6 k4`` (0.76). Why: a step reads all the
  weights whatever its batch, so while the GEMMs are memory-bound, latency barely moves with load
  (5.5 s to 6.2 s for the worst curve up to 70% of its ceiling); once the tokens of a step pass the
  GEMM ridge point (about 80 tokens for FP8 weights on an H200, i.e. a dozen requests verifying 7
  tokens each), every drafted token costs compute, most of them rejected at alpha 0.6, and latency
  nearly doubles in the last fifth of the range. That hockey stick is what the hyperbola cannot
  follow. Long prompts fit best: their prefill chunks keep steps past the ridge at every load, so
  the step time grows steadily with the batch. No unsaturated benchmark saw a KV preemption. This is
  rougher than the old engine (memory and compute time added, step time affine in the batch: median
  0.9999) and close to reality (DESIGN.md §3: about 0.975 on a real sweep; an independent engine
  simulation: median 0.987, minimum 0.79).
- Paper grid (``paper-grid-8b-h100``, 1776 curves, from ``benchmarks/simulate_grid.py --out``):
  median 0.921, worst 0.43; only 28% above 0.95. Baselines (k = 0) have median 0.991; SD
  curves are worst at k = 3-5 (medians 0.83-0.85) and at the shortest workload ``p128 g64``
  (worst ten all there, k = 1-2, 0.43-0.50): latency is flat to within about 10% up to 80% of
  the ceiling and jumps at the last rate (90%), where the tokens of a step first pass the GEMM
  ridge. The longer the prompt, the better the fit (median 0.84 at p = 128, 0.96 at
  p = 1024). The grid's median is below the 0.95 that the example passes: on this roofline the
  formula is a poor description of short SD workloads whose measured range ends near the ridge.
- MoE verifiers (``moe-30b-a3b-h100``): R² about 0.35 under the dense formula, because the first
  few requests in the batch already touch most experts; the coverage correction
  :func:`bayeslat.theory.moe_latency` (four coefficients) fits the same curves with R² above
  0.998.
- SD speedup at 90% of the load range shared with the baseline (Llama-8B on H100, p256 g128,
  seed 1), relative to zero load: alpha 0.6 and 0.75 with k = 2 or 4 fall by 4% to 22%, alpha
  0.99 with k = 1 or 2 rises by about 7%. With k = 1 moderate alpha barely moves (−2% to +1%):
  a one-token draft wastes little compute once the GEMMs are compute-bound, while it still
  spreads the weight reads over more output tokens. Under light load (30% to 50% of the range)
  speedups move by less than 3% either way: both curves are flat while the GEMMs are
  memory-bound. This is the paper's regime only: in the ``example`` preset's long-prompt groups
  (``p1024``) the speedup at 90% load rises even at alpha 0.6 for k ≤ 2 (up to +34%, 8B
  ``p1024 g512``), because under load a step is mostly other requests' prefill, which SD's
  drafter passes and extra verify tokens barely add to, while SD still needs fewer steps. The
  additive engine before this roofline showed the same for the 1B and 8B verifiers.
"""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import curve_fit

from bayeslat import theory
from bayeslat.data.schema import config_labels, group_labels
from bayeslat.simulate import presets
from bayeslat.simulate.engine import simulate_run
from bayeslat.simulate.protocol import Configuration, sweep

pytestmark = pytest.mark.slow


def fit_r2(rps: np.ndarray, lat: np.ndarray) -> float:
    """R² of a least-squares fit of ``theory.latency`` (C1, C2 free) to one curve."""
    (c1, c2), _ = curve_fit(lambda r, a, b: theory.latency(r, a, b), rps, lat,
                            p0=[lat.min(), 0.5 / rps.max()],
                            bounds=([0.0, 0.0], [np.inf, 1.0 / rps.max()]))
    resid = lat - theory.latency(rps, c1, c2)
    return 1.0 - (resid**2).sum() / ((lat - lat.mean()) ** 2).sum()


@pytest.fixture(scope="module")
def example_table():
    p = presets.preset("example")
    return sweep(p.configurations(), p.protocol, seed=0)


def test_unsaturated_curves_follow_the_formula(example_table):
    ok = example_table[~example_table["saturated"]]
    by_config = ok.groupby(config_labels(ok))
    r2 = pd.Series({label: fit_r2(rows["rps"].to_numpy(), rows["latency_mean"].to_numpy())
                    for label, rows in by_config})
    print(f"\nR² per configuration: median {r2.median():.4f}, min {r2.min():.3f}; worst:")
    print(r2.sort_values().head(5).to_string())
    assert r2.median() >= 0.95
    assert r2.median() < 0.999  # not the affine step time that put every curve on the formula
    # The worst are the weight-bound-then-compute-bound hockey sticks: short prompts, long drafts.
    worst = by_config[["prefill_tokens", "k"]].first().loc[r2.nsmallest(10).index]
    assert (worst["prefill_tokens"] == 256).all() and (worst["k"] >= 4).all()


def test_curves_stay_unsaturated_across_most_of_the_range(example_table):
    constant = example_table[example_table["strategy"] == "constant"]
    assert (~constant["saturated"]).mean() > 0.8


def _speedups(table: pd.DataFrame, share: float) -> pd.DataFrame:
    """Speedup at zero load and at ``share`` of the common unsaturated range, per config."""
    ok = table[~table["saturated"]]
    out = []
    for _, rows in ok.groupby(group_labels(ok)):
        base = rows[rows["k"] == 0].sort_values("rps")
        for (k, alpha), sd in rows[rows["k"] > 0].groupby(["k", "alpha"]):
            sd = sd.sort_values("rps")
            load = share * min(base["rps"].max(), sd["rps"].max())
            at = np.interp(load, base["rps"], base["latency_mean"]) / np.interp(
                load, sd["rps"], sd["latency_mean"])
            zero = base["latency_mean"].iloc[0] / sd["latency_mean"].iloc[0]
            out.append({"k": k, "alpha": alpha, "zero": zero, "loaded": at})
    return pd.DataFrame(out)


def test_speedup_falls_with_load_unless_alpha_is_near_one():
    # The paper's regime: short prompts and outputs, where a large batch is compute-bound.
    dep = presets.eagle("llama-8b", "H100")
    base = Configuration(replace(dep, drafter=None, method="none"), 256, 128)
    configs = [base] + [Configuration(dep, 256, 128, k, a)
                        for a in (0.6, 0.75, 0.99) for k in (1, 2, 4)]
    s = _speedups(sweep(configs, seed=1), share=0.9)
    moderate = s[s["alpha"] < 0.9]
    drafts = moderate[moderate["k"] >= 2]
    assert (drafts["loaded"] < drafts["zero"]).all()
    # A one-token draft wastes little compute: its speedup barely moves (see the docstring).
    one = moderate[moderate["k"] == 1]
    assert np.allclose(one["loaded"], one["zero"], rtol=0.03)
    near_one = s[(s["alpha"] == 0.99) & (s["k"] <= 2)]
    assert (near_one["loaded"] > near_one["zero"]).all()
    assert (s["zero"] > 1).all()  # SD wins at zero load with these drafters


def test_moe_curves_follow_the_coverage_correction_not_the_dense_formula():
    dep = presets.eagle("qwen3-30b-a3b", "H100")
    moe = dep.verifier
    configs = [Configuration(replace(dep, drafter=None, method="none"), 256, 128)] + [
        Configuration(dep, 256, 128, k, 0.8) for k in (1, 3)]
    table = sweep(configs, seed=2)
    ok = table[~table["saturated"]]
    for k, rows in ok.groupby("k"):
        rps, lat = rows["rps"].to_numpy(), rows["latency_mean"].to_numpy()

        def coverage(r, c1u, c1s, c2u, c2s, k=k):
            return theory.moe_latency(r, c1u, c1s, c2u, c2s, moe.experts_active,
                                      moe.experts_total, k, tol=1e-8)

        top = 1.0 / rps.max()
        params, _ = curve_fit(coverage, rps, lat, p0=[lat.min() / 2, lat.min(), top / 10,
                                                      top / 3],
                              bounds=(0.0, [np.inf, np.inf, top, top]), maxfev=4000)
        resid = lat - coverage(rps, *params)
        r2_moe = 1.0 - (resid**2).sum() / ((lat - lat.mean()) ** 2).sum()
        assert r2_moe > 0.99
        assert fit_r2(rps, lat) < r2_moe - 0.05  # the dense formula misses the coverage jump


def _steady_latency(config, rate, seconds=600.0):
    """The engine's mean latency at an evenly spaced ``rate``, over the middle half of
    ``seconds`` of requests (the server filled up and not yet draining)."""
    n = int(max(rate * seconds, 400))
    run = simulate_run(config.deployment, config.workload, np.arange(n) / rate, seed=2)
    return run.latency[n // 4:3 * n // 4].mean()


def _roofline_constants(dep):
    """``f``, ``T*``, ``f_d``, ``T*_d`` of :func:`bayeslat.theory.roofline_latency` from the
    engine's own costs: seconds of arithmetic per token and the knee in tokens (the weights'
    read time over that), the verifier's and the drafter's."""
    out = []
    for model in (dep.verifier, dep.drafter):
        f = model.flops_per_token / dep.gpu.flops if model is not None else 0.0
        out += [f, model.weight_bytes / dep.gpu.bytes_per_s / f if model is not None else 1.0]
    return out


@pytest.mark.parametrize(("prefill", "k"), [(256, 0), (1024, 0), (256, 1), (256, 2), (256, 6)])
def test_the_roofline_form_predicts_the_engine_near_its_wall(prefill, k):
    """The mean-field roofline form, with the engine's compute constants and only ``C1``,
    ``C2`` fitted to the steady state below 55% of the ceiling, predicts 80% and 90% of it
    within 3.5%, where the paper's curve, fitted to the same points, falls 10-50% short, and
    the rate of a full batch within 2.5% of the throughput benchmark's ceiling (Llama-8B on an
    H100 with its EAGLE-3 head at alpha 0.75; measured: 0.1-3.1% and 0.2-1.9%)."""
    dep = presets.eagle("llama-8b", "H100")
    if k == 0:
        dep = replace(dep, drafter=None, method="none")
    config = Configuration(dep, prefill, 128, k, 0.75)
    burst = simulate_run(dep, config.workload, np.zeros(2048), seed=1)
    ceiling = 2048 / burst.finish.max()
    rates = np.array([0.1, 0.25, 0.4, 0.55, 0.8, 0.9]) * ceiling
    measured = np.log([_steady_latency(config, r) for r in rates])
    cycles = 128 / theory.tokens_per_cycle(0.75, k)
    f, knee, f_d, knee_d = _roofline_constants(dep)

    def roofline(r, c1, c2):
        return theory.roofline_latency(r, c1, c2, f, knee, cycles, k, prefill, f_d, knee_d)

    for form, within in ((roofline, 0.035), (theory.latency, None)):
        (c1, c2), _ = curve_fit(lambda r, c1, c2, form=form: np.log(form(r, c1, c2)), rates[:4],
                                measured[:4], p0=(np.exp(measured[0]), 0.1 / rates[3]),
                                bounds=(0, np.inf))
        error = np.expm1(np.log(form(rates[4:], c1, c2)) - measured[4:])
        if within:
            assert np.abs(error).max() < within
            full = theory.roofline_throughput(c1, c2, f, knee, cycles, k, prefill, f_d, knee_d)
            assert full / ceiling == pytest.approx(1.0, abs=0.025)
        else:
            assert error[-1] < -0.1
