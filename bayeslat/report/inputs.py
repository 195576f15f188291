"""What the sections draw from: the fitted models, thinned draws and the few predictions shared.

Predictions cost seconds each (every call rebuilds the model), so a report makes few: one for the
fitted rows and the per-configuration latency curves together, one for the adequacy check
(:func:`bayeslat.adequacy.check`, the same figures ``bayeslat fit`` prints), and one decision
call per setup (each on its own load grid, up to about the setup's measured ceiling, because
setups saturate at very different rates). They use at most :data:`MAX_DRAWS` posterior draws,
picked at random with the report's seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import adequacy, decide
from bayeslat.data import schema
from bayeslat.errors import BayeslatError
from bayeslat.models.base import prepare
from bayeslat.report import page

MAX_DRAWS = 400
# Loads per latency curve and per decision grid. Curves reach past the highest measured load,
# decision grids also to the baseline's saturation (past any break-even).
GRID_POINTS = 30
GRID_REACH = 1.15
# Decision grids end this far past the setup's measured ceiling (its baseline's throughput
# benchmark), or past its highest measured load where no ceiling was measured.
CEILING_REACH = 1.05
# Acceptance rates for the C1R/C2R curves, besides the measured ones.
ALPHA_GRID = np.linspace(0.4, 0.95, 12)
# Acceptance rates shown in speedup panels and the tables, per setup (the measured ones).
MAX_ALPHAS = 3


# What predict_decisions and predict_answers set.
DECIDED = ("decisions", "shown_alphas", "skipped", "load_limits", "answers", "asked")


@dataclass
class Inputs:
    """The models of a report and the predictions its sections share.

    ``model`` is the first model given (every section but the comparison is about it);
    ``models`` maps each file name to its model.
    """

    models: dict[str, object]
    seed: int = 0
    # Processes that analyse the setups' decisions (None: one per core).
    jobs: int | None = None
    model: object = field(init=False)
    thin: object = field(init=False)
    fitted: xr.Dataset | None = None
    curves: xr.Dataset | None = None
    curve_rows: pd.DataFrame | None = None
    decisions: dict[str, xr.Dataset] = field(default_factory=dict)
    # Per setup: the measured acceptance rates (at most MAX_ALPHAS) that speedup panels show.
    shown_alphas: dict[str, list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    # Per setup: the highest measured load and the measured ceiling (None: not measured), req/s.
    load_limits: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    check: adequacy.Adequacy | None = None
    # The answer per setup at the reader's loads and acceptance rates (decide.verdicts).
    answers: pd.DataFrame | None = None
    # Whether the answers are at loads or acceptance rates the reader asked for.
    asked: bool = False
    # Models (by name) whose fit did not converge, with what failed; reported at the top.
    unconverged: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.model = next(iter(self.models.values()))
        self.thin = self.model.thinned(MAX_DRAWS, np.random.default_rng(self.seed))

    def middle_alpha(self, setup: str) -> float:
        """The middle of the acceptance rates shown for ``setup`` (its measured ones)."""
        shown = self.shown_alphas[setup]
        return shown[len(shown) // 2]

    @property
    def epsilon(self) -> float:
        """The largest P(SD hurts) the risk-aware choice accepts (the decisions' own)."""
        first = next(iter(self.decisions.values()), None)
        return float(first.attrs.get("epsilon", 0.05)) if first is not None else 0.05

    @property
    def name(self) -> str:
        return next(iter(self.models))

    def predict(self, rps=None, alpha=None) -> None:
        """Every prediction the sections draw from: :meth:`check_adequacy` and
        :meth:`predict_latency` here while a forked process makes :meth:`predict_decisions`
        and :meth:`predict_answers` (``rps``, ``alpha``), whose results are small
        (:func:`bayeslat.parallel.beside`; one after the other with one job)."""
        from bayeslat import parallel

        def decisions() -> dict:
            self.predict_decisions()
            self.predict_answers(rps, alpha)
            return {name: getattr(self, name) for name in DECIDED}

        def rest() -> None:
            self.check_adequacy()
            self.predict_latency()

        decided, _ = parallel.beside(decisions, rest, self.jobs)
        for name, value in decided.items():
            setattr(self, name, value)

    def predict_latency(self) -> None:
        """Predict the fitted rows and a load grid per configuration in one call."""
        table = self.model.table
        grid = curve_rows(table)
        rows = pd.concat([table, grid], ignore_index=True)
        pred = self.thin.predict(rows, seed=self.seed)
        post = self.thin.posterior
        # the measured latency's predictive: the model's, moved by the protocol's offset,
        # times the likelihood's discrepancy (the measurement error left out)
        scatter = self.thin.discrepancy(pred, rows["rps"], self.seed, rows=prepare(rows))
        with np.errstate(over="ignore"):  # a far Student-t draw: an infinite latency
            pp = pred["latency"] * np.exp(self.thin.protocol_shift(post, rows) + scatter)
        pred = pred.assign(latency_pp=pp.transpose(*pred["latency"].dims))
        n = len(table)
        self.fitted = pred.isel(obs=slice(0, n))
        self.curves = pred.isel(obs=slice(n, None))
        self.curve_rows = grid

    def check_adequacy(self) -> None:
        """The posterior predictive adequacy of the model (all its draws, as ``bayeslat fit``
        checks it, so the figures are the same for the same seed)."""
        self.check = adequacy.check(self.model, seed=self.seed)

    def predict_decisions(self) -> None:
        """The decision Dataset (:func:`bayeslat.decide.each_setup`: one prediction for the
        setups that share their acceptance rates and draft lengths) of every setup.

        Each setup's load grid ends a little past its measured ceiling (the baseline's
        throughput benchmark), or past its highest measured load where there is none; the
        limits are kept in :attr:`load_limits`. A setup the model cannot predict (the dense
        variant knows only the measured configurations) is listed in :attr:`skipped` with
        the reason.
        """
        table = self.model.table
        ceilings = adequacy.group_ceilings(self.model)
        batches = {}  # setups with the same alphas and ks: one prediction (decide.each_setup)
        for _, row in decide.setups(table).iterrows():
            rows = setup_rows(table, row)
            measured = rows["alpha"].dropna()
            # dense predicts only measured configurations: no acceptance rates in between
            grid = measured if self.model.per_configuration else np.r_[ALPHA_GRID, measured]
            alphas = np.unique(np.round(grid, 3))
            setup = row.to_frame().T.infer_objects()
            top = float(rows["rps"].max())
            ceiling = ceilings.get(schema.group_labels(setup).iloc[0])
            self.load_limits[row["setup"]] = (top, ceiling)
            highest = max(top, ceiling or 0.0) * CEILING_REACH
            batch = batches.setdefault((tuple(alphas), tuple(np.unique(rows["k"]))), {})
            batch[row["setup"]] = (setup, np.linspace(0.0, highest, GRID_POINTS),
                                   pick(measured, alphas))
        for (alphas, ks), members in batches.items():
            try:
                datasets = self._decisions(members, alphas, ks)
            except BayeslatError:  # one at a time, to say which setups cannot be predicted
                datasets = []
                for label, member in members.items():
                    try:
                        datasets += self._decisions({label: member}, alphas, ks)
                    except BayeslatError as exc:
                        self.skipped[label] = str(exc)
            for ds in datasets:
                label = str(ds["setup"].values[0])
                self.decisions[label] = ds.isel(setup=0)
                self.shown_alphas[label] = members[label][2]
        order = [label for label in decide.setups(table)["setup"] if label in self.decisions]
        self.decisions = {label: self.decisions[label] for label in order}

    def predict_answers(self, rps=None, alpha=None) -> None:
        """:func:`bayeslat.decide.verdicts` of every setup with decisions, at the loads
        ``rps`` (req/s; default: each setup's lowest, middle and highest measured load) and
        acceptance rates ``alpha`` (default: its middle measured one), into :attr:`answers`.

        One :func:`bayeslat.decide.from_model` per set of draft lengths, on the union of the
        setups' loads and rates (an analysis per setup costs more than the extra points)."""
        table = self.model.table
        self.asked = rps is not None or alpha is not None
        batches = {}
        for _, row in decide.setups(table).iterrows():
            label = row["setup"]
            if label not in self.decisions:
                continue
            measured = setup_rows(table, row)["rps"]
            loads = (np.asarray(rps, float) if rps is not None else
                     np.unique([measured.min(), (measured.min() + measured.max()) / 2,
                                measured.max()]))
            alphas = (np.asarray(alpha, float) if alpha is not None
                      else np.array([self.middle_alpha(label)]))
            batch = batches.setdefault(tuple(self.decisions[label]["k"].values), {})
            batch[label] = (row.to_frame().T.infer_objects(), loads, alphas)
        parts = []
        for ks, members in batches.items():
            ds = decide.from_model(
                self.thin, pd.concat([m[0] for m in members.values()], ignore_index=True),
                np.unique(np.concatenate([m[2] for m in members.values()])), ks,
                np.unique(np.concatenate([m[1] for m in members.values()])), seed=self.seed)
            every = decide.verdicts(ds)  # once: a call per setup was most of the time
            parts += [every[(every["setup"] == label) & every["alpha"].isin(alphas)
                            & every["rps"].isin(loads)]
                      for label, (_, loads, alphas) in members.items()]
        order = list(self.decisions)
        self.answers = (pd.concat(parts, ignore_index=True).infer_objects().sort_values(
            "setup", key=lambda col: col.map(order.index), kind="stable", ignore_index=True)
            if parts else None)

    def _decisions(self, members: dict, alphas, ks) -> list:
        """:func:`bayeslat.decide.each_setup` of ``members`` (label: (setup row, loads, shown
        alphas)) at ``alphas`` and ``ks``."""
        setups = pd.concat([setup for setup, _, _ in members.values()], ignore_index=True)
        return decide.each_setup(self.thin, setups, alphas, ks,
                                 {label: loads for label, (_, loads, _) in members.items()},
                                 seed=self.seed, jobs=self.jobs)

    def mark_loads(self, ax, setup: str, label: bool = True) -> None:
        """Mark a panel of ``setup`` against load: the extrapolation beyond its highest
        measured load and its measured ceiling (:func:`page.mark_loads`)."""
        measured, ceiling = self.load_limits.get(setup, (np.nan, None))
        page.mark_loads(ax, measured, ceiling, label)

    def skipped_note(self) -> str:
        """A warning paragraph naming the setups without decisions ('' if none)."""
        if not self.skipped:
            return ""
        return page.text("No decisions for: " + "; ".join(
            f"{name} ({why})" for name, why in self.skipped.items()), "warn")


def pick(wanted, grid) -> list[float]:
    """Up to :data:`MAX_ALPHAS` of the ``wanted`` rates (lowest, middle, highest), snapped to
    the ``grid``."""
    wanted = np.unique(np.asarray(wanted, dtype=float))
    if len(wanted) > MAX_ALPHAS:
        wanted = wanted[np.linspace(0, len(wanted) - 1, MAX_ALPHAS).round().astype(int)]
    return [float(grid[np.argmin(np.abs(grid - a))]) for a in wanted]


def load_grid(highest: float) -> np.ndarray:
    """Loads (req/s) from 0 to a little past the highest measured one."""
    return np.linspace(0.0, GRID_REACH * float(highest), GRID_POINTS)


def setup_rows(table: pd.DataFrame, setup: pd.Series) -> pd.DataFrame:
    """The rows of a setup: its group's baseline and its drafter's SD rows."""
    group = table[schema.group_labels(table) == schema.group_labels(setup.to_frame().T).iloc[0]]
    return group[(group["k"] == 0) | ((group["method"] == setup["method"])
                                      & (group["drafter"] == setup["drafter"]))]


def curve_rows(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (configuration, load) on a grid from 0 to past the group's highest load."""
    group = schema.group_labels(table)
    highest = table.groupby(group)["rps"].max()
    first = table.assign(group=group).drop_duplicates(list(schema.CONFIG_COLUMNS))
    out = [pd.DataFrame([row] * GRID_POINTS).assign(rps=load_grid(highest[row["group"]]),
                                                    strategy="constant")
           for _, row in first.iterrows()]
    return pd.concat(out, ignore_index=True).drop(columns="group")

