"""Section: the six per-stage coefficients and their scaling with model size and lengths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib import ticker

from bayeslat import scaling
from bayeslat.decide import stack_draws
from bayeslat.report import page

SAMPLE = "sample"
# Shown in milliseconds: c1* are seconds, c2* seconds per request in the system.
UNITS = {"c1p": "ms", "c1v": "ms", "c1d": "ms", "c2p": "ms/req", "c2v": "ms/req",
         "c2d": "ms/req"}
MEANING = {"c1p": "prefill, fixed", "c1v": "verify per cycle, fixed",
           "c1d": "per drafted token, fixed", "c2p": "prefill, per request in system",
           "c2v": "verify per cycle, per request", "c2d": "per drafted token, per request"}
FEATURE_LABELS = {"verifier_params_b": "verifier size (1e9 params)",
                  "drafter_params_b": "drafter size (1e9 params)",
                  "prefill_tokens": "prefill length p (tokens)",
                  "decode_tokens": "decode length g (tokens)",
                  "kv_tokens": "mean KV length p + g/2 (tokens)",
                  "prefill_compute": "size × prefill length (1e9 params·tokens)",
                  "prefill_excess": "size × prefill past its knee (1e9 params·tokens)"}


def section(inputs) -> page.Section:
    model, post = inputs.model, inputs.thin.posterior
    out = page.Section("coefficients", "Per-stage coefficients and their scaling")
    if not all(c in post for c in scaling.COEFS):
        return out.add(page.text(
            f"The {model.variant} variant has no per-stage coefficients (it fits C1 and C2 per "
            "configuration); fit the hierarchical variant to see them."))
    out.add(page.text(
        "C1 = c1p + (g/E)(c1v + k·c1d) and C2 = c2p + (g/E)(c2v + k·c2d), with E the tokens per "
        "verify cycle at acceptance alpha and draft length k. Prefill (p) and verify (v) costs "
        "belong to a group, draft costs (d) to a drafter in a group. Dots: posterior medians; "
        "thick and thin bars: 50% and 90% intervals."))
    out.add(page.figure(forest_figure(post, scaling.VERIFIER_COEFS), "Posteriors of the "
                        "prefill and verify coefficients per group (log scale).",
                        "verifier coefficients"),
            page.figure(forest_figure(post, scaling.DRAFTER_COEFS), "Posteriors of the draft "
                        "coefficients per drafter in its group (log scale).",
                        "drafter coefficients"))
    panels = [(c, f) for c in scaling.COEFS for f in model.scales.get(c, {})
              if f != scaling.INTERCEPT]
    if panels and any(f"beta_{c}" in post for c, _ in panels):
        out.add(page.text(
            "Scaling: each coefficient is a non-negative linear function of its features "
            "times a log-normal group deviation. Lines and bands: the fitted population "
            "(median, 50%, 90%) against one feature with the others at their mean; points: "
            "each group's or drafter's coefficient moved to the same other features "
            "(partial residuals), so they should scatter around the line."))
        out.add(page.figure(scaling_figure(model, post, panels),
                            "Coefficients against verifier size, drafter size and lengths, "
                            "with the fitted scaling lines.", "coefficient scaling"))
        out.add("<h3>Scaling coefficients</h3>", page.table(beta_table(model, post)))
    else:
        out.add(page.text(f"The {model.variant} variant (or this data set, with one value of "
                          "each feature) has no scaling law to show: features that do not vary "
                          "cannot be told from the intercept."))
    return out


def _interval(ax, y, draws: np.ndarray, scale: float, **style):
    q = np.nanquantile(draws * scale, [0.05, 0.25, 0.5, 0.75, 0.95])
    ax.plot([q[0], q[4]], [y, y], color=style.get("color", "k"), lw=1)
    ax.plot([q[1], q[3]], [y, y], color=style.get("color", "k"), lw=3.5)
    ax.plot(q[2], y, marker=style.get("marker", "o"), color="white",
            mec=style.get("color", "k"), ms=5)


def forest_figure(post: xr.Dataset, coefs: tuple[str, ...]):
    """Intervals of ``coefs`` (all on the same units: groups or drafters), one panel each."""
    da = [stack_draws(post[c]) for c in coefs]
    dim = [d for d in da[0].dims if d != SAMPLE][0]
    labels = [str(v) for v in da[0][dim].values]
    fig, axes = page.subplots(len(coefs), len(coefs), width=2.8 if len(coefs) > 2 else 4.0,
                              height=0.28 * len(labels) + 1.0, sharey=True)
    for ax, coef, draws in zip(axes, coefs, da, strict=True):
        for i, label in enumerate(labels):
            _interval(ax, i, draws.sel({dim: label}).values, 1e3, **page.style(i % 3))
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(f"{coef} ({UNITS[coef]})", fontsize=8)
        ax.set_title(f"{coef}\n{MEANING[coef]}", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", color="0.9")
    axes[0].set_yticks(range(len(labels)), labels, fontsize=7)
    axes[0].invert_yaxis()
    page.key(axes[-1], [("90% interval", {"lw": 1}), ("50% interval", {"lw": 3.5}),
                        ("median", {"marker": "o", "ls": "none", "mfc": "white", "ms": 5})],
             fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig


def scaling_figure(model, post: xr.Dataset, panels):
    fig, axes = page.subplots(len(panels), 4, width=3.3, height=2.8)
    for ax, (coef, feature) in zip(axes, panels, strict=True):
        _scaling_panel(ax, model, post, coef, feature)
    page.key(axes[0], [("scaling line: 90%", {"facecolor": "0.88"}),
                       ("50%", {"facecolor": "0.7"}), ("median", {"lw": 1.2}),
                       ("units (90%)", {"marker": "o", "ls": "none", "mfc": "white",
                                        "ms": 3.5})],
             fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def _features(model, post, coef: str) -> dict[str, float]:
    """Feature -> scale of ``coef``, in the order of the posterior's ``beta`` coords."""
    return {str(f): model.scales[coef][str(f)] for f in post[f"{coef}_feature"].values}


