"""Simulated sweeps written as GuideLLM reports, so that the ingest path can read them back.

One JSON report (schema 2, GuideLLM 0.7-0.8 layout) per configuration, with one benchmark per
table row, plus a TOML file beside it with what a report does not say (the deployment), in the
keys of :mod:`bayeslat.data.metadata`. Only the key paths that DESIGN.md §5 documents and
:mod:`bayeslat.data.guidellm` reads are written:

- ``metadata.version`` = 2, ``config``, ``benchmarks``, ``conclusions`` at the top;
- per benchmark ``config.id_``, ``config.strategy.{type_,rate}``, ``duration``;
- ``metrics.requests_per_second.successful.mean`` (req/s);
- ``metrics.request_latency.successful.{mean,median,std_dev,count,percentiles.{p50,p95,p99}}``
  (seconds);
- ``metrics.{time_to_first_token_ms,inter_token_latency_ms}.successful.mean`` (milliseconds);
- ``metrics.request_totals.{successful,errored,incomplete}``;
- ``metrics.{prompt,output}_token_count.successful.mean``;
- ``requests.successful[j].{request_start_time,request_latency}`` (seconds).

What the reports cannot carry: preemption (GuideLLM does not see it), so rows that the simulator
flagged only for preemption come back unflagged when the reports are ingested.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from bayeslat.data.schema import RATED, config_labels
from bayeslat.files import atomic_output
from bayeslat.simulate.protocol import Requests

_META_KEYS = ("verifier", "verifier_params_b", "drafter", "drafter_params_b", "method", "k",
              "alpha", "alpha_source", "hardware", "moe_experts_active", "moe_experts_total",
              "prefill_tokens", "decode_tokens")


def write_reports(table: pd.DataFrame, requests: dict[str, Requests], folder: str | os.PathLike,
                  overwrite: bool = False) -> list[Path]:
    """Write one report and one metadata file per configuration of ``table`` into ``folder``.

    Parameters
    ----------
    table
        A simulated sweep table.
    requests
        Measured requests per benchmark, keyed by the table's ``source`` (from
        :func:`bayeslat.simulate.protocol.sweep`); a benchmark without them gets none.
    overwrite
        Replace existing files; otherwise an existing file is an error.

    Returns
    -------
    The report paths, in the table's order.
    """
    folder = Path(folder)
    written = []
    for label, rows in table.groupby(config_labels(table), sort=False):
        stem = re.sub(r"[^A-Za-z0-9.+-]+", "_", label)
        report = folder / f"{stem}.json"
        with atomic_output(report, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(report_document(rows, requests)))
        with atomic_output(report.with_suffix(".toml"), overwrite=overwrite) as tmp:
            tmp.write_text(metadata_toml(rows.iloc[0]))
        written.append(report)
    return written


def report_document(rows: pd.DataFrame, requests: dict[str, Requests]) -> dict:
    """The schema-2 report of one configuration's benchmarks."""
    return {
        "metadata": {"version": 2, "guidellm_version": "bayeslat-simulate"},
        "config": {"profile": {"kind": "sweep"}, "backend": "bayeslat engine simulator"},
        "benchmarks": [_benchmark(row, requests.get(row["source"]))
                       for _, row in rows.iterrows()],
        "conclusions": {},
    }


def _benchmark(row: pd.Series, reqs: Requests | None) -> dict:
    rated = row["strategy"] in RATED

    def mean(value: float) -> dict:
        return {"successful": {"mean": float(value)}}

    return {
        "config": {"id_": row["source"],
                   "strategy": {"type_": row["strategy"],
                                "rate": float(row["rate_target"]) if rated else None}},
        "duration": float(row["duration_s"]),
        "metrics": {
            "requests_per_second": mean(row["rps"]),
            "request_latency": {"successful": {
                "mean": float(row["latency_mean"]), "median": float(row["latency_p50"]),
                "std_dev": float(row["latency_std"]), "count": int(row["n_successful"]),
                "percentiles": {"p50": float(row["latency_p50"]),
                                "p95": float(row["latency_p95"]),
                                "p99": float(row["latency_p99"])}}},
            "time_to_first_token_ms": mean(row["ttft_mean"] * 1000.0),
            "inter_token_latency_ms": mean(row["itl_mean"] * 1000.0),
            "request_totals": {"successful": int(row["n_successful"]),
                               "errored": int(row["n_errored"]),
                               "incomplete": int(row["n_incomplete"])},
            "prompt_token_count": mean(row["prefill_tokens"]),
            "output_token_count": mean(row["decode_tokens"]),
        },
        "requests": {"successful": [] if reqs is None else [
            {"request_start_time": float(t), "request_latency": float(lat)}
            for t, lat in zip(reqs.start, reqs.latency, strict=True)]},
    }


def metadata_toml(row: pd.Series) -> str:
    """The deployment of one configuration in :mod:`bayeslat.data.metadata`'s TOML keys.

    An acceptance the simulator measured (decaying by position) is written as ``assumed``: the
    metadata keeps ``measured`` for rates read from vLLM's metrics files.
    """
    values = {key: row[key] for key in _META_KEYS}
    if row["k"] == 0:
        for key in ("drafter", "drafter_params_b", "method", "alpha", "alpha_source"):
            del values[key]
    elif values["alpha_source"] == "measured":
        values["alpha_source"] = "assumed"
    lines = ["# Written by 'bayeslat simulate': the deployment behind the report beside it."]
    for key, value in values.items():
        if key in ("k", "moe_experts_active", "moe_experts_total"):
            text = str(int(value))
        elif isinstance(value, str):
            text = json.dumps(value)  # a JSON string is a valid TOML basic string
        else:
            text = repr(float(value))
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
