"""The tidy sweep table: one row per benchmark (one load level of one configuration).

Every stage after ingest and simulation reads this table and nothing else, so :func:`validate` is
the contract: a table that passes it can be fitted. Units are seconds for every time (TTFT and ITL
included, although GuideLLM reports those in milliseconds), requests per second for rates, billions
for parameter counts, tokens for lengths.

Identity
--------
A *group* is one verifier deployment at one workload: ``verifier, hardware, prefill_tokens,
decode_tokens``; the baseline and every SD configuration of a group share its verifier-side
coefficients. A *drafter* is ``method, drafter``. A *configuration* is a group with one drafter at
one ``(alpha, k)``; its rows at different rates trace one latency curve. ``k = 0`` rows are the
group's baseline (no SD): their ``alpha`` is NaN, ``drafter`` and ``method`` are ``"none"``.

Files
-----
A table is stored as Parquet (what ``bayeslat ingest`` and ``bayeslat simulate`` write) or as a
tidy CSV with the same column names (one header row, one row per benchmark, the units above;
``.csv`` suffix), so a sweep measured by any tool can be fitted. :func:`read_table` reads both and
fills the columns a table may leave out (:data:`REQUIRED_COLUMNS` it may not; see
:func:`fill_optional`) the same way for both.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat.errors import SchemaError
from bayeslat.files import atomic_output

SCHEMA_VERSION = 1
# The shipped example sweep, relative to the project root (what `bayeslat fit` fits by default).
EXAMPLE = Path("data/example/sweep.parquet")


@dataclass(frozen=True)
class Column:
    """One column of the tidy table: its dtype kind, unit and meaning."""

    name: str
    kind: str  # "str", "float", "int", "bool"
    unit: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("verifier", "str", "", "verifier (target) model name"),
    Column("verifier_params_b", "float", "1e9 params",
           "verifier parameter count (total for MoE); NaN: unknown (one verifier only)"),
    Column("drafter", "str", "", "drafter model name, 'none' without SD"),
    Column("drafter_params_b", "float", "1e9 params", "drafter parameter count, 0 without SD"),
    Column("method", "str", "", "SD method: none, eagle3, draft_model, ngram, mtp, ..."),
    Column("hardware", "str", "", "accelerator, e.g. H100"),
    Column("moe_experts_active", "int", "experts", "experts routed per token, 0 for dense"),
    Column("moe_experts_total", "int", "experts", "experts per MoE layer, 0 for dense"),
    Column("prefill_tokens", "float", "tokens", "mean prompt length p"),
    Column("decode_tokens", "float", "tokens", "mean output length g"),
    Column("k", "int", "tokens", "draft length, 0 = no SD"),
    Column("alpha", "float", "", "acceptance rate per drafted token; NaN when k = 0"),
    Column("alpha_source", "str", "", "forced, measured, assumed, or none (k = 0)"),
    Column("strategy", "str", "", "synchronous, constant, poisson, throughput, concurrent"),
    Column("rate_target", "float", "req/s", "requested rate; NaN where the strategy has none"),
    Column("rps", "float", "req/s", "achieved rate of successful requests"),
    Column("latency_mean", "float", "s", "mean request latency"),
    Column("latency_std", "float", "s", "standard deviation of request latency"),
    Column("latency_p50", "float", "s", "median request latency"),
    Column("latency_p95", "float", "s", "95th percentile request latency"),
    Column("latency_p99", "float", "s", "99th percentile request latency"),
    Column("ttft_mean", "float", "s", "mean time to first token"),
    Column("itl_mean", "float", "s", "mean inter-token latency"),
    Column("n_successful", "int", "requests", "successful requests"),
    Column("n_errored", "int", "requests", "errored requests"),
    Column("n_incomplete", "int", "requests", "requests cut off at the end of the run"),
    Column("duration_s", "float", "s", "benchmark duration"),
    Column("saturated", "bool", "", "excluded from fits by default"),
    Column("saturation_reason", "str", "", "why the row is flagged; empty when not"),
    Column("source", "str", "", "where the row came from: file#benchmark-index, or simulator"),
)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)
GROUP_COLUMNS = ("verifier", "hardware", "prefill_tokens", "decode_tokens")
DRAFTER_COLUMNS = ("method", "drafter")
CONFIG_COLUMNS = GROUP_COLUMNS + DRAFTER_COLUMNS + ("alpha", "k")
# Columns a file must have: the deployment, the workload, the load and the mean latency. Every
# other column may be left out of a file and is filled by fill_optional.
REQUIRED_COLUMNS = ("verifier", "verifier_params_b", "hardware", "prefill_tokens",
                    "decode_tokens", "k", "strategy", "rps", "latency_mean", "n_successful",
                    "duration_s")
# Optional columns filled with one value on every row (NaN: not measured).
_CONSTANT_DEFAULTS = {
    "moe_experts_active": 0, "moe_experts_total": 0, "rate_target": np.nan,
    "latency_std": np.nan, "latency_p50": np.nan, "latency_p95": np.nan, "latency_p99": np.nan,
    "ttft_mean": np.nan, "itl_mean": np.nan, "n_errored": 0, "n_incomplete": 0,
}
# Optional columns implied only when every row is a baseline (k = 0).
_BASELINE_DEFAULTS = {"drafter": "none", "drafter_params_b": 0.0, "method": "none",
                      "alpha": np.nan, "alpha_source": "none"}
STRATEGIES = ("synchronous", "constant", "poisson", "throughput", "concurrent")
# Strategies whose rate is a target arrival rate: the points of the load curves.
RATED = ("constant", "poisson")
ALPHA_SOURCES = ("forced", "measured", "assumed", "none")

_DTYPES = {"str": object, "float": "float64", "int": "int64", "bool": "bool"}


def empty_table() -> pd.DataFrame:
    """A table with every column and no rows."""
    return pd.DataFrame({c.name: pd.Series(dtype=_DTYPES[c.kind]) for c in COLUMNS})


def _fail(msg: str, column: str, path, df: pd.DataFrame | None = None, mask=None):
    if df is not None and mask is not None and mask.any():
        row = df.index[np.asarray(mask)][0]
        src = df.at[row, "source"] if "source" in df.columns else ""
        msg = f"{msg} (first at row {row}{', ' + str(src) if src else ''})"
    raise SchemaError(msg, path, column)


def validate(df: pd.DataFrame, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Check ``df`` against the contract and return it with canonical dtypes and column order.

    Extra columns are kept after the contract's. Raises :class:`~bayeslat.errors.SchemaError`
    naming the column and the first offending row.

    Parameters
    ----------
    df
        The table to check.
    path
        The file it came from or goes to, for the error message.
    """
    missing = [c for c in COLUMN_NAMES if c not in df.columns]
    if missing:
        _fail(f"missing column(s) {', '.join(missing)}; a sweep table needs all of "
              "bayeslat.data.schema.COLUMN_NAMES", missing[0], path)
    out = df.reset_index(drop=True)
    for col in COLUMNS:
        try:
            if col.kind == "str":
                out[col.name] = out[col.name].astype(str)
            elif col.kind == "int":
                values = pd.to_numeric(out[col.name])
                bad = values.isna() | (values != np.round(values))
                if bad.any():
                    _fail("must be a whole number", col.name, path, out, bad)
                out[col.name] = values.astype("int64")
            else:
                out[col.name] = out[col.name].astype(_DTYPES[col.kind])
        except (TypeError, ValueError) as exc:
            _fail(f"cannot be read as {col.kind}: {exc}", col.name, path)

    def require(mask, column, what):
        mask = np.asarray(mask, dtype=bool)
        if mask.any():
            _fail(what, column, path, out, mask)

    for name in ("latency_mean", "rps", "prefill_tokens", "decode_tokens", "duration_s"):
        require(~np.isfinite(out[name]), name, "must be a finite number, not NaN or inf")
    require(out["latency_mean"] <= 0, "latency_mean", "must be positive (seconds)")
    require(out["rps"] < 0, "rps", "must not be negative (requests per second)")
    require(out["rate_target"] < 0, "rate_target", "must not be negative (requests per second)")
    for name in ("latency_std", "latency_p50", "latency_p95", "latency_p99", "ttft_mean",
                 "itl_mean"):
        require(out[name] < 0, name, "must not be negative (seconds)")
    require(out["prefill_tokens"] <= 0, "prefill_tokens", "must be positive")
    require(out["decode_tokens"] <= 0, "decode_tokens", "must be positive")
    for name in ("verifier_params_b", "drafter_params_b", "moe_experts_active",
                 "moe_experts_total", "n_errored", "n_incomplete"):
        require(out[name] < 0, name, "must not be negative")
    require(out["n_successful"] < 1, "n_successful", "needs at least one successful request")
    require(out["moe_experts_active"] > out["moe_experts_total"], "moe_experts_active",
            "cannot exceed moe_experts_total")
    require(out["k"] < 0, "k", "must be 0 (no SD) or a positive draft length")
    sd = out["k"] > 0
    require(sd & ~out["alpha"].between(0, 1), "alpha", "must lie in [0, 1] when k > 0")
    require(~sd & out["alpha"].notna(), "alpha", "must be NaN (not applicable) when k = 0")
    require(~sd & (out["method"] != "none"), "method", "must be 'none' when k = 0")
    require(sd & (out["method"] == "none"), "method", "must name the SD method when k > 0")
    require(~out["strategy"].isin(STRATEGIES), "strategy",
            f"must be one of {', '.join(STRATEGIES)}")
    require(~out["alpha_source"].isin(ALPHA_SOURCES), "alpha_source",
            f"must be one of {', '.join(ALPHA_SOURCES)}")
    require(out["saturated"] & (out["saturation_reason"].str.len() == 0), "saturation_reason",
            "must say why a row is flagged saturated")
    dup = out.duplicated(subset=["source"], keep="first")
    require(dup, "source", "duplicate benchmark: the same report entry appears twice")
    extra = [c for c in out.columns if c not in COLUMN_NAMES]
    return out[list(COLUMN_NAMES) + extra].reset_index(drop=True)


