"""GuideLLM reports (files or folders) plus metadata -> one validated tidy sweep table.

Each report contributes one row per benchmark. The report gives the load and the latencies;
:mod:`bayeslat.data.metadata` gives the deployment (verifier, drafter, k, alpha, hardware) and the
token lengths default to what the report measured. Rows are flagged by
:func:`bayeslat.data.saturation.flag_saturated` (kept, excluded from fits by default) and the whole
table is checked by :func:`bayeslat.data.schema.validate` before anything is written.

A tidy table can be given too, so a sweep measured by any tool comes in by the same door: a
``.parquet`` file, or a ``.csv`` whose header names every one of
:data:`bayeslat.data.schema.REQUIRED_COLUMNS` (a GuideLLM CSV starts with three header rows of
other names). It is read by :func:`bayeslat.data.schema.read_table` and taken as it is, its
saturation flags included; metadata applies to GuideLLM reports only.
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
from bayeslat.errors import COMMAND_LINE, InputError

# Benchmark fields copied into the table unchanged.
_COPIED = ("strategy", "rate_target", "rps", "latency_mean", "latency_std", "latency_p50",
           "latency_p95", "latency_p99", "ttft_mean", "itl_mean", "n_successful", "n_errored",
           "n_incomplete", "duration_s")
# The workload's token lengths; measured ones this close (relative) are one workload.
LENGTHS = ("prefill_tokens", "decode_tokens")
LENGTH_TOLERANCE = 0.05


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


def is_table(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a tidy sweep table rather than a GuideLLM report: a ``.parquet``
    file, or a ``.csv`` whose header names the schema's required columns
    (:func:`bayeslat.data.schema.is_csv_table`)."""
    path = Path(path)
    return path.suffix.lower() == ".parquet" or schema.is_csv_table(path)


