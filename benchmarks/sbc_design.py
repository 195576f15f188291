"""How much of a model's prior predictive looks like a sweep, on that sweep's own design.

Simulation-based calibration (issue 14) draws parameters from the model's priors, data from its
likelihood, and refits. With a fixed design (the sweep's own rates) that is only meaningful if
most prior draws give data like a sweep's: unsaturated at those rates. This draws ``--draws``
prior samples of each row's ``C1`` and ``C2`` under ``--model`` (PyMC's
``sample_prior_predictive`` on the prediction model of the sweep's rows) and prints the prior's
zero-load latency ``C1`` against the measured latencies, and the share of each draw's rows
past saturation (``rps·C2 ≥ 1``, where the likelihood's barrier sets the latency). Run from the
project root::

    .venv/bin/python benchmarks/sbc_design.py [--table data/example/sweep.parquet] [--draws 500]

Without ``--table`` the sweep is the model sampler's default (``simulate.generative``).
"""

from __future__ import annotations

import argparse

import numpy as np

import bayeslat
from bayeslat.cli.options import quiet_pymc
from bayeslat.models import get
from bayeslat.simulate import generative

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", help="a sweep table (default: the model sampler's)")
    parser.add_argument("--model", default="hierarchical")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    quiet_pymc()
    import pymc as pm

    table = (bayeslat.read_table(args.table) if args.table
             else generative.sample_sweep(seed=0)[0])
    model = get(args.model)(table)
    rows = model.rows
    with model.build(rows):
        prior = pm.sample_prior_predictive(draws=args.draws, random_seed=args.seed,
                                           var_names=["C1", "C2"]).prior
    c1, c2 = prior["C1"].values[0], prior["C2"].values[0]  # (draw, row)
    saturated = (rows["rps"].to_numpy()[None, :] * c2 >= 1.0).mean(axis=1)
    print(f"{args.model} on {args.table or 'the model sampler default sweep'}: "
          f"{len(rows)} rows, {args.draws} prior draws")
    print(f"measured log latency (s): {rows['log_latency'].min():.2f} to "
          f"{rows['log_latency'].max():.2f}")
    print(_quantiles("prior log C1 (s), over draws and rows", np.log(c1)))
    print(_quantiles("share of a draw's rows past saturation", saturated))
    print(f"draws with no row past saturation: {np.mean(saturated == 0):.3f}")


def _quantiles(what: str, values: np.ndarray) -> str:
    return f"{what}, quantiles " + ", ".join(
        f"{q:g}: {v:.3g}" for q, v in zip(QUANTILES, np.quantile(values, QUANTILES), strict=True))


if __name__ == "__main__":
    main()
