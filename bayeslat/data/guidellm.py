"""Our own reader of GuideLLM reports: JSON, YAML and CSV, report schemas 1 and 2.

GuideLLM 0.8.1's loader refuses the schema-1 files that GuideLLM 0.5.x wrote (the paper's sweeps),
so bayeslat reads both schemas itself, as GuideLLM writes them:

- schema 1 (GuideLLM 0.5.0–0.6.x): top level ``metadata`` (``version: 1``), ``args``,
  ``benchmarks``;
- schema 2 (GuideLLM 0.7.0–0.8.x): top level ``metadata`` (``version: 2``), ``config``,
  ``benchmarks``, ``conclusions``.

The per-benchmark paths read here are the same in both: ``config.strategy.{type_,rate}``,
``config.id_``, ``duration``, ``metrics.requests_per_second.successful.mean``,
``metrics.request_latency.successful.{mean,median,std_dev,percentiles.p95,percentiles.p99}`` (s),
``metrics.{time_to_first_token_ms,inter_token_latency_ms}.successful.mean`` (ms),
``metrics.request_totals.{successful,errored,incomplete}``,
``metrics.{prompt,output}_token_count.successful.mean`` and the per-request records
``requests.successful[j].{request_start_time,request_latency}`` (GuideLLM may keep only a sample of
them; they feed the latency-growth check only).

The CSV output has three header rows (group, name, statistic) and one row per benchmark; its
``Percentiles`` cells list ``[min, p001, p01, p05, p10, p25, p75, p90, p95, p99, max]``. The target
rate comes from the run's profile (``Run Info / Profile``), the schema version from ``Runtime Info /
Metadata``. CSV files carry no per-request records.

Every problem is an :class:`~bayeslat.errors.InputError` naming the file and the key path (or CSV
column) at fault.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayeslat.data.saturation import latency_grows
from bayeslat.data.schema import RATED, STRATEGIES
from bayeslat.errors import InputError

SCHEMAS = {1: "GuideLLM 0.5.x–0.6.x", 2: "GuideLLM 0.7.x–0.8.x"}
FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".csv": "csv"}
# Positions in a CSV "Percentiles" cell.
CSV_PERCENTILES = ("min", "p001", "p01", "p05", "p10", "p25", "p75", "p90", "p95", "p99", "max")
_SUPPORTED = "bayeslat reads schema 1 (GuideLLM 0.5.x–0.6.x) and 2 (0.7.x–0.8.x)"


@dataclass(frozen=True)
class Benchmark:
    """The numbers of one benchmark, in seconds and requests per second.

    ``rate_target`` is NaN where the strategy has no target rate (synchronous, throughput,
    concurrent). ``growing`` is the latency-growth verdict from the per-request records, or None
    when the report has too few of them (CSV has none).
    """

    index: int
    benchmark_id: str
    strategy: str
    rate_target: float
    rps: float
    latency_mean: float
    latency_std: float
    latency_p50: float
    latency_p95: float
    latency_p99: float
    ttft_mean: float
    itl_mean: float
    n_successful: int
    n_errored: int
    n_incomplete: int
    duration_s: float
    prompt_tokens_mean: float
    output_tokens_mean: float
    growing: bool | None
    id_field: str  # where the benchmark's id sits, for duplicate messages


@dataclass(frozen=True)
class Report:
    """One GuideLLM report file."""

    path: Path
    format: str
    schema: int
    guidellm_version: str
    benchmarks: tuple[Benchmark, ...]
    # the model the run's backend served (GuideLLM's --model or the server's only one), where
    # the report names one: JSON and YAML reports; CSV does not carry it
    model: str | None = None


def read_report(path: str | os.PathLike) -> Report:
    """Read a GuideLLM report (``.json``, ``.yaml``/``.yml`` or ``.csv``, schema 1 or 2)."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"unknown report type {path.suffix!r}; give a GuideLLM report "
                         "(.json, .yaml, .yml or .csv)", path)
    text = _read_text(path)
    if fmt == "csv":
        return _read_csv(path, text)
    doc = _parse_json(path, text) if fmt == "json" else _parse_yaml(path, text)
    return _read_document(path, fmt, doc)


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise InputError("no such file", path)
    raw = path.read_bytes()
    if not raw.strip():
        raise InputError("the file is empty; GuideLLM writes a report only when a run finishes",
                         path)
    if b"\x00" in raw:
        raise InputError("binary data, not a GuideLLM report (.json, .yaml or .csv text)", path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}); give a GuideLLM report",
                         path) from None


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg}); "
                         "is the file truncated?", path) from None


