"""Which curve bends like the data near capacity? Each configuration fitted on its own, its top
rate held out and predicted (issue 12, thirty-third session).

    .venv/bin/python benchmarks/near_wall_forms.py [--data data/example/sweep.parquet]
                                                  [--batch 256] [--forms queue,roofline]
                                                  [--law] [--forms roofline,pnorm --p 2
                                                  --p-slope 0.25]

For every configuration of the sweep: its unsaturated synchronous and constant-rate rows, and
its measured ceiling (the throughput benchmark's rate). Each form is fitted by robust least
squares on the log latency (SciPy ``least_squares``, ``soft_l1``, several starts), once
without the configuration's top rate (then asked to predict it) and once on every row (its
in-sample log RMS). The forms, three free numbers each, the wall at the measured ceiling:

- ``queue``: the memory-bound curve plus an M/G/1 queue's wait whose pole is the ceiling,
  ``C1/(1 − r·C2) + Q·C3·ρ/(1 − ρ)``, ``ρ = r·C3``, ``C3 = 1/ceiling`` (the ``capacity``
  variants' form until the thirty-fourth session);
- ``roofline``: :func:`bayeslat.theory.latency` with ``p = 2`` (the ``capacity`` variants'
  form until the forty-second session), the soft maximum of the memory-bound curve and
  a compute-bound one of the same form, ``(L_m² + L_c² − A²)^(1/2)``,
  ``L_c = A/(1 − (1 − Q)·r·C3)``, ``A = Q·B·C3``: the steady state of a server whose step time
  is the larger of two lines in the batch, the batch full (``B``, ``--batch``, vLLM's
  ``max_num_seqs``, :data:`bayeslat.theory.BATCH_CAP`) at the capacity ``1/C3``, which the
  compute-bound curve's own pole lies beyond (benchmarks/README.md, thirty-third session).

With ``--law`` the configurations of a group share the six-coefficient memory law of ``C1`` and
``C2`` (:func:`bayeslat.theory.effective_coefficients`), each keeping its own ``Q``, the wall at
its ceiling: the point-estimate twin of ``bayeslat validate --split top-rate`` (each
configuration's top rate held out), in seconds instead of minutes, with its bias by draft length
(forty-first session). ``--forms`` may also name ``pnorm``, the roofline form with a
``p``-norm in place of the quadrature, ``(L_m^p + L_c^p − A^p)^(1/p)``, ``p`` = ``--p`` +
``--p-slope``·k (the defaults, 2 and 0.25, are :func:`bayeslat.theory.soft_power`: the
``capacity`` variants' form since the forty-second session).

With ``--free-wall`` the wall is a fourth free number, at or beyond the measured ceiling
(``1/C3 >= ceiling``): where the curve itself would put it (fortieth session).

Prints, per form, the median in-sample log RMS and the held-out top rate's error: median
(signed median), 90th percentile and mean of the absolute relative error; then the mean by
draft length and by group (and with ``--free-wall`` where the walls land).

With ``--engine "VERIFIER GPU PREFILL DECODE ALPHA K"`` (a deployment of
:mod:`bayeslat.simulate.presets` with its EAGLE-3 head; ``K`` 0 for the baseline) it prints
instead the engine simulator's steady state near that configuration's wall: the all-at-once
ceiling (2,048 requests sent together), then at 70–105% of it ten minutes of evenly spaced
requests, the mean latency of the second and of the third quarter of the requests (equal
where the run is steady) and the mean batch over both (Little's law), and the compute-bound
curve ``A/(1 − r·c)`` through 0.96 and 1.0 of the ceiling, its pole ``1/c`` against the
ceiling (past the ceiling the runs do not settle: benchmarks/README.md, fortieth session).
"""

from __future__ import annotations

import argparse
from functools import partial

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from bayeslat import theory
from bayeslat.data import schema


def queue(r, c1, c2, c3, q):
    """The M/G/1 form: the memory-bound curve plus the queue's wait."""
    rho = r * c3
    return c1 / (1 - r * c2) + q * c3 * rho / (1 - rho)


FORMS = {"queue": queue, "roofline": partial(theory.latency, p=2.0), "pnorm": theory.latency}


def wall(c3, theta):
    """The wall's ``C3``: the ceiling's, or with a fourth number ``theta[3]`` (``--free-wall``)
    ``C3/(1 + e^theta[3])``, the wall at or beyond the ceiling."""
    return c3 / (1 + np.exp(theta[3])) if len(theta) > 3 else c3


