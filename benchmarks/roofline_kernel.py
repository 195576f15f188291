"""What a likelihood of the roofline form would cost a row: the fixed point and its gradient in
compiled code (issue 12, forty-fourth session; a prototype for the ``roofline`` variant that
``benchmarks/README.md`` plans, not used by any model).

    .venv/bin/python benchmarks/roofline_kernel.py [--data data/example/sweep.parquet]

Each row's latency is the smallest root of :func:`bayeslat.theory.roofline_latency`'s fixed
point ``L = F(L)`` (evenly spaced arrivals), found by Newton's method from ``C1`` (cold) or
from the root at parameters 1% away (warm: what a sampler's next step would start from); its
gradient with respect to ``C1``, ``C2``, ``f`` and ``T*`` by the implicit function theorem,
``dL/dθ = (∂F/∂θ)/(1 − ∂F/∂L)``, the drafter at ``f_d = f·ratio`` past the same knee. The rows
are the sweep's unsaturated ones (a sweep the engine simulator drew). The parameters are the
engine's constants of each server and each configuration's ``C1``, ``C2`` fitted with them
(the ceilings left out).

Prints the largest difference from :func:`~bayeslat.theory.roofline_latency` and from finite
differences, the mean Newton iterations a row, and the time a row, cold and warm, beside the
committed kernel's (:func:`bayeslat.models.likelihood._kernel`, the whole Student-t with its
gradient) on the same rows.
"""

from __future__ import annotations

import argparse
import math
import time

import numba
import numpy as np
from knee_form import curves
from roofline_form import engine_constants
from scipy.optimize import least_squares

from bayeslat import theory
from bayeslat.data import schema

# Parameters of a row's gradient, in the kernel's order.
PARAMS = ("C1", "C2", "f", "knee")


@numba.njit(cache=True)
def _part(tokens, d_tokens, lo, w, prefill, d_prompts):
    """``E_m[(tokens + m·p)^+]`` over the floor and ceiling of the prompts a step carries, its
    derivative along ``L`` and the share of steps past the knee (``−∂/∂knee``)."""
    below, above = tokens + lo * prefill, tokens + (lo + 1.0) * prefill
    on = (1.0 - w) * (below > 0) + w * (above > 0)
    value = (1.0 - w) * max(below, 0.0) + w * max(above, 0.0)
    return value, on * d_tokens + (max(above, 0.0) - max(below, 0.0)) * d_prompts, on


@numba.njit(cache=True)
def _side(lat, rps, c1, c2, f, knee, cycles, k, prefill, ratio):
    """``F(L)``, ``∂F/∂L`` and ``∂F/∂(c1, c2, f, knee)`` at ``L`` (the drafter at
    ``f·ratio`` past the verifier's knee)."""
    batch, per_step = rps * lat, rps / cycles
    m = per_step * lat
    lo = math.floor(m)
    w = m - lo
    v, dv, on_v = _part(batch * (k + 1.0) - knee, rps * (k + 1.0), lo, w, prefill, per_step)
    d, dd, on_d = _part(batch - knee, rps, lo, w, prefill, per_step)
    excess = v + ratio * d
    return (c1 + c2 * batch + cycles * f * excess, c2 * rps + cycles * f * (dv + ratio * dd),
            1.0, batch, cycles * excess, -cycles * f * (on_v + ratio * on_d))


@numba.njit(cache=True)
def solve(rps, c1, c2, f, knee, cycles, k, prefill, ratio, start, grad):
    """Each row's root from ``start`` (``inf`` where none is ahead) and its gradient into
    ``grad`` (rows × :data:`PARAMS`); returns the roots and the Newton iterations in all."""
    n = rps.shape[0]
    out = np.empty(n)
    steps = 0
    for i in range(n):
        lat = start[i]
        for _ in range(100):
            side, d_lat, g1, g2, gf, gk = _side(lat, rps[i], c1[i], c2[i], f[i], knee[i],
                                                cycles[i], k[i], prefill[i], ratio[i])
            gap, slope = side - lat, d_lat - 1.0
            steps += 1
            if abs(gap) <= 1e-13 * lat:
                break
            if slope >= 0.0:
                lat = np.inf
                break
            lat -= gap / slope
        out[i] = lat
        if np.isfinite(lat):  # dL/dθ = (∂F/∂θ)/(1 − ∂F/∂L)
            scale = 1.0 / (1.0 - d_lat)
            grad[i, 0], grad[i, 1], grad[i, 2], grad[i, 3] = (g1 * scale, g2 * scale,
                                                              gf * scale, gk * scale)
    return out, steps