def _scaling_panel(ax, model, post, coef: str, feature: str):
    scales = _features(model, post, coef)
    names = tuple(scales)
    dim = "group" if coef in scaling.VERIFIER_COEFS else "draft"
    units = model.feature_units(dim, post)
    beta = stack_draws(post[f"beta_{coef}"]).transpose(SAMPLE, ...).values  # (sample, feature)
    x_units = scaling.raw_features(units, names) / np.array(list(scales.values()))
    fi = names.index(feature)
    raw = x_units[:, fi] * scales[feature]
    grid = np.linspace(0, raw.max() * 1.1, 60)
    # population with the other features at their mean (standardised value 1)
    others = beta.sum(axis=1) - beta[:, fi]
    line = (others[:, None] + beta[:, [fi]] * grid / scales[feature]) * 1e3
    q = np.quantile(line, [0.05, 0.25, 0.5, 0.75, 0.95], axis=0)
    ax.fill_between(grid, q[0], q[4], color="0.88", lw=0)
    ax.fill_between(grid, q[1], q[3], color="0.7", lw=0)
    ax.plot(grid, q[2], "k-", lw=1.2)
    coef_draws = stack_draws(post[coef]).sel({dim: units.index.to_numpy()})
    values = coef_draws.transpose(SAMPLE, ...).values  # (sample, unit)
    pop_units = beta @ x_units.T
    at_mean = others[:, None] + beta[:, [fi]] * x_units[:, fi][None, :]
    partial = values * at_mean / pop_units * 1e3
    pq = np.quantile(partial, [0.05, 0.5, 0.95], axis=0)
    ax.errorbar(raw, pq[1], yerr=[pq[1] - pq[0], pq[2] - pq[1]], fmt="o", ms=3.5,
                mfc="white", mec="k", ecolor="0.3", lw=0.8)
    ax.set_xlabel(FEATURE_LABELS.get(feature, feature), fontsize=8)
    ax.set_ylabel(f"{coef} ({UNITS[coef]})", fontsize=8)
    ax.set_title(f"{coef} vs {feature}", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=7)


def beta_table(model, post: xr.Dataset) -> pd.DataFrame:
    """Per coefficient and feature: the feature's typical value and its share (beta)."""
    rows = []
    for coef in scaling.COEFS:
        if f"beta_{coef}" not in post:
            continue
        beta = stack_draws(post[f"beta_{coef}"])
        tau = [np.nan]
        if model.fixed_tau(coef) is not None:  # few units: fixed at its prior mean
            tau = [model.fixed_tau(coef)]
        elif f"tau_{coef}" in post:
            tau = stack_draws(post[f"tau_{coef}"]).values
        for feature, scale in _features(model, post, coef).items():
            draws = beta.sel({f"{coef}_feature": feature}).values * 1e3
            q = np.quantile(draws, [0.05, 0.5, 0.95])
            rows.append({"coefficient": coef, "unit": UNITS[coef], "feature": feature,
                         "typical value": scale, "beta median": q[1], "beta 5%": q[0],
                         "beta 95%": q[2], "group deviation tau (log)": np.median(tau)})
    return pd.DataFrame(rows)
