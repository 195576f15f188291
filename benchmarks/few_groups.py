"""The hierarchical fit of sweeps with few groups: a user's sweep of one or two verifiers.

Fits the shipped example's rows of one verifier (4 groups), two (8) and all three (12) with
``bayeslat.fit``'s defaults, with every coefficient sampled non-centred, or with the spreads of
levels of few units sampled as well (``--tau-min-units 0``; by default they are fixed below 10
units), and prints each fit's convergence and its time. Run from the project root::

    .venv/bin/python benchmarks/few_groups.py [--seed 0] [--only 4,8] [--noncentered all]
        [--tau-min-units 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import bayeslat
from bayeslat.cli.options import quiet_pymc
from bayeslat.scaling import COEFS, ScalingConfig

SUBSETS = {4: ["llama-8b"], 8: ["llama-1b", "llama-8b"],
           12: ["llama-1b", "llama-8b", "llama-70b-fp8"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="4,8,12", help="group counts to fit, e.g. 4,8")
    parser.add_argument("--noncentered", choices=("default", "all"), default="default",
                        help="the default config (c1p non-centred) or all six coefficients")
    parser.add_argument("--tau-min-units", type=int, default=None,
                        help="the fewest units whose spread is sampled (default: the prior's)")
    args = parser.parse_args()
    config = ScalingConfig()
    if args.noncentered == "all":
        config = dataclasses.replace(config, noncentered=COEFS)
    if args.tau_min_units is not None:
        config = dataclasses.replace(config, priors={**config.priors,
                                                     "tau_min_units": args.tau_min_units})
    quiet_pymc()
    table = bayeslat.read_table("data/example/sweep.parquet")
    print("groups  rows  max R-hat  min bulk ESS  min tail ESS  divergences  time (s)  "
          "non-centred  fixed spreads")
    for n in (int(v) for v in args.only.split(",")):
        rows = table[table["verifier"].isin(SUBSETS[n])]
        start = time.perf_counter()
        fit = bayeslat.fit(rows, config=config, seed=args.seed, progressbar=False)
        wall = time.perf_counter() - start
        d = fit.diagnostics
        print(f"{n:>6}  {len(rows):>4}  {d.max_rhat:>9.4f}  {d.min_ess_bulk:>12.0f}  "
              f"{d.min_ess_tail:>12.0f}  {d.divergences:>11d}  {wall:>8.0f}  "
              f"{','.join(fit.model.config.noncentered)}  "
              f"{','.join(c for c in COEFS if fit.model.fixed_tau(c) is not None) or '-'}",
              flush=True)


if __name__ == "__main__":
    main()