def fit(form, r, y, c3, free_wall=False,
        starts=((0.7, 0.2, 0.01), (0.9, 0.6, 0.05), (0.8, 0.4, 0.2))):
    """``(log C1, log C2, log Q)``, and with ``free_wall`` the wall's number (:func:`wall`),
    minimising the robust loss of ``log form − y`` (None if no start converges); the rows'
    rates ``r`` stay below ``1/C2``."""
    best, top = None, r.max()

    def residual(theta):
        c1, c2, q = np.exp(theta[:3])
        if top * c2 >= 0.999 or (form is not queue and q >= 1):
            return np.full(len(r), 10.0)
        return np.log(form(r, c1, c2, wall(c3, theta), q)) - y

    for c1f, c2f, q0 in starts:
        # a free wall starts 10% beyond the ceiling
        x0 = np.log([np.exp(y.min()) * c1f, c2f / top, q0] + ([0.1] if free_wall else []))
        try:
            s = least_squares(residual, x0, loss="soft_l1", f_scale=0.02)
        except ValueError:
            continue
        if s.success and (best is None or s.cost < best.cost):
            best = s
    return None if best is None else best.x


def law_fold(form_of, configs):
    """The group's configurations under one memory law (``--law``), each top rate held out.

    ``form_of(k)``: the form of a configuration with draft length ``k``. ``configs``: one
    dict per configuration with its rates ``r``, log latencies ``y``, ``c3`` (1/ceiling),
    ``alpha``, ``k``, ``g`` and ``drafter``. Fits the law's log coefficients (``c1p, c1v, c2p,
    c2v``, and ``c1d, c2d`` per drafter) and each configuration's log ``Q`` by robust least
    squares on every row but the top ones; returns each configuration's held-out log error at
    its top rate and its log RMS on the other rows (None if no start converges)."""
    drafters = sorted({c["drafter"] for c in configs})
    n, m, rows = len(configs), 4 + 2 * len(drafters), slice(None, -1)

    def curves(theta, part):
        out = []
        for i, c in enumerate(configs):
            c1p, c1v, c2p, c2v = np.exp(theta[:4])
            c1d, c2d = np.exp(theta[4 + 2 * drafters.index(c["drafter"]):][:2])
            alpha = 0.0 if c["k"] == 0 else c["alpha"]  # E = 1 at k = 0 whatever alpha
            c1, c2 = theory.effective_coefficients(c1p, c1v, c1d, c2p, c2v, c2d, alpha,
                                                   c["k"], c["g"])
            q, form = np.exp(theta[m + i]), form_of(c["k"])
            bad = c["r"].max() * c2 >= 0.999 or (form is not queue and q >= 1)
            out.append(np.full(len(c["r"][part]), np.inf) if bad
                       else np.log(form(c["r"][part], c1, c2, c["c3"], q)) - c["y"][part])
        return out

    def residual(theta):
        res = np.concatenate(curves(theta, rows))
        return np.where(np.isfinite(res), res, 10.0)

    y0, best = np.exp(np.median([c["y"][0] for c in configs])), None
    for scale in (0.002, 0.01):  # C2 (s per request) to start from
        x0 = np.concatenate([np.log([0.3 * y0, y0 / 200, scale / 3, scale / 300]),
                             np.tile(np.log([y0 / 2000, scale / 3000]), len(drafters)),
                             np.full(n, np.log(0.02))])
        s = least_squares(residual, x0, loss="soft_l1", f_scale=0.02, max_nfev=3000)
        if s.success and (best is None or s.cost < best.cost):
            best = s
    if best is None:
        return None
    top = [c[-1] for c in curves(best.x, slice(-1, None))]
    return top, [np.sqrt(np.mean(c**2)) for c in curves(best.x, rows)]


