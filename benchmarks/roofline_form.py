"""The mean-field roofline form near the wall, its compute constants fitted per server, each
configuration's top rate held out (issue 12, forty-fourth session).

    .venv/bin/python benchmarks/roofline_form.py [--data data/example/sweep.parquet]
                                                 [--ceiling-weight 1] [--engine-constants]
                                                 [--law]
    .venv/bin/python benchmarks/roofline_form.py --engine-check

:func:`bayeslat.theory.roofline_latency`: every verify step costs the paper's memory-bound
line plus ``f`` seconds for each of its tokens past the roofline's knee ``T*`` (its decodes'
``B(k + 1)`` and the prompts that joined it), and the drafter's first pass likewise at
``f_d = f·(drafter size / verifier size)`` past the same knee. Per server (verifier and GPU)
``f`` and ``T*`` are fitted jointly with every configuration's ``C1`` and ``C2``, by robust
least squares on the log latency of every unsaturated row but each configuration's top one,
and the measured ceilings as data: :func:`bayeslat.theory.roofline_throughput`, the rate of
a full batch, against the throughput benchmark's rate (``--ceiling-weight``, 0: left out).
Each top rate is then predicted. Beside it, the ``capacity`` variants' ``P``-norm form, one
configuration at a time with its own ``Q`` and the wall at its ceiling (the ``pnorm`` form of
``near_wall_forms.py``). With ``--law`` each group's ``C1`` and ``C2`` follow its
six-coefficient law instead (the point-estimate twin of ``bayeslat validate --split top-rate``,
beside ``near_wall_forms.py --law --forms pnorm``).

With ``--engine-check`` it checks the form itself instead (:func:`engine_check`): the engine
simulator's own constants, ``C1`` and ``C2`` fitted to its steady state below 55% of the
ceiling, the steady state at 80% and 90% predicted.

Prints, per server, the fitted ``f`` and ``T*`` (with ``--engine-constants``, beside the engine
simulator's own, for a sweep it simulated: not used in the fit), then both forms' held-out
errors: mean, median and 90th percentile of the absolute relative error, and by draft length
and by group.
"""

from __future__ import annotations

import argparse
from functools import partial

import numpy as np
import pandas as pd
from knee_form import curves
from near_wall_forms import fit as pnorm_fit
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.models import start as st

KNEE_STARTS = (100.0, 250.0)  # tokens: the roofline knee of FP8 and of 16-bit weights, roughly
# f from the ceilings, times these (from one start the fit can slide to f -> 0, the compute
# cost off and its bend taken up by C2, a local optimum)
F_STARTS = (0.5, 1.0, 2.0)


def engine_constants(verifier: str, gpu: str):
    """The engine simulator's ``f`` (s per token) and knee (tokens) of a verifier on a GPU."""
    from bayeslat.simulate.hardware import GPUS
    from bayeslat.simulate.presets import MODELS

    model, hw = MODELS[verifier], GPUS[gpu]
    f = model.flops_per_token / hw.flops
    return f, model.weight_bytes / hw.bytes_per_s / f


def _fit_line(form, rates, y):
    """``C1``, ``C2`` of ``form(rates, C1, C2)`` by least squares on the log latencies ``y``."""
    fit = least_squares(lambda t: np.log(form(rates, *np.exp(t))) - y,
                        [y[0], np.log(0.1 / rates[-1])])
    return np.exp(fit.x)


