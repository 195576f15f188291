"""Section: convergence diagnostics (R-hat, ESS, divergences, energy) and PSIS-LOO comparison."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd

from bayeslat import fitting
from bayeslat.errors import FitError
from bayeslat.models import sampling
from bayeslat.models.base import LOO_GROUP, PARETO_K, psis_loo
from bayeslat.report import page

# Parameters listed in the table of the least converged ones.
WORST = 12


def section(inputs) -> page.Section:
    out = page.Section("diagnostics", "Diagnostics and model comparison")
    out.add(page.text(
        f"Convergence needs R-hat ≤ {sampling.MAX_RHAT}, bulk and tail effective sample sizes "
        f"(ESS) ≥ {sampling.MIN_ESS} and no divergent transitions. A fit that fails them may still "
        "be shown, but its bands are not to be trusted."))
    summary = convergence(inputs.models)
    out.add(page.table(summary))
    failing = summary[summary["converged"] == "no"]
    if len(failing):
        out.add(page.text("Not converged: " + "; ".join(failing["model"]) + ". Refit with more "
                          "--tune and --draws before acting on these results.", "warn"))
    out.add(f"<h3>The {WORST} least converged parameters of {inputs.name}</h3>",
            page.table(worst(inputs.model.posterior), floatfmt="{:.4g}"))
    stats = inputs.model.group("sample_stats")
    if stats is not None and "energy" in stats:
        out.add(page.figure(energy_figure(stats),
                            "Energy: the marginal energy distribution and its transitions. "
                            "Very different widths (E-BFMI < 0.3) mean the sampler explores "
                            "the tails poorly.", "energy plot"))
    else:
        out.add(page.text("The fit stores no sampler energy, so there is no energy plot."))
    out.add("<h3>PSIS-LOO</h3>", page.text(
        "Expected log pointwise predictive density (elpd, higher is better) by Pareto-smoothed "
        "importance-sampling leave-one-out cross-validation; points with Pareto k > 0.7 make "
        "the estimate unreliable."), page.table(loo_table(inputs.models), floatfmt="{:.4g}"))
    if len(inputs.models) > 1:
        out.add(page.text("Comparison (az.compare): rank 0 is the best expected predictive "
                          "accuracy; dse is the standard error of the difference to it; "
                          "warning is True where high Pareto k make a fit's estimate "
                          "unreliable."),
                compare(inputs.models))
    return out


def convergence(models: dict) -> pd.DataFrame:
    rows = []
    for name, model in models.items():
        diag = fitting.convergence(model)
        post = model.posterior
        sampler = json.loads(post.attrs.get("sampler", "{}"))
        rows.append({"model": name, "variant": model.variant,
                     "sampler": sampler.get("sampler", "?"),
                     "chains × draws": f"{post.sizes['chain']} × {post.sizes['draw']}",
                     "max R-hat": diag.max_rhat, "min bulk ESS": diag.min_ess_bulk,
                     "min tail ESS": diag.min_ess_tail, "divergences": diag.divergences,
                     "converged": "yes" if diag.converged else "no"})
    return pd.DataFrame(rows)


def worst(post) -> pd.DataFrame:
    """The :data:`WORST` parameters of the posterior ``post`` (one value of a variable each) by
    R-hat, then bulk ESS (:mod:`bayeslat.mcmc`: ArviZ's estimators, every value at once)."""
    from bayeslat import mcmc

    names = []  # in mcmc.stack's order: each variable's values, its own dims in C order
    for name, var in post.data_vars.items():
        dims = [d for d in var.dims if d not in ("chain", "draw")]
        for index in np.ndindex(*[var.sizes[d] for d in dims]):
            coords = [str(var[d].values[i]) for d, i in zip(dims, index, strict=True)]
            names.append(f"{name}[{', '.join(coords)}]" if dims else name)
    values = mcmc.stack(post)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single-chain fits: R-hat undefined
        summary = pd.DataFrame({"parameter": names, "r_hat": mcmc.rhat(values),
                                "ess_bulk": mcmc.ess_bulk(values),
                                "ess_tail": mcmc.ess_tail(values)})
    summary = summary.sort_values(["r_hat", "ess_bulk"], ascending=[False, True])
    return summary.head(WORST).reset_index(drop=True)


def energy_figure(stats):
    """The sampler's energy (``stats``: a fit's ``sample_stats``): its marginal distribution
    and that of its changes between draws, centred, with each chain's E-BFMI (their variance
    ratio; below 0.3 the momentum resampling cannot move the sampler through the energy
    levels the posterior needs)."""
    from matplotlib import pyplot as plt

    energy = stats["energy"].transpose("chain", "draw").values
    change = np.diff(energy, axis=1)
    bfmi = np.mean(change**2, axis=1) / np.var(energy, axis=1)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for values, label, color in (
            (energy - energy.mean(), "marginal energy", "0.75"),
            (change - change.mean(), "energy transition (E-BFMI "
                                     f"{', '.join(f'{b:.2f}' for b in bfmi)})", "0.35")):
        ax.hist(values.ravel(), bins=50, density=True, histtype="stepfilled", alpha=0.6,
                color=color, label=label)
    ax.set_xlabel("energy (centred, nats)")
    ax.set_ylabel("density")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def loo_table(models: dict) -> pd.DataFrame:
    rows = []
    for name, model in models.items():
        stored = model.group(LOO_GROUP)
        if stored is not None:  # what save() kept: read without ArviZ
            a = stored.attrs
            elpd, se, p, k = a["elpd_loo"], a["se"], a["p_loo"], stored["pareto_k"].values
        else:
            try:
                loo = psis_loo(model.idata)
            except (TypeError, ValueError, KeyError, FitError) as exc:
                rows.append({"model": name, "elpd_loo": np.nan, "se": np.nan, "p_loo": np.nan,
                             f"points with k > {PARETO_K:g}": f"not available ({exc})"})
                continue
            elpd, se, p, k = loo.elpd_loo, loo.se, loo.p_loo, loo.pareto_k.values
        rows.append({"model": name, "elpd_loo": float(elpd), "se": float(se), "p_loo": float(p),
                     f"points with k > {PARETO_K:g}": str(int((k > PARETO_K).sum()))})
    return pd.DataFrame(rows)


def compare(models: dict) -> str:
    import arviz as az

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = az.compare({name: psis_loo(m.idata) for name, m in models.items()})
    except (TypeError, ValueError, KeyError, FitError) as exc:
        return page.text(f"The fits cannot be compared ({exc}): PSIS-LOO compares fits of "
                         "the same observations; fit every variant to the same sweep table.",
                         "warn")
    table = table.drop(columns=["scale"], errors="ignore").rename_axis("model").reset_index()
    return page.table(table, floatfmt="{:.4g}")
