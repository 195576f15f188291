"""Section: is the model adequate? Coverage of the measured points, top loads, capacity.

The first section of the report, with the figures ``bayeslat fit`` prints
(:func:`bayeslat.adequacy.check`): what follows rests on the model's curve, and this says where
the curve misses the data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import ticker

from bayeslat import adequacy
from bayeslat.report import page

# Configurations listed as the worst.
WORST = 5


def section(inputs) -> page.Section:
    check = inputs.check
    out = page.Section("adequacy", "Adequacy: does the model fit the measurements?")
    out.add(page.text(
        "Each measured mean latency against its posterior predictive: the model's latency in "
        "each posterior draw times the likelihood's scatter (Student-t with the draw's sigma "
        "and nu, widened by the measurement's standard error). An adequate model has about "
        "half the points inside their 50% interval and nine in ten inside their 90% "
        f"interval, at every load, including each configuration's top {adequacy.TOP_LOADS} "
        "loads where the paper's curve misses first; and its capacity 1/max(C2, C3) matches "
        "the throughput the sweep measured (the throughput benchmarks)."))
    if check is None:
        return out.add(page.text("The adequacy check was not run.", "warn"))
    summary = check.summary()
    summary["adequate?"] = summary["ok"].map(
        lambda ok: "" if ok is None else "yes" if ok else "NO")
    out.add(page.table(summary[["figure", "shown", "target", "adequate?"]].rename(
        columns={"shown": "value", "target": "adequate when"})))
    if check.warnings:
        out.add(*(page.text(f"Warning: {line[0].upper()}{line[1:]}", "warn")
                  for line in check.warnings))
    else:
        out.add(page.text("No warning: coverage, top-load coverage, capacity and the "
                          "Student-t tails are where an adequate model puts them.", "note"))
    out.add(f"<h3>The {WORST} worst configurations</h3>", page.text(
        "Lowest share of points inside the 90% interval first, then the largest mean "
        "absolute standardised residual z (log residual over the half-width of the central "
        "68% predictive interval; positive: measured above the model). Misfit "
        f"configurations (below {adequacy.CONFIG_COVERAGE_MIN:.0%}) are framed and marked in "
        "the per-configuration predictive checks of the collapse section."),
        page.table(worst_table(check.worst(WORST))))
    out.add(page.figure(figure(check), "Coverage against load position (left) and model "
                        "capacity against the measured ceiling (right).", "adequacy"))
    return out


def worst_table(worst: pd.DataFrame) -> pd.DataFrame:
    """The worst configurations with readable columns."""
    return pd.DataFrame({
        "configuration": worst["config"], "points": worst["points"],
        "inside 50%": worst["inside_50"], "inside 90%": worst["inside_90"],
        f"top {adequacy.TOP_LOADS} inside 90%": worst["top_inside_90"],
        "mean z": worst["mean_z"], "model capacity (req/s)": worst["capacity"],
        "measured ceiling (req/s)": worst["ceiling"],
        "capacity / ceiling": worst["capacity_ratio"],
        "misfit": worst["misfit"].map({True: "yes", False: ""}),
    })


def figure(check: adequacy.Adequacy):
    """Left: share inside the 50% and 90% intervals by load position from the top (1: each
    configuration's highest load). Right: model capacity against measured ceiling."""
    has_ceiling = check.configs["ceiling"].notna().any()
    fig, axes = page.subplots(2 if has_ceiling else 1, 2, width=4.6, height=3.4)
    ax = axes[0]
    by_rank = check.points.groupby("load_rank")[["in50", "in90"]].mean()
    counts = check.points.groupby("load_rank").size()
    ranks = by_rank.index.to_numpy()
    for (col, nominal), st in zip((("in90", 0.9), ("in50", 0.5)), (page.style(0), page.style(1)),
                                  strict=True):
        ax.plot(ranks, by_rank[col], color=st["color"], ls=st["linestyle"], marker=st["marker"],
                ms=4, mfc="white", lw=1.2, label=f"inside {nominal:.0%}")
        ax.axhline(nominal, color="0.5", lw=0.8, ls=":")
    ax.axvspan(0.5, adequacy.TOP_LOADS + 0.5, facecolor="0.85", lw=0, zorder=0,
               label=f"top {adequacy.TOP_LOADS} loads")
    ax.set_xlim(0.5, ranks.max() + 0.5)
    ax.set_xticks(ranks, [f"{r}\n({n})" for r, n in zip(ranks, counts, strict=True)])
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("load position from the top (points)", fontsize=8)
    ax.set_ylabel("share inside the interval", fontsize=8)
    ax.set_title("Coverage by load position", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    ax.tick_params(labelsize=7)
    if has_ceiling:
        _capacity_panel(axes[1], check.configs)
    fig.tight_layout()
    return fig


def _capacity_panel(ax, configs: pd.DataFrame) -> None:
    c = configs[configs["ceiling"].notna()]
    lo = min(c["ceiling"].min(), c["capacity_lo"].min()) * 0.8
    hi = max(c["ceiling"].max(), c["capacity_hi"].max()) * 1.25
    grid = np.geomspace(lo, hi, 50)
    tol = adequacy.CAPACITY_TOLERANCE
    ax.fill_between(grid, grid * (1 - tol), grid * (1 + tol), color="0.88", lw=0,
                    label=f"within ±{tol:.0%}")
    ax.plot(grid, grid, "k-", lw=0.8, label="model = measured")
    for i, (k, g) in enumerate(c.groupby("k")):
        st = page.style(i)
        cap = g["capacity"].to_numpy()
        ax.errorbar(g["ceiling"].to_numpy(), cap,
                    yerr=np.vstack([cap - g["capacity_lo"].to_numpy(),
                                    g["capacity_hi"].to_numpy() - cap]),
                    fmt=st["marker"], ms=4, mfc="white", mec=st["color"], ecolor=st["color"],
                    lw=0.8, label=f"k={k}")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("measured ceiling (req/s, throughput benchmark)", fontsize=8)
    ax.set_ylabel("model capacity 1/max(C2, C3) (req/s)", fontsize=8)
    ax.set_title("Capacity: model against measurement (90% intervals)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.tick_params(labelsize=7)
