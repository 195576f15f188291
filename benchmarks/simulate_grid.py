"""Time the engine simulator on one verifier's paper-scale grid, and print the figures.

The grid is the ``paper-grid-8b-h100`` preset: Llama-8B-class on H100 with an EAGLE-3 head,
16 prompt/output pairs x (11 alpha x 10 k + the k = 0 baseline) = 1776 configurations, each swept
with the paper's protocol (synchronous, throughput, 9 constant rates): 19,536 benchmarks. Every
benchmark measures enough requests for a 2% standard error on its mean latency (reruns with more
requests when not). Target: under 10 minutes on a 2-core machine.

Run: ``.venv/bin/python benchmarks/simulate_grid.py [--workers 2] [--seed 0] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from rich.progress import Progress

from bayeslat.data.schema import standard_error, write_table
from bayeslat.simulate import presets, protocol


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="paper-grid-8b-h100")
    parser.add_argument("--out", default=None, help="also write the table (Parquet)")
    args = parser.parse_args()

    pr = presets.preset(args.preset)
    configs = pr.configurations()
    # Compile the engine once here, not in every worker.
    protocol.sweep(configs[:1], pr.protocol, seed=args.seed)
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task(f"{args.preset}", total=len(configs))
        table = protocol.sweep(configs, pr.protocol, seed=args.seed, workers=args.workers,
                               progress=lambda n: bar.advance(task, n))
    elapsed = time.perf_counter() - start
    if args.out:
        write_table(table, args.out)

    ok = table[~table["saturated"]]
    rel_se = standard_error(ok) / ok["latency_mean"]
    print(f"preset              {args.preset}  (seed {args.seed}, {args.workers} workers, "
          f"{os.cpu_count()} CPUs)")
    print(f"configurations      {len(configs)}")
    print(f"benchmarks (rows)   {len(table)}  ({int(table['saturated'].sum())} flagged saturated)")
    print(f"measured requests   {int(table['n_successful'].sum()):,}")
    print(f"rel. SE of mean     unsaturated rows: median {np.median(rel_se):.2%}, "
          f"max {rel_se.max():.2%}, share <= 2%: {(rel_se <= 0.02).mean():.1%}")
    print(f"wall time           {elapsed:.1f} s  ({elapsed / 60:.2f} min; target < 10 min)")


if __name__ == "__main__":
    main()
