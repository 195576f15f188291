"""The evidence behind the default model near capacity (issue 12): every figure, printed.

    .venv/bin/python benchmarks/capacity.py [--part example,holdout,llmd,sampler,engine]
                                            [--variants hierarchical,capacity] [--chains 4]
                                            [--draws 1000 (0: to the bar)] [--seed 0]
                                            [--engine dense-8b-h100:3]
                                            [--prior NAME=VALUE ...] [--cells CSV]
                                            [--truth constant|poisson]
                                            [--sweep constant|poisson]

Parts (all by default; each fit's wall time, convergence and divergences are printed with it):

- ``example``: the shipped example, each variant fitted to it: the adequacy figures of
  :func:`bayeslat.adequacy.check` (50%/90% predictive coverage overall and on each
  configuration's top three loads, model capacity against the measured ceiling, sigma, nu) and
  the PSIS-LOO comparison of the variants (:func:`arviz.compare`).
- ``holdout``: leave-top-rate-out on the example: each variant fitted without every
  configuration's highest constant rate, then asked to predict it: MAPE of the predictive
  median and 50%/90% coverage of the held-out points, how many predicted medians saturate
  (past the model's capacity: an infinite error) and the MAPE of the others, the five largest
  errors.
- ``llmd``: the real GPU sweep ``data/llmd/sweep.csv`` (no SD): ``dense`` and
  ``dense-capacity`` fitted to it and, one constant rate left out at a time, MAPE and coverage
  of the rate left out; the model capacity against the measured 17.98 req/s.
- ``sampler``: data drawn from the paper's model itself (the model sampler, no wall): PSIS-LOO
  of each variant, to show that the capacity model loses nothing there.
- ``engine``: engine-simulator data of a preset and seed the example does not use
  (``--engine PRESET:SEED``, ``dense-8b-h100:3`` by default; the preset's first deployment,
  one drafter): the last variant's 90% speedup bands against the simulator's long-run truth
  (benchmarks of 8x the requests; a speedup of 0 where the SD configuration is past its
  capacity) at loads up to each setup's highest measured baseline rate, as ``decide`` gives
  them (with the likelihood's discrepancy), both over the cells within the SD configuration's
  own measured rates (decide's ``speedup_extrapolated``) and over all, and split by decide's
  ``misfit`` mark (the fit's adequacy check stored as ``bayeslat fit`` stores it), and by
  whether the SD configuration or its baseline runs its requests alone at the load (below the
  rate of its synchronous benchmark: evenly spaced requests that never overlap, whose latency
  is the synchronous benchmark's, which the model's curves do not give); the regret
  of the risk-aware and the risk-neutral k there, and of the risk-aware k where decide marks
  its row neither extrapolated nor naming an unmeasured contender, and where it does.
  ``--cells CSV`` writes every scored cell (bands, truth, labels); ``--truth poisson``
  measures the truth with Poisson arrivals (production traffic) instead of a constant rate,
  ``--sweep poisson`` the sweep (GuideLLM's ``poisson`` profile).

``--draws 0`` samples each fit to the convergence bar with ``bayeslat fit``'s tuning (the
default fit); a number fixes the draws and the tuning steps. ``--prior NAME=VALUE`` sets a
prior of every fit (a JSON value: ``--prior 'nu_gamma=[40, 4]'``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayeslat import adequacy, decide, fitting, validate  # noqa: E402
from bayeslat.cli.options import quiet_pymc  # noqa: E402
from bayeslat.data import schema  # noqa: E402
from bayeslat.models import get, sampling  # noqa: E402
from bayeslat.models.base import PARETO_K, psis_loo  # noqa: E402

EXAMPLE = ROOT / "data" / "example" / "sweep.parquet"
LLMD = ROOT / "data" / "llmd" / "sweep.csv"
LLMD_CEILING = 17.98


def fitted(variant: str, table: pd.DataFrame, args, label: str):
    """A fitted model of ``variant`` (its default config with ``--prior`` overrides), its wall
    time and diagnostics printed."""
    cls = get(variant)
    config = cls.default_config()
    model = cls(table, dataclasses.replace(config, priors=config.priors | args.priors))
    start = time.perf_counter()
    # --draws 0: as bayeslat fit samples (to the convergence bar, its default tuning)
    length = ({"draws": args.draws, "tune": args.draws} if args.draws
              else {"draws": None, "tune": sampling.TUNE})
    idata = sampling.sample(model, **length, chains=args.chains, seed=args.seed,
                            progressbar=False)
    diag = sampling.diagnostics(idata, time.perf_counter() - start)
    timing = json.loads(idata.posterior.attrs["sampler"])
    print(f"  [{label}] {variant}: {diag.seconds:.1f} s (compile {timing.get('compile_s', 0):.1f}"
          f" s), max R-hat {diag.max_rhat:.3f}, min bulk/tail ESS {diag.min_ess_bulk:.0f}/"
          f"{diag.min_ess_tail:.0f}, divergences {diag.divergences}"
          f"{'' if diag.converged else '  NOT CONVERGED'}", flush=True)
    if "ceiling_shortfall" in idata.posterior:
        q = np.quantile(idata.posterior["ceiling_shortfall"], [0.05, 0.5, 0.95])
        print(f"    ceiling_shortfall (log model capacity over the measured ceilings): {q[1]:.3f}"
              f" [{q[0]:.3f}, {q[2]:.3f}]", flush=True)
    return model


def part_example(args):
    import arviz as az

    print("== shipped example: adequacy and PSIS-LOO")
    table = schema.read_table(EXAMPLE)
    loo = {}
    for variant in args.variants:
        model = fitted(variant, table, args, "example")
        a = adequacy.check(model, seed=args.seed)
        f = a.figures
        print("    " + ", ".join(f"{k} {v:.3g}" for k, v in f.items()))
        for w in a.warnings:
            print(f"    warning: {w}")
        loo[variant] = model.idata
    if len(loo) > 1:
        print(az.compare(loo, ic="loo").round(1).to_string())
    for variant, idata in loo.items():
        f = validate.loo_figures(psis_loo(idata))
        print(f"    {variant}: Pareto k > {PARETO_K:g} at {f['pareto_k_over_07']} of "
              f"{f['points']} points (> 1 at {f['pareto_k_over_1']}): PSIS-LOO is unreliable "
              "there")


def part_holdout(args):
    print("== shipped example: leave-top-rate-out")
    table = schema.read_table(EXAMPLE)
    (fold,) = validate.folds(table, "top-rate")  # each configuration's highest constant rate
    top = fold.drop
    for variant in args.variants:
        model = fitted(variant, table[~top].reset_index(drop=True), args, "holdout")
        out = adequacy.held_out(model, table[top].reset_index(drop=True), args.seed)
        finite = np.isfinite(out["ape"])  # a median past the model's capacity: inf
        print(f"    {variant}: {len(out)} held-out top rates, MAPE {out['ape'].mean():.2%}, "
              f"median APE {out['ape'].median():.2%}, max APE {out['ape'].max():.1%}, "
              f"coverage 50% {out['in50'].mean():.3f}, 90% {out['in90'].mean():.3f}; "
              f"{(~finite).sum()} predicted medians saturated, MAPE of the others "
              f"{out.loc[finite, 'ape'].mean():.2%}")
        worst = out.assign(ratio=out["median"] / out["latency_mean"]).nlargest(5, "ape")
        print("    the largest errors (predicted median over measured): " + "; ".join(
                  f"{row.config} {row.ratio:.2f}" for row in worst.itertuples()))


def part_llmd(args):
    print("== real llm-d sweep (data/llmd/sweep.csv): leave-one-rate-out")
    table = schema.read_table(LLMD)
    for variant in ("dense", "dense-capacity"):
        model = fitted(variant, table, args, "all rates")
        pred = model.predict(model.table.iloc[[0]], seed=args.seed)
        cap = float(pred["capacity"].median())
        nu = float(model.idata.posterior["nu"].median())
        print(f"    {variant}: capacity {cap:.1f} req/s against {LLMD_CEILING} measured "
              f"({cap / LLMD_CEILING - 1:+.1%}), nu {nu:.1f}")
        rows = []
        for fold in validate.folds(table, "rate"):  # as `bayeslat validate --split rate`
            model = fitted(variant, table[~fold.drop].reset_index(drop=True), args,
                           f"without {fold.held_out}")
            held = table[fold.scored(table)].reset_index(drop=True)
            rows.append(adequacy.held_out(model, held, args.seed))
        out = pd.concat(rows, ignore_index=True)
        print(f"    {variant}: leave-one-rate-out over {len(out)} constant rates: MAPE "
              f"{out['ape'].mean():.2%} (per rate: "
              + ", ".join(f"{a:.1%}" for a in out["ape"]) + f"), 90% coverage "
              f"{out['in90'].mean():.2f}")


def part_sampler(args):
    import arviz as az

    from bayeslat.simulate.generative import SamplerSpec, sample_sweep

    print("== model-sampler data (the paper's model, no wall): PSIS-LOO")
    spec = SamplerSpec(verifiers=(("llama-8b", 8.0), ("llama-70b", 70.0)),
                       prefill_tokens=(256.0, 2048.0), decode_tokens=(64.0, 256.0),
                       drafters=(("eagle3", "eagle3-small", 0.25),),
                       alphas=(0.6, 0.8), ks=(2, 4))
    table, _ = sample_sweep(spec, seed=args.seed + 11)
    loo = {v: fitted(v, table, args, "sampler").idata for v in args.variants}
    if len(loo) > 1:
        print(az.compare(loo, ic="loo").round(1).to_string())


def engine_truth(configs, loads, seed: int, arrivals: str = "constant") -> pd.DataFrame:
    """Long-run mean latency of each configuration at its loads: a 0.5% standard-error target
    and 8x the requests of a sweep's benchmark with requests sent at a constant rate, 200x
    with Poisson arrivals (``arrivals``: production traffic), whose queue near capacity
    wanders for long stretches: at 800 requests two seeds' truths differed by up to 5% at 78%
    of a Llama-1B baseline's top rate and 20% at its top rate, at 20,000 by 1–3% (the
    standard error's target assumes independent requests). A benchmark
    past the configuration's capacity (flagged as a sweep's would be: its latency growing
    through the run, or its rate short of the target) has no long-run latency: ``inf``, a
    speedup of 0 (its finite mean is only the length of the run)."""
    from bayeslat.data.saturation import flag_saturated
    from bayeslat.simulate.protocol import Protocol, run_benchmark

    long = (Protocol(requests=800, target_se=0.005) if arrivals == "constant"
            else Protocol(requests=20_000, target_se=0.005, max_requests=200_000))
    out, growing, rps = [], [], []
    for i, (config, rates) in enumerate(zip(configs, loads, strict=True)):
        sync = run_benchmark(config, "synchronous", np.nan, long, seed, (i, 0))
        for j, rate in enumerate(rates):
            bench = run_benchmark(config, arrivals, float(rate), long, seed, (i, 1 + j),
                                  sync.row["latency_mean"] * 2)
            out.append({**bench.row, **config.identity()})
            growing.append(bench.growing)
            rps.append(rate)
    runs = flag_saturated(pd.DataFrame(out), pd.Series(growing))
    latency = runs["latency_mean"].where(~runs["saturated"], np.inf)
    return runs[list(config.identity())].assign(rps=rps, latency=latency)


def part_engine(args):
    from dataclasses import replace

    from bayeslat.simulate.presets import preset
    from bayeslat.simulate.protocol import sweep

    name, seed = args.engine.split(":")
    seed = int(seed)
    print(f"== engine-simulator data ({name}, seed {seed}, one drafter, {args.sweep} sweep, "
          f"{args.truth} truth): speedup bands against the long-run truth within each setup's "
          "measured range")
    base = preset(name)
    chosen = replace(base, deployments=base.deployments[:1], alphas=(0.6, 0.8, 0.95),
                     ks=(1, 2, 4, 6))
    configs = chosen.configurations()
    table = sweep(configs, replace(chosen.protocol, arrivals=args.sweep), seed=seed, workers=2)
    model = fitted(args.variants[-1], table, args, "engine")
    check = adequacy.check(model, seed=args.seed)
    fitting.record_misfit(model, check)  # as bayeslat fit does: decide marks those rows
    setups = decide.setups(model.table)
    # a speedup is measured up to the baseline's highest measured rate (an SD configuration
    # often runs higher, to where the baseline is past its capacity)
    rows = model.rows[model.rows["k"] == 0]
    measured = rows.groupby("group")["rps"].max()
    cells, within, regrets, where, neutral, saturated = [], [], [], [], [], 0
    fits_badly = []  # whether decide marks the cell misfit (its configuration or baseline)
    # at each regret's cell: whether every k's speedup was within its own measured rates, and
    # whether decide's answer was (neither its chosen k's nor another contending k's
    # extrapolated: decide's row neither "extrapolated" nor naming "unmeasured" ks)
    regret_within, answer_within = [], []
    table_rows = []  # every cell, for --cells
    # below the rate of its synchronous benchmark (1/its latency) a configuration's requests,
    # evenly spaced by a constant-rate benchmark, never overlap: the truth is a lone
    # request's latency, which no curve of the model describes (it has a global sync_shift)
    sync = model.rows[model.rows["strategy"] == "synchronous"]
    lone_rate = {(g, round(a, 6), int(k)): 1.0 / latency for g, a, k, latency in zip(
        sync["group"], sync["alpha0"], sync["k"], sync["latency_mean"], strict=True)}
    lone = []  # whether the SD configuration or its baseline runs its requests alone
    for _, setup in setups.iterrows():
        group = setup["setup"].rsplit(" ", 1)[0]
        loads = np.linspace(0.1, 1.0, 5) * measured[group]
        ds = decide.from_model(model, setup.to_frame().T.reset_index(drop=True),
                               list(chosen.alphas), [0, *chosen.ks], loads, seed=args.seed)
        mine = [c for c in configs if c.deployment.verifier.name == setup["verifier"]
                and c.prefill_tokens == setup["prefill_tokens"]
                and c.decode_tokens == setup["decode_tokens"]]
        truth = engine_truth(mine, [loads] * len(mine), seed=seed + 1000, arrivals=args.truth)
        truth["alpha"] = truth["alpha"].fillna(0.0)
        saturated += int(np.isinf(truth.loc[truth["k"] > 0, "latency"]).sum())
        for alpha in chosen.alphas:
            for r in loads:
                at = truth[np.isclose(truth["rps"], r)]
                lat0 = float(at.loc[at["k"] == 0, "latency"].iloc[0])
                true_k = {0: lat0} | {int(x.k): x.latency for x in at[
                    np.isclose(at["alpha"], alpha) & (at["k"] > 0)].itertuples()}
                one = ds.sel(alpha=alpha, rps=r).isel(setup=0)
                # decide's label: whether each k's speedup rests on loads past its measurements
                past = one["speedup_extrapolated"]
                measured_here = {k: not bool(past.sel(k=k)) for k in true_k if k > 0}
                for k, lat in true_k.items():
                    if k == 0:
                        continue
                    band = one["speedup"].sel(k=k)
                    s = lat0 / lat
                    cells.append(float(band.sel(stat="q05")) <= s <= float(band.sel(stat="q95")))
                    table_rows.append({"setup": setup["setup"], "alpha": alpha, "k": k,
                                       "rps": r, "load": r / measured[group], "truth": s}
                                      | {q: float(band.sel(stat=q))
                                         for q in ("q05", "q50", "q95")})
                    within.append(measured_here[k])
                    fits_badly.append(bool(one["misfit"].sel(k=k)))
                    lone.append(any(r < lone_rate.get((group, a, kk), 0.0)
                                    for a, kk in ((round(alpha, 6), k), (0.0, 0))))
                k_risk = one["k_risk"].item()
                best = min(true_k, key=true_k.get)
                if np.isfinite(one["k_neutral"].item()):
                    neutral.append(true_k[int(one["k_neutral"])] / true_k[best] - 1)
                if np.isfinite(k_risk):
                    regrets.append(true_k[int(k_risk)] / true_k[best] - 1)
                    regret_within.append(all(measured_here.values()))
                    others = one["unmeasured_contender"].sel(k=one["k"] != k_risk)
                    answer_within.append(not (bool(past.sel(k=int(k_risk)))
                                              or bool(others.any())))
                    where.append(f"{setup['setup']}, alpha {alpha:g}, {r:.3g} req/s: k "
                                 f"{int(k_risk)} where k {best} is best; P(SD slower) "
                                 + ", ".join(f"k {k} {p:.2f}" for k, p in zip(
                                     one["k"].values, one["p_sd_hurts"].values, strict=True))
                                 + "; latency at 95% " + ", ".join(
                                     f"k {k} {t:.3g} s" for k, t in zip(
                                         one["k"].values, one["latency_tail"].values,
                                         strict=True)))
    cells, within, fits_badly = np.array(cells), np.array(within), np.array(fits_badly)
    if args.cells:
        pd.DataFrame(table_rows).assign(covered=cells, within=within, misfit=fits_badly,
                                        lone=lone).to_csv(args.cells, index=False)
        print(f"    every cell written to {args.cells}")
    regrets, neutral = np.array(regrets), np.array(neutral)
    regret_within, answer_within = np.array(regret_within), np.array(answer_within)
    print(f"    decide's 90% speedup bands cover the long-run truth in {cells[within].mean():.3f}"
          f" of {within.sum()} (setup, alpha, k, load) cells within the SD configuration's own "
          f"measured rates, {cells.mean():.3f} of all {len(cells)} up to the baseline's top "
          f"rate ({saturated} of them past the SD configuration's capacity: speedup 0); "
          "risk-aware k: mean regret "
          f"{regrets.mean():.2%}, max {regrets.max():.1%} over {len(regrets)} cells; "
          f"risk-neutral k: {neutral.mean():.2%}, max {neutral.max():.1%}")
    marked, configs = int(check.configs["misfit"].sum()), len(check.configs)
    lone = np.array(lone)
    splits = [(f"configurations {name} by the fit's adequacy check ({count} of {configs})", part)
              for name, part, count in (("marked misfit", fits_badly, marked),
                                        ("not marked", ~fits_badly, configs - marked))]
    splits += [(f"loads where the SD configuration's or its baseline's requests run {name} "
                "(below / above the rate of its synchronous benchmark)", part)
               for name, part in (("alone", lone), ("overlapping", ~lone))]
    for what, part in splits:
        mine = within & part
        print(f"    within the own rates, {what}: "
              + (f"{cells[mine].mean():.3f} of {mine.sum()} cells covered" if mine.any()
                 else "no cells"))
    inside = regrets[regret_within]
    print(f"    risk-aware k where every k's load is within its own measured rates: mean regret "
          f"{inside.mean():.2%}, max {inside.max():.1%} over {len(inside)} cells")
    shown = regrets[answer_within]
    print(f"    risk-aware k where decide marks neither its answer extrapolated nor another "
          f"k unmeasured: mean regret "
          f"{shown.mean():.2%}, max {shown.max():.1%} over {len(shown)} cells; where it does: "
          + (f"mean {regrets[~answer_within].mean():.2%}, max "
             f"{regrets[~answer_within].max():.1%} over {(~answer_within).sum()} cells"
             if (~answer_within).any() else "none"))
    print(f"    the largest regret: {where[int(regrets.argmax())]}")


PARTS = {"example": part_example, "holdout": part_holdout, "llmd": part_llmd,
         "sampler": part_sampler, "engine": part_engine}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", default=",".join(PARTS))
    parser.add_argument("--variants", default="hierarchical,capacity")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", default="dense-8b-h100:3",
                        help="the engine part's preset and simulation seed")
    parser.add_argument("--truth", choices=("constant", "poisson"), default="constant",
                        help="engine part: the truth's arrivals")
    parser.add_argument("--sweep", choices=("constant", "poisson"), default="constant",
                        help="engine part: the sweep's arrivals")
    parser.add_argument("--cells", metavar="CSV",
                        help="engine part: write every (setup, alpha, k, load) cell here")
    parser.add_argument("--prior", action="append", default=[], metavar="NAME=VALUE",
                        help="a prior of every fit set to a JSON value (bayeslat.scaling)")
    args = parser.parse_args()
    args.priors = {k: json.loads(v) for k, v in (p.split("=", 1) for p in args.prior)}
    args.variants = args.variants.split(",")
    quiet_pymc()
    for part in args.part.split(","):
        start = time.perf_counter()
        PARTS[part](args)
        print(f"  ({part}: {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