def server_labels(df: pd.DataFrame) -> pd.Series:
    """``verifier HW`` of each row: the server, a verifier on its hardware (``llama-8b
    H100``), whose deviation from the scaling laws its groups share."""
    return df["verifier"] + " " + df["hardware"]


def group_labels(df: pd.DataFrame) -> pd.Series:
    """A readable, unique label per group, ``verifier HW pP gG``: ``llama-8b H100 p512 g256``."""
    return (server_labels(df) + " p" + df["prefill_tokens"].map("{:g}".format)
            + " g" + df["decode_tokens"].map("{:g}".format))


def drafter_labels(df: pd.DataFrame) -> pd.Series:
    """``method:drafter`` of each row: ``eagle3:eagle3-llama-8b``."""
    return df["method"] + ":" + df["drafter"]


def draft_labels(df: pd.DataFrame) -> pd.Series:
    """A readable, unique label per drafter in its group (a setup, in ``bayeslat decide``):
    ``<group> method:drafter``."""
    return group_labels(df) + " " + drafter_labels(df)


def config_labels(df: pd.DataFrame) -> pd.Series:
    """A readable, unique label per configuration: ``<group> method:drafter aA kK`` (SD) or
    ``<group> k0`` (baseline)."""
    drafter = np.where(df["k"] > 0, " " + drafter_labels(df), "")
    alpha = df["alpha"].map(lambda a: "" if pd.isna(a) else f" a{a:g}")
    return group_labels(df) + drafter + alpha + " k" + df["k"].astype(str)


