"""Section: speedup against load with bands per k, and the RPS* distribution."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from matplotlib import transforms

from bayeslat import decide
from bayeslat.report import page


def section(inputs) -> page.Section:
    out = page.Section("speedup", "Speedup against load and the break-even RPS*")
    out.add(page.text(
        "Speedup = latency without SD / latency with SD, at the measured acceptance rates. "
        "Bands: 50% (darker) and 90% posterior intervals per draft length k. The boxes at the "
        "bottom of each panel are the posterior of the break-even load RPS* for each k (box: "
        "50%, whiskers: 90%, tick: median), drawn only when the break-even exists in at "
        "least 5% of draws; P in the legend is the probability that it exists. P(SD hurts) = "
        "P(speedup < 1) at your loads is in the answer at the top of the page, and at every "
        "load in the decisions' JSON (bayeslat decide). Hatched: the baseline "
        "saturates in more than half the draws, so speedup is undefined there. The load axis "
        "ends a little past the setup's measured ceiling (the throughput benchmark of its "
        "baseline; dashed line), or past its highest measured load where none was measured; "
        "loads above the highest measured one are shaded: there the curves are extrapolation, "
        "not measurement. A draft length's own measurements often end earlier (its capacity "
        "is below its baseline's): a bar across its median line marks the highest load "
        "measured with it (or, for an acceptance rate between measured ones, the nearest "
        "measured configurations')."))
    if decide.on_staircase(inputs.model):
        out.add(page.text(
            "The curves climb in steps: the sweep sent its requests evenly spaced (GuideLLM's "
            "constant profile), so each request sees a whole number of others arrive during "
            "its life, and each arrival stalls it by one prefill. The latency is flat between "
            "steps and jumps by a prefill at each, and the speedup zigzags where the "
            "baseline's steps and SD's fall at different loads; the steps are tallest for "
            "long prompts on large verifiers. Random (Poisson) arrivals see the smooth "
            "curve instead."))
    out.add(inputs.skipped_note())
    if not inputs.decisions:
        return out
    for setup, ds in inputs.decisions.items():
        out.add(page.figure(setup_figure(setup, ds, inputs.shown_alphas[setup],
                                         inputs.load_limits.get(setup)),
                            f"Speedup against load, {setup}.",
                            f"speedup {setup}"))
    out.add("<h3>Break-even per draft length (measured acceptance rates)</h3>",
            page.text("C1R, C2R: posterior medians. Alert line: a load SD starts to hurt "
                      "below with probability 5% only (0: SD hurts even when idle; never: SD "
                      "does not hurt below the baseline's saturation in 95% of draws)."),
            page.table(break_even(inputs), scroll=True))
    return out


def setup_figure(setup: str, ds, alphas: list[float],
                 limits: tuple[float, float | None] | None = None):
    """Speedup against load at each of ``alphas``; ``limits`` (highest measured load,
    measured ceiling or None, req/s) mark the load axis."""
    height = 3.9
    # fixed margins (inches; the top one leaves room for the setup above the panel titles)
    fig, axes = page.subplots(len(alphas), len(alphas), width=4.3, height=height,
                              margins=(0.62, 0.12, 0.5, 0.62))
    rps = ds["rps"].values
    for ax, a in zip(axes, alphas, strict=True):
        _speedup_panel(ax, ds.sel(alpha=a))
        ax.set_title(f"alpha = {a:g}", fontsize=9)
        ax.set_xlim(rps.min(), rps.max())
        ax.set_xlabel("load rps (req/s)", fontsize=8)
        if limits is not None:
            page.mark_loads(ax, *limits)
    axes[0].legend(fontsize=7, loc="upper right")
    fig.suptitle(setup, fontsize=10, y=1 - 0.12 / height)
    return fig


def _sd_ks(ds):
    return [int(k) for k in ds["k"].values if k > 0]


STATS = ("q05", "q25", "q50", "q75", "q95")


def _stats(da, ks):
    """``{stat: array over (ks, other dims)}`` of a summary with a ``stat`` dim: plain arrays,
    read once (an xarray selection per line was a fifth of the section's time, and
    matplotlib deep-copies what it is given when it builds the legend)."""
    da = da.sel(k=ks, stat=list(STATS)).transpose("stat", "k", ...)
    return dict(zip(STATS, da.values, strict=True))


def _speedup_panel(ax, ds):
    rps = ds["rps"].values
    ks = _sd_ks(ds)
    spd = _stats(ds["speedup"], ks)
    p_exists = ds["p_break_even"].sel(k=ks).values
    for i, k in enumerate(ks):
        st = page.k_style(k)
        ax.fill_between(rps, spd["q05"][i], spd["q95"][i], color=st["color"], alpha=0.10, lw=0)
        ax.fill_between(rps, spd["q25"][i], spd["q75"][i], color=st["color"], alpha=0.18, lw=0)
        ax.plot(rps, spd["q50"][i], color=st["color"], ls=st["linestyle"],
                marker=st["marker"], markevery=5, ms=4, mfc="white", lw=1.2,
                label=f"k={k} (P(RPS* exists)={p_exists[i]:.2f})")
    if "rps_measured_config" in ds:  # where each k's own measurements end
        ends = ds["rps_measured_config"].sel(k=ks).values
        for i, (k, end) in enumerate(zip(ks, ends, strict=True)):
            if rps[0] <= end <= rps[-1]:
                ax.plot([end], [np.interp(end, rps, spd["q50"][i])], marker="|", ms=9, mew=1.6,
                        color=page.k_style(k)["color"])
    ax.axhline(1.0, color="k", lw=0.8)
    _saturated(ax, ds)
    _break_even_boxes(ax, ks, p_exists, _stats(ds["rps_star"], ks))
    ax.set_ylim(*_speedup_range(spd["q05"], spd["q95"]))
    ax.set_ylabel("speedup (×)", fontsize=8)
    ax.tick_params(labelsize=7)


def _speedup_range(q05: np.ndarray, q95: np.ndarray) -> tuple[float, float]:
    """Speedup axis limits from the 90% bands (k by load): the bands, but at most 1.6 times
    the zero-load speedup (next to the baseline's saturation the speedup grows without
    bound)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN band: the defaults below
        low, high, zero_load = np.nanmin(q05), np.nanmax(q95), np.nanmax(q95[:, 0])
    high = min(high, 1.6 * zero_load) if np.isfinite(zero_load) else high
    low = low if np.isfinite(low) else 0.0
    high = high if np.isfinite(high) else 2.0
    return max(0.0, min(low, 0.9) * 0.95), max(high, 1.1) * 1.05