def engine_check() -> None:
    """``--engine-check``: the form with the engine's own constants against the engine's
    steady state (10 minutes of evenly spaced requests, the middle half measured), ``C1`` and
    ``C2`` fitted below 55% of the ceiling, predicting 80% and 90% of it; beside it the paper's
    curve fitted to the same points, and the full batch's rate against the ceiling."""
    from dataclasses import replace

    from bayeslat.simulate.engine import simulate_run
    from bayeslat.simulate.presets import eagle
    from bayeslat.simulate.protocol import Configuration

    shares = np.array([0.1, 0.25, 0.4, 0.55, 0.8, 0.9])
    print("engine, alpha 0.75, g 128: error at 80% and 90% of the ceiling (roofline; paper), "
          "full batch / ceiling")
    for verifier, gpu in (("llama-1b", "H100"), ("llama-8b", "H100"), ("llama-70b-fp8", "H200")):
        for p, k in ((256, 0), (1024, 0), (256, 1), (256, 2), (256, 6)):
            dep = eagle(verifier, gpu)
            dep = dep if k else replace(dep, drafter=None, method="none")
            config = Configuration(dep, p, 128, k, 0.75)
            burst = simulate_run(dep, config.workload, np.zeros(2048), seed=1)
            ceiling = 2048 / burst.finish.max()
            rates = shares * ceiling
            measured = []
            for rate in rates:
                n = int(max(rate * 600, 400))
                run = simulate_run(dep, config.workload, np.arange(n) / rate, seed=2)
                measured.append(run.latency[n // 4:3 * n // 4].mean())
            y = np.log(measured)
            cycles = 128 / theory.tokens_per_cycle(0.75, k)
            f, knee = engine_constants(verifier, gpu)
            f_d, knee_d = engine_constants(dep.drafter.name, gpu) if k else (0.0, knee)
            forms = {"roofline": partial(theory.roofline_latency, f=f, knee=knee, cycles=cycles,
                                         k=k, prefill=p, f_d=f_d, knee_d=knee_d),
                     "paper": theory.latency}
            errors, full = {}, None
            for name, form in forms.items():
                c1, c2 = _fit_line(form, rates[:4], y[:4])
                errors[name] = np.expm1(np.log(form(rates[4:], c1, c2)) - y[4:])
                if name == "roofline":
                    full = theory.roofline_throughput(c1, c2, f, knee, cycles, k, p, f_d,
                                                      knee_d) / ceiling
            print(f"  {verifier} {gpu} p{p} k{k}: roofline {errors['roofline'][0]:+.3f} "
                  f"{errors['roofline'][1]:+.3f}; paper {errors['paper'][0]:+.3f} "
                  f"{errors['paper'][1]:+.3f}; full batch {full:.3f}")


def _blocks(members: list[dict], law: bool):
    """The memory lines' parameters: ``(start, coefficients, columns)``, the log start, a
    function of the parameters giving each configuration's ``C1``, ``C2``, and each
    configuration's columns. Without ``law``, ``log C1``, ``log C2`` per configuration; with
    it, each group's six-coefficient law (``c1p, c1v, c2p, c2v``, then ``c1d, c2d`` per
    drafter; :func:`bayeslat.models.start.group_coefficients`), started from its
    :func:`~bayeslat.models.start.group_fit` on the rows the fold keeps."""
    n_c = len(members)
    if not law:
        first = np.array([m["y"][0] for m in members])
        top = np.array([m["r"][-2] for m in members])

        def coefficients(theta):
            return np.exp(theta[:n_c]), np.exp(theta[n_c:2 * n_c])

        return (np.concatenate([first, np.log(0.2 / top)]), coefficients,
                [[i, n_c + i] for i in range(n_c)])
    groups, starts, columns, at = [], [], [None] * n_c, 0
    for group in dict.fromkeys(m["group"] for m in members):
        mine = [i for i, m in enumerate(members) if m["group"] == group]
        train = pd.concat([members[i]["rows"].iloc[:-1] for i in mine])
        firsts = pd.concat([members[i]["rows"].iloc[:1] for i in mine])
        drafts = pd.Index(pd.unique(train.loc[train["k"] > 0, "drafter"]))
        theta = st.group_fit(train, drafts)
        size = 4 + 2 * len(drafts)
        starts.append(np.log(theta) if theta is not None else np.zeros(size))
        groups.append((mine, firsts, drafts, slice(at, at + size)))
        for i in mine:
            columns[i] = list(range(at, at + size))
        at += size

    def coefficients(theta):
        c1, c2 = np.empty(n_c), np.empty(n_c)
        for mine, firsts, drafts, block in groups:
            c1[mine], c2[mine] = st.group_coefficients(np.exp(theta[block]), firsts, drafts)
        return c1, c2

    return np.concatenate(starts), coefficients, columns


def server_fold(members: list[dict], ceiling_weight: float, law: bool = False):
    """One server's fit without its configurations' top rates: ``(f, knee)`` and each
    configuration's predicted top-rate latency (s); with ``law``, each group's memory lines
    under its six-coefficient law (:func:`_blocks`)."""
    n_c = len(members)
    row_of = np.concatenate([np.full(len(m["r"]) - 1, i) for i, m in enumerate(members)])
    rps = np.concatenate([m["r"][:-1] for m in members])
    y = np.concatenate([m["y"][:-1] for m in members])
    constant = np.concatenate([m["constant"][:-1] for m in members])
    each = {key: np.array([m[key] for m in members], float)
            for key in ("cycles", "k", "prefill", "ratio", "ceiling")}
    memory, coefficients, columns = _blocks(members, law)
    n_m = len(memory)

    def latency(theta, rows, rates, arrivals):
        c1, c2 = coefficients(theta)
        f, knee = np.exp(theta[n_m:])
        return theory.roofline_latency(rates, c1[rows], c2[rows], f, knee,
                                       each["cycles"][rows], each["k"][rows],
                                       each["prefill"][rows], f * each["ratio"][rows],
                                       arrivals=arrivals)

    def residual(theta):
        lat = np.empty(len(rps))
        for arrivals, mine in (("constant", constant), ("poisson", ~constant)):
            if mine.any():
                lat[mine] = latency(theta, row_of[mine], rps[mine], arrivals)
        res = np.log(lat) - y
        if ceiling_weight:
            c1, c2 = coefficients(theta)
            f, knee = np.exp(theta[n_m:])
            full = theory.roofline_throughput(c1, c2, f, knee, each["cycles"], each["k"],
                                              each["prefill"], f * each["ratio"])
            res = np.concatenate([res, ceiling_weight * np.log(full / each["ceiling"])])
        return np.where(np.isfinite(res), res, 5.0)

    # each residual sees its configuration's memory line and the server's two constants
    rows = np.concatenate([row_of, np.arange(n_c) if ceiling_weight else []]).astype(int)
    sparsity = lil_matrix((len(rows), n_m + 2), dtype=int)
    for j, i in enumerate(rows):
        sparsity[j, columns[i]] = 1
    sparsity[:, n_m:] = 1
    # compute-bound: a request's arithmetic f·(n(k + 1) + p) is about 1/ceiling
    f0 = np.median(1.0 / (each["ceiling"] * (each["cycles"] * (each["k"] + 1) + each["prefill"])))
    best = None
    for knee in KNEE_STARTS:
        for scale in F_STARTS:
            x0 = np.concatenate([memory, np.log([scale * f0, knee])])
            fit = least_squares(residual, x0, loss="soft_l1", f_scale=0.02,
                                jac_sparsity=sparsity, diff_step=1e-5, max_nfev=2000)
            if best is None or fit.cost < best.cost:
                best = fit
    last = np.arange(n_c)
    rates = np.array([m["r"][-1] for m in members])
    tops = np.where([m["constant"][-1] for m in members],
                    latency(best.x, last, rates, "constant"),
                    latency(best.x, last, rates, "poisson"))
    return np.exp(best.x[n_m:]), tops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/example/sweep.parquet")
    parser.add_argument("--ceiling-weight", type=float, default=1.0,
                        help="weight of the measured ceilings in the fit (0: left out)")
    parser.add_argument("--engine-constants", action="store_true",
                        help="print the engine simulator's f and knee beside the fitted ones")
    parser.add_argument("--law", action="store_true", help="each group's memory lines under "
                        "its six-coefficient law (the top-rate fold's point-estimate twin)")
    parser.add_argument("--engine-check", action="store_true",
                        help="instead: the form with the engine's own constants on its steady "
                        "state near the wall")
    args = parser.parse_args()
    if args.engine_check:
        engine_check()
        return
    table = schema.read_table(args.data)
    table["config"], table["group"] = schema.config_labels(table), schema.group_labels(table)
    servers: dict[str, list[dict]] = {}
    for config, rows, ceiling, cycles, _ in curves(table):
        first = rows.iloc[0]
        k = int(first["k"])
        servers.setdefault(f"{first['verifier']} {first['hardware']}", []).append({
            "config": config, "group": first["group"], "k": k, "cycles": cycles,
            "prefill": first["prefill_tokens"], "ceiling": ceiling,
            "ratio": first["drafter_params_b"] / first["verifier_params_b"] if k else 0.0,
            "r": rows["rps"].to_numpy(), "y": np.log(rows["latency_mean"].to_numpy()),
            "constant": (rows["strategy"] != "poisson").to_numpy(), "rows": rows})
    out = []
    for server, members in servers.items():
        (f, knee), tops = server_fold(members, args.ceiling_weight, args.law)
        line = (f"{server} ({len(members)} configurations): f {f:.3e} s per token, knee "
                f"{knee:.0f} tokens")
        if args.engine_constants:
            f_e, knee_e = engine_constants(*server.split())
            line += f" (the engine's: {f_e:.3e}, {knee_e:.0f})"
        print(line)
        for m, top in zip(members, tops, strict=True):
            form = partial(theory.latency, p=theory.soft_power(m["k"]))
            pn = pnorm_fit(form, m["r"][:-1], m["y"][:-1], 1 / m["ceiling"])
            measured = np.exp(m["y"][-1])
            out.append({"config": m["config"], "group": m["group"], "k": m["k"],
                        "roofline": top / measured - 1,
                        "pnorm": (np.nan if pn is None else form(
                            m["r"][-1], *np.exp(pn[:2]), 1 / m["ceiling"], np.exp(pn[2]))
                            / measured - 1)})
    res = pd.DataFrame(out)
    forms = ["pnorm", "roofline"]
    print(f"\n{len(res)} configurations of {args.data}, each top rate held out; |error| of "
          "its predicted latency")
    print(pd.DataFrame({f: {"mean": res[f].abs().mean(), "median": res[f].abs().median(),
                            "90th percentile": res[f].abs().quantile(0.9),
                            "mean log error": np.log1p(res[f]).mean(),
                            "no answer": int((~np.isfinite(res[f])).sum())}
                        for f in forms}).round(4).to_string())
    for by in ("k", "group"):
        print(f"\nmean |error| by {by}")
        print(res.groupby(by)[forms].agg(lambda x: x.abs().mean()).round(3).to_string())


if __name__ == "__main__":
    main()
