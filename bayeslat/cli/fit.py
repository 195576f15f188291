"""``bayeslat fit``: fit a Bayesian latency model to a sweep table and write the posterior."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from bayeslat.cli import options
from bayeslat.cli.options import make_console, number, quiet_pymc
from bayeslat.errors import FitError

# Headline rows shown in the terminal; the file holds them all.
MAX_ROWS = 20
# Worst configurations shown under the adequacy summary.
WORST_ROWS = 5


def command(
    data: Path | None = typer.Argument(None, help="Sweep table (Parquet or tidy CSV); default: "
                                       "the shipped example data/example/sweep.parquet."),
    model: str = typer.Option("auto", "--model",
                              help="Variant: dense, speculative, hierarchical, moe, or with the "
                              "compute wall capacity or dense-capacity; roofline (each "
                              "server's roofline, experimental: decide does not read it yet); "
                              "auto: capacity where the sweep measured its ceilings "
                              "(dense-capacity without SD rows), else hierarchical (dense)."),
    draws: int | None = options.DRAWS,
    tune: int = options.TUNE,
    chains: int | None = options.CHAINS,
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    sampler: str = options.SAMPLER,
    output: Path | None = typer.Option(None, "-o", "--output",
                                       help="Fit to write; default models/<data>-<model>.nc."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing fit."),
    strict: bool = typer.Option(False, "--strict",
                                help="Exit non-zero if the fit did not converge."),
    config: Path | None = options.CONFIG,
    exact: bool = options.EXACT,
) -> None:
    """Fit a Bayesian latency model and print diagnostics, its adequacy and a headline per
    configuration.

    Convergence needs max R-hat <= 1.01, bulk and tail ESS >= 400 and no divergences; by
    default the sampler draws until it holds (with ESS >= 500, for the estimate's own noise)
    and stops there. Adequacy:
    how many measured points lie inside their posterior predictive intervals (overall and at
    each configuration's top loads), and the model capacity against the measured ceilings.
    """
    from bayeslat.models import check, resolve

    check(model)  # before the fitting stack is imported
    from bayeslat.data import schema
    from bayeslat.files import check_output

    data = data if data is not None else schema.EXAMPLE
    if not data.exists() and data == schema.EXAMPLE:
        raise FitError(f"the shipped example {schema.EXAMPLE} is missing; run from the project "
                       "root or give a sweep table")
    table = schema.read_table(data)
    model, why = resolve(model, table)
    # refused before sampling, not after minutes of it
    output = check_output(output if output is not None else
                          Path("models") / f"{data.stem}-{model}.nc", overwrite)
    from bayeslat import api, fitting

    quiet_pymc()

    console = make_console()
    if why:
        console.print(escape(f"model: {model} (auto: {why}; --model chooses another)"),
                      highlight=False)
    with console.status("fitting") as status:
        result = api.fit(table, model, config=config, draws=draws, tune=tune, chains=chains,
                         seed=seed, sampler=sampler, progressbar=True, exact=exact,
                         status=lambda msg: status.update(msg))
        status.update("checking the fit against its data")
        try:
            check = result.adequacy(seed=seed)
            # decide warns about the setups whose configurations misfit
            fitting.record_misfit(result.model, check)
        finally:  # the fit is written even if the check fails
            status.update(f"writing {output}")
            result.save(output, overwrite=overwrite)
        status.update("summarising each configuration")
        headline = result.headline(seed=seed)
        # a sweep without SD: what it says about the server instead
        baselines = result.baselines(seed=seed) if headline.empty else None
    diag = result.diagnostics
    console.print(_diagnostics_table(diag, len(result.model.rows), len(result.model.excluded)))
    console.print(escape(fitting.sampler_line(result.idata)), highlight=False)
    console.print(escape(fitting.likelihood_line(result.idata)), highlight=False)
    for line in (fitting.spreads_line(result.model), fitting.knees_line(result.model)):
        if line:
            console.print(escape(line), highlight=False)
    console.print(_adequacy_table(check))
    console.print(_worst_table(check.worst(WORST_ROWS)))
    for message in check.warnings:
        console.print(f"[yellow]warning:[/] {escape(message)}")
    if baselines is None:
        console.print(_headline_table(headline))
    else:
        console.print(_baseline_table(baselines))
    if result.model.excluded:
        shown = "; ".join(result.model.excluded[:3])
        more = len(result.model.excluded) - 3
        console.print(f"excluded as saturated: {shown}" + (f" and {more} more" if more > 0 else ""))
    console.print(f"wrote {result.path}")
    if not diag.converged:
        message = (f"the fit did not converge ({'; '.join(diag.problems())}); it was written to "
                   f"{result.path} for inspection: try more --tune/--draws"
                   f"{fitting.few_groups_hint(result.model)}")
        if strict:
            raise FitError(message)
        console.print(f"[yellow]warning:[/] {message}")


def _diagnostics_table(diag, n_rows: int, n_excluded: int) -> Table:
    table = Table(title="Convergence", title_justify="left")
    for header in ("rows fitted", "excluded", "max R-hat", "min bulk ESS", "min tail ESS",
                   "divergences", "time (s)"):
        table.add_column(header, justify="right")
    table.add_row(str(n_rows), str(n_excluded), f"{diag.max_rhat:.3f}",
                  f"{diag.min_ess_bulk:.0f}", f"{diag.min_ess_tail:.0f}", str(diag.divergences),
                  f"{diag.seconds:.1f}", style=None if diag.converged else "yellow")
    return table


def _adequacy_table(check) -> Table:
    """The adequacy figures: value, what an adequate fit gives; failing rows in yellow."""
    table = Table(title="Adequacy: measured points against the posterior predictive",
                  title_justify="left")
    for header, justify in (("figure", "left"), ("value", "right"), ("adequate", "left")):
        table.add_column(header, justify=justify)
    for row in check.summary().itertuples():
        table.add_row(row.figure, row.shown, row.target,
                      style="yellow" if row.ok is False else None)
    return table


def _worst_table(worst) -> Table:
    """The worst configurations: coverage, mean standardised residual, capacity / ceiling."""
    table = Table(title="Worst configurations (lowest 90% coverage, then largest residual)",
                  title_justify="left", caption_justify="left",
                  caption="in 50%, in 90%: share inside the predictive interval; top 3: its "
                  "three highest loads inside 90%\nmean z: mean standardised log residual (+: "
                  "measured above); cap/ceil: model capacity / ceiling")
    table.add_column("configuration", justify="left", no_wrap=True)
    for header in ("pts", "in 50%", "in 90%", "top 3", "mean z", "cap/ceil"):
        table.add_column(header, justify="right")
    for row in worst.itertuples():
        table.add_row(row.config, str(row.points), number(row.inside_50),
                      number(row.inside_90), number(row.top_inside_90),
                      number(row.mean_z, "{:+.2f}"), number(row.capacity_ratio),
                      style="yellow" if row.misfit else None)
    return table


def _baseline_table(base) -> Table:
    table = Table(title="Per configuration without SD: latency at zero load C1, load cost C2 "
                  "and capacity (median [90% interval])", title_justify="left")
    for header, justify in (("configuration", "left"), ("C1 (s)", "right"),
                            ("C2 (s/req)", "right"), ("capacity (req/s)", "right")):
        table.add_column(header, justify=justify)
    for row in base.head(MAX_ROWS).itertuples():
        table.add_row(row.config, *(f"{getattr(row, n):.3g} [{getattr(row, n + '_lo'):.3g}, "
                                    f"{getattr(row, n + '_hi'):.3g}]"
                                    for n in ("c1", "c2", "capacity")))
    if len(base) > MAX_ROWS:
        table.caption = f"{len(base) - MAX_ROWS} more configurations in the fit"
    return table


def _headline_table(head) -> Table:
    from bayeslat.decide import shows_rps_star

    table = Table(title="Per configuration: zero-load speedup and break-even load RPS* "
                  "(median [90% interval])", title_justify="left")
    for header, justify in (("configuration", "left"), ("speedup at 0 load", "right"),
                            ("RPS* (req/s)", "right"), ("P(RPS* exists)", "right")):
        table.add_column(header, justify=justify)
    for row in head.head(MAX_ROWS).itertuples():
        star = ("none" if not shows_rps_star(row.p_break_even) else
                f"{row.rps_star:.3g} [{row.rps_star_lo:.3g}, {row.rps_star_hi:.3g}]")
        table.add_row(row.config,
                      f"{row.speedup0:.3f} [{row.speedup0_lo:.3f}, {row.speedup0_hi:.3f}]",
                      star, f"{row.p_break_even:.2f}")
    if len(head) > MAX_ROWS:
        table.caption = f"{len(head) - MAX_ROWS} more configurations in the fit"
    return table
