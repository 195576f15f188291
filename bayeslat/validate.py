"""Held-out prediction: refit a variant without part of a sweep and score its predictions there.

A posterior is only as good as the check that could have caught it being wrong, and the fit's own
points cannot: the model has seen them. Each *split* of :data:`SPLITS` cuts a sweep into folds;
for each fold the variant is fitted to the rest (the fold's rows, saturated ones too, are left
out, so that a held-out configuration's measured ceiling does not leak into the fit) and predicts
the fold's measured, unsaturated rows (:func:`bayeslat.adequacy.held_out`: the posterior
predictive of each measured mean latency, the likelihood's scatter and the measurement error
included). The splits are the questions users bring:

``top-rate``
    one fold: each configuration's highest constant rate, the load nearest capacity;
``alpha``
    a fold per acceptance rate: every SD configuration measured at it;
``k``
    a fold per draft length ``k > 0``;
``workload``
    a fold per prefill/decode pair: every group of that workload, its baseline too (the
    hierarchical variants predict a workload never measured from the scaling laws);
``verifier``
    a fold per verifier model: everything measured with it (predicted from the scaling in
    the verifier's size).

and one check that leaves nothing out:

``loo``
    the whole sweep fitted once and scored by PSIS-LOO (:func:`loo_figures`): the expected log
    predictive density of each measured point as if it had been left out, estimated from the
    one fit by Pareto-smoothed importance sampling, with the points where that estimate
    cannot be trusted (Pareto k above :data:`PARETO_K`) counted. Two or more variants run with
    it are ranked by :func:`compare`, and :func:`choice` says what the ranking implies.

Scores per fold and per split (:func:`score`): MAPE and R² of the predictive median against the
measured latency, and the share of measured points inside their 50% and 90% predictive intervals
(about 0.5 and 0.9 when the model is calibrated there). Beside them, the paper's point method
(:func:`point_fit`: SciPy ``curve_fit`` of ``C1``, ``C2`` per configuration on the same training
rows), which answers only for configurations the fit saw (the ``top-rate`` split) and says
where it extrapolates past its own saturation.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat import adequacy, fit, theory
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.files import atomic_output
from bayeslat.models import get
from bayeslat.models.base import PARETO_K, psis_loo
from bayeslat.models.start import curve_fits

SPLITS = ("top-rate", "alpha", "k", "workload", "verifier")
# The check without folds (PSIS-LOO of one fit of the whole sweep), named like a split.
LOO = "loo"
CHECKS = (*SPLITS, LOO)
# A variant is clearly ahead when its lead in elpd exceeds this many standard errors.
CLEAR_LEAD_SE = 2.0


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
    if split == "top-rate":
        constant = ok & (table["strategy"] == "constant").to_numpy()
        labels = schema.config_labels(table)
        top = table[constant].groupby(labels[constant])["rps"].idxmax()
        return [Fold(split, "each configuration's highest constant rate",
                     table.index.isin(top.to_numpy()))]
    if split == "alpha":
        values, column, words = table["alpha"].where(sd), "alpha", "alpha {:g}"
    elif split == "k":
        values, column, words = table["k"].where(sd), "k", "k = {:g}"
    elif split == "workload":
        values = ("p" + table["prefill_tokens"].map("{:g}".format) + " g"
                  + table["decode_tokens"].map("{:g}".format))
        column, words = "prefill_tokens and decode_tokens", "{}"
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


def score(points: pd.DataFrame) -> dict:
    """MAPE and R² of the predictive median, and 50% and 90% coverage, of held-out points
    (rows of :func:`bayeslat.adequacy.held_out`). MAPE and R² are over the points whose
    median is finite; ``saturated`` counts the others (served, but past the model's capacity)."""
    y, median = points["latency_mean"].to_numpy(float), points["median"].to_numpy(float)
    finite = np.isfinite(median)
    residual = ((y - median)[finite] ** 2).sum()
    total = ((y[finite] - y[finite].mean()) ** 2).sum()
    return {"points": int(len(points)),
            "mape": float(points["ape"][finite].mean()) if finite.any() else float("nan"),
            "r2": float(1.0 - residual / total) if total > 0 else float("nan"),
            "inside_50": float(points["in50"].mean()) if len(points) else float("nan"),
            "inside_90": float(points["in90"].mean()) if len(points) else float("nan"),
            "saturated": int((~finite).sum())} | _point_score(points)


def _point_score(points: pd.DataFrame) -> dict:
    """The paper's point method on the same points: MAPE where it answers with a finite
    latency, and on how many points it answers at all (NaN: a configuration never measured)
    and how many it puts past saturation."""
    if "point_fit" not in points:
        return {}
    pred = points["point_fit"].to_numpy(float)
    finite = np.isfinite(pred)
    ape = np.abs(pred[finite] / points["latency_mean"].to_numpy(float)[finite] - 1)
    return {"point_mape": float(ape.mean()) if finite.any() else float("nan"),
            "point_answered": int((~np.isnan(pred)).sum()),
            "point_saturated": int(np.isinf(pred).sum())}


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
    loo: dict | None = None
    elpd: object = field(default=None, repr=False)
    splits: pd.DataFrame = field(init=False)

    def __post_init__(self):
        names = pd.unique(self.folds["split"]) if len(self.folds) else []
        self.splits = pd.DataFrame([
            {"split": name, "folds": int((self.folds["split"] == name).sum())}
            | score(self.points[self.points["split"] == name]) for name in names])

    def doc(self) -> dict:
        """Every figure (splits, folds, points, loo) as JSON-ready records."""
        return {"variant": self.variant, "loo": self.loo,
                **{name: json.loads(getattr(self, name).to_json(orient="records"))
                   for name in ("splits", "folds", "points")}}


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
    """Write every figure of ``results`` (and of their :func:`compare` ``comparison``, with
    its :func:`choice`) as one JSON file, atomically."""
    doc = {"variants": [r.doc() for r in results],
           "comparison": (json.loads(comparison.to_json(orient="records"))
                          if comparison is not None else None),
           "choice": choice(comparison) if comparison is not None else None}
    with atomic_output(path, overwrite=overwrite) as tmp:
        tmp.write_text(json.dumps(doc, indent=1))
    return Path(path)


def check(table: pd.DataFrame, variant: str, splits) -> list[Fold]:
    """The folds of ``splits`` (names from :data:`CHECKS`) on ``table``, refused before any
    fit where the sweep or the variant cannot support them (:func:`folds`; per-configuration
    variants predict only configurations they were fitted on)."""
    unknown = [s for s in splits if s not in CHECKS]
    if unknown:
        raise InputError(f"unknown split {', '.join(unknown)}; use one or more of "
                         f"{', '.join(CHECKS)}", field="split")
    todo = [f for name in splits if name != LOO for f in folds(table, name)]
    if hasattr(get(variant), "known"):  # per-configuration variants: measured ones only
        labels = schema.config_labels(table)
        for one in todo:
            if not labels[one.drop].isin(labels[~one.drop]).all():
                raise InputError(f"the {variant} model predicts only configurations it was "
                                 f"fitted on, and the {one.split} split holds out whole "
                                 "configurations: use the top-rate split or a hierarchical "
                                 "variant", field="split")
    return todo


def run(table: pd.DataFrame, variant: str, splits=SPLITS, *, config=None, seed: int = 0,
        status=None, **sampling) -> Validation:
    """Refit ``variant`` once per fold of each split and score its held-out predictions.

    Parameters
    ----------
    table
        A sweep table (:mod:`bayeslat.data.schema`).
    variant, config
        The model variant and its scaling configuration (:class:`~bayeslat.scaling.ScalingConfig`
        or None for the variant's default).
    splits
        Names from :data:`CHECKS`; all are checked before the first fit (:func:`check`).
    status
        Optional callable taking a one-line message about the current fold.
    sampling
        Passed to :func:`bayeslat.fit.sample` (``draws``, ``tune``, ``chains``, ``sampler``,
        ``exact``, ``progressbar``).
    """
    table = schema.validate(table).reset_index(drop=True)
    todo = check(table, variant, splits)
    say = status or (lambda message: None)

    def fitted(rows: pd.DataFrame):
        model = get(variant)(rows.reset_index(drop=True), config)
        clock = time.perf_counter()
        fit.sample(model, seed=seed, **sampling)
        diag = fit.diagnostics(model.idata, time.perf_counter() - clock)
        return model, {"converged": bool(diag.converged), "max_rhat": diag.max_rhat,
                       "min_ess_bulk": diag.min_ess_bulk, "divergences": diag.divergences,
                       "seconds": round(diag.seconds, 1)}

    points, rows = [], []
    for i, one in enumerate(todo):
        say(f"{variant}, fold {i + 1} of {len(todo)}: {one.split}, without {one.held_out}")
        model, diag = fitted(table[~one.drop])
        test = table[one.scored(table)].reset_index(drop=True)
        held = adequacy.held_out(model, test, seed).assign(
            split=one.split, held_out=one.held_out, point_fit=point_fit(model.source, test))
        points.append(held)
        rows.append({"split": one.split, "held_out": one.held_out} | score(held) | diag)
    loo = elpd = None
    if LOO in splits:
        say(f"{variant}: the whole sweep, for PSIS-LOO")
        model, diag = fitted(table)
        elpd = psis_loo(model.idata)
        loo = loo_figures(elpd) | diag
    return Validation(variant, pd.concat(points, ignore_index=True) if points else
                      pd.DataFrame(), pd.DataFrame(rows), loo, elpd)