def engine(spec: str) -> None:
    """The engine simulator's latency near one configuration's wall (``--engine``)."""
    from dataclasses import replace

    from bayeslat.simulate.engine import simulate_run
    from bayeslat.simulate.presets import eagle
    from bayeslat.simulate.protocol import Configuration, _send_times, mean_concurrency

    verifier, gpu, p, g, alpha, k = spec.split()
    dep = eagle(verifier, gpu)
    if int(k) == 0:
        dep = replace(dep, drafter=None, method="none")
    config = Configuration(dep, int(p), int(g), int(k), float(alpha))
    burst = simulate_run(config.deployment, config.workload, np.zeros(2048), seed=1)
    ceiling = 2048 / burst.finish.max()
    print(f"{spec}: all-at-once ceiling {ceiling:.3f} req/s ({burst.preemptions} preemptions)")
    rates, means = {}, {}
    for share in (0.7, 0.8, 0.85, 0.9, 0.93, 0.96, 1.0, 1.02, 1.05):
        rate = share * ceiling
        n = int(rate * 600)
        sends = _send_times("constant", rate, n, 1)
        run = simulate_run(config.deployment, config.workload, sends, seed=2)
        second, third = (run.latency[i * n // 4:(i + 1) * n // 4].mean() for i in (1, 2))
        batch = mean_concurrency(run, sends[n // 4], sends[3 * n // 4])
        rates[share], means[share] = rate, (second + third) / 2
        print(f"  {share:.2f} of it, {rate:.3f} req/s: latency {second:.3f} s, then "
              f"{third:.3f} s (second, third quarter of the requests), batch {batch:.1f}")
    (r1, r2), (l1, l2) = (rates[0.96], rates[1.0]), (means[0.96], means[1.0])
    slope = (l2 - l1) / (l2 * r2 - l1 * r1)
    print(f"  A/(1 - r c) through 0.96 and 1.0 of it: A {l2 * (1 - r2 * slope):.3f} s, pole "
          f"{1 / slope:.3f} req/s ({1 / slope / ceiling:.3f} of the ceiling)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/example/sweep.parquet")
    parser.add_argument("--batch", type=int, default=theory.BATCH_CAP,
                        help="the batch cap B of the roofline form (max_num_seqs)")
    parser.add_argument("--forms", default="queue,roofline")
    parser.add_argument("--free-wall", action="store_true",
                        help="the wall free at or beyond the measured ceiling")
    parser.add_argument("--law", action="store_true", help="each group's configurations "
                        "under one memory law (the top-rate fold's point-estimate twin)")
    parser.add_argument("--p", type=float, default=2.0, help="the pnorm form's p at k = 0")
    parser.add_argument("--p-slope", type=float, default=0.25,
                        help="the pnorm form's p grows by this per drafted token")
    parser.add_argument("--engine", help='"VERIFIER GPU PREFILL DECODE ALPHA K": the engine '
                        "simulator's steady state near that configuration's wall instead")
    args = parser.parse_args()
    if args.engine:
        engine(args.engine)
        return
    theory.BATCH_CAP = args.batch  # the roofline form, theory.latency, reads it
    table = schema.read_table(args.data)
    table["config"], table["group"] = schema.config_labels(table), schema.group_labels(table)

    def form_of(name):  # the form as a function of the draft length
        if name == "pnorm":
            return lambda k: partial(theory.latency, p=args.p + args.p_slope * k)
        return lambda k: FORMS[name]

    forms = {name: form_of(name) for name in args.forms.split(",")}
    measured = {}  # group -> one dict per configuration with a ceiling and five rows
    for config, rows in table.groupby("config", sort=False):
        ceiling = rows.loc[rows["strategy"] == "throughput", "rps"].max()
        rows = rows[(rows["strategy"] != "throughput") & ~rows["saturated"]].sort_values("rps")
        if np.isfinite(ceiling) and len(rows) >= 5:
            first = rows.iloc[0]
            measured.setdefault(first["group"], []).append(
                {"config": config, "r": rows["rps"].to_numpy(), "c3": 1 / ceiling,
                 "y": np.log(rows["latency_mean"].to_numpy()), "alpha": first["alpha"],
                 "k": int(first["k"]), "g": first["decode_tokens"],
                 "drafter": first["drafter"]})
    out = []
    for group, configs in measured.items():
        for name, of_k in forms.items():
            if args.law:
                fold = law_fold(of_k, configs)
                if fold is None:
                    continue
                out += [{"config": c["config"], "group": group, "k": c["k"], "form": name,
                         "error": np.expm1(top), "log_error": top, "rms": rms}
                        for c, top, rms in zip(configs, *fold, strict=True)]
                continue
            for c in configs:
                r, y, c3, form = c["r"], c["y"], c["c3"], of_k(c["k"])
                held = fit(form, r[:-1], y[:-1], c3, args.free_wall)
                whole = fit(form, r, y, c3, args.free_wall)
                if held is None or whole is None:
                    continue
                pred = form(r[-1], *np.exp(held[:2]), wall(c3, held), np.exp(held[2]))
                rms = np.sqrt(np.mean((np.log(form(r, *np.exp(whole[:2]), wall(c3, whole),
                                                   np.exp(whole[2]))) - y) ** 2))
                out.append({"config": c["config"], "group": group, "k": c["k"], "form": name,
                            "error": pred / np.exp(y[-1]) - 1, "log_error": np.log(pred) - y[-1],
                            "rms": rms, "wall": c3 / wall(c3, whole)})
    res = pd.DataFrame(out)
    res["abs"] = res["error"].abs()
    print(f"{res['config'].nunique()} configurations of {args.data}; batch cap {args.batch}"
          + ("; the wall free beyond the ceiling" if args.free_wall else "")
          + ("; each group's memory law shared, the log RMS on the rows fitted" if args.law
             else ""))
    print(res.groupby("form").agg(
        in_sample_log_rms=("rms", "median"), top_median=("abs", "median"),
        top_signed=("error", "median"), top_p90=("abs", lambda x: x.quantile(0.9)),
        top_mean=("abs", "mean")).round(4).to_string())
    for by in ("k", "group"):
        print(res.pivot_table(index=by, columns="form", values="abs", aggfunc="mean")
              .round(3).to_string())
    print("mean log error of the top rate's prediction (+: above the measurement) by draft length")
    print(res.pivot_table(index="form", columns="k", values="log_error", aggfunc="mean")
          .round(3).to_string())
    if args.free_wall:
        print("the wall / the measured ceiling, fitted to every row (median by draft length)")
        print(res.pivot_table(index="k", columns="form", values="wall", aggfunc="median")
              .round(3).to_string())


if __name__ == "__main__":
    main()
