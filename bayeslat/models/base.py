r"""What every model variant shares: data preparation, the likelihood, save, load and predict.

Likelihood (all variants), on the log of the mean latency of observation ``i``:

.. math::
    \log L_i \sim \mathrm{StudentT}\bigl(\nu,\ \log C_{1i} - \log h(1 - \mathrm{rps}_i C_{2i}),\
    s_i\bigr), \qquad s_i^2 = \sigma^2 + (\mathrm{se}_i / L_i)^2,

``se_i`` the standard error of the measured mean (:func:`bayeslat.data.schema.standard_error`),
a synchronous benchmark's location moved by ``sync_shift ~ N(0, 0.2)`` (one request at a time:
its steps have a batch of one, which the continuous-batching curve at its rate overestimates;
:meth:`LatencyModel.protocol_shift` gives the predictive checks the same offset),
plus, in the variants with the compute wall, ``(sigma_wall·v_i)²`` with ``v_i`` how far the
latency moves with the wall, its queue's share over the headroom ``1 − rps·C3``
(:meth:`LatencyModel.likelihood_scale`),
``sigma ~ HalfNormal``, ``nu = 2 + Gamma`` (a finite variance: heavy enough tails for a few bad
points, not for a systematic misfit). ``h`` is the saturation barrier
:func:`log_headroom`: equal to the headroom ``1 − rps·C2`` wherever it exceeds a few times
:data:`BARRIER_WIDTH`, and smoothly positive below, so the log density stays finite (and pushes
back) if a proposal saturates an observed point. Rows flagged ``saturated`` are excluded from
this likelihood and listed in :attr:`LatencyModel.excluded`; the throughput benchmarks among them
are the measured ceilings (:attr:`LatencyModel.ceilings`), which the variants that model the
capacity (``capacity``, ``dense-capacity``) fit as data of their own.

The paper's variants fit, where the scatter is near Gaussian, each configuration's curve
summarised in a few sufficient statistics instead of its rows (:mod:`bayeslat.models.summary`,
:meth:`LatencyModel.summary_likelihood`): the same posterior, at a cost that grows with the
curves.

Every input goes through ``pm.Data`` (dims ``obs``, or ``curve`` for those of a configuration);
:meth:`LatencyModel.predict` rebuilds the model on new rows and draws their coefficients from
the posterior with ``pm.sample_posterior_predictive``, so a loaded fit predicts at new loads,
acceptance rates and draft lengths (and, for the scaling variants, new lengths and model sizes).
Where every unit of the new rows was fitted, the paper's scaling variants and ``capacity`` skip
the graph (:meth:`LatencyModel.known_parts`): their parts are closed-form functions of the
stored per-unit coefficients (and, for a configuration ``capacity`` never measured, of fresh
log-normal deviations, drawn with NumPy as the graph would draw them).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import theory
from bayeslat.data import schema
from bayeslat.errors import FitError, InputError, NumericalError
from bayeslat.files import atomic_output
from bayeslat.scaling import ScalingConfig
from bayeslat.version import __version__

# Version of the fit file: 8 since the capacity variants' Q is the compute-bound curve's share
# of a full batch's compute time, not a queue factor (7: the wall reads the KV cache and runs
# the drafter, c3r, c3d; 6: the hierarchical variants' server deviations, u_<coef>).
FORMAT = 8
# Headroom (1 − rps·C2) around which the barrier takes over from the exact formula.
BARRIER_WIDTH = 0.002
# The group of a saved fit that holds its PSIS-LOO (psis_loo).
LOO_GROUP = "psis_loo"
# Pareto k above which PSIS cannot estimate a point's left-out density (Vehtari et al., 2024).
PARETO_K = 0.7
# The draws are stored to float32's seven digits, far finer than any posterior's Monte Carlo
# error and half the bytes of float64 (the example's capacity fit: 20 MB -> 9 MB); in memory they
# stay float64, of the same values, so a fit and its file hold the same numbers.
STORED_FLOAT = np.float32
# Columns a table of new rows needs for predict (moe columns default to 0: dense).
PREDICT_COLUMNS = schema.GROUP_COLUMNS + ("verifier_params_b", "method", "drafter",
                                          "drafter_params_b", "alpha", "k", "rps")


def table_hash(df: pd.DataFrame) -> str:
    """Content hash (SHA-256) of a sweep table's schema columns, independent of row labels."""
    values = pd.util.hash_pandas_object(df[list(schema.COLUMN_NAMES)], index=False)
    return hashlib.sha256(values.to_numpy().tobytes()).hexdigest()


def prepare(rows: pd.DataFrame, path: str | None = None) -> pd.DataFrame:
    """Rows with the labels and derived inputs the models use.

    Adds ``group`` and ``config`` (schema labels), ``draft`` (group plus drafter, ``none`` for
    ``k = 0``), ``alpha0`` (alpha with 0 for the baseline), and, where the latency is known,
    ``log_latency`` and ``se_rel`` (standard error of the mean over the mean).
    """
    missing = [c for c in PREDICT_COLUMNS if c not in rows.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; rows to predict need "
                         f"{', '.join(PREDICT_COLUMNS)}", path, missing[0])
    out = rows.reset_index(drop=True).copy()
    for col in ("moe_experts_active", "moe_experts_total"):
        if col not in out.columns:
            out[col] = 0
    out["k"] = out["k"].astype(int)
    out["alpha"] = out["alpha"].where(out["k"] > 0)
    for col in ("verifier", "hardware", "method", "drafter"):
        out[col] = out[col].astype(str)
    out["group"] = schema.group_labels(out)
    out["config"] = schema.config_labels(out)
    out["draft"] = np.where(out["k"] > 0, schema.draft_labels(out), "none")
    out["alpha0"] = out["alpha"].fillna(0.0)
    if "latency_mean" in out.columns:
        out["log_latency"] = np.log(out["latency_mean"])
        out["se_rel"] = (schema.standard_error(out) / out["latency_mean"]).fillna(0.0)
    return out


