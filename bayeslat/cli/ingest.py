"""``bayeslat ingest``: GuideLLM reports and tidy tables -> one tidy sweep table (Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from bayeslat import checks
from bayeslat.cli.options import make_console
from bayeslat.data.metadata import DIR_FILE, UNKNOWN_HARDWARE
from bayeslat.errors import InputError

# CLI options that become metadata keys (they win over every metadata file).
_OVERRIDES = ("verifier", "verifier_params_b", "drafter", "drafter_params_b", "method", "k",
              "alpha", "hardware", "moe_experts_active", "moe_experts_total", "prefill_tokens",
              "decode_tokens", "metrics_before", "metrics_after")


def command(
    inputs: Annotated[list[Path], typer.Argument(
        metavar="REPORT_OR_DIR...", help="GuideLLM reports (.json, .yaml, .csv), folders of "
        "them, or tidy tables (.parquet, or .csv with the schema's columns).")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Table to write, e.g. data/NAME.parquet.")],
    meta: Annotated[Path | None, typer.Option(
        "--meta", help="TOML metadata for every report (verifier, drafter, k, alpha, "
        "hardware, ...).")] = None,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output."),
    verifier: str | None = typer.Option(None, help="Verifier model name."),
    verifier_params_b: float | None = typer.Option(None, "--verifier-params", "--verifier-params-b",
                                                   help="Verifier size (1e9 params)."),
    drafter: str | None = typer.Option(None, help="Drafter model name."),
    drafter_params_b: float | None = typer.Option(None, "--drafter-params", "--drafter-params-b",
                                                  help="Drafter size (1e9 params)."),
    method: str | None = typer.Option(None, help="SD method: eagle3, draft_model, ngram, mtp."),
    k: int | None = typer.Option(None, "--k", help="Draft length (0 = no SD)."),
    alpha: float | None = typer.Option(None, help="Forced acceptance rate."),
    hardware: str | None = typer.Option(None, help="Accelerator, e.g. H100."),
    moe_experts_active: int | None = typer.Option(None, help="MoE experts routed per token."),
    moe_experts_total: int | None = typer.Option(None, help="MoE experts per layer."),
    prefill_tokens: float | None = typer.Option(None, "--prefill", "--prefill-tokens",
                                                help="Prompt length p (default: measured)."),
    decode_tokens: float | None = typer.Option(None, "--decode", "--decode-tokens",
                                               help="Output length g (default: measured)."),
    metrics_before: Annotated[Path | None, typer.Option(
        help="vLLM /metrics text before the run.")] = None,
    metrics_after: Annotated[Path | None, typer.Option(
        help="vLLM /metrics text after the run.")] = None,
) -> None:
    """Read GuideLLM reports (schema 1 and 2; JSON, YAML, CSV) into one tidy sweep table.

    What a report does not say (verifier, drafter, k, alpha, hardware) comes from bayeslat.toml
    in the reports' folder, REPORT.toml next to a report, --meta FILE, then these options.
    Saturated benchmarks are kept and flagged with the reason; fits exclude them by default.
    A tidy table from any tool (Parquet, or a CSV whose header has the schema's required
    columns) is read as it is, its flags included, and validated; metadata is not applied to it.
    """
    # the values an option can get wrong, refused before pandas is imported
    if k is not None:
        checks.draft_lengths(k, "k")
    if alpha is not None:
        checks.alphas(alpha, "alpha")
    for value, name in ((prefill_tokens, "prefill_tokens"), (decode_tokens, "decode_tokens")):
        if value is not None:
            checks.positive(value, name)
    from bayeslat.data import schema
    from bayeslat.data.ingest import ingest, is_table

    if output.exists() and not overwrite:
        raise InputError("the file exists; pass --overwrite to replace it or choose another name",
                         output)
    given = dict(zip(_OVERRIDES, (verifier, verifier_params_b, drafter, drafter_params_b, method,
                                  k, alpha, hardware, moe_experts_active, moe_experts_total,
                                  prefill_tokens, decode_tokens, metrics_before, metrics_after),
                     strict=True))
    overrides = {key: str(v) if isinstance(v, Path) else v
                 for key, v in given.items() if v is not None}
    console = make_console()
    with Progress(TextColumn("reading reports"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task("", total=None)
        skipped: list[Path] = []
        origins: list[tuple[Path, int]] = []
        table = ingest(inputs, meta, overrides, skipped=skipped, origins=origins,
                       progress=lambda p: bar.update(task, advance=1, description=p.name))
    schema.write_table(table, output, overwrite=overwrite)
    console.print(summary(table, origins))
    start = 0
    for number, (path, count) in enumerate(origins, start=1):
        kind = " (tidy table)" if is_table(path) else ""
        console.print(f"report {number}: {path}{kind}: {deployment(table.iloc[start])}",
                      highlight=False, markup=False)
        start += count
    unsized = sorted(table.loc[table["verifier_params_b"].isna(), "verifier"].unique())
    if unsized:
        console.print(f"[yellow]size unknown[/] for {', '.join(unsized)}: fine for a fit of one "
                      "verifier; a fit across verifiers needs each one's size (verifier_params_b "
                      f"in {DIR_FILE} beside the reports, or the table's column)", highlight=False)
    if (table["hardware"] == UNKNOWN_HARDWARE).any():
        console.print(f"[yellow]hardware unknown[/]: the reports do not say; put hardware = "
                      f"\"H100\" (yours) in {DIR_FILE} beside them to label the setups",
                      highlight=False)
    for path in skipped:
        console.print(f"skipped {path}: the same run was read in another format", highlight=False,
                      markup=False)
    for row in table[table["saturated"]].itertuples():
        console.print(f"[yellow]saturated[/] {row.source}: {row.saturation_reason}",
                      highlight=False)
    flagged = int(table["saturated"].sum())
    console.print(f"wrote {len(table)} benchmarks to {output} ({flagged} flagged saturated: kept, "
                  "and excluded from fits by default)", highlight=False)


def deployment(row) -> str:
    """One report's deployment in a few words: ``llama-8b (8B params) on H100, k 3 (eagle3)``."""
    size = ("size unknown" if np.isnan(row.verifier_params_b)
            else f"{row.verifier_params_b:g}B params")
    sd = f"k {row.k} ({row.method}, drafter {row.drafter})" if row.k > 0 else "no SD"
    return f"{row.verifier} ({size}) on {row.hardware} hardware, {sd}"


