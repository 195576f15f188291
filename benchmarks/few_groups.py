"""The hierarchical fit of sweeps with few groups: a user's sweep of one or two verifiers.

Fits the shipped example's rows of one verifier (4 groups), two (8) and all three (12) with
``bayeslat.fit``'s defaults, or with every coefficient sampled non-centred, and prints each
fit's convergence and its time. Run from the project root::

    .venv/bin/python benchmarks/few_groups.py [--seed 0] [--only 4,8] [--noncentered all]
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
    args = parser.parse_args()
    config = None if args.noncentered == "default" else dataclasses.replace(
        ScalingConfig(), noncentered=COEFS)
    quiet_pymc()
    table = bayeslat.read_table("data/example/sweep.parquet")
    print("groups  rows  max R-hat  min bulk ESS  min tail ESS  divergences  time (s)  "
          "non-centred")
    for n in (int(v) for v in args.only.split(",")):
        rows = table[table["verifier"].isin(SUBSETS[n])]
        start = time.perf_counter()
        fit = bayeslat.fit(rows, config=config, seed=args.seed, progressbar=False)
        wall = time.perf_counter() - start
        d = fit.diagnostics
        print(f"{n:>6}  {len(rows):>4}  {d.max_rhat:>9.4f}  {d.min_ess_bulk:>12.0f}  "
              f"{d.min_ess_tail:>12.0f}  {d.divergences:>11d}  {wall:>8.0f}  "
              f"{','.join(fit.model.config.noncentered)}", flush=True)


if __name__ == "__main__":
    main()
