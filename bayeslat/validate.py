"""Held-out prediction: refit a variant without part of a sweep and score its predictions there.

A posterior is only as good as the check that could have caught it being wrong, and the fit's own
points cannot: the model has seen them. Each *split* of :data:`SPLITS` cuts a sweep into folds;
for each fold the variant is fitted to the rest (the fold's rows, saturated ones too, are left
out, so that a held-out configuration's measured ceiling does not leak into the fit) and predicts
the fold's measured, unsaturated rows (:func:`bayeslat.adequacy.held_out`: the posterior
predictive of each measured mean latency, the likelihood's scatter and the measurement error
included). The splits are the questions users bring:

``top-rate``
    one fold: each configuration's highest constant (or Poisson) rate, the load nearest
    capacity;
``rate``
    leave-one-rate-out: a fold per rank ``i``, the ``i``-th lowest constant (or Poisson) rate of
    every configuration (measured below saturation) held out at once, each predicted from the
    configuration's other rates (the interpolation and extrapolation of each curve, rate by
    rate; the highest fold holds only the configurations measured at that many rates);
``alpha``
    a fold per acceptance rate: every SD configuration measured at it;
``k``
    a fold per draft length ``k > 0``;
``workload``
    a fold per prefill/decode pair: every group of that workload, its baseline too (the
    hierarchical variants predict a workload never measured from the scaling laws);
``workload-2``, ``workload-4`` (any ``workload-<n>``)
    ``n`` workloads held out together, dealt along the wrapped diagonals of the prefill ×
    decode grid (:func:`workload_sets`), so that each fold leaves every prefill and decode
    length measured where the grid allows (the paper's extrapolation study);
``verifier``
    a fold per verifier model: everything measured with it (predicted from the scaling in
    the verifier's size);
``budget``
    the measurement budget: one fold that keeps a third of each group's SD configurations
    and predicts the other two thirds (:func:`budget_kept`: the baseline and the
    configurations on every third diagonal of the alpha × k grid, so that every acceptance
    rate and every draft length stays measured somewhere).

and one check that leaves nothing out:

``loo``
    the whole sweep fitted once and scored by PSIS-LOO (:func:`loo_figures`): the expected log
    predictive density of each measured point as if it had been left out, estimated from the
    one fit by Pareto-smoothed importance sampling, with the points where that estimate
    cannot be trusted (Pareto k above :data:`PARETO_K`) counted. Two or more variants run with
    it are ranked by :func:`compare`, and :func:`choice` says what the ranking implies.
``sbc``
    simulation-based calibration of the variant (:mod:`bayeslat.calibration`): prior draws on
    a fixed design of the model sampler's (not the sweep's: at a real sweep's rates nearly
    every draw of the wide default priors saturates), each refitted, and the uniformity of
    the ranks of the population parameters and of a few decisions. It checks the model's code
    and the sampler, not the model's fit to this sweep.

Scores per fold and per split (:func:`score`): MAPE and R² of the predictive median against the
measured latency, and the share of measured points inside their 50% and 90% predictive intervals
(about 0.5 and 0.9 when the model is calibrated there). Then the decisions on the held-out part
against the decisions of the whole sweep's fit (:func:`decision_cells`, :func:`decision_score`):
the risk-aware k* of :mod:`bayeslat.decide` at each (setup, alpha, load) cell of the held-out
setups and acceptance rates, on each setup's own load grid, and the posterior median of RPS*
per (setup, alpha, k) where both fits say it exists in most draws. Beside them, the paper's
two point methods on the same training rows: SciPy ``curve_fit`` of ``C1``, ``C2`` per
configuration (:func:`point_fit`), which answers only for configurations the fit saw (the
``top-rate`` split), and least squares of the six per-stage coefficients per group
(:func:`coefficient_fit`), which also answers for acceptance rates and draft lengths never
measured, but not for workloads or verifiers; both say where they extrapolate past their own
saturation.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import adequacy, calibration, decide, parallel, theory
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.files import atomic_output
from bayeslat.models import config_of, get, sampling
from bayeslat.models.base import PARETO_K, psis_loo
from bayeslat.models.start import curve_fits, group_coefficients, group_fit

SPLITS = ("top-rate", "rate", "alpha", "k", "workload", "workload-2", "workload-4", "verifier",
          "budget")
# The checks without folds, named like splits: PSIS-LOO of one fit of the whole sweep, and
# simulation-based calibration on the model sampler's design (not the sweep's).
LOO, SBC = "loo", "sbc"
CHECKS = (*SPLITS, LOO, SBC)
# A variant is clearly ahead when its lead in elpd exceeds this many standard errors.
CLEAR_LEAD_SE = 2.0
# RPS* of a held-out fit "agrees" within this relative error of the whole sweep's (issue 14).
RPS_STAR_TOLERANCE = 0.10
# Where a calibrated model's held-out points lie inside their 90% intervals (as the adequacy
# check of `bayeslat fit` reads in-sample coverage).
COVERAGE_90 = (0.85, 0.95)
# Folds refitted at a time, the second process a compile behind the first: one's compile,
# which runs on one core, overlaps the other's chains (the example's k and alpha folds and the
# whole sweep's fit on 2 cores: 433 s, against 578 s one at a time and 540 s started together;
# benchmarks/validate_times.py).
FOLD_JOBS = 2


@dataclass(frozen=True)
class Fold:
    """One refit: the rows it leaves out and what they are, in words."""

    split: str
    held_out: str
    drop: np.ndarray  # bool per row of the table: left out of the fit

    def scored(self, table: pd.DataFrame) -> np.ndarray:
        """The rows whose predictions are scored: the dropped ones that were measured below
        saturation (the others are excluded from every fit too)."""
        return self.drop & ~table["saturated"].to_numpy(bool)


def folds(table: pd.DataFrame, split: str) -> list[Fold]:
    """The folds of ``split`` (one of :data:`SPLITS`) on a sweep table.

    Raises
    ------
    InputError
        For an unknown split, or one the sweep cannot support (one acceptance rate, draft
        length, workload or verifier: nothing would be left to learn it from).
    """
    ok = ~table["saturated"].to_numpy(bool)
    sd = (table["k"] > 0).to_numpy()
    if split == "budget":
        kept = budget_kept(table)
        return [Fold(split, f"two of three SD configurations ({int((sd & ~kept).sum())} rows)",
                     sd & ~kept)]
    if split.startswith("workload-"):
        workloads = _workloads(table)
        return [Fold(split, " + ".join(names), workloads.isin(names).to_numpy())
                for names in workload_sets(table, _per_fold(split))]
    if split in ("top-rate", "rate"):
        rated = ok & table["strategy"].isin(schema.RATED).to_numpy()
        labels = schema.config_labels(table)
        if split == "top-rate":
            top = table[rated].groupby(labels[rated])["rps"].idxmax()
            return [Fold(split, "each configuration's top rate",
                         table.index.isin(top.to_numpy()))]
        # each unsaturated constant or Poisson rate's rank within its configuration, 1 the lowest
        rank = table["rps"].where(rated).groupby(labels).rank(method="first").to_numpy()
        n = int(np.nanmax(rank, initial=0))
        if n < 2:
            raise InputError("no configuration of the sweep has two or more constant or Poisson "
                             "rates measured below saturation: holding one out would leave "
                             "nothing to learn its curve from; choose another split",
                             field="split")
        return [Fold(split, f"rate {i}{' (lowest)' * (i == 1)}", rank == i)
                for i in range(1, n + 1)]
    if split == "alpha":
        values, column, words = table["alpha"].where(sd), "alpha", "alpha {:g}"
    elif split == "k":
        values, column, words = table["k"].where(sd), "k", "k = {:g}"
    elif split == "workload":
        values, column, words = _workloads(table), "prefill_tokens and decode_tokens", "{}"
    elif split == "verifier":
        values, column, words = table["verifier"].astype(str), "verifier", "{}"
    else:
        raise InputError(f"unknown split {split!r}; use one or more of {', '.join(SPLITS)}",
                         field="split")
    # folds in the order of the values: a workload's by prefill, then decode; a verifier's by size
    keys = {"workload": ["prefill_tokens", "decode_tokens"], "verifier": ["verifier_params_b"]}
    order = table.sort_values(keys[split]).index if split in keys else values.sort_values().index
    distinct = list(pd.unique(values.loc[order].dropna()))
    if len(distinct) < 2:
        raise InputError(f"the sweep has {len(distinct)} value(s) of {column}: holding one out "
                         "would leave nothing to learn it from; choose another split",
                         field="split")
    return [Fold(split, words.format(v), (values == v).to_numpy()) for v in distinct]


def _workloads(table: pd.DataFrame) -> pd.Series:
    """Each row's workload, ``p<prefill> g<decode>``."""
    return ("p" + table["prefill_tokens"].map("{:g}".format) + " g"
            + table["decode_tokens"].map("{:g}".format))


