"""Section: the answer first. Per setup, at the reader's loads: SD on or off, which k, how sure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayeslat import adequacy, decide
from bayeslat.data import schema
from bayeslat.report import page
from bayeslat.report.inputs import setup_rows


def section(inputs) -> page.Section:
    out = page.Section("answer", "The answer: turn SD on or off, with which k, how sure")
    answers = inputs.answers
    where = ("at the loads and acceptance rates asked for" if inputs.asked else
             "at each setup's lowest, middle and highest measured load and its middle "
             "measured acceptance rate (ask for yours with --rps and --alpha)")
    out.add(page.text(
        f"For each setup (a verifier, its lengths and hardware, and a drafter), {where}: the "
        "risk-aware choice (the draft length, no SD included, with the lowest latency at "
        f"{1 - inputs.epsilon:.0%} probability: its true latency's posterior "
        f"{1 - inputs.epsilon:.0%} quantile), its "
        "speedup (median and 90% interval, the scatter of the true latency included), the "
        "probability that it is slower than no SD, the load RPS* at which it stops paying and "
        "the alert line (SD hurts below it with 5% probability only). The last column says "
        "how well the model fits the setup's top measured loads, where these answers are "
        "decided: an answer at loads where it fits POORLY is a guess however narrow its band. "
        + _load_meaning(decide.arrivals(inputs.model.table))
        + "The evidence follows: first whether the model fits its data."))
    out.add(inputs.skipped_note())
    if answers is None or not len(answers):
        return out
    table = answer_table(answers)
    if inputs.check is not None:
        fit = near_capacity(inputs)
        table.insert(len(table.columns) - 1, "fit at the top loads",
                     [fit.get(s, "") for s in table["setup"]])
    out.add(page.table(table, cls="answer"))
    return out


def _load_meaning(arrivals: str) -> str:
    """What the loads mean (:func:`bayeslat.decide.arrivals_note`), as a sentence."""
    note = decide.arrivals_note(arrivals)
    return f"{note[0].upper()}{note[1:]}. " if note else ""


def near_capacity(inputs) -> dict[str, str]:
    """Per setup, how well the model fits its configurations' top measured loads, where the
    answer matters most (:func:`bayeslat.adequacy.check`): the share of those points inside
    their 90% interval (POOR below the check's bar for a configuration's points) and the model
    capacity furthest from the measured ceiling (POOR beyond the check's tolerance)."""
    configs = inputs.check.configs.set_index("config")
    out = {}
    for _, row in decide.setups(inputs.model.table).iterrows():
        mine = configs.reindex(schema.config_labels(setup_rows(inputs.model.table, row))
                               .unique()).dropna(subset=["points"])
        if not len(mine):
            continue
        top = float(np.average(mine["top_inside_90"],
                               weights=np.minimum(mine["points"], adequacy.TOP_LOADS)))
        ratio = mine["capacity_ratio"].dropna()
        wall = ratio.loc[(ratio - 1).abs().idxmax()] if len(ratio) else np.nan
        good = (top >= adequacy.CONFIG_COVERAGE_MIN
                and not abs(wall - 1) > adequacy.CAPACITY_TOLERANCE)
        out[row["setup"]] = (f"{'good' if good else 'POOR'}: {top:.0%} of top-load points "
                             "inside 90%" + ("" if np.isnan(wall) else
                                             f"; capacity {wall:.2g}× the ceiling"))
    return out


def answer_table(answers: pd.DataFrame) -> pd.DataFrame:
    """:func:`bayeslat.decide.verdicts` as the page shows it: bands in one cell, the setup
    named on its first row only."""
    first = ~answers["setup"].duplicated()

    def band(mid, lo, hi):
        return [("–" if pd.isna(m) else f"{m:.3g} [{a:.3g}, {b:.3g}]")
                for m, a, b in zip(answers[mid], answers[lo], answers[hi], strict=True)]

    on = answers["k"].fillna(0).to_numpy() > 0
    star = band("rps_star", "rps_star_q05", "rps_star_q95")
    star = [s if not o else "none in most draws" if not decide.shows_rps_star(p) else
            f"{s}, beyond the ceiling" if beyond else s
            for s, o, p, beyond in zip(star, on, answers["p_break_even"],
                                       answers["rps_star_beyond_capacity"], strict=True)]
    alert = [("–" if not o else "none" if not np.isfinite(a) else
              f"{a:.3g}, beyond the ceiling" if beyond else f"{a:.3g}")
             for a, o, beyond in zip(answers["rps_alert"], on, answers["alert_beyond_capacity"],
                                     strict=True)]
    return pd.DataFrame({
        "setup": answers["setup"].where(first, ""),
        "alpha": answers["alpha"].map("{:g}".format),
        "load (req/s)": [f"{r:.3g}" + (" (extrapolated)" if x else "")
                         for r, x in zip(answers["rps"], answers["extrapolated"], strict=True)],
        "answer": answers["answer"],
        "speedup [90%]": [s if o else "–" for s, o in zip(
            band("speedup", "speedup_q05", "speedup_q95"), on, strict=True)],
        "P(SD hurts)": [f"{p:.2f}" if o else "–"
                        for p, o in zip(answers["p_sd_hurts"], on, strict=True)],
        "RPS* (req/s) [90%]": [s if o else "–" for s, o in zip(star, on, strict=True)],
        "alert line (req/s)": alert,
        "why": answers["reason"],
    })
