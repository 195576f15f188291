"""Simulation-based calibration (issue 14): ``--fits`` prior draws on the fixed design of
:mod:`bayeslat.calibration`, each refitted, and the uniformity of every quantity's ranks.

Prints the prior draws' acceptance, the compile and per-fit times, the refits' convergence, and
per quantity (population parameters, the probes' speedups and RPS*) the mean fractional rank,
the largest ECDF distance, whether the ranks stay inside their simultaneous 99% band, and the
ranks' histogram in ten bins; with ``--figure`` it writes the ECDF-difference plot, with
``--json`` every rank. Run from the project root::

    .venv/bin/python benchmarks/sbc.py [--fits 100] [--noncentered all] [--figure sbc.png]
        [--json sbc.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bayeslat import calibration, scaling
from bayeslat.cli.options import quiet_pymc
from bayeslat.scaling import ScalingConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=100)
    parser.add_argument("--model", default="hierarchical")
    parser.add_argument("--noncentered", default="",
                        help="coefficients sampled non-centred, comma-separated, or 'all' "
                             "(default: the variant's own)")
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", help="write the ECDF-difference plot here (PNG)")
    parser.add_argument("--json", help="write every rank and each refit's convergence here")
    args = parser.parse_args()
    quiet_pymc()
    names = (scaling.COEFS if args.noncentered == "all"
             else tuple(n for n in args.noncentered.split(",") if n))
    config = ScalingConfig(noncentered=names) if names else None
    clock = time.perf_counter()
    result = calibration.run(args.model, args.fits, config=config, seed=args.seed,
                             tune=args.tune, draws=args.draws,
                             progress=lambda done, total: print(
                                 f"\r{done}/{total} fits", end="", flush=True))
    total = time.perf_counter() - clock
    fits = result.fits
    print(f"\n{args.model} (non-centred: {', '.join(names) or 'the default'}), {args.fits} fits "
          f"of 2 chains x ({args.tune} + {args.draws}), ranks among {result.rank_draws} draws")
    print(f"prior draws serving every design rate: {result.acceptance:.3f}")
    print(f"wall {total:.0f} s: compile {result.compile_s:.1f} s once, sampling "
          f"{fits['seconds'].median():.1f} s a fit (median; max {fits['seconds'].max():.1f})")
    print(f"refits with divergences: {(fits['divergences'] > 0).mean():.2f} (median "
          f"{fits['divergences'].median():.0f}); max R-hat > 1.01: "
          f"{(fits['max_rhat'] > 1.01).mean():.2f}; min bulk ESS median "
          f"{fits['min_ess_bulk'].median():.0f}")
    check = result.uniformity()
    bins = np.linspace(0, result.rank_draws + 1, 11)
    counts = result.ranks.apply(lambda r: np.histogram(r, bins)[0])
    check["ranks in tenths"] = [" ".join(f"{c:2d}" for c in counts[name]) for name in check.index]
    print(check.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.json:
        Path(args.json).write_text(json.dumps(result.doc(), indent=1))
        print(f"wrote {args.json}")
    population = check[~check.index.str.startswith(("speedup", "RPS*"))]
    print(f"outside the 99% band: {int((~population['passes']).sum())} of {len(population)} "
          f"population parameters, {int((~check['passes']).sum() - (~population['passes']).sum())}"
          f" of {len(check) - len(population)} decisions")
    if args.figure:
        title = f"{args.model}: {args.fits} refits, ranks among {result.rank_draws} draws"
        calibration.figure(result.ranks, result.rank_draws, title).savefig(args.figure, dpi=110)
        print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()
