"""Section: the k* map over (alpha, rps) with P(k* = k), and the decision table."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colors

from bayeslat import decide
from bayeslat.report import page

PANEL_COLUMNS = 3
# Loads of the decision table: every n-th point of each setup's load grid.
TABLE_EVERY = 5


def section(inputs) -> page.Section:
    out = page.Section("kstar", "Best draft length k* and the decision table")
    out.add(page.text(
        "k* is the draft length (k = 0: no SD) with the lowest mean latency at an acceptance "
        "rate and load. Colour: the most probable k* (the colour of k in every figure); contours: "
        "the probability P(k* = k) of that most probable k (0.5, 0.8, 0.95), so pale regions "
        "between contours are where the data cannot yet tell the draft lengths apart. "
        "Hatched: every k saturates in more than half the draws. Loads end a little past "
        "the setup's measured ceiling (dashed line; the highest measured load where no "
        "ceiling was measured); shaded: loads above the highest measured one, where k* is "
        "extrapolation."))
    out.add(inputs.skipped_note())
    if not inputs.decisions:
        return out
    out.add(page.figure(map_figure(inputs.decisions, inputs.load_limits),
                        "Most probable k* and its probability "
                        "over acceptance rate and load, per setup.", "k* map"))
    out.add(page.figure(probability_figure(inputs), "P(k* = k) for every k against load, at "
                        "the middle measured acceptance rate of each setup.", "P(k* = k)"))
    out.add("<h3>Decision table</h3>", page.text(
        "As printed by bayeslat decide, at a few loads of each setup's grid: the risk-neutral "
        "k (lowest expected latency) and the risk-aware k (lowest latency at "
        f"{1 - inputs.epsilon:.0%} probability), with the risk-aware k's speedup (median and 90% "
        "interval), P(SD hurts) and expected regret (mean extra latency over the best k in "
        "each draw). A row is extrapolated past the highest load measured with its chosen k "
        "(at that acceptance rate, or the nearest measured ones) or without SD; beside it, "
        "how far the chosen k was measured and the other ks in contention there (keeping up "
        "in at least half the draws) that were measured only at lower loads; misfit: the "
        "fit's adequacy check marked the chosen configuration (or the baseline) misfit."),
        page.table(decision_table(inputs), scroll=True))
    return out


def map_figure(decisions: dict, limits: dict | None = None):
    """The most probable k* over (rps, alpha) per setup; ``limits`` (per setup: highest
    measured load, measured ceiling) mark the load axis."""
    limits = limits or {}
    ks = sorted({int(k) for ds in decisions.values() for k in ds["k"].values})
    cmap = colors.ListedColormap([page.k_style(k)["color"] for k in ks])
    norm = colors.BoundaryNorm(np.arange(len(ks) + 1) - 0.5, len(ks))
    fig, axes = page.subplots(len(decisions), PANEL_COLUMNS, width=4.0, height=3.2,
                              margins=page.GRID_MARGINS, aside=1.0)
    mesh = None
    for ax, (setup, ds) in zip(axes, decisions.items(), strict=True):
        p = ds["p_best_k"].transpose("alpha", "rps", "k")
        total = p.sum("k").values
        best = p["k"].values[p.values.argmax(axis=-1)]
        index = np.searchsorted(ks, best).astype(float)
        index[total < 0.5] = np.nan
        rps, alpha = ds["rps"].values, ds["alpha"].values
        mesh = ax.pcolormesh(rps, alpha, index, cmap=cmap, norm=norm, shading="nearest")
        top = np.where(total >= 0.5, p.values.max(axis=-1), np.nan)
        if np.isfinite(top).sum() > 3 and len(alpha) > 1:
            # the key tells the levels apart by line style: labels on the lines overlapped
            ax.contour(rps, alpha, top, levels=[0.5, 0.8, 0.95], colors="k",
                       linewidths=[0.6, 0.9, 1.3], linestyles=["dotted", "dashed", "solid"])
        if (total < 0.5).any():
            ax.contourf(rps, alpha, (total < 0.5).astype(float), levels=[0.5, 1.5],
                        colors="none", hatches=["////"])
        ax.set_xlim(rps.min(), rps.max())
        if setup in limits:
            page.mark_loads(ax, *limits[setup], shade="white", alpha=0.4)
        ax.set_title(page.two_lines(setup), fontsize=7)
        ax.set_xlabel("load rps (req/s)", fontsize=8)
        ax.set_ylabel("acceptance rate alpha", fontsize=8)
        ax.tick_params(labelsize=7)
    page.key(axes[0], [("P(k*) = 0.5", {"lw": 0.6, "ls": ":"}),
                       ("P(k*) = 0.8", {"lw": 0.9, "ls": "--"}),
                       ("P(k*) = 0.95", {"lw": 1.3}),
                       ("every k saturates", {"facecolor": "none", "hatch": "////"}),
                       ("extrapolation", {"facecolor": "white", "alpha": 0.6,
                                          "edgecolor": "0.5"})],
             fontsize=6, loc="upper right")
    width, height = fig.get_size_inches()
    cax = fig.add_axes((1 - 0.8 / width, 0.3, 0.15 / width, 0.4))
    bar = fig.colorbar(mesh, cax=cax, ticks=range(len(ks)))
    bar.ax.set_yticklabels([str(k) for k in ks])
    bar.set_label("most probable k* (tokens)")
    return fig


def probability_figure(inputs):
    """P(k* = k) against load, one line per k, at each setup's middle measured alpha."""
    fig, axes = page.subplots(len(inputs.decisions), 4, width=3.3, height=2.6,
                              margins=page.GRID_MARGINS)
    for ax, (setup, ds) in zip(axes, inputs.decisions.items(), strict=True):
        alpha = inputs.middle_alpha(setup)
        p = ds["p_best_k"].sel(alpha=alpha)
        for k in p["k"].values:
            st = page.k_style(k)
            ax.plot(ds["rps"], p.sel(k=k), color=st["color"], ls=st["linestyle"],
                    marker=st["marker"], markevery=4, ms=3.5, mfc="white", lw=1.1,
                    label=f"k={k}")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlim(float(ds["rps"].min()), float(ds["rps"].max()))
        inputs.mark_loads(ax, setup)
        ax.set_title(f"{page.two_lines(setup)}, alpha = {alpha:g}", fontsize=7)
        ax.set_xlabel("load rps (req/s)", fontsize=8)
        ax.set_ylabel("P(k* = k)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    return fig


def decision_table(inputs) -> pd.DataFrame:
    """:func:`bayeslat.decide.decision_table` of every setup at its measured alphas and a few
    loads."""
    parts = []
    for setup, ds in inputs.decisions.items():
        at = {"alpha": inputs.shown_alphas[setup], "rps": ds["rps"].values[::TABLE_EVERY]}
        parts.append(decide.decision_table(ds.sel(at).expand_dims("setup")))
    df = pd.concat(parts, ignore_index=True)
    for col in ("k_neutral", "k_risk"):
        df[col] = df[col].map(lambda v: "–" if pd.isna(v) else str(int(v)))
    df["unmeasured_ks"] = df["unmeasured_ks"].map(decide.ks_list)
    return df.rename(columns={
        "rps": "rps (req/s)", "k_neutral": "k risk-neutral", "k_risk": "k risk-aware",
        "speedup": "speedup median", "speedup_q05": "speedup 5%",
        "speedup_q95": "speedup 95%", "p_sd_hurts": "P(SD hurts)",
        "regret": "expected regret", "p_saturated": "P(saturated)",
        "extrapolated": "extrapolated", "p_valid": "P(baseline unsaturated)",
        "rps_measured_k": "chosen k measured to (req/s)",
        "unmeasured_ks": "other ks in contention, measured only below",
        "misfit": "chosen configuration misfit",
        "latency_tail": f"latency at {1 - inputs.epsilon:.0%} (s)",
        "latency_tail_neutral": f"risk-neutral k's latency at {1 - inputs.epsilon:.0%} (s)"})