def _per_fold(split: str) -> int:
    """``n`` of a ``workload-<n>`` split name."""
    try:
        n = int(split.removeprefix("workload-"))
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"unknown split {split!r}: workload-<n> takes a whole number of "
                         "workloads held out together, e.g. workload-2", field="split")
    return n


def workload_sets(table: pd.DataFrame, n: int) -> list[list[str]]:
    """The workloads (``p<prefill> g<decode>`` labels) held out together by the folds of
    ``workload-<n>``.

    Workload ``(i, j)``, the ``i``-th prefill and ``j``-th decode length of the sweep, is ordered
    by its wrapped diagonal ``(i + j) mod m`` (``m`` the larger of the numbers of prefill and
    decode lengths), then by ``i``; consecutive runs of ``n`` are the folds (the last may be
    smaller). On a full grid a fold then never holds out two workloads with the same prefill
    or decode length while the diagonal has room: each length stays measured in the rest.

    Raises
    ------
    InputError
        When ``n`` workloads or more would leave none to fit.
    """
    grid = table[["prefill_tokens", "decode_tokens"]].drop_duplicates()
    if len(grid) <= n:
        raise InputError(f"the sweep has {len(grid)} workload(s): holding out {n} at a time "
                         "would leave nothing to learn them from; choose a smaller n or "
                         "another split", field="split")
    i = grid["prefill_tokens"].rank(method="dense").to_numpy(int) - 1
    j = grid["decode_tokens"].rank(method="dense").to_numpy(int) - 1
    m = max(i.max(), j.max()) + 1
    order = np.lexsort((i, (i + j) % m))
    names = _workloads(grid).to_numpy()[order]
    return [list(names[start:start + n]) for start in range(0, len(names), n)]


