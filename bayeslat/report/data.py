"""Section: the data — which configurations and loads were measured, which points were excluded."""

from __future__ import annotations

import re

import pandas as pd

from bayeslat.data import schema
from bayeslat.report import page

# How a model lists an excluded row: "<configuration> rps=<load> (<reason>)".
EXCLUDED = re.compile(r"^(?P<config>.*) rps=(?P<rps>\S+) \((?P<reason>.*)\)$")


def section(inputs) -> page.Section:
    model = inputs.model
    table = model.table
    out = page.Section("data", "Data: what was measured")
    n_configs = schema.config_labels(table).nunique()
    out.add(page.text(
        f"{len(table) + len(model.excluded)} benchmarks (one constant load of one "
        f"configuration each) of {n_configs} configurations in "
        f"{schema.group_labels(table).nunique()} groups; {len(table)} were fitted and "
        f"{len(model.excluded)} excluded as saturated. A group is a verifier on its hardware "
        "at one prefill length p and decode length g (tokens); a configuration is a group "
        "with a drafter at one acceptance rate alpha and draft length k (k = 0: no SD)."))
    out.add("<h3>Measured configurations and loads, per group</h3>", page.table(groups(table)))
    excluded = excluded_table(model.excluded)
    out.add("<h3>Points excluded as saturated</h3>")
    if excluded.empty:
        out.add(page.text("None: every measured point was below saturation."))
    else:
        reasons = excluded.groupby("reason").size().rename("points").reset_index()
        out.add(page.text(
            "The model holds only below saturation (rps·C2 < 1), so these points are left out "
            "of the fit. Throughput runs measure the ceiling, not a fixed load; preempted "
            "requests and achieved rates below the target mean the server was overloaded."),
            page.table(reasons), page.table(excluded, floatfmt="{:.4g}", scroll=True))
    return out


def groups(table: pd.DataFrame) -> pd.DataFrame:
    """One row per group: drafters, acceptance rates, draft lengths and the loads measured."""
    rows = []
    for label, g in table.groupby(schema.group_labels(table), sort=False):
        sd = g[g["k"] > 0]
        per_config = g.groupby(schema.config_labels(g)).size()
        rows.append({
            "group": label,
            "drafters": ", ".join(sorted(schema.drafter_labels(sd).unique())) or "–",
            "alpha": ", ".join(f"{a:g}" for a in sorted(sd["alpha"].unique())) or "–",
            "k": ", ".join(str(k) for k in sorted(g["k"].unique())),
            "configurations": len(per_config),
            "loads per configuration": f"{per_config.min()}–{per_config.max()}",
            "rps range (req/s)": f"{g['rps'].min():.3g}–{g['rps'].max():.3g}",
            "points fitted": len(g),
        })
    return pd.DataFrame(rows)


def excluded_table(excluded: list[str]) -> pd.DataFrame:
    """The model's list of excluded points as a table (configuration, load, reason)."""
    rows = []
    for line in excluded:
        m = EXCLUDED.match(line)
        rows.append({"configuration": m["config"], "rps (req/s)": float(m["rps"]),
                     "reason": m["reason"]} if m else
                    {"configuration": line, "rps (req/s)": float("nan"), "reason": "–"})
    return pd.DataFrame(rows, columns=["configuration", "rps (req/s)", "reason"])
