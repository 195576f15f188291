"""``bayeslat theory``: what the closed-form model says for given coefficients."""

from __future__ import annotations

import numpy as np
import typer
from rich.table import Table

from bayeslat.cli.options import check_loads, make_console
from bayeslat.errors import InputError


def command(
    c1_d: float = typer.Option(1.20, "--c1-d", help="Baseline zero-load latency C1_D (s)."),
    c2_d: float = typer.Option(0.07, "--c2-d", help="Baseline load coefficient C2_D (s/req)."),
    c1_sd: float = typer.Option(0.78, "--c1-sd", help="SD zero-load latency C1_SD (s)."),
    c2_sd: float = typer.Option(0.085, "--c2-sd", help="SD load coefficient C2_SD (s/req)."),
    rps: str = typer.Option("0,2,4,6,8,10,12", "--rps",
                            help="Loads in req/s: 0,2,4 or start:stop:count."),
) -> None:
    """Latency, speedup and break-even load from C1 and C2 of a baseline and an SD configuration.

    L = C1 / (1 - rps*C2); the defaults are config A of the worked example in DESIGN.md.
    """
    for name, value in (("--c1-d", c1_d), ("--c2-d", c2_d), ("--c1-sd", c1_sd),
                        ("--c2-sd", c2_sd)):
        if not np.isfinite(value) or value <= 0:
            raise InputError(f"must be a positive number of seconds, got {value}", field=name)
    loads = check_loads(rps)
    from bayeslat import theory  # xarray and pandas: after the options are checked

    c1r, c2r = theory.ratios(c1_d, c2_d, c1_sd, c2_sd)
    star = theory.break_even_rps(c1_d, c2_d, c1_sd, c2_sd)

    table = Table(title="Closed-form latency under load", title_justify="left")
    for header in ("rps (req/s)", "L baseline (s)", "L SD (s)", "speedup"):
        table.add_column(header, justify="right")
    lat_d = theory.latency(loads, c1_d, c2_d)
    lat_sd = theory.latency(loads, c1_sd, c2_sd)
    for r, ld, ls, s in zip(loads, lat_d, lat_sd, theory.speedup(loads, c1_d, c2_d, c1_sd, c2_sd),
                            strict=True):
        style = "red" if s < 1 else ("green" if s > 1 else None)
        shown = ("SD saturated" if not np.isfinite(ls) else
                 "baseline saturated" if not np.isfinite(ld) else f"{s:.3f}")
        table.add_row(f"{r:g}", _fmt(ld), _fmt(ls), shown, style=style)
    console = make_console()
    console.print(table)
    console.print(f"C1R = {c1r:.3f}  C2R = {c2r:.3f}  saturation: baseline {1 / c2_d:.3g} req/s, "
                  f"SD {1 / c2_sd:.3g} req/s")
    if np.isnan(star):
        verdict = "SD never loses" if c1r <= 1 and c2r <= 1 else "no break-even below saturation"
        console.print(f"RPS* = none ({verdict})")
    elif c1r < 1:
        console.print(f"RPS* = {star:.3g} req/s: SD helps below it and hurts above")
    else:
        console.print(f"RPS* = {star:.3g} req/s: SD hurts below it and helps above")


def _fmt(value: float) -> str:
    return "saturated" if not np.isfinite(value) else f"{value:.3g}"
