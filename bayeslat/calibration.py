r"""Simulation-based calibration (SBC): does a fit recover what generated its data?

Talts et al. (2018): draw parameters :math:`\tilde\theta` from the prior, data
:math:`\tilde y` from the likelihood given them, and fit. For every quantity
:math:`f(\theta)`, the rank of :math:`f(\tilde\theta)` among ``L`` posterior draws of the fit
is uniform on :math:`\{0, \dots, L\}` exactly when the fit computes the model's posterior
(the model's code, its priors, the sampler and its convergence together). Failures show in the
ranks' ECDF: above the diagonal then below (a ∪-shaped histogram of ranks, piled at both ends:
posteriors too narrow), the reverse (too wide), or one-sided (biased).

**The design.** A model of a sweep takes the rates as fixed inputs, so the rates must not
depend on :math:`\tilde\theta` (the model sampler's rates between each configuration's true
``1/C1`` and ``1/C2`` would make the ranks of every ``C2`` parameter non-uniform). SBC here
uses one fixed design: the model sampler's default sweep (:mod:`bayeslat.simulate.generative`:
one 8B verifier, six workloads, one drafter, nine configurations and the baseline each, nine
rates) with its rates times :data:`RATE_SCALE`. The default priors are ten times a typical
server's (:data:`bayeslat.scaling.DEFAULT_PRIORS`), so at the sampler's own rates nearly every
prior draw saturates (``benchmarks/sbc_design.py``); at a twentieth of them about two thirds
of the draws serve every rate (0.645 in ``benchmarks/sbc.py``).

**Draws past saturation are rejected.** A draw that puts a design rate past its
configuration's saturation would "measure" a latency the barrier puts hundreds of times above
the curve (:func:`bayeslat.models.base.log_headroom`): no sweep looks like that, and given any
accepted data set the posterior has no mass there. Rejecting them conditions the prior on the
design being servable, and the ranks stay uniform under that prior (the fit's posterior is the
same under the truncated prior, whose mass outside is zero given the data).

**Quantities.** Every population parameter (each ``beta`` of each coefficient, each ``tau``,
each server's roofline knee, ``sigma``, ``nu``), and the decisions: for two probe
configurations (the middle acceptance rate and draft length of the first and the last
workload), the speedup at a low and a high design rate of its baseline and the break-even load
RPS* (+inf where there is none, ties broken at random).

**The check** (:func:`uniformity`): the ECDF of each quantity's ranks against the simultaneous
band of Säilynoja, Bürkner & Vehtari (2022): pointwise binomial intervals widened until, for
uniform ranks, the whole ECDF stays inside with probability ``1 − level``. A quantity fails when
its ECDF leaves the band; with ``level`` 0.01 a calibrated fit fails about one quantity in a
hundred by chance.

Each fit refits the same compiled model with new data (:class:`bayeslat.models.sampling.Refitter`):
one compile, then seconds per fit.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models import get
from bayeslat.scaling import ScalingConfig
from bayeslat.simulate import generative

# The design's rates: the model sampler's default sweep's, times this (about two thirds of the
# default prior's draws then serve every rate).
RATE_SCALE = 0.05
# Posterior draws each rank is taken among (L): thinned evenly from every chain.
RANK_DRAWS = 100
# Level of the simultaneous uniformity check per quantity.
LEVEL = 0.01
# Fewer accepted prior draws than this share means the design does not suit the priors.
MIN_ACCEPTANCE = 0.02
# Monte Carlo draws of uniform ranks that set the simultaneous band.
BAND_SIMULATIONS = 2000
DESIGN_NOTE = (f"the model sampler's default sweep (one 8B verifier, six workloads, one drafter) "
               f"at {RATE_SCALE:g} times its rates; prior draws past saturation at a design "
               "rate rejected")


def design(spec: generative.SamplerSpec | None = None,
           rate_scale: float = RATE_SCALE) -> pd.DataFrame:
    """The fixed design: the model sampler's sweep (``spec``, default one 8B verifier, six
    workloads) with its rates times ``rate_scale`` and as many requests per benchmark (so the
    measurement errors are the same). Its latencies are placeholders, replaced by each
    calibration draw's."""
    table, _ = generative.sample_sweep(spec, seed=0)
    scaled = table.assign(rps=table["rps"] * rate_scale,
                          rate_target=table["rate_target"] * rate_scale)
    return schema.validate(scaled.assign(duration_s=scaled["n_successful"] / scaled["rps"]))


