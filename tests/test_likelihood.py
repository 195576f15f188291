"""The fused row likelihood (bayeslat.models.likelihood) against the graph it stands for."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.initial_point import make_initial_point_fn
from support.sweeps import table

from bayeslat import theory
from bayeslat.errors import FitError
from bayeslat.models import VARIANTS, get
from bayeslat.models.base import BARRIER_WIDTH, LatencyModel
from bayeslat.models.likelihood import row_student_t


def _table(variant):
    df = table(variant)  # a throughput benchmark: a ceiling for the capacity variants
    df.loc[df.index[::7], "strategy"] = "synchronous"  # their shift
    return df


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_fused_model_has_the_log_density_and_gradient_of_the_observed_rows(variant):
    """``build(fused=True)`` is the same posterior as ``build()``: log density and gradient to
    1e-10 at the start and at points far from it (the Op's numba implementation, what nutpie
    runs, is checked below). The MoE and roofline models' means are not the kernel's: they are
    refused."""
    model = get(variant)(_table(variant))
    if variant in ("moe", "roofline"):
        assert not model.fuses
        with pytest.raises(FitError, match="fused"):
            model.build(fused=True)
        return
    exact, fused = model.build(), model.build(fused=True)
    assert {rv.name for rv in exact.observed_RVs} - {rv.name for rv in fused.observed_RVs} == {
        "log_latency"} and "log_latency" in {p.name for p in fused.potentials}
    start = make_initial_point_fn(model=exact, overrides=model.initial_values(exact),
                                  jitter_rvs=set(), return_transformed=True)(0)
    rng = np.random.default_rng(0)
    points = [start] + [{name: value + scale * rng.standard_normal(np.shape(value))
                         for name, value in start.items()} for scale in (0.05, 0.3)]
    (want_logp, want_dlogp), (logp, dlogp) = ((m.compile_logp(), m.compile_dlogp())
                                              for m in (exact, fused))
    for point in points:
        want, want_grad = want_logp(point), want_dlogp(point)
        assert np.isfinite(want)
        np.testing.assert_allclose(logp(point), want, rtol=1e-10)
        np.testing.assert_allclose(dlogp(point), want_grad, rtol=1e-9,
                                   atol=1e-9 * np.abs(want_grad).max())


@pytest.mark.parametrize("tiny", [1.0, 1e-30])
def test_the_kernel_follows_the_barrier_past_both_walls(tiny):
    """Rows past the memory-bound wall (``rps·C2 > 1``) and past the compute curve's pole
    (``rps·(1 − Q)·C3 > 1``) go through the saturation barrier as the graph's do. With the scales
    shrunk by ``tiny`` the variances (1e-60) and the Student-t's ``ν + z²`` (1e60) leave the
    range of the kernel's running products after two rows: it takes their logs as it goes."""
    rng = np.random.default_rng(1)
    n, rows = 5, 60
    idx = rng.integers(0, n, rows)
    rps = rng.uniform(0.5, 12.0, rows)
    values = {"C1": rng.uniform(0.5, 2.0, n), "C2": rng.uniform(0.02, 0.12, n),
              "C3": rng.uniform(0.08, 0.25, n), "Q": rng.uniform(0.02, 0.5, n)}
    assert (rps * values["C2"][idx] > 1).any()
    assert (rps * (1 - values["Q"][idx]) * values["C3"][idx] > 1).any()
    data = {"idx": idx, "rps": rps, "y": rng.normal(0.5, 1.0, rows),
            "se_rel": tiny * rng.uniform(0.0, 0.05, rows),
            "sync": (rng.uniform(size=rows) < 0.2) * 1.0}
    scalars = {"sigma": 0.03 * tiny, "sigma_wall": 0.02 * tiny, "nu": 3.5, "shift": -0.1}
    power = theory.soft_power(rng.choice([0.0, 1.0, 2.0, 6.0], n))  # data: each curve's k
    for wall in (True, False):
        names = ("C1", "C2", "C3", "Q") if wall else ("C1", "C2")
        parts = {name: pt.dvector(name) for name in names}
        if wall:
            parts["P"] = pt.as_tensor_variable(power)
        s = {name: pt.dscalar(name) for name in scalars}
        at = {name: value[idx] for name, value in parts.items()}
        mu = LatencyModel.log_mean(LatencyModel, at, {"rps": rps}) + s["shift"] * data["sync"]
        scale = LatencyModel.likelihood_scale(s["sigma"], data["se_rel"], at, {"rps": rps},
                                              s["sigma_wall"])
        nu = s["nu"]
        graph = (pt.gammaln((nu + 1) / 2) - pt.gammaln(nu / 2) - 0.5 * pt.log(nu * np.pi)
                 - pt.log(scale) - (nu + 1) / 2 * pt.log1p(((data["y"] - mu) / scale) ** 2 / nu)
                 ).sum()
        fused = row_student_t(parts, s["sigma"], nu, s["shift"],
                              s["sigma_wall"] if wall else None, data, BARRIER_WIDTH)
        inputs = [*(parts[name] for name in names),
                  *(s[k] for k in scalars if wall or k != "sigma_wall")]
        args = [values[name] for name in names] + [scalars[k] for k in scalars
                                                   if wall or k != "sigma_wall"]
        for mode in ("FAST_COMPILE", "NUMBA"):
            want, got = (pytensor.function(inputs, [f, *pt.grad(f, inputs)], mode=mode,
                                           on_unused_input="ignore")(*args)
                         for f in (graph, fused))
            for a, b in zip(want, got, strict=True):
                np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