def log_headroom(headroom):
    r"""``log(1 − rps·C2)`` with a smooth positive floor: ``log h(d)``, ``d`` the headroom,

    .. math:: h(d) = \tfrac12\bigl(d + \sqrt{d^2 + 4w^2}\bigr), \qquad w = \text{BARRIER_WIDTH},

    the positive root of ``h² − d·h − w² = 0``. ``h = d·(1 + O(w²/d²))`` where unsaturated (within
    0.2% for ``d > 25·w``) and ``h ≈ w²/|d|`` past saturation, so ``log h`` stays finite however
    far a proposal goes and the model latency rises steeply there. Written as ``2w²/(r − d)``
    for ``d < 0`` so that nothing cancels. One square root and one log: cheaper than a softplus.
    """
    import pytensor.tensor as pt

    w2 = BARRIER_WIDTH**2
    root = pt.sqrt(headroom**2 + 4.0 * w2)
    return pt.log(pt.switch(headroom >= 0, 0.5 * (headroom + root), 2.0 * w2 / (root - headroom)))


def fast_mode(idata) -> dict | None:
    """Compile options to evaluate a graph once per posterior draw: numba when there are many
    draws (PyTensor's default mode without a C compiler takes 0.2 s a draw on 1,300 rows); a
    mocked fit's few draws need no compile."""
    draws = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"]
    return {"mode": "NUMBA"} if draws > 200 else None


def scatter_draws(scale: xr.DataArray, nu: xr.DataArray, seed, shared=()) -> xr.DataArray:
    r"""Draws of a latency's log deviation from the model's, ``scale·t_nu``: the likelihood's
    discrepancy, one independent Student-t draw per element (but along the ``shared`` dims).

    Parameters
    ----------
    scale
        The scale per draw and row (:meth:`LatencyModel.scatter`, with the measurement error
        added where a measured point is predicted).
    nu
        The degrees of freedom per draw (dims a subset of ``scale``'s).
    seed
        Seed (anything :func:`numpy.random.default_rng` takes).
    shared
        Dims of ``scale`` along which one ``t`` draw is shared (a curve's misfit is smooth in
        the load: one draw per curve keeps its band smooth, each load's marginal unchanged).

    Returns
    -------
    DataArray with ``scale``'s dims. ``exp`` of it has no mean (``t_nu`` has no exponential
    moments): use the draws for quantiles and probabilities, not for expectations.
    """
    scale, nu = xr.broadcast(scale, nu)
    nu = nu.isel({dim: [0] for dim in shared})
    t = np.random.default_rng(seed).standard_t(nu.transpose(*scale.dims).values)
    return scale * t


def psis_loo(idata):
    """PSIS-LOO of a fit's latency rows (ArviZ ``ELPDData``, pointwise): from its pointwise
    log-likelihood where the fit holds it (in memory after sampling), else from the
    ``psis_loo`` group :meth:`LatencyModel.save` wrote (the pointwise elpd and Pareto k; the
    log-likelihood itself, a value per draw and row, would be most of the file)."""
    import warnings

    import arviz as az
    from arviz.stats.stats_utils import ELPDData

    if "log_likelihood" in idata.groups():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ArviZ warns on high Pareto k; callers show them
            return az.loo(idata, pointwise=True)
    if LOO_GROUP not in idata.groups():
        raise FitError("the fit holds neither its log-likelihood nor its PSIS-LOO; refit it "
                       "with this version")
    ds = getattr(idata, LOO_GROUP)
    a = ds.attrs
    return ELPDData(data=[float(a["elpd_loo"]), float(a["se"]), float(a["p_loo"]),
                          int(a["n_samples"]), int(a["n_data_points"]), bool(a["warning"]),
                          ds["loo_i"], ds["pareto_k"], str(a["scale"]), float(a["good_k"])],
                    index=["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning",
                           "loo_i", "pareto_k", "scale", "good_k"])


def read_fit(path: str | os.PathLike) -> dict[str, xr.Dataset]:
    """The ``posterior`` and ``fit_data`` groups of a fit file (:meth:`LatencyModel.save`),
    with xarray alone (those it lacks are absent); raises what h5netcdf and xarray raise on a
    file that is not one."""
    return _read_groups(path, only=("posterior", "fit_data"))


def _read_groups(path, only=None, skip=()) -> dict[str, xr.Dataset]:
    """The netCDF groups of ``path`` (those in ``only``, if given, but not in ``skip``), in
    memory."""
    import h5netcdf

    with h5netcdf.File(path, "r") as f:
        names = [g for g in f.groups if (only is None or g in only) and g not in skip]
    out = {}
    for name in names:
        with xr.open_dataset(path, group=name, engine="h5netcdf") as ds:
            out[name] = ds.load()
    if "posterior" in out:  # the draws, as a fit in memory holds them (float64)
        post = out["posterior"]
        out["posterior"] = post.assign({name: var.astype(np.float64)
                                        for name, var in post.data_vars.items()
                                        if var.dtype == STORED_FLOAT})
    return out


def round_draws(posterior: xr.Dataset) -> None:
    """Round the float64 draws of ``posterior`` to :data:`STORED_FLOAT`'s precision, in place:
    what a fit file holds (:meth:`LatencyModel.save`)."""
    for name in [name for name, var in posterior.data_vars.items() if var.dtype == np.float64]:
        posterior[name] = posterior[name].astype(STORED_FLOAT).astype(np.float64)


