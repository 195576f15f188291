"""The HTML page of ``bayeslat validate``: held-out scores, where they miss, and the choice.

Built from the JSON document :func:`bayeslat.validate.write_json` writes (so a page can be
rebuilt from a saved JSON without refitting), with the report's page machinery
(:mod:`bayeslat.report.page`): one file, figures embedded, nothing fetched.

Sections: a summary per variant (one row per split, the splits whose 90% coverage lies outside
:data:`bayeslat.validate.COVERAGE_90` or whose refits did not converge named at the top), the
PSIS-LOO comparison and the choice it implies, the held-out points against their predictive
intervals, the coverage by load rank (1: each configuration's highest measured rate, where
the paper's curve is known to miss), every fold with its refit's convergence, and with the
``sbc`` check the simulation-based calibration (:mod:`bayeslat.calibration`).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from bayeslat.models.sampling import MAX_RHAT, MIN_ESS
from bayeslat.report import page
from bayeslat.validate import COVERAGE_90, RPS_STAR_TOLERANCE
from bayeslat.version import __version__

SUMMARY_COLUMNS = {
    "split": "split", "folds": "folds", "points": "points", "mape": "MAPE",
    "mdape": "median APE", "r2": "R²", "inside_50": "in 50%", "inside_90": "in 90%",
    "point_mape": "curve_fit MAPE", "coef_mape": "6 coef. MAPE", "k_agree": "k* same",
    "k_regret_mean": "k* mean regret", "k_regret_max": "k* max regret",
    "rps_star_within": "RPS* within 10%", "rps_star_pairs": "RPS* pairs"}
FOLD_COLUMNS = {"split": "split", "held_out": "held out", "points": "points", "mape": "MAPE",
                "mdape": "median APE", "inside_50": "in 50%", "inside_90": "in 90%",
                "k_agree": "k* same", "k_regret_mean": "k* mean regret",
                "rps_star_within": "RPS* within 10%", "converged": "converged",
                "max_rhat": "max R-hat", "min_ess_bulk": "min bulk ESS",
                "min_ess_tail": "min tail ESS", "divergences": "divergences",
                "seconds": "fit (s)"}
# Columns shown as percentages.
PERCENT = ("mape", "mdape", "point_mape", "coef_mape", "k_regret_mean", "k_regret_max")
# Load ranks shown one by one in the coverage figure; deeper ranks are pooled.
RANKS = 6


def build(doc: dict, source: str) -> str:
    """The page of a validation document (``doc``: the JSON of
    :func:`bayeslat.validate.write_json`) of the sweep ``source`` (a path, for the title)."""
    variants = doc["variants"]
    sections = [_summary(variants)]
    if doc.get("comparison"):
        sections.append(_comparison(doc))
    sections += [_points(variants), _coverage(variants), _folds(variants)]
    if any(v.get("sbc") for v in variants):
        sections.append(_calibration(variants))
    meta = [f"Sweep: {source}; variants: {', '.join(v['variant'] for v in variants)}. Made by "
            f"bayeslat {__version__}. Every figure and held-out point is in the JSON beside "
            "this page.",
            "Each fold refits the variant without the fold's rows and predicts them: a "
            "calibrated model puts about 50% and 90% of the held-out points inside their 50% "
            "and 90% predictive intervals."]
    return page.render(f"bayeslat validate: {source}", meta, sections, _alerts(variants))


def _frame(variant: dict, name: str) -> pd.DataFrame:
    return pd.DataFrame(variant.get(name) or [])


def _shown(df: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """``df``'s ``columns`` (those it has) renamed for a table: percentages with one decimal,
    convergence as yes/no."""
    out = df[[c for c in columns if c in df]].copy()
    for col in (c for c in PERCENT if c in out):
        out[col] = out[col].map(lambda v: "–" if pd.isna(v) else f"{v:.1%}")
    if "converged" in out:
        out["converged"] = out["converged"].map({True: "yes", False: "no"})
    return out.rename(columns=columns)


def _off(row) -> bool:
    lo, hi = COVERAGE_90
    return not lo <= row["inside_90"] <= hi


def _alerts(variants: list[dict]) -> list[str]:
    """The splits whose held-out 90% coverage is off, and the refits that did not converge."""
    out = []
    for v in variants:
        splits = _frame(v, "splits")
        off = [f"{r.split} ({r.inside_90:.2f})" for r in splits.itertuples() if _off(r._asdict())]
        if off:
            out.append(f"{v['variant']}: held-out 90% coverage outside {COVERAGE_90[0]}–"
                       f"{COVERAGE_90[1]} for {', '.join(off)}: its bands are not calibrated "
                       "there; read the figures below before trusting them.")
        folds = _frame(v, "folds")
        fits = len(folds) + (1 if v.get("loo") else 0)
        bad = int((~folds["converged"].astype(bool)).sum()) if len(folds) else 0
        bad += 0 if not v.get("loo") or v["loo"]["converged"] else 1
        if bad:
            out.append(f"{v['variant']}: {bad} of {fits} fits did not converge; their scores "
                       "may reflect the sampler, not the model (refit with more draws).")
        failed = [r["quantity"] for r in (v.get("sbc") or {}).get("uniformity", [])
                  if not r["passes"]]
        if failed:
            out.append(f"{v['variant']}: simulation-based calibration fails for "
                       f"{', '.join(failed)}: the fits do not recover what generated their data "
                       "there; read the calibration section.")
    return out


def _summary(variants: list[dict]) -> page.Section:
    section = page.Section("summary", "Held-out scores per split")
    section.add(page.text(
        "MAPE and R² of the predictive median; in 50%, in 90%: the share of held-out points "
        "inside their predictive intervals; curve_fit and 6 coef.: the paper's point methods on "
        "the same training rows (– where they cannot answer: configurations or groups never "
        "measured); k*: the held-out setups' risk-aware k* against the whole sweep's fit (the "
        "share of (setup, alpha, load) cells with the same k*, and the regret of the fold's k*, "
        "its expected latency by the whole sweep's fit over that of the whole sweep's k*, "
        "below 0 where the fold's k is faster on average at more risk); RPS*: the share of "
        f"break-even loads within {RPS_STAR_TOLERANCE:.0%} of the whole sweep's."))
    return _tables(section, variants, "splits", SUMMARY_COLUMNS)


def _tables(section: page.Section, variants: list[dict], name: str,
            columns: dict) -> page.Section:
    """A table per variant of its records ``name`` (``splits``, ``folds``), titled by it."""
    for v in variants:
        frame = _frame(v, name)
        if not frame.empty:
            section.add(f"<h3>{html.escape(v['variant'])}</h3>",
                        page.table(_shown(frame, columns)))
    return section


def _comparison(doc: dict) -> page.Section:
    section = page.Section("loo", "Variants compared by PSIS-LOO")
    table = pd.DataFrame(doc["comparison"]).rename(columns={
        "elpd_loo": "elpd", "elpd_diff": "Δ elpd", "dse": "se of Δ",
        "pareto_k_over_07": "Pareto k > 0.7", "pareto_k_over_1": "Pareto k > 1"})
    return section.add(
        page.text("The expected log predictive density of each measured point as if it had "
                  "been left out (higher is better), from one fit of the whole sweep; Pareto "
                  "k > 0.7 counts the points where that estimate is unreliable."),
        page.table(table, floatfmt="{:.1f}"), page.text(doc["choice"], "note"))


def _points(variants: list[dict]) -> page.Section:
    section = page.Section("points", "Held-out points against their predictions")
    for v in variants:
        points = _frame(v, "points")
        if points.empty:
            continue
        splits = list(pd.unique(points["split"]))
        fig, axes = page.subplots(len(splits), 3, width=3.8, height=3.4)
        for ax, name in zip(axes, splits, strict=True):
            one = points[points["split"] == name]
            ok = np.isfinite(one["median"].to_numpy(float))
            one = one[ok]
            for inside, marker, shade in ((True, "o", "0.6"), (False, "x", "0.0")):
                mine = one[one["in90"].astype(bool) == inside]
                med = mine["median"].to_numpy(float)  # arrays: matplotlib floats a 1-row Series
                ax.errorbar(med, mine["latency_mean"].to_numpy(float),
                            xerr=[med - mine["lo90"].to_numpy(float),
                                  mine["hi90"].to_numpy(float) - med],
                            fmt=marker, ms=3, color=shade, elinewidth=0.6, lw=0,
                            label="inside 90%" if inside else "outside 90%")
            lo = np.nanmin(one[["lo90", "latency_mean"]].to_numpy()) if len(one) else 0.1
            hi = np.nanmax(one[["hi90", "latency_mean"]].to_numpy()) if len(one) else 1.0
            ax.plot([lo, hi], [lo, hi], color="k", lw=0.8, ls="--", label="measured = predicted")
            ax.set(xscale="log", yscale="log", title=name, xlabel="predicted median (s)",
                   ylabel="measured mean latency (s)")
            ax.legend(fontsize=7)
        section.add(page.figure(
            fig, f"{v['variant']}: each held-out point's measured latency against its "
            "predictive median, with the 90% interval (horizontal bars); crosses lie outside "
            "it. Points past the model's capacity (infinite median) are left out.",
            alt=f"held-out points {v['variant']}"))
    return section


def _coverage(variants: list[dict]) -> page.Section:
    section = page.Section("coverage", "Where the bands miss: coverage by load")
    for v in variants:
        points = _frame(v, "points")
        if points.empty or "load_rank" not in points:
            continue
        rank = points["load_rank"].clip(upper=RANKS)
        table = points.assign(rank=rank).groupby(["split", "rank"])["in90"].mean().unstack(
            "split")
        fig, ax = page.subplots(1, 1, width=5.5, height=3.6)
        ax = ax[0]
        for i, name in enumerate(table.columns):
            series = table[name].dropna()
            ax.plot(series.index, series.to_numpy(), label=name, **page.style(i))
        ax.axhspan(*COVERAGE_90, color="0.85", zorder=0, label="calibrated (0.85–0.95)")
        ax.set(xlabel=f"load rank within its configuration (1: highest; {RANKS}: "
               f"{RANKS} and lower)", ylabel="held-out points inside 90%", ylim=(0, 1.02),
               xticks=range(1, RANKS + 1))
        ax.legend(fontsize=7)
        section.add(page.figure(
            fig, f"{v['variant']}: the share of held-out points inside their 90% interval by "
            "how high the load is within its configuration; the paper's curve bends too "
            "little near capacity, where rank 1 lies.", alt=f"coverage by load {v['variant']}"))
    return section


def _calibration(variants: list[dict]) -> page.Section:
    """Simulation-based calibration: the ECDF difference of each quantity's ranks with its
    simultaneous band, and the uniformity table."""
    from bayeslat import calibration

    section = page.Section("sbc", "Simulation-based calibration")
    section.add(page.text(
        "Parameters drawn from the variant's priors, latencies from its likelihood, each data "
        "set refitted: where the fit computes the model's posterior, the rank of the true value "
        "among the posterior draws is uniform for every quantity, and the ECDF of the ranks "
        "stays inside its simultaneous band. A difference that rises above 0 and then falls "
        "below it (ranks piled at both ends) means posteriors too narrow, the reverse too "
        "wide, one sign throughout a bias. This checks the "
        "model's code and the sampler on a design of the model sampler's, not the fit to this "
        "sweep."))
    for v in (v for v in variants if v.get("sbc")):
        sbc = v["sbc"]
        ranks = pd.DataFrame(sbc["ranks"])
        fits = pd.DataFrame(sbc["convergence"])
        check = pd.DataFrame(sbc["uniformity"]).assign(
            passes=lambda d: d["passes"].map({True: "yes", False: "no"}))
        section.add(
            f"<h3>{html.escape(v['variant'])}</h3>",
            page.text(f"{sbc['fits']} refits; design: {sbc['design']} (acceptance "
                      f"{sbc['acceptance']:.2f}); refits with divergent transitions "
                      f"{(fits['divergences'] > 0).mean():.0%}, with max R-hat above 1.01 "
                      f"{(fits['max_rhat'] > 1.01).mean():.0%}, median sampling "
                      f"{fits['seconds'].median():.1f} s after one compile of "
                      f"{sbc['compile_s']:.0f} s."),
            page.figure(calibration.figure(
                ranks, sbc["rank_draws"], f"{v['variant']}: {sbc['fits']} refits, ranks among "
                f"{sbc['rank_draws']} draws", sbc["level"]),
                f"{v['variant']}: ECDF of each quantity's ranks minus the uniform's, with the "
                f"simultaneous {1 - sbc['level']:.0%} band (grey); red where it leaves the band.",
                alt=f"sbc {v['variant']}"),
            page.table(check.rename(columns={"mean_rank": "mean rank",
                                             "max_ecdf_diff": "max |ECDF − z|",
                                             "passes": "inside band"})))
    return section


def _folds(variants: list[dict]) -> page.Section:
    section = page.Section("folds", "Every fold")
    section.add(page.text(f"One refit per fold (convergence bar: R-hat ≤ {MAX_RHAT}, bulk "
                          f"and tail ESS ≥ {MIN_ESS}, no divergences)."))
    return _tables(section, variants, "folds", FOLD_COLUMNS)