def standard_error(df: pd.DataFrame) -> pd.Series:
    """Standard error of each row's mean latency, ``latency_std / sqrt(n_successful)`` (s)."""
    return df["latency_std"] / np.sqrt(df["n_successful"])


def fill_optional(df: pd.DataFrame, path: str | os.PathLike | None = None) -> pd.DataFrame:
    """``df`` with the optional columns it lacks filled in; the columns it has are left alone.

    - ``moe_experts_active``, ``moe_experts_total``, ``n_errored``, ``n_incomplete``: 0;
      ``rate_target``, ``latency_std``, the percentiles, ``ttft_mean``, ``itl_mean``: NaN (not
      measured);
    - ``drafter``, ``method`` (``"none"``), ``drafter_params_b`` (0), ``alpha`` (NaN),
      ``alpha_source`` (``"none"``): only when every row has ``k = 0``; a table with SD rows
      must give them;
    - ``saturated`` and ``saturation_reason``: when both are missing, the rules of
      :mod:`bayeslat.data.saturation` that need no per-request records (throughput strategy,
      rate shortfall, failed requests); when only the reason is missing, ``"flagged saturated
      in the input table"`` on flagged rows; when only the flag is missing, a non-empty reason;
    - ``source``: ``<file name>#<row number>`` (from 0), or ``row#<row number>`` without a file.

    Raises :class:`~bayeslat.errors.SchemaError` naming the first missing required column
    (:data:`REQUIRED_COLUMNS`) or an SD column missing from a table with ``k > 0`` rows.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        _fail(f"missing column(s) {', '.join(missing)}; a sweep table needs at least "
              f"{', '.join(REQUIRED_COLUMNS)} (see bayeslat.data.schema.COLUMNS for names and "
              "units)", missing[0], path)
    out = df.reset_index(drop=True).copy()
    for name, value in _CONSTANT_DEFAULTS.items():
        if name not in out.columns:
            out[name] = value
    absent = [c for c in _BASELINE_DEFAULTS if c not in out.columns]
    if absent:
        k = pd.to_numeric(out["k"], errors="coerce")
        if (k > 0).any():
            _fail(f"missing column(s) {', '.join(absent)}: a table with speculative-decoding "
                  "rows (k > 0) must say which drafter, method and acceptance rate they had "
                  "(give 'none', 0 and an empty alpha on k = 0 rows)", absent[0], path, out,
                  k > 0)
        for name in absent:
            out[name] = _BASELINE_DEFAULTS[name]
    if "saturated" not in out.columns and "saturation_reason" not in out.columns:
        from bayeslat.data.saturation import flag_saturated

        counts = {c: pd.to_numeric(out[c], errors="coerce")
                  for c in ("rate_target", "rps", "n_successful", "n_errored", "n_incomplete")}
        flagged = flag_saturated(out.assign(**counts))
        out["saturated"] = flagged["saturated"]
        out["saturation_reason"] = flagged["saturation_reason"]
    elif "saturation_reason" not in out.columns:
        flags = out["saturated"].astype(bool)
        out["saturation_reason"] = np.where(flags, "flagged saturated in the input table", "")
    elif "saturated" not in out.columns:
        out["saturation_reason"] = out["saturation_reason"].fillna("").astype(str)
        out["saturated"] = out["saturation_reason"].str.len() > 0
    if "source" not in out.columns:
        stem = Path(path).name if path is not None else "row"
        out["source"] = [f"{stem}#{i}" for i in range(len(out))]
    return out


def write_table(df: pd.DataFrame, path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Validate ``df`` and write it, atomically (nothing is left half-written): as a tidy CSV
    when ``path`` ends in ``.csv`` (empty cells for NaN, floats written to round-trip exactly),
    as Parquet otherwise."""
    table = validate(df, path)
    with atomic_output(path, overwrite=overwrite) as tmp:
        if Path(path).suffix.lower() == ".csv":
            table.to_csv(tmp, index=False, lineterminator="\n")
        else:
            table.to_parquet(tmp, index=False)
    return Path(path)