def budget_kept(table: pd.DataFrame) -> np.ndarray:
    """The rows of the ``budget`` split's measured third (bool per row): every baseline, and
    in each group and drafter the SD configurations whose acceptance rate's rank ``i`` and
    draft length's rank ``j`` (among that group and drafter's own) satisfy
    ``(i + j) mod 3 = 0``: a third of a full alpha × k grid, every alpha and (with three or
    more alphas) every k measured at least once, the lowest alpha with the shortest k always."""
    sd = table["k"] > 0
    keys = [schema.group_labels(table), table["drafter"]]
    rank = {c: table[c].where(sd).groupby(keys).rank(method="dense") - 1 for c in ("alpha", "k")}
    return (~sd | ((rank["alpha"] + rank["k"]) % 3 == 0)).to_numpy(bool)


def point_fit(train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    """The paper's prediction of each ``test`` row: ``C1/(1 − rps·C2)`` from a SciPy
    ``curve_fit`` of its configuration's unsaturated ``train`` rows
    (:func:`bayeslat.models.start.curve_fits`); NaN for a configuration not in ``train``, ``inf``
    at or past the fitted saturation."""
    train = train[~train["saturated"].to_numpy(bool)]
    labels = schema.config_labels(train)
    codes, known = pd.factorize(labels)
    fits = curve_fits(codes, train["rps"].to_numpy(float),
                      train["latency_mean"].to_numpy(float)).set_index(known)
    coef = fits.reindex(schema.config_labels(test).to_numpy())
    latency = theory.latency(test["rps"].to_numpy(float), coef["C1"].to_numpy(),
                             coef["C2"].to_numpy())
    return np.where(coef["C1"].isna().to_numpy(), np.nan, latency)  # not an infinite latency


def coefficient_fit(train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    """The paper's coefficient method: each group's six per-stage coefficients
    (:func:`bayeslat.theory.effective_coefficients`: ``c1p, c1v, c2p, c2v`` of the group,
    ``c1d, c2d`` of each of its drafters) by least squares of ``log L`` over the group's
    unsaturated ``train`` rows, every configuration at once, then ``C1/(1 − rps·C2)`` of each
    ``test`` row. It predicts acceptance rates and draft lengths it never measured; NaN for a
    group (or a group's drafter) not in ``train``, ``inf`` at or past the fitted saturation.
    (:func:`~bayeslat.models.start.group_fit`)."""
    train = train[~train["saturated"].to_numpy(bool)]
    out = np.full(len(test), np.nan)
    test_groups = schema.group_labels(test).to_numpy()
    for group, rows in train.groupby(schema.group_labels(train)):
        drafts = pd.Index(pd.unique(rows.loc[rows["k"] > 0, "drafter"]))
        theta = group_fit(rows, drafts)
        mine = (test_groups == group) & ((test["k"] == 0) | test["drafter"].isin(drafts)).to_numpy()
        if theta is not None and mine.any():
            c1, c2 = group_coefficients(theta, test[mine], drafts)
            out[mine] = theory.latency(test.loc[mine, "rps"].to_numpy(float), c1, c2)
    return out


def score(points: pd.DataFrame) -> dict:
    """MAPE and R² of the predictive median, and 50% and 90% coverage, of held-out points
    (rows of :func:`bayeslat.adequacy.held_out`). MAPE and R² are over the points whose
    median is finite; ``saturated`` counts the others (served, but past the model's capacity).
    ``mdape``, the median of the same errors, is beside the mean because a median just below
    the predicted wall is finite but can be hundreds of times the measured latency, and a few
    such points make the mean."""
    y, median = points["latency_mean"].to_numpy(float), points["median"].to_numpy(float)
    finite = np.isfinite(median)
    residual = ((y - median)[finite] ** 2).sum()
    total = ((y[finite] - y[finite].mean()) ** 2).sum()
    return {"points": int(len(points)),
            "mape": float(points["ape"][finite].mean()) if finite.any() else float("nan"),
            "mdape": float(points["ape"][finite].median()) if finite.any() else float("nan"),
            "r2": float(1.0 - residual / total) if total > 0 else float("nan"),
            "inside_50": float(points["in50"].mean()) if len(points) else float("nan"),
            "inside_90": float(points["in90"].mean()) if len(points) else float("nan"),
            "saturated": int((~finite).sum())} | _point_score(points, "point") | _point_score(
                points, "coef")


def _point_score(points: pd.DataFrame, method: str) -> dict:
    """One of the paper's point methods on the same points (column ``<method>_fit``:
    ``point``, :func:`point_fit`; ``coef``, :func:`coefficient_fit`): MAPE where it answers
    with a finite latency, on how many points it answers at all (NaN: a configuration or group
    never measured) and how many it puts past saturation."""
    if f"{method}_fit" not in points:
        return {}
    pred = points[f"{method}_fit"].to_numpy(float)
    finite = np.isfinite(pred)
    ape = np.abs(pred[finite] / points["latency_mean"].to_numpy(float)[finite] - 1)
    return {f"{method}_mape": float(ape.mean()) if finite.any() else float("nan"),
            f"{method}_answered": int((~np.isnan(pred)).sum()),
            f"{method}_saturated": int(np.isinf(pred).sum())}


def decision_cells(model, table: pd.DataFrame, held: np.ndarray, loads: dict,
                   seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The decisions of ``model`` on the rows ``held`` (bool per row of ``table``: a fold's
    held-out part): the setups and acceptance rates of its SD rows (every measured k to
    choose from), on each setup's load grid ``loads`` (:func:`bayeslat.decide.default_loads`
    of the whole sweep's fit).

    Returns
    -------
    ``(k_star, rps_star)``: the risk-aware k* per (setup, alpha, rps) cell with the posterior
    expected latency of every k there (columns ``latency_k<k>``, s), and the posterior median
    of RPS* with the share of draws in which it exists (``p_break_even``) per
    (setup, alpha, k > 0).
    """
    sd_rows = table[held & (table["k"] > 0).to_numpy()]
    alphas = np.sort(sd_rows["alpha"].unique())
    ks = np.sort(table.loc[table["k"] > 0, "k"].unique()).astype(int)
    k_star, rps_star = [], []
    for ds in decide.each_setup(model, decide.setups(sd_rows), alphas, ks, loads, seed=seed):
        latency = ds["expected_latency"].to_series().unstack("k").add_prefix("latency_k")
        k_star.append(ds["k_risk"].to_dataframe().join(latency).reset_index())
        star = xr.merge([ds["rps_star"].sel(stat="q50", drop=True), ds["p_break_even"]])
        rps_star.append(star.to_dataframe().reset_index().query("k > 0"))
    if not k_star:  # no SD rows held out (a baseline-only sweep): nothing to decide
        return (pd.DataFrame(columns=["setup", "alpha", "rps", "k_risk"]),
                pd.DataFrame(columns=["setup", "alpha", "k", "rps_star", "p_break_even"]))
    return pd.concat(k_star, ignore_index=True), pd.concat(rps_star, ignore_index=True)


def decision_score(fold_cells, full_cells) -> tuple[dict, pd.DataFrame]:
    """How the decisions of a fit without the fold (``fold_cells``, :func:`decision_cells`)
    agree with the whole sweep's (``full_cells``, at those cells and maybe more): the share of
    (setup, alpha, load) cells with the same k*, and the regret of the fold's k* where it
    differs (its expected latency over that of the whole sweep's k*, both by the whole sweep's
    fit, minus 1: near-ties cost little), and the share of RPS* pairs (both existing in most
    draws) within :data:`RPS_STAR_TOLERANCE`; also how often the two agree on whether RPS*
    exists.

    Returns the scores and the cells, one row per compared quantity (``kind`` ``k_star`` or
    ``rps_star``, the fold's and the full fit's values, whether they agree, and the regret
    or the relative ``error``)."""
    keys = {"k_star": ["setup", "alpha", "rps"], "rps_star": ["setup", "alpha", "k"]}
    full_k = full_cells[0]
    k = fold_cells[0][keys["k_star"] + ["k_risk"]].merge(
        full_k, on=keys["k_star"], suffixes=("", "_full"))
    k = k.rename(columns={"k_risk": "fold", "k_risk_full": "full"}).assign(kind="k_star")
    k["agree"] = k["fold"] == k["full"]
    k["regret"] = _expected(k, "fold") / _expected(k, "full") - 1.0
    k = k.drop(columns=[c for c in k if c.startswith("latency_k")])
    star = fold_cells[1].merge(full_cells[1], on=keys["rps_star"], suffixes=("", "_full"))
    exists = (star["p_break_even"] > 0.5).to_numpy(), (star["p_break_even_full"] > 0.5).to_numpy()
    star = star[exists[0] & exists[1]].rename(columns={"rps_star": "fold",
                                                       "rps_star_full": "full"})
    error = np.abs(star["fold"] / star["full"] - 1)
    star = star.assign(kind="rps_star", agree=error <= RPS_STAR_TOLERANCE, error=error)
    cells = pd.concat([k, star.drop(columns=["p_break_even", "p_break_even_full"])],
                      ignore_index=True)
    agree = float((exists[0] == exists[1]).mean()) if len(exists[0]) else float("nan")
    return _decision_figures(cells) | {"rps_star_exists_agree": agree}, cells


def _expected(cells: pd.DataFrame, which: str) -> np.ndarray:
    """The whole sweep's expected latency (columns ``latency_k<k>``) at the k in ``which``;
    NaN where that k is NaN (no k eligible)."""
    out = np.full(len(cells), np.nan)
    for column in (c for c in cells if c.startswith("latency_k")):
        rows = (cells[which] == int(column.removeprefix("latency_k"))).to_numpy()
        out[rows] = cells.loc[rows, column].to_numpy(float)
    return out


def _decision_figures(cells: pd.DataFrame) -> dict:
    """k* agreement and regret, and RPS* error, over compared cells (rows of
    :func:`decision_score`)."""
    k, star = cells[cells["kind"] == "k_star"], cells[cells["kind"] == "rps_star"]
    nan = float("nan")
    regret = k["regret"].to_numpy(float) if len(k) else np.array([])
    return {"k_cells": int(len(k)), "k_agree": float(k["agree"].mean()) if len(k) else nan,
            "k_regret_mean": float(np.nanmean(regret)) if np.isfinite(regret).any() else nan,
            "k_regret_max": float(np.nanmax(regret)) if np.isfinite(regret).any() else nan,
            "rps_star_pairs": int(len(star)),
            "rps_star_within": float(star["agree"].mean()) if len(star) else nan,
            "rps_star_error": float(star["error"].median()) if len(star) else nan}


def agreement(model, reference, seed: int = 0) -> pd.DataFrame:
    """How close a fit's posterior is to a reference fit's of the same data, per measured
    configuration: for ``C1``, ``C2`` (at zero load) and, per SD configuration, the zero-load
    speedup and RPS* (:func:`bayeslat.decide.headline`), ``z``, the distance of the medians in the
    reference's posterior sd (its 90% interval over 3.29), and ``width``, the ratio of the 90%
    intervals. The check of the curve summaries against the exact likelihood."""
    rows = reference.table.drop_duplicates(list(schema.CONFIG_COLUMNS)).assign(rps=0.0)
    out = {}
    for name, m in (("model", model), ("reference", reference)):
        pred = m.predict(rows, seed=seed)
        q = {part: pd.DataFrame(pred[part].quantile([0.05, 0.5, 0.95], ("chain", "draw")).values.T,
                                index=schema.config_labels(rows).to_numpy(),
                                columns=["lo", "mid", "hi"]) for part in ("C1", "C2")}
        # every draw, as for C1 and C2: the fits' difference, not the thinning's noise
        head = decide.headline(m, seed, max_draws=None).set_index("config")
        for stat, col in (("speedup0", "speedup0"), ("rps_star", "rps_star")):
            q[stat] = head[[f"{col}_lo", col, f"{col}_hi"]].set_axis(["lo", "mid", "hi"], axis=1)
        out[name] = pd.concat(q, names=["quantity", "config"])
    a, b = out["model"], out["reference"].reindex(out["model"].index)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({"z": (a["mid"] - b["mid"]).abs() / ((b["hi"] - b["lo"]) / 3.29),
                             "width": (a["hi"] - a["lo"]) / (b["hi"] - b["lo"])})


def loo_figures(elpd) -> dict:
    """The figures of a fit's PSIS-LOO (``elpd``: :func:`bayeslat.models.base.psis_loo`):
    ``elpd_loo`` and its standard error ``se``, the effective number of parameters ``p_loo``,
    and how many of the ``points`` have Pareto k above :data:`PARETO_K` and above 1 (there
    the estimate is unreliable: a held-out split says more)."""
    k = elpd.pareto_k.values
    return {"elpd_loo": float(elpd.elpd_loo), "se": float(elpd.se), "p_loo": float(elpd.p_loo),
            "points": int(k.size), "pareto_k_over_07": int((k > PARETO_K).sum()),
            "pareto_k_over_1": int((k > 1).sum())}


@dataclass
class Validation:
    """What :func:`run` produced for one variant: the held-out points with their predictions, a
    row of scores and fit diagnostics per fold, the scores of each split over its folds, and,
    with the ``loo`` check, the PSIS-LOO figures and diagnostics of the whole sweep's fit
    (``loo``) and its pointwise PSIS-LOO (``elpd``, for :func:`compare`)."""

    variant: str
    points: pd.DataFrame
    folds: pd.DataFrame
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)
    loo: dict | None = None
    elpd: object = field(default=None, repr=False)
    sbc: dict | None = None
    splits: pd.DataFrame = field(init=False)

    def __post_init__(self):
        names = pd.unique(self.folds["split"]) if len(self.folds) else []
        self.splits = pd.DataFrame([
            {"split": name, "folds": int((self.folds["split"] == name).sum())}
            | score(self.points[self.points["split"] == name]) | self._decided(name)
            for name in names])

    def _decided(self, split: str) -> dict:
        """The decision scores of ``split`` over all its folds' cells."""
        if self.decisions.empty:
            return {}
        return _decision_figures(self.decisions[self.decisions["split"] == split])

    def doc(self) -> dict:
        """Every figure (splits, folds, points, decisions, loo) as JSON-ready records."""
        return {"variant": self.variant, "loo": self.loo, "sbc": self.sbc,
                **{name: json.loads(getattr(self, name).to_json(orient="records"))
                   for name in ("splits", "folds", "points", "decisions")}}


def compare(results: list[Validation]) -> pd.DataFrame:
    """Rank the variants of ``results`` that ran the ``loo`` check (two or more, fitted to the
    same sweep) by PSIS-LOO (:func:`arviz.compare`): a row per variant, best first, with
    ``elpd_loo``, ``se``, ``p_loo``, the difference from the best ``elpd_diff`` and its
    standard error ``dse``, the Pareto k counts of :func:`loo_figures` and whether the fit
    converged."""
    import arviz as az

    fits = {r.variant: r.elpd for r in results if r.elpd is not None}
    if len(fits) < 2:
        raise InputError("comparing variants needs two or more fitted with the loo check",
                         field="model")
    with warnings.catch_warnings():  # the Pareto k are counted, not warned about
        warnings.simplefilter("ignore")
        table = az.compare(fits, ic="loo")
    loo = pd.DataFrame({r.variant: r.loo for r in results if r.loo is not None}).T
    table = table.join(loo[["points", "pareto_k_over_07", "pareto_k_over_1", "converged"]])
    return (table.rename_axis("variant").reset_index()
            [["variant", "rank", "elpd_loo", "se", "p_loo", "elpd_diff", "dse", "points",
              "pareto_k_over_07", "pareto_k_over_1", "converged"]])


def choice(comparison: pd.DataFrame) -> str:
    """What a :func:`compare` ranking implies, in one sentence: the best variant when its
    lead over the next exceeds :data:`CLEAR_LEAD_SE` standard errors, else no clear choice;
    where PSIS-LOO itself is unreliable; and which fits did not converge."""
    best, next_ = comparison.iloc[0], comparison.iloc[1]
    lead = (f"ahead of {next_.variant} by {next_.elpd_diff:.1f} ± {next_.dse:.1f} in expected "
            "log predictive density")
    if next_.elpd_diff > CLEAR_LEAD_SE * next_.dse:
        text = f"PSIS-LOO prefers {best.variant}: {lead}"
    else:
        text = (f"no clear choice: {best.variant} is {lead}, within {CLEAR_LEAD_SE:g} standard "
                "errors; prefer the simpler variant or the one the held-out splits favour")
    shaky = comparison[comparison["pareto_k_over_07"] > 0]
    if len(shaky):
        text += ("; PSIS-LOO is unreliable at " + ", ".join(
            f"{r.pareto_k_over_07} of {r.points} points of {r.variant}" for r in
            shaky.itertuples()) + f" (Pareto k > {PARETO_K:g}): check with the top-rate split")
    unconverged = comparison.loc[~comparison["converged"].astype(bool), "variant"]
    if len(unconverged):
        text += (f"; the fit of {' and '.join(unconverged)} did not converge: refit with more "
                 "draws before relying on this")
    return text


def write_json(path: str | Path, results: list[Validation], comparison=None,
               overwrite: bool = False) -> Path:
    """Write :func:`document` of ``results`` and ``comparison`` as one JSON file, atomically."""
    with atomic_output(path, overwrite=overwrite) as tmp:
        tmp.write_text(json.dumps(document(results, comparison), indent=1))
    return Path(path)


def document(results: list[Validation], comparison=None) -> dict:
    """Every figure of ``results`` (and of their :func:`compare` ``comparison``, with its
    :func:`choice`) as one JSON-ready document: ``{"variants", "comparison", "choice"}``."""
    return {"variants": [r.doc() for r in results],
            "comparison": (json.loads(comparison.to_json(orient="records"))
                           if comparison is not None else None),
            "choice": choice(comparison) if comparison is not None else None}


def unknown_checks(splits) -> list[str]:
    """The names in ``splits`` that are neither in :data:`CHECKS` nor a ``workload-<n>``."""
    return [s for s in splits if s not in CHECKS and not s.startswith("workload-")]


def check(table: pd.DataFrame, variant: str, splits) -> list[Fold]:
    """The folds of ``splits`` (names from :data:`CHECKS`) on ``table``, refused before any
    fit where the sweep or the variant cannot support them (:func:`folds`; per-configuration
    variants predict only configurations they were fitted on)."""
    unknown = unknown_checks(splits)
    if unknown:
        raise InputError(f"unknown split {', '.join(unknown)}; use one or more of "
                         f"{', '.join(CHECKS)}", field="split")
    if SBC in splits and not calibration.supports(variant):
        raise InputError(f"the sbc check calibrates the variants with the paper's per-group "
                         f"coefficients (hierarchical, speculative), not {variant}",
                         field="split")
    todo = [f for name in splits if name not in (LOO, SBC) for f in folds(table, name)]
    if get(variant).per_configuration:  # measured configurations only
        labels = schema.config_labels(table)
        for one in todo:
            if not labels[one.drop].isin(labels[~one.drop]).all():
                raise InputError(f"the {variant} model predicts only configurations it was "
                                 f"fitted on, and the {one.split} split holds out whole "
                                 "configurations: use the top-rate split or a hierarchical "
                                 "variant", field="split")
    return todo


def run(table: pd.DataFrame, variant: str, splits=SPLITS, *, config=None, seed: int = 0,
        status=None, decisions: bool = True, sbc_fits: int = 100, jobs: int = FOLD_JOBS,
        **sampler) -> Validation:
    """Refit ``variant`` once per fold of each split and score its held-out predictions.

    Parameters
    ----------
    table
        A sweep table (:mod:`bayeslat.data.schema`).
    variant, config
        The model variant and its scaling configuration (:class:`~bayeslat.scaling.ScalingConfig`,
        a file of overrides of the variant's defaults, or None for the defaults:
        :func:`bayeslat.models.config_of`).
    splits
        Names from :data:`CHECKS`; all are checked before the first fit (:func:`check`).
    status
        Optional callable taking a one-line message about the current fold.
    decisions
        Also score each fold's decisions against the whole sweep's fit (one fit more, shared
        with the ``loo`` check; :func:`decision_score`), where :mod:`bayeslat.decide` reads
        the variant's fits (not ``roofline``'s yet).
    sbc_fits
        Refits of the ``sbc`` check (:func:`bayeslat.calibration.run`; its own sampler
        settings).
    jobs
        Folds refitted at a time, each in a process forked from this one after the whole
        sweep's fit (at most one per core; 1: one after the other, here), the second started
        one compile of that fit later. The results do not depend on it: every fit is seeded,
        and its sampler stops at the same checkpoint whatever the machine's load.
    sampler
        Passed to :func:`bayeslat.models.sampling.sample` (``draws``, ``tune``, ``chains``,
        ``sampler``, ``exact``, ``progressbar``).
    """
    table = schema.validate(table).reset_index(drop=True)
    todo = check(table, variant, splits)
    config = config_of(variant, config)
    say = status or (lambda message: None)

    def fitted(rows: pd.DataFrame, log_likelihood: bool = False):
        model = get(variant)(rows.reset_index(drop=True), config)
        clock = time.perf_counter()
        # the pointwise log-likelihood is for PSIS-LOO only; the folds predict
        sampling.sample(model, seed=seed, log_likelihood=log_likelihood, **sampler)
        diag = sampling.diagnostics(model.idata, time.perf_counter() - clock)
        return model, {"converged": bool(diag.converged)} | asdict(diag) | {
            "seconds": round(diag.seconds, 1)}

    loo = elpd = full = full_cells = None
    if LOO in splits or (decisions and todo):
        say(f"{variant}: the whole sweep (PSIS-LOO, the decisions held-out fits are scored on)")
        full, full_diag = fitted(table, log_likelihood=LOO in splits)
        if LOO in splits:
            elpd = psis_loo(full.idata)
            loo = loo_figures(elpd) | full_diag
        if decisions and todo:
            loads = decide.default_loads(full, decide.setups(table), seed=seed)
            # every setup and alpha, once: each fold is scored on the cells of its held-out part
            full_cells = decision_cells(full, table, (table["k"] > 0).to_numpy(), loads, seed)

    def fold(item: tuple[int, Fold], _shared):
        """The fold's held-out points, its row of figures and its decision cells."""
        i, one = item
        if i == 1 and jobs > 1:
            # the second process starts a compile later, so that each one's compile (one
            # core) overlaps the other's sampling rather than its compile
            time.sleep(stagger)
        model, diag = fitted(table[~one.drop])
        test = table[one.scored(table)].reset_index(drop=True)
        held = adequacy.held_out(model, test, seed).assign(
            split=one.split, held_out=one.held_out, point_fit=point_fit(model.source, test),
            coef_fit=coefficient_fit(model.source, test))
        decided, compared = {}, None
        if decisions:
            decided, compared = decision_score(
                decision_cells(model, table, one.drop, loads, seed), full_cells)
            compared = compared.assign(split=one.split, held_out=one.held_out)
        return held, ({"split": one.split, "held_out": one.held_out} | score(held) | decided
                      | diag), compared

    jobs = parallel.jobs_for(min(jobs, os.cpu_count() or 1), len(todo))
    if jobs > 1:
        sampler["progressbar"] = False  # the folds' bars would overwrite each other
    if todo:
        say(f"{variant}: {len(todo)} folds, {jobs} at a time")
    stagger = (json.loads(full.idata.posterior.attrs.get("sampler", "{}")).get("compile_s", 0.0)
               if full is not None else 0.0)
    done = parallel.fork_map(fold, list(enumerate(todo)), jobs=jobs, each=lambda i: say(
        f"{variant}: fold {i + 1} of {len(todo)} done ({todo[i].split}, without "
        f"{todo[i].held_out})"))
    points = [held for held, _, _ in done]
    rows = [row for _, row, _ in done]
    cells = [compared for _, _, compared in done if compared is not None]
    sbc = None
    if SBC in splits:
        say(f"{variant}: simulation-based calibration, {sbc_fits} refits of prior draws")
        sbc = calibration.run(variant, sbc_fits, config=config, seed=seed,
                              progress=lambda done, total: say(
                                  f"{variant}: simulation-based calibration, fit {done} of "
                                  f"{total}")).doc()
    return Validation(variant, pd.concat(points, ignore_index=True) if points else
                      pd.DataFrame(), pd.DataFrame(rows),
                      pd.concat(cells, ignore_index=True) if cells else pd.DataFrame(), loo,
                      elpd, sbc)