def summary(table, origins: list[tuple[Path, int]]) -> Table:
    """One terminal row per benchmark (input number#benchmark index in a report, or row number
    in a tidy table): configuration, load, latency, request counts and the saturation flag.
    ``origins`` holds ``(file, number of rows)`` per input, in the table's row order."""
    out = Table(title="Ingested benchmarks (rates in req/s, latency L in s)",
                title_justify="left")
    for header in ("report", "k", "alpha", "strategy", "target", "rps", "L mean", "L p95",
                   "ok/err/inc", "saturated"):
        out.add_column(header, justify="left" if header == "strategy" else "right",
                       no_wrap=True)
    labels = [f"{number}#{index}" for number, (_, count) in enumerate(origins, start=1)
              for index in range(count)]
    for label, row in zip(labels, table.itertuples(), strict=True):
        out.add_row(
            label, str(row.k),
            "-" if np.isnan(row.alpha) else f"{row.alpha:.3f}", row.strategy,
            "-" if np.isnan(row.rate_target) else f"{row.rate_target:g}", f"{row.rps:.3g}",
            f"{row.latency_mean:.3f}",
            "-" if np.isnan(row.latency_p95) else f"{row.latency_p95:.3f}",
            f"{row.n_successful}/{row.n_errored}/{row.n_incomplete}",
            "yes" if row.saturated else "", style="yellow" if row.saturated else None,
        )
    return out