def is_csv_table(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a ``.csv`` file whose first line names every one of
    :data:`REQUIRED_COLUMNS`: a tidy table, not a GuideLLM report (whose CSV starts with three
    header rows of other names)."""
    path = Path(path)
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return set(REQUIRED_COLUMNS) <= {name.strip() for name in header}


# Cells a CSV table may use for "not measured" in a numeric column (compared case-insensitively).
_CSV_MISSING = frozenset({"", "nan", "na", "n/a", "null", "none"})
_CSV_BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _float(cell: str) -> float:
    """The number in a CSV cell, NaN when it is not one."""
    try:
        return float(cell.replace("_", "x"))  # float() would take 1_000; a table should not
    except ValueError:
        return np.nan


def _read_csv(path: Path) -> pd.DataFrame:
    """A tidy CSV table with each known column parsed by its kind; unknown columns stay text."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False,
                          encoding="utf-8-sig")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
            ValueError) as exc:
        raise SchemaError(f"not a readable CSV table ({type(exc).__name__}: {exc}); give one "
                          "header row with the column names of bayeslat.data.schema.COLUMNS and "
                          "one row per benchmark", path) from exc
    if raw.empty:
        raise SchemaError("no rows; a sweep table has one row per benchmark under its header",
                          path)
    raw.columns = [str(c).strip() for c in raw.columns]
    dup = raw.columns[raw.columns.duplicated()]
    if len(dup):
        raise SchemaError("column named twice in the header; give each column once", path,
                          dup[0])
    kinds = {c.name: c for c in COLUMNS}
    out = {}
    for name in raw.columns:
        text = raw[name].str.strip()
        col = kinds.get(name)
        if col is None or col.kind == "str":
            out[name] = text
            continue
        if col.kind == "bool":
            values = text.str.lower().map(_CSV_BOOLS)
            bad = values.isna()
            what = "true or false"
        else:
            missing = text.str.lower().isin(_CSV_MISSING)
            # float() rounds exactly, so a table written by write_table reads back to the bit
            values = pd.Series([np.nan if gone else _float(cell)
                                for cell, gone in zip(text, missing, strict=True)],
                               index=raw.index, dtype="float64")
            bad = values.isna() & ~missing
            what = f"a number{' in ' + col.unit if col.unit else ''} (empty when not measured)"
            if col.kind == "int":
                bad = bad | missing | (values.notna() & (values != np.round(values)))
                what = f"a whole number{' of ' + col.unit if col.unit else ''}"
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise SchemaError(f"'{raw[name].iloc[i]}' on line {i + 2} is not {what}; fix that "
                              "cell (units and meaning: bayeslat.data.schema.COLUMNS)", path, name)
        out[name] = values.astype(bool) if col.kind == "bool" else values
    return pd.DataFrame(out, index=raw.index)


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a sweep table, Parquet or (suffix ``.csv``) tidy CSV, fill the optional columns it
    leaves out (:func:`fill_optional`) and validate it.

    Raises :class:`~bayeslat.errors.SchemaError` (an :class:`~bayeslat.errors.InputError`) naming
    the file and the column for a missing file, an unreadable one, a missing required column, a
    cell of the wrong type or a value the contract refuses.
    """
    path = Path(path)
    if not path.is_file():
        raise SchemaError("no such file; give a sweep table written by 'bayeslat ingest' or "
                          "'bayeslat simulate', or a tidy CSV with its columns", path)
    if path.suffix.lower() == ".csv":
        df = _read_csv(path)
    else:
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise SchemaError(
                f"not a readable Parquet file ({type(exc).__name__}); give a sweep table written "
                "by 'bayeslat ingest' or 'bayeslat simulate', or a tidy CSV ending in .csv",
                path) from exc
    return validate(fill_optional(df, path), path)
