"""What one log-density-and-gradient evaluation of the hierarchical model costs, beside a floor.

On the paper-scale sweep of ``fit_hierarchical.py`` (11,232 rows), times:

1. the model's compiled log density and gradient (PyTensor's numba backend, data frozen into
   constants, as nutpie samples it), one evaluation at the start;
2. a reference loop, hand-fused in numba, of only the per-row work any implementation of the
   likelihood has to do: the barrier headroom (one square root, one log), the Student-t term
   (``log1p``), the per-row scale (``log``), and their gradients accumulated per curve. The
   per-curve coefficients and the priors (a few hundred values) are left out, so this is a
   lower bound, not an alternative implementation.

NUTS needs a number of gradient evaluations per effective draw that depends on the posterior,
not on the code (``fit_hierarchical.py`` prints it); times the cost per evaluation, this bounds
the sampling time from below.

    .venv/bin/python benchmarks/logp_floor.py
"""

from __future__ import annotations

import time

import numba
import numpy as np
import pandas as pd
from fit_hierarchical import SPEC

from bayeslat.models.base import BARRIER_WIDTH
from bayeslat.models.hierarchical import HierarchicalModel
from bayeslat.models.start import linear_fits
from bayeslat.simulate.generative import sample_sweep


@numba.njit(cache=True)
def fused_rows(log_c1, c2, sigma, nu, curve, rps, y, se_rel, grad_c1, grad_c2):
    """Student-t log density of every row and its gradient in the per-curve ``log C1``, ``C2``
    (accumulated into ``grad_c1``, ``grad_c2``), ``sigma`` and ``nu``."""
    w2 = BARRIER_WIDTH**2
    grad_c1[:] = 0.0
    grad_c2[:] = 0.0
    total = grad_sigma = grad_nu = 0.0
    for i in range(len(y)):
        c = curve[i]
        d = 1.0 - rps[i] * c2[c]
        root = np.sqrt(d * d + 4.0 * w2)
        h = 0.5 * (d + root) if d >= 0 else 2.0 * w2 / (root - d)
        s2 = sigma * sigma + se_rel[i] * se_rel[i]
        r = y[i] - (log_c1[c] - np.log(h))
        t = r * r / (nu * s2)
        total += -0.5 * (nu + 1.0) * np.log1p(t) - 0.5 * np.log(s2)
        dmu = (nu + 1.0) * r / (nu * s2 * (1.0 + t))
        grad_c1[c] += dmu
        grad_c2[c] += dmu * rps[i] / root  # d log h / d d = 1 / root
        grad_sigma += sigma * ((nu + 1.0) * t / (1.0 + t) - 1.0) / s2
        grad_nu += -0.5 * np.log1p(t) + 0.5 * (nu + 1.0) * t / (nu * (1.0 + t))
    return total, grad_sigma, grad_nu


def per_call_ms(fn, repeat: int = 7, number: int = 300) -> float:
    """Median over ``repeat`` batches of the time of one call, in ms."""
    fn()
    times = []
    for _ in range(repeat):
        clock = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - clock) / number)
    return 1e3 * float(np.median(times))


def main() -> None:
    from pymc.initial_point import make_initial_point_fn
    from pymc.model.transform.optimization import freeze_dims_and_data

    table, _ = sample_sweep(SPEC, seed=0)
    model = HierarchicalModel(table)
    rows = model.rows
    frozen = freeze_dims_and_data(model.build())
    clock = time.perf_counter()
    logp = frozen.logp_dlogp_function(mode="NUMBA", ravel_inputs=True)
    logp.set_extra_values({})
    point = make_initial_point_fn(model=frozen, overrides=model.initial_values(),
                                  jitter_rvs=set(), return_transformed=True)(0)
    x = np.concatenate([np.ravel(point[v.name]) for v in logp._grad_vars])
    logp(x)
    compile_s = time.perf_counter() - clock
    model_ms = per_call_ms(lambda: logp(x))

    curve, labels = pd.factorize(rows["config"])
    fits = linear_fits(curve, rows["rps"].to_numpy(), rows["latency_mean"].to_numpy())
    log_c1 = np.log(fits["C1"].reindex(range(len(labels))).to_numpy())
    c2 = fits["C2"].reindex(range(len(labels))).to_numpy()
    args = (log_c1, c2, 0.05, 10.0, curve, rows["rps"].to_numpy(), rows["log_latency"].to_numpy(),
            rows["se_rel"].to_numpy(), np.zeros(len(labels)), np.zeros(len(labels)))
    floor_ms = per_call_ms(lambda: fused_rows(*args))

    print(f"rows {len(rows)}, curves {len(labels)}, free parameters {x.size}")
    print(f"model log density + gradient (numba): {model_ms:.3f} ms per evaluation "
          f"(compile and first call {compile_s:.1f} s)")
    print(f"hand-fused per-row floor: {floor_ms:.3f} ms per evaluation "
          f"({1e6 * floor_ms / len(rows):.0f} ns a row); model / floor = "
          f"{model_ms / floor_ms:.2f}")


if __name__ == "__main__":
    main()
