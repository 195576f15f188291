"""``bayeslat decide``: what to deploy, from a fitted model, with its uncertainty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from bayeslat.cli.options import make_console, parse_floats, quiet_pymc, shows_rps_star
from bayeslat.errors import InputError

FORMATS = ("table", "json", "vllm")
POLICIES = ("risk", "neutral")


def command(
    model_path: Annotated[Path, typer.Argument(metavar="MODEL",
                                               help="A fit written by bayeslat fit.")],
    alpha: str = typer.Option(..., "--alpha", help="Acceptance rate(s): 0.7 or 0.6,0.8."),
    rps: str = typer.Option(None, "--rps", help="Loads in req/s: 0,2,4 or start:stop:count. "
                            "Default: 12 loads up to the highest measured for the setup."),
    k: str = typer.Option("0:8:9", "--k", help="Draft lengths to compare (0 is always added)."),
    setup: str = typer.Option(None, "--setup", help="Choose the setup whose label contains this "
                              "text (see the list printed without it)."),
    prefill: float = typer.Option(None, "--prefill", help="Predict for this prompt length."),
    decode: float = typer.Option(None, "--decode", help="Predict for this output length."),
    verifier_params: float = typer.Option(None, "--verifier-params",
                                          help="Predict for this verifier size (1e9 params)."),
    drafter_params: float = typer.Option(None, "--drafter-params",
                                         help="Predict for this drafter size (1e9 params)."),
    risk: float = typer.Option(0.05, "--risk", help="Largest acceptable P(SD slower than "
                               "no SD) for the risk-aware choice."),
    policy: str = typer.Option("risk", "--policy", help="k for --format vllm: risk or neutral."),
    fmt: str = typer.Option("table", "--format", help="table, json or vllm."),
    max_batch: int = typer.Option(256, "--max-batch", help="vLLM's max_num_seqs (vllm format)."),
    seed: int = typer.Option(0, "--seed", help="Seed for draws of unmeasured groups."),
) -> None:
    """Speedup bands, break-even RPS*, k* and risk-aware choices; or a vLLM config.

    Risk-neutral picks the k with the best mean speedup; risk-aware the best mean among k with
    P(speedup < 1) <= --risk. --format vllm prints a --speculative-config whose
    num_speculative_tokens_per_batch_size follows k*(rps) mapped to batch size B = rps*L.
    """
    from bayeslat import decide
    from bayeslat.fit import load

    quiet_pymc()
    if fmt not in FORMATS:
        raise InputError(f"use one of {', '.join(FORMATS)}", field="--format")
    if policy not in POLICIES:
        raise InputError(f"use one of {', '.join(POLICIES)}", field="--policy")
    if not 0 <= risk <= 1:
        raise InputError("must be a probability in [0, 1]", field="--risk")
    alphas = parse_floats(alpha, "--alpha")
    if ((alphas < 0) | (alphas > 1)).any() or alphas.size == 0:
        raise InputError("acceptance rates must lie in [0, 1]", field="--alpha")
    ks = parse_floats(k, "--k")
    if (ks < 0).any() or (ks != np.round(ks)).any():
        raise InputError("draft lengths are whole numbers >= 0", field="--k")

    model = load(model_path)
    chosen = _choose_setups(decide.setups(model.table), setup, fmt == "vllm")
    for column, value in (("prefill_tokens", prefill), ("decode_tokens", decode),
                          ("verifier_params_b", verifier_params),
                          ("drafter_params_b", drafter_params)):
        if value is not None:
            if not value > 0:
                raise InputError("must be positive", field="--" + column.split("_")[0])
            chosen[column] = float(value)
    chosen["setup"] = _relabel(chosen)
    loads = parse_floats(rps, "--rps") if rps else _default_loads(model.table)
    if (loads < 0).any():
        raise InputError("loads must not be negative", field="--rps")
    ds = decide.from_model(model, chosen, alphas, ks.astype(int), loads, epsilon=risk, seed=seed)

    if fmt == "vllm":
        row = chosen.iloc[0]
        config = decide.vllm_config(ds, row["setup"], float(alphas[0]), row["method"],
                                    row["drafter"], policy, max_batch)
        typer.echo(json.dumps(config))
    elif fmt == "json":
        typer.echo(json.dumps({
            "model": str(model_path), "variant": model.variant, "epsilon": risk,
            "decisions": _records(decide.decision_table(ds)),
            "break_even": _records(decide.break_even_table(ds)),
        }, indent=2))
    else:
        _print_tables(decide.decision_table(ds), decide.break_even_table(ds), risk)


def _choose_setups(setups, text, single):
    if setups.empty:
        raise InputError("the fit has no speculative configurations to decide about", field="k")
    if text:
        setups = setups[setups["setup"].str.contains(text, regex=False)]
        if setups.empty:
            raise InputError(f"no setup contains {text!r}", field="--setup")
    if single and len(setups) > 1:
        raise InputError("a vLLM config is for one setup; choose one with --setup from: "
                         + "; ".join(setups["setup"]), field="--setup")
    return setups.reset_index(drop=True).copy()


def _relabel(setups):
    from bayeslat.data import schema

    return schema.group_labels(setups) + " " + setups["method"] + ":" + setups["drafter"]


def _default_loads(table):
    return np.linspace(0.0, float(table["rps"].max()), 12)


def _records(df):
    return json.loads(df.to_json(orient="records"))


def _print_tables(decisions, break_even, risk):
    out = make_console()
    for (name, a), part in decisions.groupby(["setup", "alpha"], sort=False):
        table = Table(title=f"{name}, alpha = {a:g}", title_justify="left")
        for header in ("rps", "k neutral", f"k risk ≤{risk:g}", "speedup", "90% band",
                       "P(hurts)", "regret", "note"):
            table.add_column(header, justify="right")
        for r in part.itertuples():
            note = "baseline saturated" if r.p_valid < 0.5 else ""
            table.add_row(f"{r.rps:.3g}", _k(r.k_neutral), _k(r.k_risk), f"{r.speedup:.2f}",
                          f"{r.speedup_q05:.2f}–{r.speedup_q95:.2f}", f"{r.p_sd_hurts:.2f}",
                          f"{r.regret:.1%}", note)
        out.print(table)
        be = break_even[(break_even["setup"] == name) & (break_even["alpha"] == a)]
        table = Table(title="break-even per draft length", title_justify="left")
        for header in ("k", "C1R", "C2R", "P(C2R>1)", "RPS*", "90% band", "P(exists)",
                       "alert"):
            table.add_column(header, justify="right")
        for r in be.itertuples():
            likely = shows_rps_star(r.p_break_even)
            table.add_row(str(int(r.k)), f"{r.c1r:.3f}", f"{r.c2r:.3f}", f"{r.p_c2r_above_1:.2f}",
                          f"{r.rps_star:.3g}" if likely else "none",
                          f"{r.rps_star_q05:.3g}–{r.rps_star_q95:.3g}" if likely else "",
                          f"{r.p_break_even:.2f}",
                          "never" if np.isinf(r.rps_alert) else f"{r.rps_alert:.3g}")
        out.print(table)
    out.print("rps and RPS* in req/s; speedup = latency without SD / with SD; regret = "
              "expected extra latency of the choice over the best k; RPS* shown where it exists "
              "in most draws; alert = load below which SD hurts with only 5% probability.")


def _k(value):
    return "-" if np.isnan(value) else str(int(value))
