"""The roofline knee in tokens, with the prompts' interference: a candidate form of the curve
near the wall, each configuration fitted on its own and its top rate held out (issue 12,
forty-third session).

    .venv/bin/python benchmarks/knee_form.py [--data data/example/sweep.parquet]
                                             [--knee-tokens H100=250,H200=77 | pooled]
                                             [--law] [--smooth 0]

A step of the verifier takes its weights' read time ``W`` or its arithmetic on the step's
tokens, ``f·T``, whichever is longer: the knee is at ``T* = W/f`` tokens, a property of the
GPU and the weights' precision (the engine simulator's H100 with 16-bit weights: 221 tokens).
A decoding request verifies ``k + 1`` tokens a step, so ``B`` running requests carry
``u = B·(k + 1)``, and the knee in requests is ``B_k = T*/(k + 1)``. Each request's prompt
(``p`` tokens) joins one step, which it lengthens by ``Δ = f·clamp(u + p − T*, 0, p)``: nothing
while the step's tokens stay below the knee, all of its arithmetic past it. A request sees
``rps·L = B`` other prompts join its steps while it runs (Little), so its latency is a fixed
point ``L = F(rps·L)`` of

.. math::
    F(B) = C_1 + c_2\\,B + n\\,D\\,(B - B_k)^+ + D\\,B\\,\\mathrm{clamp}(B - B_k + w,\\ 0,\\ w),
    \\qquad w = p/(k + 1),\\quad n = g/E,\\quad D = f\\,(k + 1),

the paper's line below the knee (``L = C1/(1 − rps·c2)`` where ``F`` is linear), a quadratic
rise where the prompts start to cost arithmetic (the ``B²`` term of DESIGN.md §2a), and the
compute-bound line past the knee. ``D`` follows from the measured ceiling, the rate at a full
batch of ``B_max`` (:data:`bayeslat.theory.BATCH_CAP`): ``F(B_max) = B_max/ceiling``. Free
per configuration: ``C1``, ``c2`` and the knee ``B_k`` (or ``B_k = T*/(k + 1)`` from the GPU's
knee in tokens with ``--knee-tokens``; ``pooled``: each GPU's median of the free fits' knees
in tokens, from the rows each fit saw); ``L`` is the smallest root of ``rps·F(B) = B``.
``--smooth s`` softens the kinks (softplus) over ``s·√B_k`` requests, the batch's
fluctuation about its mean.

With ``--law`` (and a knee per GPU, given or pooled) each group's configurations share the
paper's six-coefficient law of ``C1`` and ``c2`` (:func:`bayeslat.theory.effective_coefficients`,
started from :func:`bayeslat.models.start.group_fit`), nothing else free: the point twin of
``bayeslat validate --split top-rate``, beside ``near_wall_forms.py --law``.

Prints, beside the ``capacity`` variants' form one configuration at a time (the ``pnorm`` form
of ``near_wall_forms.py``, ``P = 2 + k/4``), the in-sample log RMS and the held-out top rate's
absolute error (median, mean, 90th percentile), the mean error by draft length and by group,
and with a free knee its place in tokens, ``B_k·(k + 1)``, by group and draft length.
"""

from __future__ import annotations

import argparse
from functools import partial

import numpy as np
import pandas as pd
from near_wall_forms import fit as pnorm_fit
from scipy.optimize import least_squares

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.models import start as st


def plus(x, width):
    """``max(x, 0)``, or its softplus of ``width`` (the batch's fluctuation about its mean)."""
    return np.maximum(x, 0.0) if width <= 0 else width * np.logaddexp(0.0, x / width)


def excess(b, knee, n, w, smooth=0.0):
    """``(F(B) − C1 − c2·B)/D``: the arithmetic past the knee, per unit of ``D``; its kinks
    softened over ``smooth·√B_k`` requests with ``smooth`` > 0."""
    width = smooth * np.sqrt(knee)
    ramp = plus(b - knee + w, width) - plus(b - knee, width)
    return n * plus(b - knee, width) + b * ramp


def latency(r, c1, c2, knee, ceiling, n, w, smooth=0.0, cap=theory.BATCH_CAP):
    """Mean latency at rates ``r``: the smallest batch ``B`` with ``r·F(B) = B``, over ``r``
    (NaN where ``D`` would be negative or ``r`` reaches the ceiling)."""
    r = np.atleast_1d(np.asarray(r, float))
    past, room = excess(cap, knee, n, w, smooth), cap / ceiling - c1 - c2 * cap
    if past <= 0 or room < 0:  # no knee below a full batch, or the line alone past the ceiling
        return np.full(len(r), np.nan)
    d = room / past

    def gap(b):  # r·F(B) − B: positive below the fixed point
        return r[:, None] * (c1 + c2 * b + d * excess(b, knee, n, w, smooth)) - b

    grid = np.linspace(0.0, cap, 2049)[None, :]
    below = gap(grid) <= 0
    first = np.argmax(below, axis=1)
    ok = below[np.arange(len(r)), first]
    lo, hi = grid[0, np.maximum(first - 1, 0)], grid[0, first]
    for _ in range(50):  # bisection inside the grid cell that holds the first root
        mid = 0.5 * (lo + hi)
        pos = gap(mid[:, None])[:, 0] > 0
        lo, hi = np.where(pos, mid, lo), np.where(pos, hi, mid)
    return np.where(ok, 0.5 * (lo + hi) / r, np.nan)


