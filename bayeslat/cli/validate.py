"""``bayeslat validate``: refit without part of a sweep, score the predictions of that part."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from bayeslat.cli import options
from bayeslat.cli.options import make_console, number, quiet_pymc
from bayeslat.errors import InputError


def command(
    data: Path | None = typer.Argument(None, help="Sweep table (Parquet or tidy CSV); default: "
                                       "the shipped example data/example/sweep.parquet."),
    model: str = typer.Option("hierarchical", "--model", help="Variants to validate, "
                              "comma-separated (as for bayeslat fit; auto: the one it chooses "
                              "for the sweep); with the loo split, two or more are compared. "
                              "The default, the paper's model, refits fastest."),
    split: str = typer.Option("top-rate,alpha,k,workload,verifier", "--split",
                              help="Checks, comma-separated: top-rate (each configuration's "
                              "highest constant or Poisson rate), rate (leave-one-rate-out: a "
                              "fold per rank of the configurations' rates, lowest first), "
                              "alpha, k, workload, verifier (a fold per value), workload-2, "
                              "workload-4 (any workload-<n>: n workloads held out together), "
                              "budget (a third of the SD configurations "
                              "measured, the rest predicted), loo (no fold: the whole sweep "
                              "fitted once and scored by PSIS-LOO), sbc (simulation-based "
                              "calibration of the variant on the model sampler's design, "
                              "--sbc-fits refits; not of this sweep)."),
    output: Path | None = typer.Option(None, "-o", "--output", help="The HTML page; the JSON "
                                       "of every figure is written beside it (.json). Default "
                                       "reports/<data>-<models>-validation.html."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing file."),
    draws: int | None = options.DRAWS,
    tune: int = options.TUNE,
    chains: int | None = options.CHAINS,
    seed: int = typer.Option(0, "--seed", help="Random seed of the fits and predictions."),
    sampler: str = options.SAMPLER,
    config: Path | None = options.CONFIG,
    exact: bool = options.EXACT,
    sbc_fits: int = typer.Option(100, "--sbc-fits", min=10, help="Refits of the sbc check "
                                 "(about 10 s each on 2 cores, after one compile)."),
    jobs: int = typer.Option(2, "--jobs", min=1, help="Folds refitted at a time, each in its "
                             "own process (at most one per core; 1: one after the other). "
                             "The figures do not depend on it."),
) -> None:
    """Held-out prediction: for each fold of each split, refit the model without the fold's
    rows and predict them; print MAPE and R² of the predictive median and the share of the
    measured points inside their 50% and 90% predictive intervals, per fold and per split,
    and how the held-out setups' decisions (k*, RPS*) agree with those of a fit of the whole
    sweep. With the loo check, fit the whole sweep once and print its PSIS-LOO (several variants:
    ranked, with the choice it implies).

    A calibrated model puts about 50% and 90% of held-out points inside those intervals; every
    fold is a full fit (its convergence is shown beside its scores).
    """
    from bayeslat import validate, validate_page
    from bayeslat.data import schema
    from bayeslat.files import atomic_output
    from bayeslat.models import check, resolve
    from bayeslat.scaling import ScalingConfig

    splits = [s.strip() for s in split.split(",") if s.strip()]
    unknown = validate.unknown_checks(splits)
    if unknown or not splits:
        raise InputError(f"unknown split {', '.join(unknown) or '(none)'}; use one or more of "
                         f"{', '.join(validate.CHECKS)}", field="--split")
    variants = list(dict.fromkeys(m.strip() for m in model.split(",") if m.strip()))
    for variant in variants or [""]:
        check(variant)  # an unknown variant: refused here, before the data are read
    data = data if data is not None else schema.EXAMPLE
    table = schema.read_table(data)
    variants = list(dict.fromkeys(resolve(v, table)[0] for v in variants))  # auto: fit's choice
    output = output or Path("reports") / f"{data.stem}-{'+'.join(variants)}-validation.html"
    written = output.with_suffix(".html"), output.with_suffix(".json")
    for path in written:
        if path.exists() and not overwrite:
            raise InputError("the file exists; pass --overwrite to replace it or choose another "
                             "name with -o", path)
    if config is not None:
        ScalingConfig.load(config)  # a bad file is refused before any fit
    for variant in variants:  # refuse what the sweep or a variant cannot support before any fit
        validate.check(table, variant, splits)
    quiet_pymc()
    console = make_console()
    results = []
    with console.status("validating") as status:
        for variant in variants:
            results.append(validate.run(
                table, variant, splits, config=config, seed=seed,
                status=lambda msg: status.update(escape(msg)), draws=draws, tune=tune,
                chains=chains, sampler=sampler, exact=exact, progressbar=True,
                sbc_fits=sbc_fits, jobs=jobs))
    for result in results:
        for name in splits:
            if name not in (validate.LOO, validate.SBC):
                console.print(_split_table(result, name))
        if result.sbc:
            console.print(_sbc_table(result.sbc))
    comparison = None
    if validate.LOO in splits:
        if len(results) > 1:
            comparison = validate.compare(results)
        console.print(_loo_table(results, comparison))
        if comparison is not None:
            console.print(escape(validate.choice(comparison)))
    validate.write_json(written[1], results, comparison, overwrite=overwrite)
    with atomic_output(written[0], overwrite=overwrite) as tmp:
        tmp.write_text(validate_page.build(validate.document(results, comparison), str(data)),
                       encoding="utf-8")
    import pandas as pd

    fits = [r.folds for r in results] + [pd.DataFrame([r.loo]) for r in results if r.loo]
    fits = pd.concat(fits, ignore_index=True)
    unconverged = int((~fits["converged"].astype(bool)).sum()) if len(fits) else 0
    if unconverged:
        console.print(f"[yellow]warning:[/] {unconverged} of {len(fits)} fits did not "
                      "converge; their scores may reflect the sampler, not the model (try "
                      "more --tune or --draws)")
    console.print(f"wrote {written[0]} and {written[1]}")


def _sbc_table(sbc: dict) -> Table:
    """The uniformity of each quantity's ranks, failures in red, and the refits' convergence."""
    import pandas as pd

    fits = pd.DataFrame(sbc["convergence"])
    table = Table(title=f"Simulation-based calibration of {sbc['variant']}: {sbc['fits']} "
                  f"refits of prior draws, ranks among {sbc['rank_draws']} draws",
                  title_justify="left", caption_justify="left", caption=(
                      f"design: {sbc['design']}. mean rank 0.5 and the ECDF inside its "
                      f"simultaneous {1 - sbc['level']:.0%} band when calibrated; refits with "
                      f"divergences {(fits['divergences'] > 0).mean():.0%}, with R-hat > 1.01 "
                      f"{(fits['max_rhat'] > 1.01).mean():.0%}"))
    for col in ("quantity", "mean rank", "max |ECDF − z|", "inside band"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for row in sbc["uniformity"]:
        table.add_row(escape(row["quantity"]), number(row["mean_rank"], "{:.2f}"),
                      number(row["max_ecdf_diff"], "{:.3f}"),
                      "yes" if row["passes"] else "[red]no[/]")
    return table


def _loo_table(results, comparison) -> Table:
    """PSIS-LOO per variant: ranked when compared, with the Pareto k counts and convergence."""
    from bayeslat.models.base import PARETO_K

    table = Table(title="PSIS-LOO of the whole sweep", title_justify="left",
                  caption="elpd: expected log predictive density of the measured points, each "
                  "as if left out (higher is better; ± its standard error); Δ: behind the "
                  f"best; Pareto k > {PARETO_K:g}: points where the estimate is unreliable "
                  "(yellow: any, or not converged)", caption_justify="left")
    for header in ("variant", "elpd", "p_loo", "Δ elpd", f"Pareto k > {PARETO_K:g}",
                   "converged", "fit (s)"):
        table.add_column(header, justify="left" if header == "variant" else "right")
    order = (list(comparison["variant"]) if comparison is not None
             else [r.variant for r in results if r.loo])
    ranked = comparison.set_index("variant") if comparison is not None else None
    for variant in order:
        loo = next(r.loo for r in results if r.variant == variant)
        diff = (f"{ranked.loc[variant, 'elpd_diff']:.1f} ± {ranked.loc[variant, 'dse']:.1f}"
                if ranked is not None else "–")
        shaky = loo["pareto_k_over_07"]
        table.add_row(variant, f"{loo['elpd_loo']:.1f} ± {loo['se']:.1f}",
                      f"{loo['p_loo']:.1f}", diff, f"{shaky} of {loo['points']}",
                      "yes" if loo["converged"] else "no", f"{loo['seconds']:.0f}",
                      style="yellow" if shaky or not loo["converged"] else None)
    return table


def _split_table(result, name: str) -> Table:
    from bayeslat.validate import COVERAGE_90

    lo, hi = COVERAGE_90
    folds = result.folds[result.folds["split"] == name]
    # the paper's point methods cannot predict what they never saw (a whole workload or
    # verifier): columns of dashes only, so say it once instead (and keep the table narrow)
    answered = bool(folds[["point_answered", "coef_answered"]].to_numpy().any()
                    ) if "point_answered" in folds else True
    methods = ("curve, 6 coef.: the MAPE of the paper's point methods where they predict a "
               "finite latency, curve_fit of C1 and C2 per configuration and the six "
               "coefficients per group (–: configurations, or groups, they never saw)"
               if answered else "the paper's point methods (curve_fit per configuration or "
               "group) cannot predict any of these points: they never saw the "
               "configurations")
    table = Table(title=f"Held out: {name} ({result.variant})", title_justify="left",
                  caption=f"MAPE, MdAPE (the median absolute percentage error), R²: of the "
                  f"predictive median (sat.: points it puts past the model's capacity, left "
                  f"out of all three; a median a point just below that capacity predicts far "
                  f"too slow makes the MAPE huge, not the MdAPE); in 50%, in 90%: measured points "
                  f"inside the predictive interval (calibrated: about 0.50 and 0.90; yellow "
                  f"outside {lo}–{hi} or a refit that did not converge, marked *); "
                  f"{methods}; k*, RPS*: the held-out setups' decisions "
                  "against the whole sweep's fit (share of (setup, alpha, load) cells with "
                  "the same risk-aware k*, and in brackets the mean regret of the fold's k*, "
                  "its expected latency by the whole sweep's fit over that of the whole "
                  "sweep's k*, below 0 where the fold's k is faster on average at more risk; "
                  "share of RPS* "
                  "medians within 10%, of the pairs where both exist); fit s: the refit's "
                  "seconds", caption_justify="left")
    table.add_column("held out", justify="left", min_width=14)
    for header in ("points", "MAPE", "MdAPE", "R²", "in 50%", "in 90%",
                   *(("curve", "6 coef.") if answered else ()), "k*", "RPS*", "fit s"):
        # the MAPE may wrap before its count of points past capacity
        table.add_column(header, justify="right", no_wrap=header != "MAPE")
    overall = result.splits.set_index("split").loc[name]
    rows = [(r.held_out + ("" if r.converged else " *"), r, r.converged, f"{r.seconds:.0f}")
            for r in folds.itertuples()]
    if len(folds) > 1:
        rows.append(("all folds", overall, True, ""))
    for label, r, converged, seconds in rows:
        off = not lo <= r.inside_90 <= hi or not converged
        mape = _percent(r.mape) + (f" ({int(r.saturated)} sat.)" if r.saturated else "")
        r2 = "< -99" if r.r2 < -99 else number(r.r2, "{:.3f}")  # beyond: as bad as any
        k_star = number(getattr(r, "k_agree", float("nan")))  # absent without decisions
        if (regret := getattr(r, "k_regret_mean", float("nan"))) == regret:
            k_star += f" ({regret:.1%})".replace("-0.0%", "0.0%")
        rps_star = number(getattr(r, "rps_star_within", float("nan")))
        if pairs := getattr(r, "rps_star_pairs", 0):
            rps_star += f" of {int(pairs)}"
        table.add_row(label, str(int(r.points)), mape, _percent(r.mdape), r2,
                      number(r.inside_50),
                      number(r.inside_90),
                      *((_point(r, "point"), _point(r, "coef")) if answered else ()),
                      k_star, rps_star, seconds,
                      style="yellow" if off else None)
    return table


def _percent(share: float) -> str:
    """A share as a percentage, ``> 999%`` beyond (a median predicted near its wall: as bad
    as any, and its digits would crowd the table)."""
    return "> 999%" if share > 9.99 else number(share, "{:.1%}")


def _point(r, method: str) -> str:
    """One of the paper's point methods (``point``, ``coef``) on a row of scores: its MAPE, and
    on how many points it answers and how many it puts past its own saturation."""
    answered, mape = getattr(r, f"{method}_answered"), getattr(r, f"{method}_mape")
    if not answered:
        return "–"
    notes = [f"{answered} of {r.points}"] if answered < r.points else []
    if saturated := getattr(r, f"{method}_saturated"):
        notes.append(f"{saturated} saturated")
    text = _percent(mape)  # "–" for NaN: none finite
    return text + (f" ({', '.join(notes)})" if notes else "")