def rows_and_parameters(data: str):
    """The sweep's unsaturated rows with each one's parameters: the engine's ``f`` and knee of
    its server, and its configuration's ``C1``, ``C2`` fitted with them."""
    table = schema.read_table(data)
    table["config"], table["group"] = schema.config_labels(table), schema.group_labels(table)
    columns = {name: [] for name in ("rps", "y", "c1", "c2", "f", "knee", "cycles", "k",
                                     "prefill", "ratio", "curve")}
    for curve, (_, rows, _, cycles, _) in enumerate(curves(table)):
        first = rows.iloc[0]
        k = int(first["k"])
        f, knee = engine_constants(first["verifier"], first["hardware"])
        ratio = first["drafter_params_b"] / first["verifier_params_b"] if k else 0.0
        r, y = rows["rps"].to_numpy(), np.log(rows["latency_mean"].to_numpy())

        def residual(t, r=r, y=y, f=f, knee=knee, cycles=cycles, k=k, ratio=ratio,
                     p=first["prefill_tokens"]):
            lat = theory.roofline_latency(r, *np.exp(t), f, knee, cycles, k, p, f * ratio)
            return np.where(np.isfinite(lat), np.log(lat) - y, 5.0)

        c1, c2 = np.exp(least_squares(residual, [y[0], np.log(0.1 / r[-1])]).x)
        for name, value in (("rps", r), ("y", y), ("c1", c1), ("c2", c2), ("f", f),
                            ("knee", knee), ("cycles", cycles), ("k", k),
                            ("prefill", first["prefill_tokens"]), ("ratio", ratio),
                            ("curve", curve)):
            columns[name].append(np.broadcast_to(np.asarray(value, float), r.shape))
    return {name: np.concatenate(values) for name, values in columns.items()}


def timed(fn, repeat: int) -> float:
    """Seconds a call of ``fn`` takes (best of three runs of ``repeat`` calls)."""
    best = np.inf
    for _ in range(3):
        clock = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - clock) / repeat)
    return best


def main() -> None:
    from bayeslat.models.likelihood import _kernel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/example/sweep.parquet")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    d = rows_and_parameters(args.data)
    n = len(d["rps"])
    params = [d[name] for name in ("c1", "c2", "f", "knee")]
    rest = [d[name] for name in ("cycles", "k", "prefill", "ratio")]
    grad = np.zeros((n, len(PARAMS)))
    lat, _ = solve(d["rps"], *params, *rest, d["c1"].copy(), grad)
    want = theory.roofline_latency(d["rps"], *params, *rest[:3], d["f"] * d["ratio"])
    finite = np.isfinite(want)
    print(f"{n} rows of {args.data}; {int((~finite).sum())} past the steady state; largest "
          f"relative difference from theory.roofline_latency "
          f"{np.max(np.abs(lat[finite] / want[finite] - 1)):.1e}")
    worst = []
    for j, name in enumerate(PARAMS):
        step = 1e-6 * params[j]
        moved = [p + step if i == j else p for i, p in enumerate(params)]
        up, _ = solve(d["rps"], *moved, *rest, lat.copy(), np.zeros_like(grad))
        moved = [p - step if i == j else p for i, p in enumerate(params)]
        down, _ = solve(d["rps"], *moved, *rest, lat.copy(), np.zeros_like(grad))
        fd = (up - down) / (2 * step)
        ok = finite & np.isfinite(fd)
        # elasticities, d log L / d log θ: comparable across parameters
        exact, numeric = (g[ok] * params[j][ok] / lat[ok] for g in (grad[:, j], fd))
        error = np.abs(exact - numeric) / (np.abs(numeric) + 1e-3)
        worst.append(f"{name} {error.max():.1e}")
    print("gradient against central differences (largest error in elasticity, relative): "
          + ", ".join(worst))
    rng = np.random.default_rng(0)
    near = [p * np.exp(0.01 * rng.standard_normal(n)) for p in params]
    warm, _ = solve(d["rps"], *near, *rest, d["c1"].copy(), np.zeros_like(grad))
    warm = np.where(np.isfinite(warm), warm, d["c1"])
    _, cold_steps = solve(d["rps"], *params, *rest, d["c1"].copy(), grad)
    _, warm_steps = solve(d["rps"], *params, *rest, warm, grad)
    t_cold = timed(lambda: solve(d["rps"], *params, *rest, d["c1"].copy(), grad), args.repeat)
    t_warm = timed(lambda: solve(d["rps"], *params, *rest, warm, grad), args.repeat)
    # the committed kernel on the same rows: each curve's C1, C2, its wall 10% past its top
    # rate, Q = 0.05 and its power P
    idx = d["curve"].astype(np.int64)
    per = np.unique(idx, return_index=True)[1]
    top = np.maximum.reduceat(d["rps"], per)
    inputs = (d["c1"][per], d["c2"][per], 1 / (1.1 * top), np.full(len(per), 0.05), 0.02, 0.05,
              3.0, 0.0, idx, d["rps"], d["y"], np.full(n, 0.01), np.zeros(n),
              theory.soft_power(d["k"][per]), True, 0.01, theory.BATCH_CAP)
    t_kernel = timed(lambda: _kernel(*inputs), args.repeat)
    print(f"Newton iterations a row: {cold_steps / n:.1f} from C1, {warm_steps / n:.1f} from "
          "the root 1% away")
    print(f"a row's root and gradient: {t_cold / n * 1e9:.0f} ns from C1, {t_warm / n * 1e9:.0f} "
          f"ns warm; the committed kernel (P-norm Student-t and its gradient): "
          f"{t_kernel / n * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
