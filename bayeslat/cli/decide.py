"""``bayeslat decide``: what to deploy, from a fitted model, with its uncertainty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from bayeslat import checks
from bayeslat.cli.options import check_alphas, check_loads, make_console, parse_floats, quiet_pymc
from bayeslat.errors import InputError

FORMATS = ("table", "json", "vllm")
POLICIES = ("risk", "neutral")


def command(
    model_path: Annotated[Path, typer.Argument(metavar="MODEL",
                                               help="A fit written by bayeslat fit.")],
    alpha: str = typer.Option(..., "--alpha", help="Acceptance rate(s): 0.7 or 0.6,0.8."),
    rps: str = typer.Option(None, "--rps", help="Loads in req/s: 0,2,4 or start:stop:count. "
                            "Default: per setup, 12 loads from 0 to its measured ceiling."),
    k: str = typer.Option(None, "--k", help="Draft lengths to compare (0 is always added): "
                          "2,4 or start:stop:count. Default: those the fit measured."),
    setup: str = typer.Option(None, "--setup", help="Choose the setup whose label contains this "
                              "text (see the list printed without it)."),
    prefill: float = typer.Option(None, "--prefill", help="Predict for this prompt length."),
    decode: float = typer.Option(None, "--decode", help="Predict for this output length."),
    verifier_params: float = typer.Option(None, "--verifier-params",
                                          help="Predict for this verifier size (1e9 params)."),
    drafter_params: float = typer.Option(None, "--drafter-params",
                                         help="Predict for this drafter size (1e9 params)."),
    risk: float = typer.Option(0.05, "--risk", help="The risk-aware choice has the lowest "
                               "latency at probability 1 - risk."),
    max_saturated: float = typer.Option(0.05, "--max-saturated",
                                        help="Largest share of posterior draws in which a "
                                        "chosen k may be past its capacity at that load."),
    policy: str = typer.Option("risk", "--policy", help="k for --format vllm: risk or neutral."),
    fmt: str = typer.Option("table", "--format", help="table, json or vllm."),
    max_batch: int = typer.Option(256, "--max-batch", help="vLLM's max_num_seqs (vllm format)."),
    seed: int = typer.Option(0, "--seed", help="Seed for draws of unmeasured groups."),
    allow_unconverged: bool = typer.Option(False, "--allow-unconverged",
                                           help="Decide from a fit that did not converge "
                                           "(every output then says so)."),
) -> None:
    """Speedup bands, break-even RPS*, k* and risk-aware choices; or a vLLM config.

    Risk-neutral picks the k with the lowest expected latency; risk-aware the k with the lowest
    latency at probability 1 - --risk (its posterior 95% quantile by default). Neither picks a
    k that is past its capacity in more than --max-saturated of the posterior draws at that
    load. A row is marked extrapolated past the highest rate measured with its chosen k (at
    that alpha, or the nearest measured ones) or without SD. --format vllm prints a
    --speculative-config whose num_speculative_tokens_per_batch_size follows k*(rps) mapped to
    batch size B = rps*L.
    """
    quiet_pymc()
    if fmt not in FORMATS:
        raise InputError(f"use one of {', '.join(FORMATS)}", field="fmt")
    if policy not in POLICIES:
        raise InputError(f"use one of {', '.join(POLICIES)}", field="policy")
    checks.share(risk, "risk")
    checks.share(max_saturated, "max_saturated", below_one=True)
    alphas = check_alphas(alpha)
    ks = None if k is None else checks.draft_lengths(parse_floats(k, "k"))
    loads = check_loads(rps)
    # pandas, xarray and the models only once the options are known to be good
    from bayeslat import api

    fit = api.load(model_path)
    found = fit.decide(alphas, setup=setup, rps=loads, k=ks, prefill=prefill, decode=decode,
                       verifier_params=verifier_params, drafter_params=drafter_params,
                       risk=risk, max_saturated=max_saturated, seed=seed,
                       allow_unconverged=allow_unconverged, jobs=None, single=fmt == "vllm")
    if fmt == "vllm":
        config = found.vllm_config(policy=policy, max_batch=max_batch)
        for line in found.warnings:
            typer.echo(f"warning: {line}", err=True)
        typer.echo(json.dumps(config))
        return
    decisions, break_even, diag = found.table(), found.break_even(), found.diagnostics
    if fmt == "json":
        typer.echo(json.dumps({
            "model": str(model_path), "variant": fit.variant, "epsilon": risk,
            "max_saturated": max_saturated, "converged": diag.converged,
            "diagnostics": {"max_rhat": diag.max_rhat, "min_ess_bulk": diag.min_ess_bulk,
                            "min_ess_tail": diag.min_ess_tail,
                            "divergences": diag.divergences},
            "arrivals": found.arrivals, "warnings": found.warnings,
            "setups": _records(found.info),
            "decisions": _records(decisions), "break_even": _records(break_even),
        }, indent=2))
    else:
        _print_tables(decisions, break_even, found.info, risk, max_saturated, found.warnings,
                      found.arrivals)


def _records(df):
    return json.loads(df.to_json(orient="records"))


def _num(value, fmt):
    """A number for a table cell; '–' where it is undefined."""
    return "–" if not np.isfinite(value) else format(value, fmt)


def _print_tables(decisions, break_even, info, risk, max_saturated, warnings, arrivals):
    from bayeslat.data.schema import RATED
    from bayeslat.decide import arrivals_note, shows_rps_star

    out = make_console()
    for line in warnings:
        out.print(f"[yellow]warning:[/] {line}", highlight=False)
    info = info.set_index("setup")
    for (name, a), part in decisions.groupby(["setup", "alpha"], sort=False):
        about = info.loc[name]
        table = Table(title=f"{name}, alpha = {a:g}", title_justify="left")
        if about["new_setup"]:
            table.caption = "never measured: every row is a prediction (extrapolated)"
        elif np.isfinite(about["rps_measured"]):
            source = "throughput benchmark" if about["ceiling_measured"] else "highest measured"
            table.caption = (f"measured up to {about['rps_measured']:.3g} req/s; ceiling "
                             f"{about['rps_ceiling']:.3g} req/s ({source})")
        for header in ("rps", "extrapolated", "k neutral", f"k risk {1 - risk:.0%}", "speedup",
                       "90% band", "P(hurts)", "regret", "P(sat)", "note"):
            table.add_column(header, justify="right")
        for r in part.itertuples():
            cells = _decision_cells(r, max_saturated)
            table.add_row(f"{r.rps:.3g}", "yes" if r.extrapolated else "", _k(r.k_neutral),
                          _k(r.k_risk), *cells)
        out.print(table)
        be = break_even[(break_even["setup"] == name) & (break_even["alpha"] == a)]
        table = Table(title="break-even per draft length", title_justify="left")
        for header in ("k", "C1R", "C2R", "P(C2R>1)", "capacity", "90% band", "RPS*",
                       "90% band", "P(exists)", "alert"):
            table.add_column(header, justify="right")
        for r in be.itertuples():
            likely = shows_rps_star(r.p_break_even)
            star = ("none" if not likely else "beyond capacity" if r.rps_star_beyond_capacity
                    else f"{r.rps_star:.3g}")
            alert = ("never" if np.isposinf(r.rps_alert) else "beyond capacity"
                     if r.alert_beyond_capacity else _num(r.rps_alert, ".3g"))
            table.add_row(str(int(r.k)), _num(r.c1r, ".3f"), _num(r.c2r, ".3f"),
                          f"{r.p_c2r_above_1:.2f}", _num(r.capacity, ".3g"),
                          f"{_num(r.capacity_q05, '.3g')}–{_num(r.capacity_q95, '.3g')}", star,
                          f"{r.rps_star_q05:.3g}–{r.rps_star_q95:.3g}" if likely else "",
                          f"{r.p_break_even:.2f}", alert)
        out.print(table)
    out.print("rps, capacity and RPS* in req/s; k risk = the k with the lowest latency at "
              f"{1 - risk:.0%} probability (its true latency's {1 - risk:.0%} quantile); "
              "speedup = latency without SD / with SD, for the risk-aware k, its band and "
              "P(hurts) with the scatter of the true latency about the fitted curve; "
              "regret = expected extra latency of that k over the best k, in the "
              "draws where it keeps up; P(sat) = share of draws in which it is past its "
              f"capacity (neither policy picks a k above {max_saturated:g}); extrapolated = "
              "past the highest load measured with the risk-aware k at this alpha (or with "
              "the nearest measured alphas and ks) or without SD; RPS* shown where it exists "
              "in most draws; "
              "alert = load below which SD hurts with only 5% probability; beyond capacity = "
              "above the measured ceiling; note 'k N: x s' = the risk-neutral k and its "
              f"latency at {1 - risk:.0%} probability, above the risk-aware k's; 'unmeasured: "
              "N' = other ks (or no SD) keeping up in at least half the draws at this load but "
              "measured only at lower loads: the choice compares with their extrapolation; "
              "'misfit' = the fit's adequacy check marked the chosen k's configuration (or no "
              "SD's) misfit: its band rests on a curve that misses its measurements."
              + (f" The {arrivals_note(arrivals)}." if arrivals in RATED
                 else ""),
              highlight=False)


def _decision_cells(r, max_saturated):
    """speedup, band, P(hurts), regret, P(sat) and note of one decision row: why the
    baseline's draws are missing, or why the risk-aware k is not the risk-neutral one."""
    if np.isnan(r.k_risk):
        return ("saturated", "", "", "", "", "all k saturated")
    notes = ["no-SD saturated"] if r.p_valid < 0.5 else []
    if r.misfit:
        notes.append("misfit")
    if np.isfinite(r.k_neutral) and r.k_neutral != r.k_risk:
        notes.append(f"k {int(r.k_neutral)}: {_num(r.latency_tail_neutral, '.3g')} s")
    if r.unmeasured_ks:
        from bayeslat.decide import ks_list

        notes.append(f"unmeasured: {ks_list(r.unmeasured_ks)}")
    note = "; ".join(notes)
    if not np.isfinite(r.speedup):
        return ("–", "", f"{r.p_sd_hurts:.2f}", _num(r.regret, ".1%"), f"{r.p_saturated:.2f}",
                note)
    return (f"{r.speedup:.2f}", f"{r.speedup_q05:.2f}–{r.speedup_q95:.2f}",
            f"{r.p_sd_hurts:.2f}", _num(r.regret, ".1%"), f"{r.p_saturated:.2f}", note)


def _k(value):
    return "-" if np.isnan(value) else str(int(value))
