"""``bayeslat report``: one self-contained HTML report of fitted models, with posterior plots."""

from __future__ import annotations

from pathlib import Path

import typer

from bayeslat.cli.options import (
    check_alphas,
    check_loads,
    make_console,
    quiet_pymc,
)


def command(
    models: list[Path] = typer.Argument(..., metavar="MODEL",
                                        help="Fits written by bayeslat fit; the first is "
                                        "reported on, all are compared by PSIS-LOO."),
    output: Path | None = typer.Option(None, "-o", "--output",
                                       help="HTML file to write; default "
                                       "reports/<first model>.html."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing report."),
    seed: int = typer.Option(0, "--seed", help="Seed for thinning draws and for draws of "
                             "unmeasured groups."),
    figures: Path | None = typer.Option(None, "--figures", help="Also write every figure as a "
                                        "PNG in this folder, named after its caption."),
    allow_unconverged: bool = typer.Option(False, "--allow-unconverged",
                                           help="Report on a fit that did not converge (the "
                                           "report then says so at the top)."),
    rps: str = typer.Option(None, "--rps", help="Your loads in req/s (0,2,4 or "
                            "start:stop:count), for the answer the page opens with. Default: "
                            "each setup's lowest, middle and highest measured load."),
    alpha: str = typer.Option(None, "--alpha", help="Your acceptance rate(s), for the answer "
                              "the page opens with. Default: each setup's middle measured one."),
    jobs: int = typer.Option(None, "--jobs", min=1, help="Processes that analyse the "
                             "setups and draw the figures; default: one per core."),
) -> None:
    """Write an HTML report: the answer (SD on or off, which k, how sure), adequacy, data,
    collapse and checks, coefficients, C1R/C2R, speedup and RPS*, the k* map and decision
    table, diagnostics and LOO, and the model's limits.

    Figures and styles are embedded: the file opens in any browser with no network. A fit
    that did not converge is refused unless --allow-unconverged.
    """
    from bayeslat import report

    quiet_pymc()
    loads = check_loads(rps)
    alphas = check_alphas(alpha) if alpha else None

    output = output if output is not None else Path("reports") / f"{models[0].stem}.html"
    console = make_console()
    with console.status("writing the report") as status:
        path = report.write(models, output, overwrite=overwrite, seed=seed,
                            status=lambda msg: status.update(msg),
                            allow_unconverged=allow_unconverged, rps=loads, alpha=alphas,
                            jobs=jobs)
    console.print(f"wrote {path}")
    if allow_unconverged:
        _warn_unconverged(console, models)
    if figures is not None:
        saved = report.save_figures(path, figures, overwrite=overwrite)
        console.print(f"wrote {len(saved)} figures to {figures}")


def _warn_unconverged(console, models: list[Path]) -> None:
    """Repeat in the terminal what the report says at its top: which fits did not converge."""
    from rich.markup import escape

    from bayeslat import fitting

    for path in models:
        diag = fitting.convergence(fitting.load(path))
        if not diag.converged:
            line = escape(fitting.unconverged_warning(diag))
            console.print(f"[yellow]warning:[/] {path}: {line}")