def with_latency(table: pd.DataFrame, log_latency: np.ndarray) -> pd.DataFrame:
    """``table`` measuring mean latencies ``exp(log_latency)`` with the same relative spread
    (the same measurement error)."""
    latency = np.exp(np.asarray(log_latency, dtype=float))
    scale = latency / table["latency_mean"].to_numpy()
    out = table.copy()
    for column in ("latency_mean", "latency_std", "latency_p50", "latency_p95", "latency_p99",
                   "ttft_mean", "itl_mean"):
        out[column] = out[column].to_numpy() * scale
    return out


def probes(model) -> pd.DataFrame:
    """The configurations whose decisions are ranked: the middle acceptance rate and draft
    length of the first and the last group, each with a low and a high design rate of its
    baseline (the third and seventh of nine). One row each: ``label``, the SD config and its
    baseline's, and the two loads (req/s)."""
    rows = model.rows
    out = []
    for group in dict.fromkeys(rows["group"].iloc[[0, -1]]):
        mine = rows[rows["group"] == group]
        sd = mine[mine["k"] > 0]
        alpha = np.sort(sd["alpha0"].unique())[len(sd["alpha0"].unique()) // 2]
        k = np.sort(sd["k"].unique())[len(sd["k"].unique()) // 2]
        config = sd[(sd["alpha0"] == alpha) & (sd["k"] == k)]["config"].iloc[0]
        base = mine[mine["k"] == 0]
        rates = np.sort(base["rps"].unique())
        out.append({"label": f"{group} a{alpha:g} k{k}", "config": config,
                    "baseline": base["config"].iloc[0],
                    "low": rates[len(rates) // 4], "high": rates[(3 * len(rates)) // 4]})
    return pd.DataFrame(out)


def quantities(model, values: xr.Dataset, probe: pd.DataFrame) -> dict[str, np.ndarray]:
    """The ranked quantities of ``values`` (prior or posterior draws of ``model``'s variables,
    any sample dims): each population parameter element, then per probe the speedup at its
    two loads and RPS* (NaN, no break-even, as +inf). Arrays flattened over the sample dims."""
    out = {}
    for name in sorted(values.data_vars):
        if not (name.startswith(("beta_", "tau_")) or name in ("sigma", "nu", "prefill_knee")):
            continue
        var = values[name]
        extra = [d for d in var.dims if d not in ("chain", "draw", "sample")]
        if not extra:
            out[name] = var.values.reshape(-1)
            continue
        for label in var[extra[0]].values:
            out[f"{name}[{label}]"] = var.sel({extra[0]: label}).values.reshape(-1)
    rows = model.rows.drop_duplicates("config").set_index("config")
    picked = rows.loc[np.r_[probe["baseline"], probe["config"]]]
    parts = model.parts_of(values, picked, *model.positions(picked))
    sample_dims = [d for d in parts["C1"].dims if d != "obs"]
    c1 = parts["C1"].transpose(*sample_dims, "obs").values.reshape(-1, len(picked))
    c2 = parts["C2"].transpose(*sample_dims, "obs").values.reshape(-1, len(picked))
    n = len(probe)
    for i, p in enumerate(probe.itertuples()):
        base, sd = (c1[:, i], c2[:, i]), (c1[:, n + i], c2[:, n + i])
        for which in ("low", "high"):
            out[f"speedup[{p.label} at {getattr(p, which):.3g}]"] = theory.speedup(
                getattr(p, which), *base, *sd)
        star = theory.break_even_rps(*base, *sd)
        out[f"RPS*[{p.label}]"] = np.where(np.isnan(star), np.inf, star)
    return out


def rank(draws: np.ndarray, truth: float, rng: np.random.Generator) -> int:
    """How many of ``draws`` lie below ``truth``, ties (an infinite RPS*, say) broken at
    random; a NaN draw (no order) counts as a tie, and a NaN truth gets a uniform rank."""
    draws = np.asarray(draws, dtype=float)
    if np.isnan(truth):
        return int(rng.integers(0, len(draws) + 1))
    draws = np.where(np.isnan(draws), truth, draws)
    return int(np.sum(draws < truth)) + int(rng.integers(0, np.sum(draws == truth) + 1))


def thin(posterior: xr.Dataset, n: int = RANK_DRAWS) -> xr.Dataset:
    """``n`` draws evenly spread over every chain (dim ``sample``)."""
    stacked = posterior.stack(sample=("chain", "draw"))
    total = stacked.sizes["sample"]
    if total < n:
        raise FitError(f"{total} posterior draws, fewer than the {n} ranks are taken among")
    keep = np.linspace(0, total - 1, n).round().astype(int)
    return stacked.isel(sample=keep).drop_vars(["sample", "chain", "draw"])


def prior_draws(model, n: int, seed: int, batch: int = 200):
    """``n`` prior draws of ``model``'s fitting model (its parameters and the observed log
    latencies, dim ``draw``) that serve every design rate (``rps·C2 < 1`` for each row), and
    the share of draws that did."""
    import pymc as pm

    rows = model.rows
    positions = model.positions(rows)
    pm_model = model.build()
    kept, tried, accepted, attempt = [], 0, 0, 0
    while accepted < n:
        draws = pm.sample_prior_predictive(draws=batch, model=pm_model,
                                           random_seed=np.random.default_rng([seed, attempt]))
        attempt += 1
        prior = draws.prior.isel(chain=0).assign(
            log_latency=draws.prior_predictive["log_latency"].isel(chain=0))
        c2 = model.parts_of(prior, rows, *positions)["C2"].transpose("draw", "obs").values
        ok = (rows["rps"].to_numpy() * c2).max(axis=1) < 1.0
        ok &= np.isfinite(prior["log_latency"].values).all(axis=1)
        tried += batch
        accepted += int(ok.sum())
        kept.append(prior.isel(draw=np.flatnonzero(ok)))
        if tried >= 1000 and accepted < MIN_ACCEPTANCE * tried:
            raise FitError(f"only {accepted} of {tried} prior draws serve every rate of the "
                           "design; lower the design's rates (rate_scale) or narrow the priors")
    out = xr.concat(kept, dim="draw").isel(draw=slice(0, n))
    return out.assign_coords(draw=np.arange(n)), accepted / tried


@dataclass
class Calibration:
    """What :func:`run` measured.

    Attributes
    ----------
    ranks
        One row per fit, one column per quantity: the truth's rank among
        :attr:`rank_draws` posterior draws (0 to ``rank_draws``).
    fits
        One row per fit: its convergence (``max_rhat``, ``min_ess_bulk``, ``min_ess_tail``,
        ``divergences``) and sampling time ``seconds``.
    """

    variant: str
    ranks: pd.DataFrame
    fits: pd.DataFrame
    rank_draws: int
    acceptance: float
    compile_s: float

    def uniformity(self, level: float = LEVEL) -> pd.DataFrame:
        """:func:`uniformity` of :attr:`ranks`."""
        return uniformity(self.ranks, self.rank_draws, level)

    def doc(self) -> dict:
        """Every figure as JSON-ready values: the settings, each fit's convergence, the ranks
        (a list per quantity) and the uniformity check."""
        check = self.uniformity().reset_index()
        return {"variant": self.variant, "fits": len(self.ranks), "rank_draws": self.rank_draws,
                "level": LEVEL, "acceptance": self.acceptance, "compile_s": self.compile_s,
                "design": DESIGN_NOTE, "convergence": self.fits.to_dict(orient="records"),
                "ranks": {name: [int(v) for v in values] for name, values in self.ranks.items()},
                "uniformity": check.to_dict(orient="records")}


def supports(variant: str) -> bool:
    """Whether :func:`run` can calibrate ``variant``: the paper's curve from per-group and
    per-drafter coefficients (the quantities are computed from those)."""
    cls = get(variant)
    return tuple(cls.parts) == ("C1", "C2") and hasattr(cls, "parts_of")


def run(variant: str = "hierarchical", fits: int = 100, *, table: pd.DataFrame | None = None,
        config: ScalingConfig | None = None, seed: int = 0, chains: int = 2, tune: int = 300,
        draws: int = 400, progress=None) -> Calibration:
    """Simulation-based calibration of ``variant``: ``fits`` prior draws on ``table`` (default
    :func:`design`), each refitted (``chains`` × (``tune`` + ``draws``), one compile) and its
    quantities ranked.

    Parameters
    ----------
    progress
        Optional callable taking ``(done, total)`` after each fit.
    """
    from bayeslat.models.sampling import Refitter, diagnostics

    if not supports(variant):
        raise FitError(f"calibration needs a variant with the paper's per-group coefficients "
                       f"(hierarchical, speculative); {variant} is not one")
    table = design() if table is None else table
    model = get(variant)(table, config)
    truth, acceptance = prior_draws(model, fits, seed)
    probe = probes(model)
    clock = time.perf_counter()
    refit = Refitter(model, chains=chains, tune=tune, draws=draws)
    compile_s = time.perf_counter() - clock
    rng = np.random.default_rng(seed)
    ranks, rows = [], []
    for i in range(fits):
        truth_i = truth.isel(draw=[i])
        replicate = get(variant)(with_latency(table, truth_i["log_latency"].values[0]),
                                 model.config)
        clock = time.perf_counter()
        idata = refit.sample(replicate, seed=seed + 1 + i)
        seconds = time.perf_counter() - clock
        diag = diagnostics(idata, seconds)
        rows.append({"max_rhat": diag.max_rhat, "min_ess_bulk": diag.min_ess_bulk,
                     "min_ess_tail": diag.min_ess_tail, "divergences": diag.divergences,
                     "seconds": seconds})
        post = quantities(model, thin(idata.posterior), probe)
        true = quantities(model, truth_i, probe)
        ranks.append({name: rank(post[name], float(true[name][0]), rng) for name in post})
        if progress is not None:
            progress(i + 1, fits)
    return Calibration(variant=variant, ranks=pd.DataFrame(ranks), fits=pd.DataFrame(rows),
                       rank_draws=RANK_DRAWS, acceptance=acceptance, compile_s=compile_s)


def ecdf_band(n: int, rank_draws: int, level: float = LEVEL, seed: int = 0):
    """The simultaneous ``1 − level`` band of the ECDF of ``n`` ranks uniform on
    ``0..rank_draws`` (Säilynoja, Bürkner & Vehtari 2022), at ``z_j = j/(L+1)``,
    ``j = 1..L``: the pointwise binomial level ``γ`` is the ``level`` quantile, over
    :data:`BAND_SIMULATIONS` sets of uniform ranks, of each set's least two-sided pointwise
    tail probability. Returns ``(z, lower, upper)`` on the ECDF scale."""
    from scipy.stats import binom

    L = rank_draws
    j = np.arange(1, L + 1)
    z = j / (L + 1)
    sims = np.random.default_rng(seed).integers(0, L + 1, size=(BAND_SIMULATIONS, n))
    below = np.stack([np.bincount(s, minlength=L + 1).cumsum()[:-1] for s in sims])
    tail = 2.0 * np.minimum(binom.cdf(below, n, z), binom.sf(below - 1, n, z))
    gamma = np.quantile(np.minimum(tail, 1.0).min(axis=1), level)
    return z, binom.ppf(gamma / 2, n, z) / n, binom.ppf(1 - gamma / 2, n, z) / n


def ecdf(ranks: np.ndarray, rank_draws: int) -> np.ndarray:
    """The ECDF of ``ranks`` at ``z_j = j/(L+1)``: the share of ranks below ``j``."""
    counts = np.bincount(np.asarray(ranks, dtype=int), minlength=rank_draws + 1)
    return counts.cumsum()[:-1] / len(ranks)


def uniformity(ranks: pd.DataFrame, rank_draws: int, level: float = LEVEL) -> pd.DataFrame:
    """Per quantity (a column of ``ranks``): the largest distance of the ranks' ECDF from the
    diagonal, whether it stays inside the simultaneous ``1 − level`` band (:func:`ecdf_band`),
    and the mean fractional rank (0.5 when unbiased)."""
    z, lower, upper = ecdf_band(len(ranks), rank_draws, level)
    out = []
    for name in ranks.columns:
        f = ecdf(ranks[name].to_numpy(), rank_draws)
        out.append({"quantity": name, "max_ecdf_diff": float(np.abs(f - z).max()),
                    "mean_rank": float(ranks[name].mean() / rank_draws),
                    "passes": bool(((f >= lower) & (f <= upper)).all())})
    return pd.DataFrame(out).set_index("quantity")


def figure(ranks: pd.DataFrame, rank_draws: int, title: str, level: float = LEVEL):
    """The ECDF difference (ECDF − z) of each quantity's ranks (a column of ``ranks``, among
    ``rank_draws`` draws) with its simultaneous ``1 − level`` band: one panel per quantity, red
    where the ECDF leaves the band."""
    from bayeslat.report import page

    z, lower, upper = ecdf_band(len(ranks), rank_draws, level)
    top, bottom, above = 0.42, 0.3, 0.3  # inches: a panel's two-line title; the figure's
    fig, axes = page.subplots(len(ranks.columns), 4, width=2.6, height=1.9,
                              margins=(0.35, 0.1, bottom, top))
    # room for the figure's title above the first row's panel titles
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + above)
    axes[0].get_gridspec().update(top=1 - (top + above) / (height + above),
                                  bottom=bottom / (height + above))
    for ax, name in zip(axes, ranks.columns, strict=True):
        f = ecdf(ranks[name].to_numpy(), rank_draws)
        inside = ((f >= lower) & (f <= upper)).all()
        ax.fill_between(z, lower - z, upper - z, color="0.85", label=f"{1 - level:.0%} band")
        ax.plot(z, f - z, color="C0" if inside else "C3", lw=1.2, label="ECDF − z")
        ax.axhline(0.0, color="0.4", lw=0.6)
        ax.set_title("\n".join(textwrap.wrap(name, 36)), fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0].legend(fontsize=6, loc="lower left")
    fig.suptitle(title, fontsize=9, y=1 - 0.1 / (height + above), va="top")
    return fig
