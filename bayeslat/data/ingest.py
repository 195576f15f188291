"""GuideLLM reports (files or folders) plus metadata -> one validated tidy sweep table.

Each report contributes one row per benchmark. The report gives the load and the latencies;
:mod:`bayeslat.data.metadata` gives the deployment (verifier, drafter, k, alpha, hardware) and the
token lengths default to what the report measured. Rows are flagged by
:func:`bayeslat.data.saturation.flag_saturated` (kept, excluded from fits by default) and the whole
table is checked by :func:`bayeslat.data.schema.validate` before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat.data import metadata, schema
from bayeslat.data.guidellm import FORMATS, Report, read_report
from bayeslat.data.saturation import flag_saturated
from bayeslat.errors import InputError

# Benchmark fields copied into the table unchanged.
_COPIED = ("strategy", "rate_target", "rps", "latency_mean", "latency_std", "latency_p50",
           "latency_p95", "latency_p99", "ttft_mean", "itl_mean", "n_successful", "n_errored",
           "n_incomplete", "duration_s")


def _one_format_per_run(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """Keep one file of each run that GuideLLM saved in several formats (``sweep.json``,
    ``sweep.yaml``, ``sweep.csv``: same folder, same stem), preferring JSON, then YAML, then CSV
    (the CSV carries the fewest fields). Returns the kept and the skipped files."""
    rank = {suffix: i for i, suffix in enumerate(FORMATS)}
    best: dict[tuple[Path, str], Path] = {}
    for p in paths:
        key = (p.parent, p.stem)
        if key not in best or rank[p.suffix.lower()] < rank[best[key].suffix.lower()]:
            best[key] = p
    kept = set(best.values())
    return [p for p in paths if p in kept], [p for p in paths if p not in kept]


def find_reports(inputs: Iterable[str | os.PathLike],
                 skipped: list[Path] | None = None) -> list[Path]:
    """The report files named by ``inputs``: files as given, folders searched recursively.

    A folder contributes every ``.json``, ``.yaml``, ``.yml`` and ``.csv`` file in it, sorted,
    one format per run (:func:`_one_format_per_run`; the others are appended to ``skipped``).
    Files named explicitly are all read, so the same run given twice is a duplicate error.
    Raises :class:`~bayeslat.errors.InputError` for a missing path or a folder with no report.
    """
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*")
                            if p.is_file() and p.suffix.lower() in FORMATS
                            and not p.name.startswith("."))
            if not inside:
                raise InputError(f"no GuideLLM reports ({', '.join(FORMATS)}) in this folder",
                                 path)
            inside, other_formats = _one_format_per_run(inside)
            if skipped is not None:
                skipped.extend(other_formats)
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise InputError("no such file or folder", path)
    if not found:
        raise InputError("give at least one GuideLLM report or folder of reports")
    return found


def report_rows(report: Report, meta: metadata.Meta) -> pd.DataFrame:
    """The tidy rows of one report (not yet flagged or validated)."""
    benches = report.benchmarks
    weights = np.array([b.n_successful for b in benches], dtype=float)
    prompt = float(np.average([b.prompt_tokens_mean for b in benches], weights=weights))
    output = float(np.average([b.output_tokens_mean for b in benches], weights=weights))
    deployment = metadata.resolve(meta, prompt, output, str(report.path))
    rows = []
    for b in benches:
        row = dict(deployment)
        row.update({name: getattr(b, name) for name in _COPIED})
        row["source"] = f"{report.path}#{b.index}"
        rows.append(row)
    return pd.DataFrame(rows)


def _check_duplicates(reports: list[Report]) -> None:
    """The same benchmark twice (same file given twice, or one run saved as JSON and CSV)."""
    seen: dict[str, str] = {}
    for report in reports:
        for b in report.benchmarks:
            here = f"{report.path}#{b.index}"
            if b.benchmark_id in seen:
                raise InputError(
                    f"duplicate benchmark {b.benchmark_id}, already read from "
                    f"{seen[b.benchmark_id]}; give each run once (GuideLLM's JSON, YAML and "
                    "CSV of one run hold the same benchmarks)", report.path, b.id_field)
            seen[b.benchmark_id] = here


def ingest(
    inputs: Iterable[str | os.PathLike],
    meta_file: str | os.PathLike | None = None,
    overrides: dict | None = None,
    progress: Callable[[Path], None] | None = None,
    skipped: list[Path] | None = None,
) -> pd.DataFrame:
    """Read GuideLLM reports into one validated tidy table.

    Parameters
    ----------
    inputs
        Report files and folders of reports.
    meta_file
        A TOML metadata file applied to every report (see :mod:`bayeslat.data.metadata`).
    overrides
        Metadata keys given on the command line; they win over every file.
    progress
        Called with each report's path after it is read.
    skipped
        If given, receives the files left out because the same run was read in another format.

    Returns
    -------
    pandas.DataFrame
        The table, with ``saturated`` and ``saturation_reason`` set, validated.
    """
    meta_path = None if meta_file is None else Path(meta_file)
    if meta_path is not None:
        metadata.read_meta_file(meta_path)  # fail early on a bad --meta file
    paths = find_reports(inputs, skipped)
    reports, frames, growing = [], [], []
    for path in paths:
        report = read_report(path)
        reports.append(report)
        frames.append(report_rows(report, metadata.meta_for(path, meta_path, overrides or {})))
        growing.extend(bool(b.growing) for b in report.benchmarks)
        if progress is not None:
            progress(path)
    _check_duplicates(reports)
    table = pd.concat(frames, ignore_index=True)
    table = flag_saturated(table, growing=pd.Series(growing, index=table.index))
    return schema.validate(table)