def knee_fit(r, y, ceiling, n, w, knee=None, smooth=0.0):
    """``(C1, c2, B_k)`` by robust least squares of the log latency (``knee`` given: fixed);
    None if no start converges."""
    top, best = r.max(), None

    def residual(theta):
        c1, c2 = np.exp(theta[:2])
        b_k = knee if knee is not None else np.exp(theta[2])
        res = np.log(latency(r, c1, c2, b_k, ceiling, n, w, smooth)) - y
        return np.where(np.isfinite(res), res, 5.0)

    knees = [None] if knee is not None else [10.0, 40.0, 120.0]
    for k0 in knees:
        for c2f in (0.1, 0.3, 0.6):
            x0 = np.log([0.9 * np.exp(y.min()), c2f * np.exp(y.min() - y.max()) / top]
                        + ([] if k0 is None else [k0]))
            try:
                s = least_squares(residual, x0, loss="soft_l1", f_scale=0.02, diff_step=1e-4)
            except ValueError:
                continue
            if s.success and (best is None or s.cost < best.cost):
                best = s
    if best is None:
        return None
    c1, c2 = np.exp(best.x[:2])
    return c1, c2, knee if knee is not None else float(np.exp(best.x[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/example/sweep.parquet")
    parser.add_argument("--law", action="store_true", help="each group's configurations under "
                        "one memory law, the knee per GPU (given or pooled)")
    parser.add_argument("--knee-tokens", default="",
                        help="GPU=tokens pairs, comma-separated: the knee of those GPUs fixed "
                        "(B_k = tokens/(k + 1)); the others' free per configuration")
    parser.add_argument("--smooth", type=float, default=0.0, help="soften the form's kinks "
                        "over this many times the square root of the knee's batch")
    args = parser.parse_args()
    smooth = args.smooth
    table = schema.read_table(args.data)
    table["config"], table["group"] = schema.config_labels(table), schema.group_labels(table)
    if args.knee_tokens == "pooled":
        free = held_out(table, {}, smooth)
        tokens = free.groupby("gpu")["knee_tokens"].median().to_dict()
    else:
        tokens = {gpu: float(t) for gpu, t in
                  (pair.split("=") for pair in args.knee_tokens.split(",") if pair)}
    if args.law:
        law = law_held_out(table, tokens, smooth)
        print(f"{len(law)} configurations of {args.data}, each group under one memory law; knee "
              + ", ".join(f"{g} {t:g} tokens" for g, t in tokens.items()))
        print(f"top rate held out: median |error| {law['error'].abs().median():.4f}, mean "
              f"{law['error'].abs().mean():.4f}, 90th percentile "
              f"{law['error'].abs().quantile(0.9):.4f}; in-sample log RMS (median) "
              f"{law['rms'].median():.4f}")
        for by in ("k", "group"):
            print(law.groupby(by)["error"].agg(mean_abs=lambda x: x.abs().mean(),
                                               mean_log=lambda x: np.log1p(x).mean())
                  .round(3).T.to_string() if by == "k" else law.groupby(by)["error"].agg(
                      lambda x: x.abs().mean()).round(3).to_string())
        return
    res = held_out(table, tokens, smooth)
    report(res, args.data, tokens)


def curves(table: pd.DataFrame):
    """Per configuration with a ceiling and five rates: its rows below saturation (by rate),
    ceiling, verify cycles ``n`` and prompt width ``w = p/(k + 1)``."""
    for config, rows in table.groupby("config", sort=False):
        ceiling = rows.loc[rows["strategy"] == "throughput", "rps"].max()
        rows = rows[(rows["strategy"] != "throughput") & ~rows["saturated"]].sort_values("rps")
        if not (np.isfinite(ceiling) and len(rows) >= 5):
            continue
        first = rows.iloc[0]
        k = int(first["k"])
        n = float(theory.verify_cycles(first["decode_tokens"], 0.0 if k == 0 else first["alpha"],
                                       k))
        yield config, rows, ceiling, n, first["prefill_tokens"] / (k + 1)


def law_held_out(table: pd.DataFrame, tokens: dict, smooth: float) -> pd.DataFrame:
    """Each group's law fitted without its configurations' top rates, which it then predicts:
    ``config``, ``group``, ``k``, ``error`` (relative) and ``rms`` (log, on the rows fitted)."""
    out = [law_group(group, rows, tokens, smooth)
           for group, rows in table.groupby("group", sort=False)]
    return pd.concat([o for o in out if o is not None], ignore_index=True)


def law_group(group: str, rows: pd.DataFrame, tokens: dict, smooth: float) -> pd.DataFrame | None:
    """:func:`law_held_out` of one group (None where it has no curve or its start fails)."""
    members = list(curves(rows))
    if not members:
        return None
    train = pd.concat([m[1].iloc[:-1] for m in members])
    drafts = pd.Index(pd.unique(train.loc[train["k"] > 0, "drafter"]))
    start = st.group_fit(train, drafts)
    if start is None:
        return None
    firsts = pd.concat([m[1].iloc[:1] for m in members])
    knees = np.array([tokens[f] for f in firsts["hardware"]]) / (firsts["k"].to_numpy() + 1)

    def predict(log_theta, part):
        c1, c2 = st.group_coefficients(np.exp(log_theta), firsts, drafts)
        return [np.log(latency(m[1]["rps"].to_numpy()[part], c1[i], c2[i], knees[i], m[2], m[3],
                               m[4], smooth)) - np.log(m[1]["latency_mean"].to_numpy()[part])
                for i, m in enumerate(members)]

    def residual(log_theta):
        res = np.concatenate(predict(log_theta, slice(None, -1)))
        return np.where(np.isfinite(res), res, 5.0)

    fit = least_squares(residual, np.log(start), loss="soft_l1", f_scale=0.02, diff_step=1e-4,
                        max_nfev=400)
    top = [p[0] for p in predict(fit.x, slice(-1, None))]
    rms = [np.sqrt(np.mean(p**2)) for p in predict(fit.x, slice(None, -1))]
    return pd.DataFrame([{"config": m[0], "group": group, "k": int(m[1]["k"].iloc[0]),
                          "error": np.expm1(t), "rms": e}
                         for m, t, e in zip(members, top, rms, strict=True)])


def held_out(table: pd.DataFrame, tokens: dict, smooth: float) -> pd.DataFrame:
    """Each configuration's top rate held out: the knee form's and the ``pnorm`` form's errors
    (``knee``, ``pnorm``) and in-sample log RMS, and the knee fitted (in tokens)."""
    out = []
    for config, rows, ceiling, n, w in curves(table):
        first = rows.iloc[0]
        k = int(first["k"])
        fixed = tokens.get(first["hardware"])
        r, y = rows["rps"].to_numpy(), np.log(rows["latency_mean"].to_numpy())
        row = {"config": config, "group": first["group"], "gpu": first["hardware"], "k": k}
        held = knee_fit(r[:-1], y[:-1], ceiling, n, w,
                        None if fixed is None else fixed / (k + 1), smooth)
        if held is not None:
            c1, c2, b_k = held
            fitted = np.log(latency(r, c1, c2, b_k, ceiling, n, w, smooth)) - y
            row |= {"knee": np.exp(fitted[-1]) - 1, "knee_rms": np.sqrt(np.mean(fitted[:-1] ** 2)),
                    "knee_tokens": b_k * (k + 1)}
        form = partial(theory.latency, p=theory.soft_power(k))
        pn = pnorm_fit(form, r[:-1], y[:-1], 1 / ceiling)
        if pn is not None:
            fitted = np.log(form(r, *np.exp(pn[:2]), 1 / ceiling, np.exp(pn[2]))) - y
            row |= {"pnorm": np.exp(fitted[-1]) - 1,
                    "pnorm_rms": np.sqrt(np.mean(fitted[:-1] ** 2))}
        out.append(row)
    return pd.DataFrame(out)


def report(res: pd.DataFrame, data, tokens: dict) -> None:
    """Print the two forms' figures side by side."""
    forms = ("pnorm", "knee")
    print(f"{len(res)} configurations of {data}; knee "
          + (", ".join(f"{g} {t:g} tokens" for g, t in tokens.items()) or "free") + " per GPU")
    summary = {f: {"in-sample log RMS (median)": res[f"{f}_rms"].median(),
                   "top rate held out: median |error|": res[f].abs().median(),
                   "mean |error|": res[f].abs().mean(),
                   "90th percentile": res[f].abs().quantile(0.9),
                   "failed fits": int(res[f].isna().sum())} for f in forms}
    print(pd.DataFrame(summary).round(4).to_string())
    for by in ("k", "group"):
        print(f"mean |error| of the top rate by {by}")
        print(res.groupby(by)[list(forms)].agg(lambda x: x.abs().mean()).round(3).to_string())
    if not tokens:
        print("the fitted knee in tokens, B_k·(k + 1) (median by group and draft length)")
        print(res.pivot_table(index="group", columns="k", values="knee_tokens",
                              aggfunc="median").round(0).to_string())


if __name__ == "__main__":
    main()
