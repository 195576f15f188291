"""Section: latency against load, no SD and the chosen k, with the measured points."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayeslat import decide
from bayeslat.report import page
from bayeslat.report.inputs import setup_rows

PANEL_COLUMNS = 4


def section(inputs) -> page.Section:
    out = page.Section("latency", "Latency against load: no SD and the chosen k")
    out.add(page.text(
        "Mean latency per request against load for each setup, at its middle measured "
        "acceptance rate: no SD (k = 0, black) and the draft length the answer chooses most "
        "often over the measured loads (the colour of k in every figure). Lines: posterior "
        "median of the model's mean latency; bands: its 90% interval. Points: the measured "
        "mean latencies of the same configurations. The dashed line is the measured ceiling; "
        "shaded: loads above the highest measured one (extrapolation)."))
    out.add(inputs.skipped_note())
    if inputs.decisions:
        out.add(page.figure(latency_figure(inputs), "Latency against load, no SD and the "
                            "chosen k, per setup.", "latency against load"))
    return out


def chosen_k(ds, alpha: float) -> int:
    """The SD draft length the risk-aware choice picks most often at ``alpha`` over the
    measured loads of ``ds`` (a setup's decisions); where it never picks SD there, the k with
    the highest median zero-load speedup."""
    at = ds.sel(alpha=alpha)
    picked = at["k_risk"].where(~at["extrapolated"]).values
    picked = picked[np.isfinite(picked) & (picked > 0)]
    if len(picked):
        return int(pd.Series(picked).mode().min())
    zero = at["speedup"].sel(stat="q50").isel(rps=0).sel(k=at["k"] > 0)
    return int(zero["k"][int(np.nanargmax(zero.fillna(-np.inf).values))])


def latency_figure(inputs):
    """One panel per setup: the model's latency band and the measured points of k = 0 and
    :func:`chosen_k`, with the load axis marked (:meth:`inputs.Inputs.mark_loads`)."""
    table = inputs.model.table
    measured = {row["setup"]: setup_rows(table, row) for _, row in decide.setups(table).iterrows()}
    fig, axes = page.subplots(len(inputs.decisions), PANEL_COLUMNS, width=3.4, height=2.8,
                              margins=page.GRID_MARGINS)
    for ax, (setup, ds) in zip(axes, inputs.decisions.items(), strict=True):
        alpha = inputs.middle_alpha(setup)
        rows = measured[setup]
        rps, top = ds["rps"].values, 0.0
        for k in (0, chosen_k(ds, alpha)):
            st = page.k_style(k)
            lat = ds["latency"].sel(alpha=alpha, k=k)
            ax.fill_between(rps, lat.sel(stat="q05"), lat.sel(stat="q95"), color=st["color"],
                            alpha=0.18, lw=0)
            ax.plot(rps, lat.sel(stat="q50"), color=st["color"], ls=st["linestyle"], lw=1.3,
                    label="no SD (k = 0)" if k == 0 else f"SD, k = {k}")
            mine = rows[(rows["k"] == k) & ((k == 0) | np.isclose(rows["alpha"], alpha))]
            ax.plot(mine["rps"], mine["latency_mean"], st["marker"], color=st["color"], ms=4,
                    mfc="white", ls="none")
            top = max(top, float(mine["latency_mean"].max()) if len(mine) else 0.0)
        ax.plot([], [], "o", color="0.3", mfc="white", ls="none", label="measured")
        ax.set_xlim(rps.min(), rps.max())
        if top > 0:
            ax.set_ylim(0, 1.5 * top)
        inputs.mark_loads(ax, setup)
        ax.set_title(f"{page.two_lines(setup)}, alpha = {alpha:g}", fontsize=7)
        ax.set_xlabel("load rps (req/s)", fontsize=8)
        ax.set_ylabel("mean latency (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6.5, loc="upper left")
    return fig