def find_reports(inputs: Iterable[str | os.PathLike],
                 skipped: list[Path] | None = None) -> list[Path]:
    """The report and table files named by ``inputs``: files as given, folders searched
    recursively.

    A folder contributes every ``.json``, ``.yaml``, ``.yml`` and ``.csv`` file in it, sorted:
    each tidy CSV table (:func:`is_table`), and of the GuideLLM reports one format per run
    (:func:`_one_format_per_run`; the others are appended to ``skipped``). Files named explicitly
    are all read, so the same run given twice is a duplicate error.
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
            tables = {p for p in inside if is_table(p)}
            reports, other_formats = _one_format_per_run([p for p in inside if p not in tables])
            if skipped is not None:
                skipped.extend(other_formats)
            found.extend(p for p in inside if p in tables or p in reports)
        elif path.exists():
            found.append(path)
        else:
            raise InputError("no such file or folder", path)
    if not found:
        raise InputError("give at least one GuideLLM report, tidy table or folder of reports")
    return found


def report_rows(report: Report, meta: metadata.Meta) -> pd.DataFrame:
    """The tidy rows of one report (not yet flagged or validated)."""
    benches = report.benchmarks
    weights = np.array([b.n_successful for b in benches], dtype=float)
    prompt = float(np.average([b.prompt_tokens_mean for b in benches], weights=weights))
    output = float(np.average([b.output_tokens_mean for b in benches], weights=weights))
    deployment = metadata.resolve(meta, prompt, output, str(report.path), report.model)
    rows = []
    for b in benches:
        row = dict(deployment)
        row.update({name: getattr(b, name) for name in _COPIED})
        row["source"] = f"{report.path}#{b.index}"
        for column in LENGTHS:  # measured, not stated: :func:`one_workload_per_length`
            row[f"_measured_{column}"] = column not in meta.values
        rows.append(row)
    return pd.DataFrame(rows)


def one_workload_per_length(table: pd.DataFrame) -> pd.DataFrame:
    """Measured token lengths within :data:`LENGTH_TOLERANCE` of each other made one workload.

    A report's lengths are its measured means, which differ by a token or two between the runs
    of one workload (the baseline against SD, one rate against another): left as they are,
    each run would be a group of its own. Sorted, each measured value joins the workload of the
    one before while within the tolerance of it, and every value of a workload becomes their
    median, rounded to whole tokens. Stated lengths (metadata) and
    tidy-table rows are kept as they are; the ``_measured_*`` marks are dropped.
    """
    table = table.copy()
    for column in LENGTHS:
        mark = f"_measured_{column}"
        if mark not in table:
            continue
        measured = table[mark].fillna(False).to_numpy(dtype=bool)
        values = np.sort(table.loc[measured, column].unique())
        merged, members = {}, []
        for value in [*values, np.inf]:
            if members and value > members[-1] * (1 + LENGTH_TOLERANCE):
                merged.update(dict.fromkeys(members, float(np.round(np.median(members)))))
                members = []
            members.append(value)
        table.loc[measured, column] = table.loc[measured, column].map(merged)
        table = table.drop(columns=mark)
    return table


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


def _check_sources(frames: list[pd.DataFrame], paths: list[Path]) -> None:
    """The same row twice across inputs (a tidy table given twice, or holding rows of a report
    also given): its ``source`` names it."""
    seen: dict[str, Path] = {}
    for frame, path in zip(frames, paths, strict=True):
        for source in frame["source"]:
            if source in seen:
                raise InputError(
                    f"duplicate benchmark {source!r}, already read from {seen[source]}; give "
                    "each table or run once", path, "source")
            seen[source] = path


def ingest(
    inputs: Iterable[str | os.PathLike],
    meta_file: str | os.PathLike | None = None,
    overrides: dict | None = None,
    progress: Callable[[Path], None] | None = None,
    skipped: list[Path] | None = None,
    origins: list[tuple[Path, int]] | None = None,
) -> pd.DataFrame:
    """Read GuideLLM reports and tidy tables into one validated tidy table.

    Parameters
    ----------
    inputs
        Report files, tidy tables (``.parquet``, or ``.csv`` with the schema's columns) and
        folders of reports.
    meta_file
        A TOML metadata file applied to every report (see :mod:`bayeslat.data.metadata`); not to
        tidy tables, which carry their own deployment columns.
    overrides
        Metadata keys given on the command line; they win over every file. Reports only, too.
    progress
        Called with each input file's path after it is read.
    skipped
        If given, receives the files left out because the same run was read in another format.
    origins
        If given, receives ``(file, number of rows)`` per input file, in the table's row order.

    Returns
    -------
    pandas.DataFrame
        The table, validated. Report rows get ``saturated`` and ``saturation_reason`` from
        :func:`~bayeslat.data.saturation.flag_saturated`; table rows keep theirs.
    """
    meta_path = None if meta_file is None else Path(meta_file)
    if meta_path is not None:
        metadata.read_meta_file(meta_path)  # fail early on a bad --meta file
    paths = find_reports(inputs, skipped)
    tables = [is_table(p) for p in paths]
    if all(tables) and (meta_path is not None or overrides):
        field = None if meta_path is not None else next(iter(overrides))
        raise InputError(
            "metadata applies to GuideLLM reports only, and every input is a tidy table, which "
            "carries its own deployment columns; edit the table, or leave out --meta and the "
            "deployment options", meta_path if meta_path is not None else COMMAND_LINE, field)
    reports, frames = [], []
    for path, table_file in zip(paths, tables, strict=True):
        if table_file:
            frame = schema.read_table(path)
        else:
            report = read_report(path)
            reports.append(report)
            rows = report_rows(report, metadata.meta_for(path, meta_path, overrides or {}))
            growing = pd.Series([bool(b.growing) for b in report.benchmarks], index=rows.index)
            frame = flag_saturated(rows, growing=growing)
        frames.append(frame)
        if origins is not None:
            origins.append((path, len(frame)))
        if progress is not None:
            progress(path)
    _check_duplicates(reports)
    _check_sources(frames, paths)
    table = one_workload_per_length(pd.concat(frames, ignore_index=True))
    return schema.validate(table)
