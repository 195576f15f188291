"""``bayeslat simulate``: sweep a preset deployment on the engine simulator."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bayeslat.cli.options import make_console
from bayeslat.errors import InputError


def command(
    preset: str = typer.Option(..., "--preset", help="Deployment and grid to simulate; "
                               "e.g. example, dense-8b-h100, moe-30b-a3b-h100 (see the README)."),
    seed: int = typer.Option(0, "--seed", help="Root seed; the same seed gives the same table."),
    output: Path = typer.Option(..., "-o", "--output", help="Sweep table to write (Parquet)."),
    reports: Path | None = typer.Option(None, "--reports", help="Also write one GuideLLM "
                                        "(schema 2) JSON report per configuration here."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing outputs."),
    arrivals: str = typer.Option("constant", "--arrivals", help="How the rated benchmarks "
                                 "send requests: constant (evenly spaced) or poisson."),
    workers: int = typer.Option(1, "--workers", help="Processes to use; the table does not "
                                "depend on it."),
) -> None:
    """Simulate a preset's load sweeps on the engine simulator; write the tidy sweep table.

    Every configuration gets the paper's protocol: synchronous, throughput, then 9 constant (or
    Poisson) rates evenly spaced between the two.
    """
    from dataclasses import replace

    from bayeslat.data.schema import group_labels, write_table
    from bayeslat.simulate import presets, protocol

    chosen = presets.preset(preset)
    if arrivals not in ("constant", "poisson"):
        raise InputError(f"must be constant or poisson, got {arrivals!r}", field="--arrivals")
    if workers < 1:
        raise InputError("must be at least 1", field="--workers")
    # Refuse before the sweep, not after it: a preset can take minutes.
    if output.exists() and not overwrite:
        raise InputError("the file exists; pass --overwrite to replace it or choose another "
                         "name", output)
    if reports is not None and reports.is_dir() and any(reports.iterdir()) and not overwrite:
        raise InputError("the folder is not empty; pass --overwrite to replace its reports or "
                         "choose another folder", reports)
    configs = chosen.configurations()
    run = replace(chosen.protocol, arrivals=arrivals)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(f"simulating {preset}", total=len(configs))
        requests = {} if reports is not None else None
        table = protocol.sweep(configs, run, seed=seed, source=f"simulate:{preset}",
                               workers=workers, progress=lambda n: bar.advance(task, n),
                               requests=requests)
    write_table(table, output, overwrite=overwrite)
    if reports is not None:
        from bayeslat.simulate.reports import write_reports

        written = write_reports(table, requests, reports, overwrite=overwrite)
        make_console().print(f"wrote {len(written)} GuideLLM reports to {reports}")
    _summary(table, group_labels(table), preset, output)


def _summary(table, groups, preset: str, output: Path) -> None:
    view = Table(title=f"Simulated sweep '{preset}'", title_justify="left",
                 caption="flagged: rows flagged saturated; L0: synchronous latency and ceiling: "
                 "throughput, both without SD",
                 caption_justify="left")
    view.add_column("group", no_wrap=True)
    for header in ("configs", "rows", "flagged", "L0 (s)", "ceiling (req/s)"):
        view.add_column(header, justify="right")
    for label, rows in table.groupby(groups, sort=False):
        base = rows[rows["k"] == 0]
        sync = base.loc[base["strategy"] == "synchronous", "latency_mean"]
        ceiling = base.loc[base["strategy"] == "throughput", "rps"]
        configs = rows.groupby(["method", "drafter", "alpha", "k"], dropna=False).ngroups
        view.add_row(label, str(configs), str(len(rows)), str(int(rows["saturated"].sum())),
                     f"{sync.iloc[0]:.3g}", f"{ceiling.iloc[0]:.3g}")
    console = make_console()
    console.print(view)
    console.print(f"wrote {len(table)} rows ({int(table['saturated'].sum())} flagged saturated) "
                  f"to {output}")