def _write_netcdf(idata, path) -> None:
    """The groups of ``idata`` into the netCDF file ``path``, one netCDF group each, as ArviZ's
    ``to_netcdf`` writes them, but the posterior's float64 draws stored as
    :data:`STORED_FLOAT` and every number compressed after HDF5's byte shuffle (which puts the
    floats' exponent bytes together: 10% smaller)."""
    mode = "w"
    for group in idata.groups():
        data = idata[group]
        encoding = {name: {"zlib": True, "shuffle": True}
                    | ({"dtype": STORED_FLOAT} if group == "posterior"
                       and var.dtype == np.float64 else {})
                    for name, var in data.data_vars.items() if var.dtype.kind in "biuf"}
        data.to_netcdf(path, mode=mode, group=group, engine="h5netcdf", encoding=encoding)
        mode = "a"


def _loo_group(idata) -> xr.Dataset:
    """What :func:`psis_loo` needs of a fit, as a Dataset to store in its place."""
    loo = psis_loo(idata)
    return xr.Dataset({"loo_i": loo.loo_i, "pareto_k": loo.pareto_k}, attrs={
        "elpd_loo": float(loo.elpd_loo), "se": float(loo.se), "p_loo": float(loo.p_loo),
        "n_samples": int(loo.n_samples), "n_data_points": int(loo.n_data_points),
        "warning": int(bool(loo.warning)), "scale": str(loo.scale),
        "good_k": float(loo.good_k)})


def unit_index(labels: pd.Series, known: pd.Index) -> tuple[np.ndarray, pd.Index]:
    """Index of each label among ``known``; labels not there get ``len(known) + j`` in order of
    first appearance. Returns the indices and the new labels."""
    pos = known.get_indexer(labels)
    new = pd.Index(pd.unique(labels[pos < 0]))
    pos[pos < 0] = len(known) + new.get_indexer(labels[pos < 0])
    return pos, new