def _parse_yaml(path: Path, text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is ~10x faster
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}; is the file truncated?", path) from None


class _Node:
    """A value inside a parsed report that knows its key path, for error messages."""

    def __init__(self, value: Any, where: str, path: Path):
        self.value, self.where, self.path = value, where, path

    def fail(self, message: str):
        raise InputError(message, self.path, self.where)

    def has(self, key: str) -> bool:
        return isinstance(self.value, dict) and key in self.value

    def __getitem__(self, key: str | int) -> _Node:
        where = f"{self.where}[{key}]" if isinstance(key, int) else (
            f"{self.where}.{key}" if self.where else key)
        if isinstance(key, int):
            if not isinstance(self.value, list):
                self.fail("must be a list")
            if key >= len(self.value):
                self.fail(f"has no entry {key}")
        elif not isinstance(self.value, dict):
            self.fail("must be a mapping of keys")
        elif key not in self.value:
            raise InputError("missing; not a complete GuideLLM benchmark report", self.path, where)
        return _Node(self.value[key], where, self.path)

    def items(self) -> list[_Node]:
        if not isinstance(self.value, list):
            self.fail("must be a list")
        return [self[i] for i in range(len(self.value))]

    def number(self, positive: bool = False) -> float:
        """The value as a finite, non-negative float (positive if asked)."""
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            self.fail(f"must be a finite number, got {value}")
        if positive and value <= 0:
            self.fail(f"must be positive, got {value:g}")
        if value < 0:
            self.fail(f"must not be negative, got {value:g}")
        return value

    def count(self) -> int:
        value = self.number()
        if value != int(value):
            self.fail(f"must be a whole number of requests, got {value:g}")
        return int(value)