def _break_even_boxes(ax, ks, p_exists, star):
    """The RPS* posterior of each k (``star``: :func:`_stats` of it) as a box along the bottom
    of the panel, where it exists in at least 5% of draws (``p_exists``)."""
    trans = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for i, k in enumerate(ks):
        if p_exists[i] < 0.05:
            continue
        q05, q25, q50, q75, q95 = (float(star[s][i]) for s in STATS)
        y, h = 0.04 + 0.06 * i, 0.04
        st = page.k_style(k)
        ax.plot([q05, q95], [y + h / 2] * 2, color=st["color"], lw=0.9, transform=trans)
        ax.add_patch(plt.Rectangle((q25, y), q75 - q25, h, transform=trans, facecolor="white",
                                   edgecolor=st["color"], lw=1))
        ax.plot([q50], [y + h / 2], marker=st["marker"], color=st["color"], ms=4,
                transform=trans)


def _saturated(ax, ds):
    bad = ds["p_valid"].values < 0.5
    if bad.any():
        rps = ds["rps"].values
        ax.axvspan(rps[bad].min(), rps.max(), facecolor="none", edgecolor="0.6", hatch="\\\\",
                   lw=0)


def break_even(inputs) -> pd.DataFrame:
    """:func:`bayeslat.decide.break_even_table` of every setup at its measured alphas."""
    parts = [decide.break_even_table(ds.sel(alpha=inputs.shown_alphas[setup]).expand_dims("setup"))
             for setup, ds in inputs.decisions.items()]
    df = pd.concat(parts, ignore_index=True)
    df["rps_alert"] = df["rps_alert"].map(
        lambda v: "never" if np.isposinf(v) else "–" if np.isnan(v) else f"{v:.3g}")
    return df.rename(columns={
        "c1r": "C1R", "c2r": "C2R", "p_c2r_above_1": "P(C2R > 1)",
        "rps_star": "RPS* median (req/s)", "rps_star_q05": "RPS* 5%",
        "rps_star_q95": "RPS* 95%", "p_break_even": "P(RPS* exists)",
        "rps_alert": "alert line (req/s)", "capacity": "capacity median (req/s)",
        "capacity_q05": "capacity 5%", "capacity_q95": "capacity 95%",
        "rps_star_beyond_capacity": "RPS* beyond the ceiling",
        "alert_beyond_capacity": "alert beyond the ceiling"})
