"""Fit the hierarchical model to a paper-scale single-verifier sweep and time it.

The sweep comes from the model sampler: one 8B verifier on two GPUs, six prefill by four decode
lengths (48 groups), each with its baseline and 25 SD configurations (5 alpha x 5 k), at nine
rates: 11,232 rows (``--data example``: the shipped example instead). Prints, in one run, the
time SciPy ``curve_fit`` takes for the paper's per-configuration point fits, and for each
likelihood of ``--likelihood`` (``summary``: the curve summaries of
:mod:`bayeslat.models.summary`, which fall back to every row when the scatter is
heavy-tailed; ``exact``: every row) the Bayesian fit's wall time (compile and sampling), max
R-hat, min bulk ESS, ESS per second and divergences. With both, the summaries' agreement with
the exact fit per configuration: posterior medians of ``C1``, ``C2``, the zero-load speedup
and RPS* within 0.25 posterior sd of the exact fit's, and 90% interval widths within ±20%.

Target (issue 13): converged (R-hat <= 1.01, min bulk ESS >= 400, no divergences) in <= 30 s
on a 2-core machine, and agreement for >= 95% of configurations.

    .venv/bin/python benchmarks/fit_hierarchical.py [--data paper|example]
        [--likelihood summary,exact] [--draws N] [--tune N] [--chains N]

``--draws`` and ``--chains`` default to what ``bayeslat fit`` does: chains for the machine,
drawing until the convergence bar holds (:func:`bayeslat.models.sampling.sample`).
"""

from __future__ import annotations

import argparse
import json
import time

import pandas as pd

from bayeslat import fitting, validate
from bayeslat.cli.options import quiet_pymc
from bayeslat.data import schema
from bayeslat.models import sampling
from bayeslat.models.hierarchical import HierarchicalModel
from bayeslat.models.start import curve_fits
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

SPEC = SamplerSpec(
    verifiers=(("llama-8b", 8.0),), hardware=("H100", "H200"),
    prefill_tokens=(128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0),
    decode_tokens=(64.0, 128.0, 256.0, 512.0),
    alphas=(0.5, 0.6, 0.7, 0.8, 0.9), ks=(1, 2, 3, 4, 6),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("paper", "example"), default="paper")
    parser.add_argument("--likelihood", default="summary,exact")
    # default: what bayeslat fit does (draws until the bar holds, chains for the machine)
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--tune", type=int, default=sampling.TUNE)
    parser.add_argument("--chains", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    quiet_pymc()

    if args.data == "paper":
        table, _ = sample_sweep(SPEC, seed=args.seed)
    else:
        table = schema.read_table(schema.EXAMPLE)
    configs, _ = pd.factorize(schema.config_labels(table))
    print(f"rows {len(table)}, configurations {configs.max() + 1}, "
          f"groups {schema.group_labels(table).nunique()}")

    clock = time.perf_counter()
    ok = ~table["saturated"].to_numpy()
    curve_fits(configs[ok], table["rps"].to_numpy()[ok], table["latency_mean"].to_numpy()[ok])
    print(f"scipy curve_fit, per configuration: {time.perf_counter() - clock:.1f} s")

    fits = {}
    for likelihood in args.likelihood.split(","):
        clock = time.perf_counter()
        model = HierarchicalModel(table)
        sampling.sample(model, draws=args.draws, tune=args.tune, chains=args.chains, seed=args.seed,
                   sampler="nutpie", progressbar=False, exact=likelihood == "exact")
        describe(model, time.perf_counter() - clock)
        fits[likelihood] = model
    if len(fits) == 2:
        agreement(*fits.values())


def describe(model, wall: float) -> None:
    """Print a fit's time, convergence and how hard its posterior is to sample."""
    idata = model.idata
    diag = sampling.diagnostics(idata, wall)
    timing = json.loads(idata.posterior.attrs["sampler"])
    print(f"hierarchical fit, {fitting.sampler_line(idata)}")
    print(f"{fitting.likelihood_line(idata)}: wall {wall:.1f} s")
    print(f"max R-hat {diag.max_rhat:.3f}, min bulk ESS {diag.min_ess_bulk:.0f}, "
          f"min tail ESS {diag.min_ess_tail:.0f}, divergences {diag.divergences}, "
          f"ESS/s {diag.min_ess_bulk / wall:.1f} (min bulk ESS over wall time)")
    stats = idata.sample_stats
    print(f"NUTS: mean tree depth {float(stats['depth'].mean()):.1f}, mean leapfrog steps per draw "
          f"{float(stats['n_steps'].mean()):.0f}")
    scalars = mixing(idata)
    # what the posterior asks of any implementation: times the cost of one evaluation
    # (benchmarks/logp_floor.py) this bounds the sampling time from below
    grads = float(stats["n_steps"].sum())
    per_draw = grads / scalars[0][0]
    parallel = min(timing["chains"], timing["cores"])  # chains running at once
    print(f"gradient evaluations after tuning: {grads:.0f}, {per_draw:.0f} per effective draw "
          f"of the slowest variable, {per_draw * sampling.MIN_ESS:.0f} for a bulk ESS of "
          f"{sampling.MIN_ESS}; per evaluation {timing['sample_s'] / grads * parallel * 1e6:.0f} "
          "µs (the sampling time, tuning included, over the evaluations after tuning)")
    print("slowest mixing:", ", ".join(f"{name} (bulk ESS {ess:.0f}, R-hat {rhat:.3f})"
                                       for ess, rhat, name in scalars[:3]))
    ess, rhat, name = max(scalars, key=lambda s: s[1])
    print(f"highest R-hat: {name} ({rhat:.3f}, bulk ESS {ess:.0f})")
    print("converged" if diag.converged else f"NOT converged: {'; '.join(diag.problems())}")


def agreement(fast, exact) -> None:
    """Print, per quantity, the share of configurations whose summaries' posterior median is
    within 0.25 posterior sd of the exact fit's and whose 90% width is within ±20%."""
    table = validate.agreement(fast, exact)
    for quantity, one in table.groupby(level="quantity", sort=False):
        one = one.dropna()
        print(f"agreement, {quantity} ({len(one)} configurations): median within 0.25 sd "
              f"{(one['z'] <= 0.25).mean():.3f} (max {one['z'].max():.2f}), 90% width within "
              f"±20% {((one['width'] - 1).abs() <= 0.2).mean():.3f} (median ratio "
              f"{one['width'].median():.2f})")


def mixing(idata) -> list[tuple[float, float, str]]:
    """Every posterior scalar as ``(bulk ESS, R-hat, name[index])``, lowest ESS first."""
    import arviz as az
    import numpy as np

    ess, rhat = az.ess(idata.posterior, method="bulk"), az.rhat(idata.posterior)
    out = []
    for name in ess.data_vars:
        e, r = np.ravel(ess[name].values), np.ravel(rhat[name].values)
        out += [(e[i], r[i], f"{name}[{i}]" if e.size > 1 else name) for i in range(e.size)
                if np.isfinite(e[i])]  # a constant (the summaries' fixed nu) has no ESS
    return sorted(out)


if __name__ == "__main__":
    main()
