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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat import adequacy, fit, theory
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.files import atomic_output
from bayeslat.models import get
from bayeslat.models.start import curve_fits

SPLITS = ("top-rate", "alpha", "k", "workload", "verifier")


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


@dataclass
class Validation:
    """What :func:`run` produced: the held-out points with their predictions, a row of scores
    and fit diagnostics per fold, and the scores of each split over its folds."""

    variant: str
    points: pd.DataFrame
    folds: pd.DataFrame
    splits: pd.DataFrame = field(init=False)

    def __post_init__(self):
        self.splits = pd.DataFrame([
            {"split": name, "folds": int((self.folds["split"] == name).sum())}
            | score(self.points[self.points["split"] == name])
            for name in pd.unique(self.folds["split"])])

    def to_json(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write every figure (splits, folds, points) as one JSON file, atomically."""
        doc = {"variant": self.variant,
               **{name: json.loads(getattr(self, name).to_json(orient="records"))
                  for name in ("splits", "folds", "points")}}
        with atomic_output(path, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(doc, indent=1))
        return Path(path)


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
        Names from :data:`SPLITS`; all are checked before the first fit.
    status
        Optional callable taking a one-line message about the current fold.
    sampling
        Passed to :func:`bayeslat.fit.sample` (``draws``, ``tune``, ``chains``, ``sampler``,
        ``exact``, ``progressbar``).
    """
    table = schema.validate(table).reset_index(drop=True)
    todo = [f for name in splits for f in folds(table, name)]
    if hasattr(get(variant), "known"):  # per-configuration variants: measured ones only
        labels = schema.config_labels(table)
        for one in todo:
            if not labels[one.drop].isin(labels[~one.drop]).all():
                raise InputError(f"the {variant} model predicts only configurations it was "
                                 f"fitted on, and the {one.split} split holds out whole "
                                 "configurations: use the top-rate split or a hierarchical "
                                 "variant", field="split")
    say = status or (lambda message: None)
    points, rows = [], []
    for i, one in enumerate(todo):
        say(f"fold {i + 1} of {len(todo)}: {one.split}, without {one.held_out}")
        model = get(variant)(table[~one.drop].reset_index(drop=True), config)
        clock = time.perf_counter()
        fit.sample(model, seed=seed, **sampling)
        diag = fit.diagnostics(model.idata, time.perf_counter() - clock)
        test = table[one.scored(table)].reset_index(drop=True)
        held = adequacy.held_out(model, test, seed).assign(
            split=one.split, held_out=one.held_out, point_fit=point_fit(model.source, test))
        points.append(held)
        rows.append({"split": one.split, "held_out": one.held_out} | score(held)
                    | {"converged": bool(diag.converged), "max_rhat": diag.max_rhat,
                       "min_ess_bulk": diag.min_ess_bulk, "divergences": diag.divergences,
                       "seconds": round(diag.seconds, 1)})
    return Validation(variant, pd.concat(points, ignore_index=True), pd.DataFrame(rows))
