"""Section: the universal collapse and the posterior predictive check of every configuration."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib import ticker

from bayeslat import adequacy, theory
from bayeslat.data import schema
from bayeslat.models.base import full_coefficients
from bayeslat.report import page

DRAWS = ("chain", "draw")
# Panels of per-configuration checks: the worst this many (the table lists every one).
MAX_PANELS = 15
PANEL_COLUMNS = 5


def section(inputs) -> page.Section:
    table, fitted = inputs.model.table, inputs.fitted
    out = page.Section("collapse", "Universal collapse and posterior predictive checks")
    out.add(page.text(
        "Theory: every configuration falls on one curve, L/C1 = 1/(1 − x) with x = rps·C2, "
        "while it is below saturation. Each measured point is placed with its configuration's "
        "posterior median C1 and C2; the bands are the 50% and 90% posterior predictive "
        "scatter of the likelihood around the curve. The right panel shows what is left: a "
        "pattern in the binned median (e.g. an S shape) is something the model does not "
        "capture."))
    out.add(page.figure(collapse_figure(table, fitted),
                        "Universal collapse (left) and log residuals against x (right).",
                        "universal collapse"))
    check = inputs.check
    coverage_df = coverage(table, fitted) if check is None else coverage_table(check.configs)
    shown = coverage_df["configuration"].head(MAX_PANELS).tolist()  # worst first
    out.add(f"<h3>The {len(shown)} configurations that fit worst: measured points over the "
            "predicted band</h3>",
            page.text("Points: measured mean latency ± 2 standard errors. Grey bands: 50% and "
                      "90% posterior predictive intervals; line: posterior median of the "
                      "model's mean latency. Where the band leaves the plot the configuration "
                      "saturates. A thick frame and MISFIT in the title: fewer than "
                      f"{adequacy.CONFIG_COVERAGE_MIN:.0%} of the configuration's points lie "
                      "inside their 90% interval (the share is given; see the adequacy "
                      "section). The configurations are the first of the coverage table "
                      "below, which lists every one."))
    out.add(page.figure(configs_figure(table, fitted, inputs.curve_rows, inputs.curves, shown,
                                       None if check is None else check.configs),
                        f"Posterior predictive check of the {len(shown)} configurations with "
                        "the lowest coverage.", "worst configurations"))
    out.add("<h3>Coverage per configuration</h3>",
            page.text("Share of measured points inside the 50% and 90% predictive intervals "
                      "(about 0.5 and 0.9 when the model is adequate), of its top "
                      f"{adequacy.TOP_LOADS} loads inside the 90% interval, the mean "
                      "standardised residual (positive: measured above the model) and the "
                      "model capacity over the measured ceiling. Worst first."),
            page.table(coverage_df, scroll=True))
    return out


def collapse_figure(table: pd.DataFrame, fitted: xr.Dataset):
    c1, c2 = full_coefficients(fitted)
    rps, measured = table["rps"].to_numpy(), table["latency_mean"].to_numpy()
    x, y = theory.collapse(rps, measured, c1.median(DRAWS).values, c2.median(DRAWS).values)
    scatter = _scatter_quantiles(fitted)
    fig, (ax, res) = page.subplots(2, 2, width=5.6, height=4.2)
    grid = np.linspace(0, min(0.97, max(np.nanmax(x), 0.5)), 200)
    curve = 1 / (1 - grid)
    ax.fill_between(grid, curve * scatter[0.05], curve * scatter[0.95], color="0.85",
                    label="90% predictive")
    ax.fill_between(grid, curve * scatter[0.25], curve * scatter[0.75], color="0.65",
                    label="50% predictive")
    ax.plot(grid, curve, "k-", lw=1.2, label="1/(1 − x)")
    model_lat = fitted["latency"].median(DRAWS).values
    with np.errstate(divide="ignore"):
        residual = np.log(measured / model_lat)  # -inf where the model saturates the point
    residual[~np.isfinite(residual)] = np.nan
    for i, verifier in enumerate(pd.unique(table["verifier"])):
        m = (table["verifier"] == verifier).to_numpy()
        st = page.style(i)
        for a, yy in ((ax, y), (res, residual)):
            a.plot(x[m], yy[m], st["marker"], ms=3, mfc="none", mec=st["color"], alpha=0.7,
                   label=verifier if a is ax else None)
    ax.set(xlabel="x = rps·C2 (dimensionless load)", ylabel="y = L / C1 (log scale)",
           yscale="log", title="Collapse onto 1/(1 − x)")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(ticker.FormatStrFormatter("%g"))
    ax.legend(fontsize=7, loc="upper left")
    for q in (0.05, 0.25, 0.75, 0.95):
        res.axhline(np.log(scatter[q]), color="0.5", ls="--" if q in (0.05, 0.95) else ":",
                    lw=0.8)
    res.axhline(0, color="k", lw=0.8)
    centres, medians = _binned_median(x, residual)
    res.plot(centres, medians, "k-", lw=2, label="binned median")
    res.set(xlabel="x = rps·C2 (dimensionless load)",
            ylabel="log(measured L / model L)", title="Residuals (dashed: 90%, dotted: 50%)")
    res.legend(fontsize=7)
    return fig


def _scatter_quantiles(fitted: xr.Dataset) -> dict[float, float]:
    """Quantiles of the predictive scatter factor ``exp(sigma·t_nu)``."""
    ratio = (fitted["latency_pp"] / fitted["latency"]).values.ravel()
    ratio = ratio[np.isfinite(ratio)]
    return {q: float(np.quantile(ratio, q)) for q in (0.05, 0.25, 0.75, 0.95)}


def _binned_median(x, y, bins: int = 12):
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    edges = np.quantile(x, np.linspace(0, 1, bins + 1))
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    used = [b for b in range(bins) if (idx == b).any()]
    return (np.array([np.median(x[idx == b]) for b in used]),
            np.array([np.median(y[idx == b]) for b in used]))


def configs_figure(table, fitted, curve_rows, curves, shown: list[str],
                   configs: pd.DataFrame | None = None):
    """One panel per configuration label in ``shown``: measured points over the predicted band.

    ``configs`` (:attr:`bayeslat.adequacy.Adequacy.configs`) marks the misfit configurations:
    a thick red frame and their 90% coverage in the title (the mark does not rely on colour
    alone).
    """
    misfit = ({} if configs is None else
              configs.loc[configs["misfit"]].set_index("config")["inside_90"].to_dict())
    curve_labels = schema.config_labels(curve_rows).to_numpy()
    labels = schema.config_labels(table).to_numpy()
    # fixed margins: room for three title lines (tight_layout was half the figure's time)
    fig, axes = page.subplots(len(shown), PANEL_COLUMNS, width=2.9, height=2.4,
                              margins=(0.55, 0.12, 0.4, 0.55))
    page.key(axes[0], [("90% predictive", {"facecolor": "0.85"}),
                       ("50% predictive", {"facecolor": "0.6"}),
                       ("model median", {"lw": 1}),
                       ("measured ± 2 se", {"marker": "o", "ls": "none", "mfc": "white",
                                            "ms": 4})],
             fontsize=6, loc="upper left")
    for ax, config in zip(axes, shown, strict=True):
        cm = curve_labels == config
        loads = curve_rows["rps"].to_numpy()[cm]
        pp = curves["latency_pp"].isel(obs=np.flatnonzero(cm))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # loads where every draw saturates
            q = pp.where(np.isfinite(pp)).quantile([0.05, 0.25, 0.75, 0.95], dim=DRAWS).values
        mean = curves["latency"].isel(obs=np.flatnonzero(cm)).median(DRAWS).values
        ax.fill_between(loads, q[0], q[3], color="0.85", lw=0)
        ax.fill_between(loads, q[1], q[2], color="0.6", lw=0)
        ax.plot(loads, np.where(np.isfinite(mean), mean, np.nan), "k-", lw=1)
        pts = table[labels == config]
        ax.errorbar(pts["rps"], pts["latency_mean"], yerr=2 * schema.standard_error(pts),
                    fmt="o", ms=3, mfc="white", mec="k", ecolor="k", lw=0.8)
        top = pts["latency_mean"].max()
        ax.set_ylim(0, 1.6 * top if np.isfinite(top) else None)
        group = schema.group_labels(pts).iloc[0]
        title = f"{group}\n{config.removeprefix(group).strip()}"
        if config in misfit:
            title += f"\nMISFIT: {misfit[config]:.0%} inside 90%"
            for spine in ax.spines.values():
                spine.set(color="#b00000", linewidth=2.5)
        ax.set_title(title, fontsize=7, color="#b00000" if config in misfit else "k",
                     fontweight="bold" if config in misfit else "normal")
        ax.tick_params(labelsize=7)
        ax.set_xlabel("rps (req/s)", fontsize=7)
        ax.set_ylabel("latency (s)", fontsize=7)
    return fig


def coverage_table(configs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (:attr:`bayeslat.adequacy.Adequacy.configs`), worst first."""
    order = configs.sort_values(["inside_90", "inside_50", "mean_abs_z"],
                                ascending=[True, True, False], kind="stable")
    return pd.DataFrame({
        "configuration": order["config"], "points": order["points"],
        "inside 50%": order["inside_50"], "inside 90%": order["inside_90"],
        f"top {adequacy.TOP_LOADS} inside 90%": order["top_inside_90"],
        "mean z": order["mean_z"], "capacity / ceiling": order["capacity_ratio"],
        "misfit": order["misfit"].map({True: "yes", False: ""}),
    }).reset_index(drop=True)


def coverage(table: pd.DataFrame, fitted: xr.Dataset) -> pd.DataFrame:
    """Per configuration: points, share inside the 50%/90% predictive intervals, median error."""
    q = fitted["latency_pp"].quantile([0.05, 0.25, 0.75, 0.95], dim=DRAWS).values
    measured = table["latency_mean"].to_numpy()
    median = fitted["latency"].median(DRAWS).values
    df = pd.DataFrame({
        "configuration": schema.config_labels(table).to_numpy(),
        "in90": (measured >= q[0]) & (measured <= q[3]),
        "in50": (measured >= q[1]) & (measured <= q[2]),
        "err": np.abs(median / measured - 1),
    })
    out = df.groupby("configuration", sort=False).agg(
        points=("in90", "size"), in_50=("in50", "mean"), in_90=("in90", "mean"),
        median_rel_error=("err", "median")).reset_index()
    out.columns = ["configuration", "points", "inside 50%", "inside 90%",
                   "median |relative error|"]
    return out.sort_values(["inside 90%", "inside 50%"]).reset_index(drop=True)
