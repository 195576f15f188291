r"""Adequacy of a fitted model: does its posterior predictive cover the data it was fitted to?

Convergence says the sampler explored the posterior; it says nothing about whether the model's
curve goes through the measurements. :func:`check` answers that for every fit, from the
posterior predictive of the fitted rows: the model latency of each draw times the likelihood's
scatter,

.. math::
    \log \tilde L_i = \log L_{\mathrm{model},i} + \delta_i + s_i\,t_{\nu}, \qquad
    s_i^2 = \sigma^2 + \mathrm{se\_rel}_i^2\ (+\,(\sigma_{\mathrm{wall}} w_i)^2),

with ``sigma`` and ``nu`` of the same draw, ``delta_i`` the synchronous benchmarks' offset
(:meth:`~bayeslat.models.base.LatencyModel.protocol_shift`) and ``t_nu`` drawn with a seed.
A constant-rate benchmark's model latency is on the staircase of evenly spaced requests, as
:mod:`bayeslat.decide` predicts them (:meth:`~bayeslat.models.base.LatencyModel.evenly_spaced`).
From it:

- the share of points inside their 50% and 90% central predictive intervals (about 0.5 and 0.9
  for an adequate model; a fit to these very points errs, if anything, on the high side);
- the same for each configuration's top three loads, where the paper's curve misses first
  (DESIGN.md §2a), pooled and as the share of configurations with all three inside the 90% band;
- per configuration: coverage and the mean standardised residual, and the worst configurations;
- the model capacity (posterior median: ``1/max(C2, C3)``, :func:`bayeslat.theory.capacity`,
  or the variant's own) against the measured ceiling of the configuration (its throughput
  benchmark);
- the posterior medians of ``sigma`` and ``nu``.

:class:`Adequacy` holds tidy tables and a list of warnings in words. This module is a
posterior stage: it imports the models' helpers, :mod:`bayeslat.theory`
and the schema, never the CLI or the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models.base import prepare, scatter_draws

DRAWS = ("chain", "draw")
# Posterior draws used (picked at random with the seed, the same draw indices in every chain):
# the 5% and 95% quantiles of 1,000 draws are within about 0.01 in probability of the true ones.
MAX_DRAWS = 1000
# Loads per configuration counted as "top": the paper's curve misses first at the highest loads
# (the roofline knee, DESIGN.md §2a), and three of nine is the third past the knee on a
# paper-style sweep.
TOP_LOADS = 3
# Overall 90% coverage expected between these. With n points the binomial standard deviation of
# the coverage is sqrt(0.09/n): 0.03 at 100 points, so 0.85–0.95 is a real departure there.
# Below: the model misses systematically or its scatter is too small; above: the scatter
# (sigma) is inflated by a misfit elsewhere, and every band is wider than the data warrant.
COVERAGE90_RANGE = (0.85, 0.95)
# Pooled 90% coverage of the top three loads expected above this: five points in a hundred
# below 0.9 are noise, ten are a curve that bends away from the data near capacity.
TOP_COVERAGE_MIN = 0.80
# A configuration with fewer than this share of its points in the 90% band is marked misfit:
# with nine points that is two or more outside, against about one expected. One in four
# configurations of nine points falls below it by chance even when the model is right, so the
# mark is a pointer to look at, and the warning comes only when more configurations are marked
# than chance gives in 95% of fits (:data:`CHANCE_LEVEL`), or when one is below
# :data:`CONFIG_COVERAGE_FLOOR`.
CONFIG_COVERAGE_MIN = 0.80
CHANCE_LEVEL = 0.95
# A configuration this far below (half its points outside the 90% band) is a misfit whatever
# the others do: with four or more points chance gives it less than once in 250.
CONFIG_COVERAGE_FLOOR = 0.50
# Model capacity and measured ceiling agree within this relative tolerance: a throughput
# benchmark measures the ceiling to a few percent, and decisions near capacity (RPS*, k* at
# high load) shift by about as much as the capacity does.
CAPACITY_TOLERANCE = 0.15
# Warn when more than this share of configurations miss the ceiling by more than the tolerance.
CAPACITY_SHARE_MAX = 0.10
# Student-t degrees of freedom below this (variance infinite at 2) mean the likelihood explains
# the misfit as outliers: heavy tails absorb what is a systematic miss of the curve.
NU_MIN = 2.5
# Configurations listed as the worst in summaries.
WORST = 5
# Log latency (log-seconds) standing for a saturated draw (infinite latency) in the quantiles.
_SATURATED_LOG = 1e6
# How a model lists an excluded row: "<configuration> rps=<load> (<reason>)".
_EXCLUDED = re.compile(r"^(?P<config>.*) rps=(?P<rps>\S+) \((?P<reason>.*)\)$")
_QUANTILES = (0.05, 0.16, 0.25, 0.5, 0.75, 0.84, 0.95)


@dataclass
class Adequacy:
    """What :func:`check` found.

    Attributes
    ----------
    points
        One row per fitted row (model.rows order): ``config``, ``group``, ``rps``,
        ``latency_mean`` (s), ``load_rank`` (1 = the configuration's highest load), ``top``
        (among its top three), the predictive quantiles ``lo90``, ``lo50``, ``median``,
        ``hi50``, ``hi90`` (s), ``in50``, ``in90`` and ``z``, the standardised residual
        ``(log L − median log L̃) / half-width of the central 68% of log L̃``.
    configs
        One row per configuration: ``config``, ``group``, ``k``, ``points``, ``inside_50``,
        ``inside_90``, ``top_inside_90``, ``top_all_inside`` (bool), ``mean_z``,
        ``mean_abs_z``, ``capacity``, ``capacity_lo``, ``capacity_hi`` (median and 90%
        interval of the model capacity, req/s), ``ceiling`` (measured, req/s; NaN if none),
        ``capacity_ratio`` (``capacity / ceiling``) and ``misfit`` (90% coverage below
        :data:`CONFIG_COVERAGE_MIN`).
    figures
        The headline numbers by name (see :meth:`summary`).
    warnings
        What is wrong, in words, one sentence each; empty when nothing is.
    """

    points: pd.DataFrame
    configs: pd.DataFrame
    figures: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    @property
    def misfit(self) -> list[str]:
        """Labels of the configurations marked misfit."""
        return self.configs.loc[self.configs["misfit"], "config"].tolist()

    def summary(self) -> pd.DataFrame:
        """The headline figures as a table: ``figure``, ``value``, ``shown`` (the value as
        text), ``target`` (in words) and ``ok`` (True, False, or None where there is no pass
        mark)."""
        f = self.figures
        lo, hi = COVERAGE90_RANGE
        has_ceiling = f["capacity_configs"] > 0
        below = f"{f['configs_below']:.0f} of {f['configurations']:.0f}"
        rows = [
            ("points inside the 50% interval", f["coverage_50"], None, "about 0.50", None),
            ("points inside the 90% interval", f["coverage_90"], None, f"{lo:.2f}–{hi:.2f}",
             bool(lo <= f["coverage_90"] <= hi)),
            (f"top {TOP_LOADS} loads inside the 90% interval", f["top_coverage_90"], None,
             f"≥ {TOP_COVERAGE_MIN:.2f}", bool(f["top_coverage_90"] >= TOP_COVERAGE_MIN)),
            (f"configurations with their top {TOP_LOADS} all inside 90%", f["top_all_inside"],
             None, f"about {f['top_all_inside_expected']:.2f}", None),
            (f"configurations with 90% coverage below {CONFIG_COVERAGE_MIN:.2f}",
             f["configs_below"], below, f"≤ {f['configs_below_chance']:.0f} (chance: about "
             f"{f['configs_below_expected']:.1f})",
             bool(f["configs_below"] <= f["configs_below_chance"])),
            (f"capacity within ±{CAPACITY_TOLERANCE:.0%} of the measured ceiling",
             f["capacity_within"], None,
             f"≥ {1 - CAPACITY_SHARE_MAX:.2f} of {f['capacity_configs']:.0f}" if has_ceiling
             else "no measured ceiling", bool(f["capacity_within"] >= 1 - CAPACITY_SHARE_MAX)
             if has_ceiling else None),
            ("model capacity / measured ceiling (median)", f["capacity_ratio"], None,
             "about 1" if has_ceiling else "", None),
            ("sigma, log-latency scatter (median)", f["sigma"], f"{f['sigma']:.3g}", "", None),
            ("nu, Student-t degrees of freedom (median)", f["nu"], None, f"≥ {NU_MIN:g}",
             bool(f["nu"] >= NU_MIN)),
        ]
        out = pd.DataFrame(rows, columns=["figure", "value", "shown", "target", "ok"])
        out["shown"] = [s if s is not None else "–" if not np.isfinite(v) else f"{v:.2f}"
                        for s, v in zip(out["shown"], out["value"], strict=True)]
        return out

    def worst(self, n: int = WORST) -> pd.DataFrame:
        """The ``n`` configurations with the lowest 90% coverage, then the largest mean
        absolute standardised residual."""
        order = self.configs.sort_values(["inside_90", "mean_abs_z"], ascending=[True, False],
                                         kind="stable")
        return order.head(n).reset_index(drop=True)


def check(model, seed: int = 0, max_draws: int = MAX_DRAWS) -> Adequacy:
    """The posterior predictive adequacy of a fitted model on the rows it was fitted to.

    Parameters
    ----------
    model
        A fitted :class:`~bayeslat.models.base.LatencyModel`.
    seed
        Seed of the choice of draws and of the Student-t scatter.
    max_draws
        Posterior draws used at most (all when there are fewer).

    Returns
    -------
    Adequacy
        Tables, headline figures and warnings; see :class:`Adequacy`.
    """
    if not model.fitted:
        raise FitError("the model is not fitted; fit it or load a fit before checking it")
    thin = model.thinned(max_draws, np.random.default_rng([seed, 0]))
    rows = model.rows
    parts, latency = _predict(thin, model, seed)
    points = _predictive_points(thin, parts, latency, rows, seed)
    configs = _configs(points, _capacity(thin, parts, rows), measured_ceilings(model))
    figures = _figures(points, configs, model.posterior)
    return Adequacy(points=points, configs=configs, figures=figures,
                    warnings=_warnings(figures, configs, "C3" in model.parts))


def held_out(model, table: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The posterior predictive of measured rows a fitted model did not see.

    Parameters
    ----------
    model
        A fitted :class:`~bayeslat.models.base.LatencyModel`.
    table
        Sweep rows (:mod:`bayeslat.data.schema`, unsaturated) left out of the fit: a rate, a
        configuration, a workload.
    seed
        Seed of the prediction and of the Student-t scatter.

    Returns
    -------
    One row per row of ``table``: the columns of :attr:`Adequacy.points` (ranks and ``top``
    among the held-out rows) and ``ape``, the absolute error of the predictive median over
    the measured latency.
    """
    rows = prepare(table)
    pred = model.predict(table, seed=seed)
    points = _predictive_points(model, pred, pred["latency"], rows, seed)
    return points.assign(ape=np.abs(points["median"] / points["latency_mean"] - 1))


def _predictive_points(model, parts: xr.Dataset, latency: xr.DataArray, rows: pd.DataFrame,
                       seed: int) -> pd.DataFrame:
    """Predictive quantiles of each row's measured latency (:func:`_points`): the model's
    latency (a constant-rate benchmark's on its staircase of prefill stalls,
    :func:`bayeslat.theory.evenly_spaced`, anchored at its configuration's fitted rates) moved
    by the benchmark's protocol offset, with the likelihood's scatter."""
    post = model.posterior
    constant = xr.DataArray((rows["strategy"] == "constant").to_numpy(), dims="obs")
    if constant.any():
        rps = xr.DataArray(rows["rps"].to_numpy(float), dims="obs")
        latency = xr.where(constant, model.evenly_spaced(parts, rows, latency, rps), latency)
    latency = latency * np.exp(model.protocol_shift(post, rows))
    se_rel = xr.DataArray(rows["se_rel"].to_numpy(float), dims="obs")
    scale = np.sqrt(model.scatter(post, parts, rows["rps"], rows) ** 2 + se_rel**2)
    return _points(rows, predictive_log_latency(latency, scale, post["nu"], seed))


def predictive_log_latency(latency: xr.DataArray, scale: xr.DataArray, nu: xr.DataArray,
                           seed: int = 0) -> np.ndarray:
    r"""Draws of the log of a measured mean latency, ``log L + scale·t_nu``
    (:func:`~bayeslat.models.base.scatter_draws`).

    Parameters
    ----------
    latency
        Model latency (s), dims ``(chain, draw, obs)``; ``inf`` where a draw saturates.
    scale, nu
        The likelihood's scale with the measurement error, ``sqrt(scatter² + se_rel²)``
        (:meth:`~bayeslat.models.base.LatencyModel.scatter`), and its degrees of freedom.
    seed
        Seed of the Student-t draws.

    Returns
    -------
    Array of shape ``(chain, draw, obs)``; a saturated draw is a very large finite number,
    so that quantiles stay defined and a measured point is below it.
    """
    draws = scatter_draws(scale.broadcast_like(latency), nu, [seed, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (np.log(latency) + draws).transpose("chain", "draw", "obs").values
    out[~np.isfinite(out)] = _SATURATED_LOG
    return out


def measured_ceilings(model) -> pd.Series:
    """The measured capacity (req/s) of each configuration, indexed by its label.

    From ``model.ceilings`` (the sweep's throughput-strategy rows) where the model has them;
    else from the rows the model excluded as throughput benchmarks (``model.excluded``, loads
    to four digits). Several throughput rows of one configuration are averaged. Empty when
    the sweep had no throughput benchmark.
    """
    table = getattr(model, "ceilings", None)
    if isinstance(table, pd.DataFrame) and not table.empty and "rps" in table.columns:
        try:
            labels = schema.config_labels(table)
        except (KeyError, TypeError):
            labels = None
        if labels is not None:
            return _positive(pd.Series(table["rps"].to_numpy(float), index=labels.to_numpy()))
    found = {}
    for line in getattr(model, "excluded", None) or []:
        m = _EXCLUDED.match(line)
        if m and m["reason"].startswith("throughput strategy"):
            try:
                found.setdefault(m["config"], []).append(float(m["rps"]))
            except ValueError:
                continue
    return _positive(pd.Series({c: float(np.mean(v)) for c, v in found.items()}, dtype=float))


def _positive(series: pd.Series) -> pd.Series:
    series = series[np.isfinite(series) & (series > 0)]
    return series.groupby(level=0, sort=False).mean().rename("ceiling")


def group_ceilings(model) -> dict[str, float]:
    """Per group: the measured ceiling of its baseline (``k = 0``), req/s, where measured."""
    ceilings = measured_ceilings(model)
    return {label.removesuffix(" k0"): float(v) for label, v in ceilings.items()
            if label.endswith(" k0")}


# -- internals ---------------------------------------------------------------------------------


def _predict(thin, model, seed: int) -> tuple[xr.Dataset, xr.DataArray]:
    """Parts per fitted row and the model latency, predicting each configuration once (its
    parts do not depend on the load) and the latency of every row from them."""
    rows = model.rows
    first = rows.drop_duplicates("config")
    pred = thin.predict(model.table.iloc[first.index.to_numpy()], seed=seed)
    pred = pred.drop_vars([c for c in ("config", "rps") if c in pred.coords])
    pos = pd.Index(first["config"]).get_indexer(rows["config"])
    parts = pred[list(model.parts)].isel(obs=pos)
    latency = thin.latency(parts, rows)
    return parts, latency


def _capacity(model, parts: xr.Dataset, rows: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: median and 90% interval of the model's capacity (req/s:
    ``1/max(C2, C3)``, or the variant's own, :meth:`~bayeslat.models.base.LatencyModel.
    capacity`)."""
    first = ~rows["config"].duplicated().to_numpy()
    one = parts.isel(obs=np.flatnonzero(first))
    cap = model.capacity(one, rows[first].reset_index(drop=True))
    cap = np.asarray(cap.transpose(*DRAWS, "obs").values, dtype=float)
    flat = cap.reshape(-1, cap.shape[-1])
    q = np.quantile(flat, [0.05, 0.5, 0.95], axis=0)
    return pd.DataFrame({"capacity": q[1], "capacity_lo": q[0], "capacity_hi": q[2]},
                        index=rows.loc[first, "config"].to_numpy())


def _points(rows: pd.DataFrame, log_pp: np.ndarray) -> pd.DataFrame:
    flat = log_pp.reshape(-1, log_pp.shape[-1])
    q = dict(zip(_QUANTILES, np.quantile(flat, _QUANTILES, axis=0), strict=True))
    y = rows["log_latency"].to_numpy(float)
    half = (q[0.84] - q[0.16]) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where((half > 0) & (half < _SATURATED_LOG / 4), (y - q[0.5]) / half, np.nan)
    rank = rows.groupby("config", sort=False)["rps"].rank(ascending=False, method="first")
    with np.errstate(over="ignore"):
        quantiles = {name: np.exp(q[p]) for name, p in (
            ("lo90", 0.05), ("lo50", 0.25), ("median", 0.5), ("hi50", 0.75), ("hi90", 0.95))}
    return pd.DataFrame({
        "config": rows["config"].to_numpy(), "group": rows["group"].to_numpy(),
        "k": rows["k"].to_numpy(), "rps": rows["rps"].to_numpy(float),
        "latency_mean": np.exp(y), "load_rank": rank.to_numpy(int),
        "top": (rank <= TOP_LOADS).to_numpy(), **quantiles,
        "in50": (y >= q[0.25]) & (y <= q[0.75]), "in90": (y >= q[0.05]) & (y <= q[0.95]),
        "z": z,
    })


def _configs(points: pd.DataFrame, capacity: pd.DataFrame, ceilings: pd.Series) -> pd.DataFrame:
    g = points.assign(abs_z=points["z"].abs(),
                      top_in90=points["in90"].astype(float).where(points["top"]))
    out = g.groupby("config", sort=False).agg(
        group=("group", "first"), k=("k", "first"), points=("in90", "size"),
        inside_50=("in50", "mean"), inside_90=("in90", "mean"),
        top_inside_90=("top_in90", "mean"), mean_z=("z", "mean"), mean_abs_z=("abs_z", "mean"))
    out["top_all_inside"] = out["top_inside_90"] == 1.0
    out = out.join(capacity)
    out["ceiling"] = ceilings.reindex(out.index).to_numpy(float)
    out["capacity_ratio"] = out["capacity"] / out["ceiling"]
    out["misfit"] = out["inside_90"] < CONFIG_COVERAGE_MIN
    return out.rename_axis("config").reset_index()


def _below_by_chance(points) -> tuple[float, int]:
    """How many configurations fall under :data:`CONFIG_COVERAGE_MIN` by chance, if every
    point lay inside its 90% interval with probability 0.9, independently: the expected number
    and the :data:`CHANCE_LEVEL` quantile of the count (a Poisson-binomial, by convolution)."""
    from scipy.special import bdtr  # the binomial CDF (scipy.stats takes seconds to import)

    n = np.asarray(points, dtype=int)
    cut = np.ceil(CONFIG_COVERAGE_MIN * n - 1e-9) - 1  # most points inside and still below
    p = np.where(cut >= 0, bdtr(np.maximum(cut, 0), n, 0.9), 0.0)
    dist = np.ones(1)
    for pi in p:
        dist = np.convolve(dist, [1.0 - pi, pi])
    return float(p.sum()), int(np.searchsorted(np.cumsum(dist), CHANCE_LEVEL))


def _figures(points: pd.DataFrame, configs: pd.DataFrame, posterior) -> dict[str, float]:
    top = points[points["top"]]
    ratio = configs["capacity_ratio"]
    measured = ratio.notna()
    n_top = np.minimum(configs["points"].to_numpy(), TOP_LOADS)
    expected, limit = _below_by_chance(configs["points"])
    return {
        "points": float(len(points)), "configurations": float(len(configs)),
        "coverage_50": float(points["in50"].mean()),
        "coverage_90": float(points["in90"].mean()),
        "top_coverage_50": float(top["in50"].mean()),
        "top_coverage_90": float(top["in90"].mean()),
        "top_mean_z": float(top["z"].mean()),
        "top_all_inside": float(configs["top_all_inside"].mean()),
        "top_all_inside_expected": float(np.mean(0.9 ** n_top)),
        "configs_below": float(configs["misfit"].sum()),
        "configs_below_expected": expected,
        "configs_below_chance": float(limit),
        "config_coverage_min": float(configs["inside_90"].min()),
        "capacity_configs": float(measured.sum()),
        "capacity_within": float((np.abs(ratio[measured] - 1) <= CAPACITY_TOLERANCE).mean())
        if measured.any() else float("nan"),
        "capacity_ratio": float(ratio[measured].median()) if measured.any() else float("nan"),
        "sigma": float(posterior["sigma"].median()),
        "nu": float(posterior["nu"].median()),
    }


def _warnings(f: dict[str, float], configs: pd.DataFrame, has_wall: bool) -> list[str]:
    out = []
    lo, hi = COVERAGE90_RANGE
    if not lo <= f["coverage_90"] <= hi:
        why = ("the model misses the data or its scatter is too small" if f["coverage_90"] < lo
               else "the scatter sigma is inflated (by a misfit somewhere?) and every band is "
               "wider than the data warrant")
        out.append(f"{f['coverage_90']:.0%} of the fitted points lie inside their 90% "
                   f"predictive interval (expected {lo:.0%}–{hi:.0%}): {why}.")
    if f["top_coverage_90"] < TOP_COVERAGE_MIN:
        side = ("above" if f["top_mean_z"] > 0 else "below")
        hint = "" if has_wall else " (try the capacity variant)"
        out.append(f"only {f['top_coverage_90']:.0%} of each configuration's top {TOP_LOADS} "
                   f"loads lie inside the 90% predictive interval (expected about 90%); the "
                   f"measurements lie {side} the curve near capacity, so predictions at high "
                   f"load are not to be trusted{hint}.")
    if (f["configs_below"] > f["configs_below_chance"]
            or f["config_coverage_min"] < CONFIG_COVERAGE_FLOOR):
        worst = configs[configs["misfit"]].sort_values("inside_90", kind="stable").head(3)
        names = "; ".join(f"{r.config} ({r.inside_90:.0%})" for r in worst.itertuples())
        out.append(f"{f['configs_below']:.0f} of {f['configurations']:.0f} configurations "
                   f"have less than {CONFIG_COVERAGE_MIN:.0%} of their points inside the 90% "
                   f"interval (about {f['configs_below_expected']:.1f} would by chance, at "
                   f"most {f['configs_below_chance']:.0f} in {CHANCE_LEVEL:.0%} of fits); "
                   f"worst: {names}.")
    if f["capacity_configs"] > 0 and 1 - f["capacity_within"] > CAPACITY_SHARE_MAX:
        off = int(round((1 - f["capacity_within"]) * f["capacity_configs"]))
        out.append(f"the model capacity is more than {CAPACITY_TOLERANCE:.0%} "
                   f"off the measured ceiling for {off} of {f['capacity_configs']:.0f} "
                   f"configurations (median model/measured {f['capacity_ratio']:.2f}); loads "
                   "near the ceiling are extrapolation.")
    if f["nu"] < NU_MIN:
        out.append(f"the Student-t degrees of freedom nu has posterior median {f['nu']:.2f} < "
                   f"{NU_MIN:g}: the likelihood is treating systematic misfit as outliers.")
    return out