class LatencyModel:
    """Base of the model variants: build, fit, save, load and predict.

    Parameters
    ----------
    data
        A sweep table (:mod:`bayeslat.data.schema`); rows flagged ``saturated`` are excluded.
    config
        Scaling design and priors; defaults from :mod:`bayeslat.scaling`.
    scales
        Feature scales of a fitted model (set by :meth:`load`); computed from ``data`` if None.
    data_hash
        Content hash of the table the model was fitted to (set by :meth:`load`).
    """

    variant: ClassVar[str] = ""
    # Names of the per-observation Deterministics that predict returns.
    parts: ClassVar[tuple[str, ...]] = ("C1", "C2")
    # Whether the model has a capacity of its own that the measured ceilings inform.
    fits_ceilings: ClassVar[bool] = False
    # Whether it predicts only the configurations it was fitted on (no scaling laws).
    per_configuration: ClassVar[bool] = False
    # Whether its rows' likelihood can be the fused kernel (bayeslat.models.likelihood): a mean
    # from C1, C2 (and C3, Q) as log_mean computes it; nutpie's exact fits sample it.
    fuses: ClassVar[bool] = True
    # Whether its latency has no closed form in its parts (the roofline form's fixed point):
    # bayeslat.decide then reads the model's latency, capacity and break_even, not theory's.
    implicit: ClassVar[bool] = False
    # Feature scales of the scaling laws per coefficient (none for the per-configuration ones).
    scales: dict = {}

    def __init__(self, data: pd.DataFrame, config: ScalingConfig | None = None, *,
                 scales: dict | None = None, data_hash: str | None = None,
                 excluded: list[str] | None = None):
        table = schema.validate(data)
        self.source = table
        self.data_hash = data_hash or table_hash(table)
        self.config = config or self.default_config()
        sat = table["saturated"].to_numpy()
        self.excluded = excluded if excluded is not None else [
            f"{label} rps={r:.4g} ({why})" for label, r, why in zip(
                schema.config_labels(table[sat]), table.loc[sat, "rps"],
                table.loc[sat, "saturation_reason"], strict=True)]
        if (~sat).sum() == 0:
            raise FitError("every row is flagged saturated; nothing to fit")
        self.table = table[~sat].reset_index(drop=True)
        self.rows = prepare(self.table)
        ceilings = prepare(table[(table["strategy"] == "throughput").to_numpy()])
        #: the measured ceilings (throughput benchmarks, rps in req/s) of fitted configurations
        self.ceilings = ceilings[ceilings["config"].isin(self.rows["config"])].reset_index(
            drop=True)
        self.idata = None
        self.setup(scales)

    # -- the fit --------------------------------------------------------------------------------
    @property
    def idata(self):
        """The fit as ArviZ ``InferenceData`` (None before one). A fit read from a file
        (:meth:`from_file`) builds it on first use, reading the groups it has not read yet:
        ArviZ's import is most of what ``decide`` would wait for, and it needs only
        :attr:`posterior`."""
        if self._idata is None and self._stored is not None:
            import arviz as az

            path, groups = self._stored
            groups = (_read_groups(path, skip=groups) if path else {}) | groups
            self._idata, self._stored = az.InferenceData(**groups), None
        return self._idata

    @idata.setter
    def idata(self, value) -> None:
        self._idata, self._stored = value, None

    @property
    def posterior(self) -> xr.Dataset:
        """The posterior draws (dims ``chain``, ``draw``, then each variable's), without
        building :attr:`idata`."""
        if self._stored is not None:
            return self._stored[1]["posterior"]
        if self._idata is None:
            raise FitError("the model is not fitted; call fit() or bayeslat.load() first")
        return self._idata.posterior

    def group(self, name: str) -> xr.Dataset | None:
        """One group of the fit (``sample_stats``, ``psis_loo``, ...) or None where the fit has
        none, without building :attr:`idata` (a fit read from a file reads that group alone)."""
        if self._stored is None:
            return getattr(self.idata, name, None) if self.fitted else None
        path, groups = self._stored
        if name not in groups and path:
            groups.update(_read_groups(path, only=(name,)))
        return groups.get(name)

    def thinned(self, max_draws: int, rng: np.random.Generator) -> LatencyModel:
        """A shallow copy whose posterior keeps at most ``max_draws`` draws in all, the same
        draw indices (chosen by ``rng``) in every chain; ``self`` where there are no more. The
        copy holds that posterior alone (its :attr:`idata` has no other group)."""
        post = self.posterior
        per_chain = max(1, max_draws // post.sizes["chain"])
        if post.sizes["draw"] <= per_chain:
            return self
        keep = np.sort(rng.choice(post.sizes["draw"], per_chain, replace=False))
        out = copy.copy(self)
        out._idata, out._stored = None, (None, {"posterior": post.isel(draw=keep)})
        return out

    @property
    def fitted(self) -> bool:
        """Whether the model holds a posterior (fitted, or read from a fit file)."""
        return self._idata is not None or self._stored is not None

    # -- variant hooks -------------------------------------------------------------------------
    @classmethod
    def default_config(cls) -> ScalingConfig:
        """The design and priors used when none is given."""
        return ScalingConfig()

    def setup(self, scales: dict | None) -> None:
        """Find the units (groups, drafters, configurations) and their feature scales."""
        raise NotImplementedError

    def coords(self) -> dict[str, Any]:
        """Coords of the unit dims."""
        raise NotImplementedError

    def coefficients(self, curves: pd.DataFrame, data: dict, dim: str) -> dict:
        """Tensors named as :attr:`parts`, one value per row of ``curves`` (dim ``dim``),
        built inside the model context."""
        raise NotImplementedError

    def log_mean(self, parts: dict, data: dict):
        r"""Model log latency per observation (the Student-t location), from the parts and the
        inputs gathered to the observations: :math:`\log C_1 - \log h(1 - \mathrm{rps}\,C_2)`,
        or, where the parts have the compute wall (``C3``, ``Q``, ``P``),
        :math:`\tfrac1P\log(L_m^P + L_c^P - A^P)` with the compute-bound curve
        :math:`L_c = A / h(1 - (1 - Q)\,\mathrm{rps}\,C_3)`, :math:`A = Q\,B_{\max}\,C_3`
        (:func:`bayeslat.theory.latency`), both headrooms through the barrier."""
        import pytensor.tensor as pt

        memory, intercept, headroom = self._log_terms(parts, data)
        if intercept is None:
            return memory
        # L^P = L_m^P + A^P·(1/h^P − 1): the compute curve's rise over its zero-load value
        p = parts["P"]
        return pt.log(pt.exp(p * memory) + pt.exp(p * intercept) * pt.expm1(-p * headroom)) / p

    @staticmethod
    def _log_terms(parts: dict, data: dict):
        """Log of the memory-bound curve, then, with the wall, the log of the compute curve's
        intercept ``A`` and of its headroom (None, None without)."""
        import pytensor.tensor as pt

        memory = pt.log(parts["C1"]) - log_headroom(1.0 - data["rps"] * parts["C2"])
        if "C3" not in parts:
            return memory, None, None
        rho = (1.0 - parts["Q"]) * data["rps"] * parts["C3"]
        return (memory, pt.log(parts["Q"] * theory.BATCH_CAP * parts["C3"]),
                log_headroom(1.0 - rho))

    @staticmethod
    def likelihood_scale(sigma, se_rel, parts: dict, data: dict, sigma_wall=None):
        r"""The Student-t scale of each observation, :math:`s_i^2 = \sigma^2 + \mathrm{se}_i^2`,
        plus, for the variants with the compute wall, :math:`(\sigma_{\mathrm{wall}}\,v_i)^2`
        with :math:`v_i = w_i/(1-\rho_i)` how far the latency moves with the wall
        (:func:`bayeslat.theory.wall_sensitivity`; :math:`w_i = L_c^P/L^P` the compute
        curve's share, :math:`\rho_i = \mathrm{rps}_i\,C_3` the batch's fill): ``sigma_wall``
        (:meth:`sigma_wall`) is a jitter of the wall itself, in log terms. Near the wall the
        form is an approximation (the batch, token-budget and KV limits bind there too, and a
        benchmark of finite length sees its own effective wall), and what it misses is scatter
        that grows as the wall nears, not outliers; a held-out point nearer the wall than any
        fitted one gets the wider band it needs."""
        import pytensor.tensor as pt

        var = sigma**2 + se_rel**2
        if "C3" in parts:
            memory, intercept, headroom = LatencyModel._log_terms(parts, data)
            log_mean = LatencyModel.log_mean(LatencyModel, parts, data)
            # the compute curve's share, (A/h/L)^P, over the batch's headroom at the wall
            fill = log_headroom(1.0 - data["rps"] * parts["C3"])
            moves = pt.exp(parts["P"] * (intercept - headroom - log_mean) - fill)
            var = var + (sigma_wall * moves) ** 2
        return pt.sqrt(var)

    def sigma_wall(self):
        """The wall's jitter ``sigma_wall ~ Gamma(2, 2/m)`` (:meth:`likelihood_scale`; ``m``
        the ``sigma_wall_mean`` prior), created in the model context."""
        import pymc as pm

        # Gamma(2, 2/mean), away from 0: on a short sweep few points are near the wall, and a
        # scale free to collapse onto them would be a funnel
        mean = self.config.prior("sigma_wall_mean")
        return pm.Gamma("sigma_wall", alpha=2.0, beta=2.0 / mean)

    @property
    def jittered(self) -> bool:
        """Whether the likelihood's scale grows near capacity by ``sigma_wall``
        (:meth:`sigma_wall`): the variants with the compute wall (and ``roofline``)."""
        return "C3" in self.parts

    def scatter(self, posterior: xr.Dataset, parts, rps, rows=None):
        """The likelihood's scale without the measurement error, per draw and row, from
        predicted ``parts`` (dims ``chain, draw`` or ``sample``, and the rows'): ``sigma``,
        and, with the compute wall, ``sqrt(sigma² + (sigma_wall·v)²)``
        (:meth:`likelihood_scale`; ``sigma`` where the load is past the wall) at the loads
        ``rps`` (req/s; an array along ``obs`` or a DataArray with dims of its own); ``rows``
        (prepared) for a variant whose scale needs them (``roofline``)."""
        sigma = posterior["sigma"]
        if "C3" not in parts:
            return sigma
        if not isinstance(rps, xr.DataArray):
            rps = xr.DataArray(np.asarray(rps, dtype=float), dims="obs")
        moves = theory.wall_sensitivity(rps, parts["C1"], parts["C2"], *capacity_terms(parts))
        # past the wall the latency is infinite whatever its scatter: keep the scale finite
        # there, so that the draws stay infinite (inf·t would be NaN, or -inf)
        moves = moves.where(np.isfinite(moves), 0.0)
        return np.sqrt(sigma**2 + (posterior["sigma_wall"] * moves) ** 2)

    def discrepancy(self, parts, rps, seed, shared=(), rows=None) -> xr.DataArray:
        """Draws of the log of the true latency over the model's (:func:`scatter_draws` of
        :meth:`scatter`: the likelihood's discrepancy, without the measurement error), one per
        posterior draw, element of the predicted ``parts`` (of ``rows``, for a variant whose
        scatter needs them) and load ``rps`` (:meth:`scatter`), but one along the ``shared``
        dims."""
        post = self.posterior
        if not isinstance(rps, xr.DataArray):
            rps = xr.DataArray(np.asarray(rps, dtype=float), dims="obs")
        scale = xr.broadcast(self.scatter(post, parts, rps, rows), rps,
                             *(parts[name] for name in self.parts))[0]
        return scatter_draws(scale, post["nu"], seed, shared)

    @staticmethod
    def protocol_shift(posterior: xr.Dataset, rows: pd.DataFrame):
        """The log offset of each row's measured latency from the model's, per draw (dims
        ``chain, draw, obs``): ``sync_shift`` for a synchronous benchmark, 0 for the others
        (and for every row of a fit without synchronous rows)."""
        if "sync_shift" not in posterior or "strategy" not in rows:
            return 0.0
        sync = xr.DataArray((rows["strategy"] == "synchronous").to_numpy(float), dims="obs")
        return posterior["sync_shift"] * sync

    def start(self) -> dict[str, np.ndarray]:
        """A feasible start: values (constrained space) of the free variables."""
        raise NotImplementedError

    def prefill_stall(self, rows: pd.DataFrame) -> xr.DataArray | None:
        """Draws of each row's prefill stall (s), for the latency of evenly spaced requests
        (:func:`bayeslat.theory.evenly_spaced`); None for a variant without per-stage
        coefficients, whose curves cannot tell a prefill's share of ``C2``."""
        return None

    def evenly_spaced(self, parts, rows: pd.DataFrame, latency: xr.DataArray, rps):
        """``latency`` (the smooth curve's, from the predicted ``parts`` of ``rows``, dims
        ``obs`` and any others) as requests sent evenly spaced at ``rps`` see it: on the
        staircase of prefill stalls (:func:`bayeslat.theory.evenly_spaced`), anchored at each
        configuration's fitted constant-rate loads (:meth:`constant_rates`,
        :func:`bayeslat.theory.staircase_offset`); unchanged for a variant without
        :meth:`prefill_stall`."""
        stall = self.prefill_stall(rows)
        if stall is None:
            return latency
        rates = self.constant_rates(rows)
        at = theory.latency(rates, parts["C1"], parts["C2"], *capacity_terms(parts))
        return theory.evenly_spaced(latency, rps, stall,
                                    theory.staircase_offset(at, rates, stall, "rate"))

    def constant_rates(self, rows: pd.DataFrame) -> xr.DataArray:
        """The fitted constant-rate loads (req/s) of each row's configuration, dims ``obs``
        and ``rate`` (NaN-padded; all NaN for a configuration never measured so): where the
        staircase of evenly spaced requests is anchored
        (:func:`bayeslat.theory.staircase_offset`)."""
        fitted = self.rows[self.rows["strategy"] == "constant"]
        by_config = fitted.groupby("config")["rps"].apply(np.sort)
        per_row = [by_config.get(label, np.zeros(0)) for label in prepare(rows)["config"]]
        out = np.full((len(per_row), max([1, *map(len, per_row)])), np.nan)
        for i, rates in enumerate(per_row):
            out[i, :len(rates)] = rates
        return xr.DataArray(out, dims=("obs", "rate"))

    def known_parts(self, rows: pd.DataFrame, seed=0) -> dict | None:
        """The parts of ``rows`` computed from the stored posterior without PyMC, where the
        variant can (:meth:`HierarchicalModel.known_parts`; ``seed`` for the fresh deviations
        of configurations never measured, :meth:`CapacityModel.known_parts`); None: predict
        through the model's graph."""
        return None

    def latency(self, parts: xr.Dataset, rows: pd.DataFrame) -> xr.DataArray:
        """Exact latency (``inf`` past saturation) from predicted parts, via theory."""
        lat = theory.latency(xr.DataArray(rows["rps"].to_numpy(), dims="obs"), parts["C1"],
                             parts["C2"], *capacity_terms(parts))
        return lat.transpose("chain", "draw", "obs")

    def capacity(self, parts: xr.Dataset, rows: pd.DataFrame) -> xr.DataArray:
        """The model's saturation rate (req/s) from predicted parts of ``rows``:
        ``1/max(C2, C3)``."""
        return theory.capacity(parts["C2"], parts.get("C3", 0.0))

    def ceiling_likelihood(self, parts: dict, curves: pd.DataFrame) -> None:
        """The measured ceilings as data, for the variants whose capacity is a parameter
        (:attr:`fits_ceilings`): ``log ceiling ~ Normal(−log max(C2, C3) − shortfall,
        sigma_cap)``, ``sigma_cap ~ Gamma(5, 5/m)``, and where the ``ceiling_shortfall_sd``
        prior is positive one ``shortfall ~ HalfNormal(ceiling_shortfall_sd)`` shared by every
        ceiling: a throughput benchmark delivers at most the capacity (its fill and drain
        count), never more but for its noise."""
        import pymc as pm
        import pytensor.tensor as pt

        if not self.fits_ceilings or self.ceilings.empty:
            return
        idx = pm.Data("ceiling_idx", pd.Index(curves["config"]).get_indexer(
            self.ceilings["config"]), dims="ceiling")
        self.observe_ceilings(-pt.log(pt.maximum(parts["C2"], parts["C3"]))[idx])

    def observe_ceilings(self, log_cap) -> None:
        """The measured ceilings' likelihood about the model's log capacity ``log_cap`` (a
        tensor, dim ``ceiling``), its scale and shortfall (:meth:`ceiling_likelihood`)."""
        import pymc as pm

        # Gamma(5, 5/mean) keeps well away from 0 (P(< mean/5) ≈ 0.0004): a sweep has one
        # ceiling per configuration, too few on a small sweep to pin a scale that could
        # otherwise collapse onto them (a funnel, and divergences); the floor keeps the walls
        # from collapsing onto them where the sweep has many (ceiling_sigma_floor)
        mean = self.config.prior("ceiling_sigma_mean")
        sigma = pm.Gamma("sigma_ceiling", alpha=5.0, beta=5.0 / mean)
        sigma = (sigma**2 + self.config.prior("ceiling_sigma_floor") ** 2) ** 0.5
        observed = pm.Data("log_ceiling_obs", np.log(self.ceilings["rps"].to_numpy(float)),
                           dims="ceiling")
        shortfall_sd = self.config.prior("ceiling_shortfall_sd")
        if shortfall_sd > 0:
            log_cap = log_cap - pm.HalfNormal("ceiling_shortfall", shortfall_sd)
        pm.Normal("log_ceiling", mu=log_cap, sigma=sigma, observed=observed, dims="ceiling")

    # -- building ------------------------------------------------------------------------------
    def curve_inputs(self, curves: pd.DataFrame) -> dict[str, np.ndarray]:
        """Inputs per latency curve (configuration), each a ``pm.Data``."""
        return {"alpha": curves["alpha0"].to_numpy(float), "k": curves["k"].to_numpy(float),
                "decode_tokens": curves["decode_tokens"].to_numpy(float)}

    def row_inputs(self, rows: pd.DataFrame) -> dict[str, np.ndarray]:
        """Inputs per row beyond its rate, each a ``pm.Data`` (none but for the roofline's
        arrivals)."""
        return {}

    @property
    def summarises(self) -> bool:
        """Whether the fast likelihood (:mod:`bayeslat.models.summary`) applies: the variants
        whose curve is the paper's, ``C1`` and ``C2`` per configuration."""
        return tuple(self.parts) == ("C1", "C2")

    def build(self, rows: pd.DataFrame | None = None, summary=None, fused: bool = False):
        """The PyMC model: with ``rows`` None, the fitting model (with the likelihood); else
        the prediction model for ``rows`` (prepared by :func:`prepare`), whose per-row parts are
        Deterministics. With a ``summary`` (:func:`bayeslat.models.summary.summarise` of
        :attr:`rows`), the fitting model's likelihood is the curves' summaries
        (:meth:`summary_likelihood`) instead of every row's. ``fused``: every row's likelihood
        as one compiled kernel (:mod:`bayeslat.models.likelihood`, for a sampler that compiles
        with numba), a Potential named ``log_latency`` with the same value and gradient as the
        observed Student-t it stands for, which the pointwise log-likelihood needs.

        The coefficients are computed once per latency curve (dim ``curve``: one configuration,
        all its rates), then gathered to the observations (dim ``obs``): nine times fewer
        coefficient evaluations than per row on a paper-style sweep.
        """
        import pymc as pm

        predicting = rows is not None
        rows = self.rows if rows is None else rows
        curves = rows if predicting else rows.drop_duplicates("config")
        cdim = "obs" if predicting else "curve"
        coords = {"obs": np.arange(len(rows)), **self.coords()}
        if not predicting:
            coords["curve"] = curves["config"].to_numpy()
            if self.fits_ceilings and not self.ceilings.empty:
                coords["ceiling"] = self.ceilings["config"].to_numpy()
        with pm.Model(coords=coords) as model:
            data = {name: pm.Data(name, values, dims=cdim)
                    for name, values in self.curve_inputs(curves).items()}
            parts = self.coefficients(curves, data, cdim)
            if predicting:
                for name in self.parts:
                    pm.Deterministic(name, parts[name], dims="obs")
                return model
            if summary is not None:
                self.summary_likelihood(summary, parts, data)
                return model
            idx = pm.Data("curve_idx", pd.Index(curves["config"]).get_indexer(rows["config"]),
                          dims="obs")
            rps = pm.Data("rps", rows["rps"].to_numpy(float), dims="obs")
            sync = (rows["strategy"] == "synchronous").to_numpy(float)
            if sync.any():
                shift = pm.Normal("sync_shift", 0.0, self.config.prior("sync_shift_sd"))
                sync = pm.Data("synchronous", sync, dims="obs")
            self.ceiling_likelihood(parts, curves)
            sigma = pm.HalfNormal("sigma", sigma=self.config.prior("sigma_scale"))
            a, b = self.config.prior("nu_gamma")
            nu = pm.Deterministic("nu", 2.0 + pm.Gamma("nu_excess", alpha=a, beta=b))
            se_rel = pm.Data("se_rel", rows["se_rel"].to_numpy(float), dims="obs")
            observed = pm.Data("log_latency_obs", rows["log_latency"].to_numpy(float), dims="obs")
            wall = self.sigma_wall() if self.jittered else None
            if fused:
                if not self.fuses:
                    raise FitError(f"the {self.variant} model's rows cannot use the fused "
                                   "likelihood; build it with fused=False")
                from bayeslat.models.likelihood import row_student_t

                pm.Potential("log_latency", row_student_t(
                    parts, sigma, nu, shift if "sync_shift" in model else 0.0, wall,
                    {"idx": idx, "rps": rps, "y": observed, "se_rel": se_rel, "sync": sync},
                    BARRIER_WIDTH))
                return model
            at_obs = {name: value[idx] for name, value in data.items()} | {"rps": rps} | {
                name: pm.Data(name, values, dims="obs")
                for name, values in self.row_inputs(rows).items()}
            parts_obs = {name: value[idx] for name, value in parts.items()}
            mu = self.log_mean(parts_obs, at_obs)
            if "sync_shift" in model:
                mu = mu + shift * sync
            pm.StudentT("log_latency", nu=nu, mu=mu,
                        sigma=self.likelihood_scale(sigma, se_rel, parts_obs, at_obs, wall),
                        observed=observed, dims="obs")
        return model

    def summary_likelihood(self, summary, parts: dict, data: dict) -> None:
        """The fast likelihood (:mod:`bayeslat.models.summary`): each summarised curve's
        sufficient statistics, and the Student-t of the rows kept exact (synchronous rows,
        curves with too few loads) with ``nu`` fixed at the summary's; ``sigma`` and
        ``sync_shift`` sampled as in the exact model."""
        import pymc as pm

        sigma = pm.HalfNormal("sigma", sigma=self.config.prior("sigma_scale"))
        pm.Potential("curve_summaries", summary.log_likelihood(parts["C1"], parts["C2"], sigma))
        if not len(summary.exact):
            return
        rows = self.rows.iloc[summary.exact]
        idx = pd.Index(pd.unique(self.rows["config"])).get_indexer(rows["config"])
        at_rows = {name: value[idx] for name, value in data.items()}
        at_rows["rps"] = rows["rps"].to_numpy(float)
        parts_rows = {name: value[idx] for name, value in parts.items()}
        mu = self.log_mean(parts_rows, at_rows)
        sync = (rows["strategy"] == "synchronous").to_numpy(float)
        if sync.any():
            mu = mu + pm.Normal("sync_shift", 0.0, self.config.prior("sync_shift_sd")) * sync
        scale = self.likelihood_scale(sigma, rows["se_rel"].to_numpy(float), parts_rows, at_rows)
        logp = pm.logp(pm.StudentT.dist(nu=summary.nu, mu=mu, sigma=scale),
                       rows["log_latency"].to_numpy(float))
        pm.Potential("exact_rows", logp.sum())

    def initial_values(self, model=None) -> dict[str, np.ndarray]:
        """The feasible start of every free variable (constrained values); of the free
        variables of the PyMC ``model`` only, when given (the fast likelihood has no ``nu``)."""
        extra = {"sigma_ceiling": 0.05} if self.fits_ceilings and not self.ceilings.empty else {}
        if self.jittered:
            extra["sigma_wall"] = 0.01
        out = self.start() | {"sigma": 0.05, "nu_excess": 8.0} | extra
        if model is None:
            return out
        free = {rv.name for rv in model.free_RVs}
        return {name: value for name, value in out.items() if name in free}

    def check_start(self, model) -> float:
        """The log density at the start; raise :class:`NumericalError` if it is not finite."""
        from pymc.initial_point import make_initial_point_fn

        point = make_initial_point_fn(model=model, overrides=self.initial_values(model),
                                      jitter_rvs=set(), return_transformed=True)(0)
        # one term per variable: no single Add of them all, which PyTensor's Python mode (no C
        # compiler) cannot build past 32 inputs
        terms = model.point_logps(point, round_vals=16)
        bad = {name: float(v) for name, v in terms.items() if not np.isfinite(v)}
        if bad:
            raise NumericalError(f"the log density at the start is not finite ({bad}); the data "
                                 "may have points past saturation that are not flagged")
        return float(sum(terms.values()))

    # -- saving, loading --------------------------------------------------------------------
    def attrs(self) -> dict[str, str]:
        """What the saved fit carries to be loaded and checked."""
        return {"bayeslat_format": str(FORMAT), "bayeslat_version": __version__,
                "variant": self.variant, "config": self.config.to_json(),
                "priors": json.dumps(self.config.to_dict()["priors"], sort_keys=True),
                # feature order matters (it is the order of the betas): keep it
                "feature_scales": json.dumps(self.scales_dict()),
                "data_hash": self.data_hash, "fit_data_hash": table_hash(self.source),
                "excluded": json.dumps(self.excluded)}

    def scales_dict(self) -> dict:
        return {}

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the fit as one netCDF file (atomically; refuses to overwrite unless told to).
        The pointwise log-likelihood is stored as its PSIS-LOO (:func:`psis_loo`); the draws
        to float32's precision, to which the fit's own are rounded (:func:`round_draws`: a
        sampled fit's already are)."""
        if self.idata is None:
            raise FitError("the model is not fitted; call fit() before save()")
        round_draws(self.idata.posterior)
        idata = self.idata.copy()
        if "log_likelihood" in idata.groups():
            idata.add_groups({LOO_GROUP: _loo_group(idata)}, warn_on_custom_groups=False)
            del idata.log_likelihood
        idata.posterior.attrs.update(self.attrs())
        # the whole table, saturated rows too: the model rebuilt from it finds its ceilings
        fit_data = xr.Dataset.from_dataframe(self.source.rename_axis("row"))
        if "fit_data" in idata.groups():  # a loaded fit, saved again
            del idata.fit_data
        idata.add_groups({"fit_data": fit_data}, warn_on_custom_groups=False)
        with atomic_output(path, overwrite=overwrite) as tmp:
            _write_netcdf(idata, tmp)
        return Path(path)

    @classmethod
    def from_file(cls, path: str | os.PathLike, groups: dict[str, xr.Dataset]) -> LatencyModel:
        """The fitted model stored in the file ``path`` (as written by :meth:`save`), of which
        ``groups`` (:func:`read_fit`) holds at least ``posterior`` and ``fit_data``; the others
        are read when :attr:`idata` is first used."""
        path = str(path)
        attrs = groups["posterior"].attrs
        table = groups["fit_data"].to_dataframe().reset_index(drop=True)
        table["saturated"] = table["saturated"].astype(bool)
        model = cls(table, ScalingConfig.from_json(attrs["config"]),
                    scales=json.loads(attrs["feature_scales"]), data_hash=attrs["data_hash"],
                    excluded=json.loads(attrs["excluded"]))
        if table_hash(model.source) != attrs["fit_data_hash"]:
            raise FitError("the stored training data do not match the model built from them; "
                           "refit", path)
        for dim, labels in model.coords().items():
            stored = (groups["posterior"][dim].values if dim in groups["posterior"].coords
                      else None)
            if stored is None or list(stored) != list(labels):
                raise FitError(f"the stored coords of '{dim}' do not match the model rebuilt from "
                               "the stored data; refit", path)
        model._stored = (path, groups)
        return model

    # -- prediction ----------------------------------------------------------------------------
    def predict(self, new: pd.DataFrame, seed: int = 0, progressbar: bool = False) -> xr.Dataset:
        """Posterior draws of the per-row parts and the exact mean latency for new rows.

        Parameters
        ----------
        new
            Rows with :data:`PREDICT_COLUMNS` (any rps, alpha, k, lengths, model sizes; groups
            and drafters the fit never saw get fresh group deviations drawn from the fit's
            population, where the variant allows).
        seed
            Seed of the draws of new group deviations.
        progressbar
            Show PyMC's progress bar (when the rows need the model's graph).

        Returns
        -------
        Dataset with dims ``(chain, draw, obs)``: the parts (``C1``, ``C2``, ...),
        ``latency`` (s, ``inf`` past saturation) and ``capacity`` (req/s, the load at which the
        row's configuration saturates); coords ``config`` and ``rps`` on ``obs``.
        """
        if not self.fitted:
            raise FitError("the model is not fitted; call fit() or bayeslat.load() first")
        rows = prepare(new)
        known = self.known_parts(rows, seed)
        if known is not None:
            ds = xr.Dataset({name: value.transpose("chain", "draw", "obs")
                             for name, value in known.items()}).assign_coords(
                obs=np.arange(len(rows)))
        else:
            import pymc as pm

            model = self.build(rows)
            new_vars = [rv.name for rv in model.free_RVs if rv.name not in self.posterior]
            pp = pm.sample_posterior_predictive(self.idata, model=model,
                                                var_names=list(self.parts) + new_vars,
                                                random_seed=seed, predictions=True,
                                                progressbar=progressbar,
                                                compile_kwargs=fast_mode(self.idata))
            ds = pp.predictions[list(self.parts)]
        ds["latency"] = self.latency(ds, rows)
        ds["capacity"] = self.capacity(ds, rows).transpose("chain", "draw", "obs")
        return ds.assign_coords(config=("obs", rows["config"].to_numpy()),
                                rps=("obs", rows["rps"].to_numpy()))


def full_coefficients(pred: xr.Dataset):
    """``(C1, C2)`` draws from predicted parts; for ``moe``, at full coverage (``phi = 1``)."""
    if "C1" in pred:
        return pred["C1"], pred["C2"]
    return pred["C1u"] + pred["C1s"], pred["C2u"] + pred["C2s"]


def capacity_terms(pred):
    """``(C3, Q, P)`` of the compute wall from predicted parts (a Dataset or a dict: draws of
    ``C3`` and ``Q``, the norm's power ``P``); ``(0.0, 0.0, 2.0)`` for the variants without it
    (the paper's model), so that :mod:`bayeslat.theory` takes its closed forms."""
    if "C3" in pred and "Q" in pred:
        return pred["C3"], pred["Q"], pred["P"]
    return 0.0, 0.0, theory.SOFT_POWER