def _strategy(node: _Node, name: str) -> str:
    if name not in STRATEGIES:
        node.fail(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    return name


def _schema_version(version: _Node) -> int:
    if isinstance(version.value, bool) or version.value not in SCHEMAS:
        version.fail(f"schema version {version.value!r} is not supported; {_SUPPORTED}")
    return int(version.value)


def _read_document(path: Path, fmt: str, doc: Any) -> Report:
    root = _Node(doc, "", path)
    if not isinstance(doc, dict):
        raise InputError("not a GuideLLM report: the top level must be a mapping with "
                         "'metadata' and 'benchmarks'", path, "metadata")
    if not root.has("metadata"):
        raise InputError(f"missing; GuideLLM 0.5.0 and later write it ({_SUPPORTED})", path,
                         "metadata.version")
    schema = _schema_version(root["metadata"]["version"])
    version = str(doc["metadata"].get("guidellm_version", "")) if isinstance(
        doc["metadata"], dict) else ""
    entries = root["benchmarks"].items()
    if not entries:
        root["benchmarks"].fail("no benchmarks in the report; the run recorded nothing")
    benchmarks = tuple(_document_benchmark(b, i) for i, b in enumerate(entries))
    return Report(path, fmt, schema, version, benchmarks, _served_model(doc))


def _served_model(doc: dict) -> str | None:
    """The one model name the report's benchmarks were served by (``config.backend.model``,
    else the run's ``args.model``); None where it names none or several."""
    names = set()
    for bench in doc.get("benchmarks") or []:
        config = bench.get("config") if isinstance(bench, dict) else None
        backend = config.get("backend") if isinstance(config, dict) else None
        if isinstance(backend, dict) and backend.get("model"):
            names.add(str(backend["model"]))
    args = doc.get("args")
    if not names and isinstance(args, dict) and args.get("model"):
        names.add(str(args["model"]))
    return names.pop() if len(names) == 1 else None


def _document_benchmark(bench: _Node, index: int) -> Benchmark:
    config, metrics = bench["config"], bench["metrics"]
    strategy = _strategy(config["strategy"]["type_"], config["strategy"]["type_"].value)
    rate_target = (config["strategy"]["rate"].number(positive=True) if strategy in RATED
                   else math.nan)
    totals = metrics["request_totals"]
    n_ok = totals["successful"].count()
    if n_ok < 1:
        totals["successful"].fail(
            f"no successful requests ({totals['errored'].count()} errored, "
            f"{totals['incomplete'].count()} incomplete): the benchmark measured nothing; check "
            "the server and rerun it, or leave this report out")
    latency = metrics["request_latency"]["successful"]
    return Benchmark(
        index=index,
        benchmark_id=str(config["id_"].value),
        strategy=strategy,
        rate_target=rate_target,
        rps=metrics["requests_per_second"]["successful"]["mean"].number(),
        latency_mean=latency["mean"].number(positive=True),
        latency_std=latency["std_dev"].number(),
        latency_p50=latency["median"].number(),
        latency_p95=latency["percentiles"]["p95"].number(),
        latency_p99=latency["percentiles"]["p99"].number(),
        ttft_mean=_optional_ms(metrics, "time_to_first_token_ms"),
        itl_mean=_optional_ms(metrics, "inter_token_latency_ms"),
        n_successful=n_ok,
        n_errored=totals["errored"].count(),
        n_incomplete=totals["incomplete"].count(),
        duration_s=bench["duration"].number(positive=True),
        prompt_tokens_mean=metrics["prompt_token_count"]["successful"]["mean"].number(),
        output_tokens_mean=metrics["output_token_count"]["successful"]["mean"].number(),
        growing=_growing(bench),
        id_field=config["id_"].where,
    )


def _optional_ms(metrics: _Node, name: str) -> float:
    """A TTFT/ITL mean in seconds; NaN when the run did not stream (GuideLLM omits it)."""
    if not metrics.has(name) or metrics.value[name] is None:
        return math.nan
    return metrics[name]["successful"]["mean"].number() / 1000.0


def _growing(bench: _Node) -> bool | None:
    if not (bench.has("requests") and bench["requests"].has("successful")):
        return None
    records = bench["requests"]["successful"]
    if not isinstance(records.value, list):
        return None  # a count instead of records: GuideLLM kept none
    starts, lats = [], []
    for rec in records.items():
        starts.append(rec["request_start_time"].number())
        lats.append(rec["request_latency"].number())
    return latency_grows(starts, lats) if len(lats) >= 10 else None


# --- CSV ------------------------------------------------------------------------------------

_ID = ("Run Info", "Run ID", "")


class _CsvRow:
    """One CSV data row addressed by its three header cells."""

    def __init__(self, columns: dict, cells: list[str], line: int, path: Path):
        self.columns, self.cells, self.line, self.path = columns, cells, line, path

    def text(self, group: str, name: str, stat: str = "") -> str:
        where = f"{group} / {name}" + (f" / {stat}" if stat else "")
        col = self.columns.get((group, name, stat))
        if col is None:
            raise InputError("column missing; a GuideLLM CSV has three header rows (group, "
                             "name, statistic)", self.path, where)
        return self.cells[col]

    def node(self, group: str, name: str, stat: str = "", parse=float) -> _Node:
        where = f"row {self.line}: {group} / {name}" + (f" / {stat}" if stat else "")
        raw = self.text(group, name, stat)
        try:
            value = parse(raw)
        except ValueError:
            raise InputError(f"cannot read {raw[:40]!r}", self.path, where) from None
        return _Node(value, where, self.path)


def _read_csv(path: Path, text: str) -> Report:
    rows = list(csv.reader(io.StringIO(text)))
    header_ok = (len(rows) >= 3 and rows[0][:1] == ["Run Info"] and rows[1][:1] == ["Run ID"]
                 and rows[2][:1] == [""])
    if not header_ok:
        raise InputError("expected GuideLLM's three header rows (group, name, statistic) "
                         "starting 'Run Info' / 'Run ID' / ''; is a header row missing?", path,
                         "header rows")
    if not len(rows[0]) == len(rows[1]) == len(rows[2]):
        raise InputError("the three header rows differ in length; is a header row damaged?",
                         path, "header rows")
    columns: dict[tuple[str, str, str], int] = {}
    for i, key in enumerate(zip(rows[0], rows[1], rows[2], strict=True)):
        columns.setdefault(key, i)
    data = [r for r in rows[3:] if any(r)]
    if not data:
        raise InputError("no benchmark rows under the headers", path, "benchmarks")
    for line, cells in enumerate(data, start=4):
        if len(cells) < len(rows[0]):
            raise InputError(f"row {line} has {len(cells)} cells but the header names "
                             f"{len(rows[0])}; is the file truncated?", path, f"row {line}")
        if len(cells) > len(rows[0]):
            # GuideLLM 0.5.x writes the header of the first benchmark only; a later benchmark
            # with incomplete or errored requests has extra columns that no header names.
            raise InputError(f"row {line} has {len(cells)} cells but the header names "
                             f"{len(rows[0])}: GuideLLM 0.5.x writes the first benchmark's header "
                             "only, so this row's columns cannot be told apart; ingest the run's "
                             "JSON or YAML output instead", path, f"row {line}")
    csv_rows = [_CsvRow(columns, cells, line, path) for line, cells in enumerate(data, start=4)]
    meta = csv_rows[0].node("Runtime Info", "Metadata", parse=json.loads)
    schema = _schema_version(meta["version"])
    version = str(meta.value.get("guidellm_version", "")) if isinstance(meta.value, dict) else ""
    benchmarks = tuple(_csv_benchmark(row, schema, i) for i, row in enumerate(csv_rows))
    return Report(path, "csv", schema, version, benchmarks)


def _csv_benchmark(row: _CsvRow, schema: int, index: int) -> Benchmark:
    node = row.node("Benchmark", "Strategy", parse=str)
    strategy = _strategy(node, node.value.split("@")[0])  # 0.8.x writes "constant@2.00"
    counts = {s: row.node("Request Counts", s.capitalize(), parse=float).count()
              for s in ("successful", "errored", "incomplete")}
    if counts["successful"] < 1:
        row.node("Request Counts", "Successful").fail(
            f"no successful requests ({counts['errored']} errored, {counts['incomplete']} "
            "incomplete): the benchmark measured nothing; rerun it or leave this report out")
    pct = row.node("Request Latency", "Successful Sec", "Percentiles", parse=json.loads)
    if not (isinstance(pct.value, list) and len(pct.value) == len(CSV_PERCENTILES)):
        pct.fail(f"must list {len(CSV_PERCENTILES)} values ({', '.join(CSV_PERCENTILES)})")
    pct_of = {name: _Node(v, f"{pct.where}[{name}]", row.path)
              for name, v in zip(CSV_PERCENTILES, pct.value, strict=True)}
    return Benchmark(
        index=index,
        benchmark_id=row.text("Benchmark", "ID"),
        strategy=strategy,
        rate_target=_csv_rate(row, strategy) if strategy in RATED else math.nan,
        rps=row.node("Server Throughput", "Successful Requests/Sec", "Mean").number(),
        latency_mean=row.node("Request Latency", "Successful Sec", "Mean").number(positive=True),
        latency_std=row.node("Request Latency", "Successful Sec", "Std Dev").number(),
        latency_p50=row.node("Request Latency", "Successful Sec", "Median").number(),
        latency_p95=pct_of["p95"].number(),
        latency_p99=pct_of["p99"].number(),
        ttft_mean=_csv_optional_ms(row, "Time to First Token"),
        itl_mean=_csv_optional_ms(row, "Inter Token Latency"),
        n_successful=counts["successful"],
        n_errored=counts["errored"],
        n_incomplete=counts["incomplete"],
        duration_s=row.node("Timings", "Duration", "Sec").number(positive=True),
        prompt_tokens_mean=row.node("Token Metrics", "Successful Input Tokens", "Mean").number(),
        output_tokens_mean=row.node("Token Metrics", "Successful Output Tokens", "Mean").number(),
        growing=None,
        id_field=f"row {row.line}: Benchmark / ID",
    )


def _csv_optional_ms(row: _CsvRow, group: str) -> float:
    if (group, "Successful ms", "Mean") not in row.columns:
        return math.nan
    return row.node(group, "Successful ms", "Mean").number() / 1000.0


def _csv_rate(row: _CsvRow, strategy: str) -> float:
    """The target rate of a rated benchmark, from the run's profile and the benchmark's index.

    Schema 1 lists ``completed_strategies`` (each with its ``rate``); both schemas list the
    profile's ``rate`` values in run order.
    """
    profile = row.node("Run Info", "Profile", parse=json.loads)
    index = row.node("Run Info", "Run Index", parse=int).value
    if profile.has("completed_strategies"):
        done = profile["completed_strategies"]
        if isinstance(done.value, list) and index < len(done.value):
            return done[index]["rate"].number(positive=True)
    rates = profile["rate"]
    if isinstance(rates.value, list):
        return rates[index].number(positive=True)
    return rates.number(positive=True)
