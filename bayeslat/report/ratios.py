"""Section: C1R and C2R over (alpha, k), marking where C2R > 1 (SD helps only at low load)."""

from __future__ import annotations

from bayeslat.report import page

PANEL_COLUMNS = 4


def section(inputs) -> page.Section:
    out = page.Section("ratios", "C1R and C2R over acceptance rate and draft length")
    out.add(page.text(
        "C1R = C1_SD/C1_D is SD's zero-load latency relative to no SD (below 1: SD is faster "
        "when the server is idle). C2R = C2_SD/C2_D is its cost per concurrent request relative "
        "to no SD: where C2R > 1 (hatched) every extra request hurts SD more than the "
        "baseline, so SD helps only below a break-even load and hurts above it. Lines: "
        "posterior medians; bands: 90% intervals; one line style and marker per k."))
    out.add(inputs.skipped_note())
    if not inputs.decisions:
        return out
    decisions = inputs.decisions
    for name, caption in (("c1r", "C1R (zero-load cost ratio)"),
                          ("c2r", "C2R (load cost ratio); hatched: C2R > 1")):
        out.add(page.figure(ratio_figure(decisions, name), f"{caption} against alpha, per "
                            "setup.", f"{name.upper()} over alpha and k"))
    return out


def ratio_figure(decisions: dict, name: str):
    fig, axes = page.subplots(len(decisions), PANEL_COLUMNS, width=3.4, height=2.7,
                              margins=page.GRID_MARGINS)
    for ax, (setup, ds) in zip(axes, decisions.items(), strict=True):
        da = ds[name]
        alpha = da["alpha"].values
        for k in (k for k in da["k"].values if k > 0):
            one = da.sel(k=k)
            st = page.k_style(k)
            ax.fill_between(alpha, one.sel(stat="q05"), one.sel(stat="q95"), color=st["color"],
                            alpha=0.12, lw=0)
            ax.plot(alpha, one.sel(stat="q50"), color=st["color"], ls=st["linestyle"],
                    marker=st["marker"], ms=3.5, mfc="white", lw=1.1, label=f"k={k}")
        ax.axhline(1.0, color="k", lw=0.8)
        if name == "c2r":
            top = max(ax.get_ylim()[1], 1.05)
            ax.axhspan(1.0, top, facecolor="none", edgecolor="0.6", hatch="///", lw=0)
            ax.set_ylim(top=top)
        ax.set_title(page.two_lines(setup), fontsize=7)
        ax.set_xlabel("acceptance rate alpha", fontsize=8)
        ax.set_ylabel(f"{name.upper()} (ratio)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    return fig
