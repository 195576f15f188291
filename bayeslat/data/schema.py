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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat.errors import SchemaError
from bayeslat.files import atomic_output

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Column:
    """One column of the tidy table: its dtype kind, unit and meaning."""

    name: str
    kind: str  # "str", "float", "int", "bool"
    unit: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("verifier", "str", "", "verifier (target) model name"),
    Column("verifier_params_b", "float", "1e9 params", "verifier parameter count (total for MoE)"),
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
STRATEGIES = ("synchronous", "constant", "poisson", "throughput", "concurrent")
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


def group_labels(df: pd.DataFrame) -> pd.Series:
    """A readable, unique label per group, ``verifier HW pP gG``: ``llama-8b H100 p512 g256``."""
    return (df["verifier"] + " " + df["hardware"]
            + " p" + df["prefill_tokens"].map("{:g}".format)
            + " g" + df["decode_tokens"].map("{:g}".format))


def config_labels(df: pd.DataFrame) -> pd.Series:
    """A readable, unique label per configuration: ``<group> method:drafter aA kK`` (SD) or
    ``<group> k0`` (baseline)."""
    drafter = np.where(df["k"] > 0, " " + df["method"] + ":" + df["drafter"], "")
    alpha = df["alpha"].map(lambda a: "" if pd.isna(a) else f" a{a:g}")
    return group_labels(df) + drafter + alpha + " k" + df["k"].astype(str)


def standard_error(df: pd.DataFrame) -> pd.Series:
    """Standard error of each row's mean latency, ``latency_std / sqrt(n_successful)`` (s)."""
    return df["latency_std"] / np.sqrt(df["n_successful"])


def write_table(df: pd.DataFrame, path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Validate ``df`` and write it as Parquet, atomically (nothing is left half-written)."""
    table = validate(df, path)
    with atomic_output(path, overwrite=overwrite) as tmp:
        table.to_parquet(tmp, index=False)
    return Path(path)


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a Parquet sweep table and validate it."""
    path = Path(path)
    if not path.is_file():
        raise SchemaError("no such file; give a sweep table written by 'bayeslat ingest' or "
                          "'bayeslat simulate'", path)
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise SchemaError(
            f"not a readable Parquet file ({type(exc).__name__}); give a sweep table written by "
            "'bayeslat ingest' or 'bayeslat simulate'", path) from exc
    return validate(df, path)
