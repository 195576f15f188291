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
    hierarchical variants predict a workload never measured from the scaling laws).

Scores per fold and per split (:func:`score`): MAPE and R² of the predictive median against the
measured latency, and the share of measured points inside their 50% and 90% predictive intervals
(about 0.5 and 0.9 when the model is calibrated there).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat import adequacy, fit
from bayeslat.data import schema
from bayeslat.errors import InputError
from bayeslat.files import atomic_output
from bayeslat.models import get

SPLITS = ("top-rate", "alpha", "k", "workload")


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
        For an unknown split, or one the sweep cannot support (one acceptance rate, one draft
        length or one workload: nothing would be left to learn it from).
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
    else:
        raise InputError(f"unknown split {split!r}; use one or more of {', '.join(SPLITS)}",
                         field="split")
    if split == "workload":  # by prefill, then decode length
        order = table.sort_values(["prefill_tokens", "decode_tokens"]).index
    else:
        order = values.sort_values().index
    distinct = list(pd.unique(values.loc[order].dropna()))
    if len(distinct) < 2:
        raise InputError(f"the sweep has {len(distinct)} value(s) of {column}: holding one out "
                         "would leave nothing to learn it from; choose another split",
                         field="split")
    return [Fold(split, words.format(v), (values == v).to_numpy()) for v in distinct]


def score(points: pd.DataFrame) -> dict:
    """MAPE and R² of the predictive median, and 50% and 90% coverage, of held-out points
    (rows of :func:`bayeslat.adequacy.held_out`)."""
    y, median = points["latency_mean"].to_numpy(float), points["median"].to_numpy(float)
    finite = np.isfinite(median)
    residual = ((y - median)[finite] ** 2).sum()
    total = ((y[finite] - y[finite].mean()) ** 2).sum()
    return {"points": int(len(points)),
            "mape": float(points["ape"].mean()) if len(points) else float("nan"),
            "r2": float(1.0 - residual / total) if total > 0 else float("nan"),
            "inside_50": float(points["in50"].mean()) if len(points) else float("nan"),
            "inside_90": float(points["in90"].mean()) if len(points) else float("nan"),
            "saturated": int((~finite).sum())}


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
    say = status or (lambda message: None)
    points, rows = [], []
    for i, one in enumerate(todo):
        say(f"fold {i + 1} of {len(todo)}: {one.split}, without {one.held_out}")
        model = get(variant)(table[~one.drop].reset_index(drop=True), config)
        clock = time.perf_counter()
        fit.sample(model, seed=seed, **sampling)
        diag = fit.diagnostics(model.idata, time.perf_counter() - clock)
        held = adequacy.held_out(model, table[one.scored(table)].reset_index(drop=True), seed)
        held = held.assign(split=one.split, held_out=one.held_out)
        points.append(held)
        rows.append({"split": one.split, "held_out": one.held_out} | score(held)
                    | {"converged": bool(diag.converged), "max_rhat": diag.max_rhat,
                       "min_ess_bulk": diag.min_ess_bulk, "divergences": diag.divergences,
                       "seconds": round(diag.seconds, 1)})
    return Validation(variant, pd.concat(points, ignore_index=True), pd.DataFrame(rows))
