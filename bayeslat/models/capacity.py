r"""``capacity`` and ``dense-capacity``: the paper's model plus the compute wall.

Near capacity a step's time is set by its arithmetic, not by moving the weights (DESIGN.md §2a),
and the batch fills up. Both variants take the latency as the soft maximum of the memory-bound
curve and the compute-bound one, each of the paper's form, up to the capacity at which the
scheduler's batch is full (:func:`bayeslat.theory.latency`, whose docstring derives it):

.. math::
    L = \bigl(L_m^P + L_c^P - A^P\bigr)^{1/P}, \qquad L_m = \frac{C_1}{1 - \mathrm{rps}\,C_2},
    \qquad L_c = \frac{A}{1 - (1 - Q)\,\mathrm{rps}\,C_3}, \qquad A = Q\,B_{\max}\,C_3,
    \qquad \text{capacity} = 1/\max(C_2, C_3),

``C3`` the compute time of a request at a full batch of ``B_max`` requests
(:data:`bayeslat.theory.BATCH_CAP`), ``Q`` the share of it that is the compute-bound step's
intercept and ``P = 2 + k/4`` the norm's power, data (:func:`bayeslat.theory.soft_power`: the
bend sharpens with the draft length). (An M/G/1 queue's wait with its pole at the measured
ceiling, the form before it, missed the held-out top rates more: the ceiling is where the batch
fills, not where compute saturates; benchmarks/README.md, thirty-third to thirty-fifth
sessions.) The measured ceilings
(throughput benchmarks) are data of their own, so the fitted capacity must agree with them:

.. math::
    \log \mathrm{ceiling}_c \sim N\bigl(-\log\max(C_{2c}, C_{3c}) - \delta,\
    \sigma_{\mathrm{cap}}\bigr), \qquad \sigma_{\mathrm{cap}} \sim \mathrm{Gamma}(5, 5/m),
    \qquad \delta \sim \mathrm{HalfNormal}(0.05).

``capacity`` (not ``dense-capacity``, whose walls are free per configuration) samples the
shortfall ``δ``, one for the sweep (the ``ceiling_shortfall_sd`` prior): a throughput benchmark
counts its completions over its whole run, its fill and drain included, so it delivers at most
the capacity constant arrivals can sustain, and less where its batches run in waves (the engine
simulator's 70B, 4–10%; benchmarks/README.md, twenty-first session).

``capacity`` is :mod:`~bayeslat.models.hierarchical` with three more coefficients per group
and one more per drafter, under the same linear scaling priors (:mod:`bayeslat.scaling`:
``c3p`` with the prefill's arithmetic, ``c3v`` and ``c3r`` with the verifier's size, ``c3d``
with the drafter's), a wall per configuration that scatters log-normally around its group's
compute time, and a share ``Q`` per configuration around its group's stage-1 law,

.. math::
    \log C_{3c} \sim N\bigl(\log(c_{3p} + \tfrac{g}{E}\,((k+1)\,c_{3v} + k\,c_{3d}
    + (p + g/2)\,c_{3r})),\ s_{C3}\bigr),
    \qquad \operatorname{logit} Q_c \sim N\bigl(\operatorname{logit} \hat Q_c,\ \tau_Q\bigr),
    \quad \tau_Q = 0.5,

a request's prefill plus, in each of its ``g/E`` verify cycles, the ``k+1`` tokens it scores,
the ``k`` it drafts and the read of its KV cache (:func:`~bayeslat.theory.compute_coefficient`).
The walls tell ``c3v``, ``c3d`` and ``c3r`` apart only across groups, so the spreads of the
last two are fixed (:attr:`CapacityModel.fixed_spread`). The walls' spread
:math:`s_{C3} = (\tau_{C3}^2 + f^2)^{1/2}` has a floor ``f`` (the ``wall_spread_floor`` prior,
2%): no law places a wall closer than a benchmark measures it, and a spread free to reach 0
funnelled where a sweep's walls all lie near their law.
:math:`\hat Q_c` is an empirical-Bayes centre (:meth:`CapacityModel.queue_factors`): the
group's six coefficients and a law of its compute curve's intercept, ``A = g/E·(a_v + k·a_d)``
(a verify step's arithmetic that does not grow with the batch, and each drafted token's;
``A = g·a_b`` for the baseline, whose bend is more its prompts' arithmetic), by robust least
squares, each wall at its measured ceiling, then ``Q̂_c = A_c/(B_max·C3_c)``,
floored at :data:`Q_FLOOR`. Sampled as a free population instead, ``Q`` and the group's memory
term ``c2p`` traded its load growth between two modes. A configuration never measured is
centred on its group's law with its own wall, or, for a group never measured, on the geometric
mean of its server's groups' intercept terms that their curves measure (of every group's for a
new server), their spread added to ``τ_Q`` (:meth:`CapacityModel.new_shares`).

``c3v``, ``c3p`` and ``c3d`` are sampled non-centred by default
(:meth:`CapacityModel.default_config`): the data pin the first two near their law, so a
centred coefficient and its spread form a funnel, where the example's fits met divergences,
and leave the drafters' ``c3d`` to its law, which a centred ``c3d`` follows along a ridge
(benchmarks/README.md, eighth, thirteenth, thirty-fifth and thirty-sixth sessions).
The memory slopes ``c2p`` and ``c2v`` are centred, as one pair
(:meth:`~bayeslat.models.hierarchical.HierarchicalModel.paired_logs`): non-centred, each
group's ``z_c2v`` ran with ``tau_c2v`` along the posterior's narrowest directions (412 leapfrog
steps a draw on the example against 178 as the pair). The drafter's ``c2d`` joins them, one
triple a group (:func:`~bayeslat.models.hierarchical.memory_pair`), its spread fixed: the
data leave ``c2d`` at its prior (its spread's posterior was its prior, 0.25 ± 0.18) except that
it cannot take much of the memory slope the group's configurations pin, and in its own log a
non-centred ``c2d`` met that bound as a curved ridge with the pair, where the example's fit
at seed 0 and its top-rate fold diverged; in the triple neither does, nor six short runs
(benchmarks/README.md, thirty-seventh and thirty-eighth sessions). An earlier compute curve
(thirty-third session) let ``tau_c2v`` reach 0.009, where the pair funnelled; its 1% quantile
is now 0.13.
The laws of ``c3v`` and ``c3d`` leave their intercepts loose (the drafters' from 1e-8 to
3e-6 s between the 1% and 99% quantiles), so their betas are sampled as the law at the mean
unit and its terms' log shares (:func:`~bayeslat.models.hierarchical.law_coordinates`, the
same half-normal prior): in ``log beta`` the example's fit diverged in the intercept's tail.

The scatter of the walls is there because compute is not the only wall: the batch limit
(``max_num_seqs``) and the KV cache cap the concurrency too, and on a small verifier they bind
first (its baseline, with the most steps per request, then has the lowest ceiling). Each
measured configuration's own ceiling pins its ``C3``; a configuration never measured gets the
group's compute time times a fresh deviation ``exp(s_C3·z)``.

Near the wall the likelihood is far from Gaussian in ``log C3`` (the top points move several per
cent for a 1% move of the wall), so the sampler works in the headroom at each configuration's
top measured rate ``r``: ``y = logit(1 − r·C3)`` (:class:`HeadroomTransform`), in which the log
latency at that rate is nearly linear. The prior's sliver of mass at ``r·C3 >= 1`` (a wall below
a rate that was served), which the barrier excludes anyway, is dropped. The share is sampled
shifted by the wall's place just below the top rate, ``log Q + log(C3·ρ/(1 − ρ))`` at ``ρ =
QUEUE_AT·r·C3`` (:func:`queue_shift`; a shift, so the prior is unchanged), near the log of the
compute curve's rise there: the top points pin that rise, not ``Q``, which trades against the
wall's place. Not at the top rate itself, where the top point's band widens (below) and a share
sampled there runs along the headroom (benchmarks/README.md, twenty-sixth session).

The form is an approximation near the wall (the token budget and the KV cache bind there too,
the batch fluctuates, and each bends the curve its own way). Those misses are not outliers, and
a Student-t that called them so would let a top point choose between being fitted and being
ignored (two modes). The likelihood's scale therefore grows with how far the latency moves with
the wall, ``s² = sigma² + se² + (sigma_wall·v)²``, ``v = w/(1 − ρ)`` with ``w`` the compute
curve's share of ``L^P`` and ``ρ = rps·C3`` the batch's fill
(:meth:`~bayeslat.models.base.LatencyModel.likelihood_scale`,
:func:`~bayeslat.theory.wall_sensitivity`): ``sigma_wall`` is a jitter of the wall itself (each
benchmark, of finite length, sees its own effective wall), so the bands widen as the wall nears,
and a point nearer the wall than any fitted one gets the band its extrapolation needs
(benchmarks/README.md, fourteenth and thirty-fourth sessions).

``dense-capacity`` is :mod:`~bayeslat.models.dense` with ``log C3`` and ``logit Q`` per
configuration, pooled like ``C1`` and ``C2``; it needs no SD rows (a baseline-only sweep).
With ``Q → 0`` both reduce to the paper's model, which stays available as ``hierarchical`` and
``dense``.
"""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import parallel, scaling, theory
from bayeslat.data import schema
from bayeslat.models import start as st
from bayeslat.models.base import unit_index
from bayeslat.models.dense import DenseModel
from bayeslat.models.hierarchical import HierarchicalModel, _dim
from bayeslat.scaling import ScalingConfig

# The prefill stall's law of this variant: linear in the prefill's arithmetic, without the
# roofline knee of the default design (scaling.DEFAULT_DESIGN). With the knee, its workload
# folds on the example were no better (9.5% and 14.2% MAPE where the g512 workloads are held
# out, against 9% and 13%), and its short-output folds still put 61-74 points past capacity:
# there the walls' law misses, not the stall (benchmarks/README.md, thirty-first session).
CAPACITY_STALL = ("verifier_params_b", "prefill_compute")
# A configuration's columns the compute time takes (theory.compute_coefficient), in order.
COMPUTE_INPUTS = ("alpha0", "k", "prefill_tokens", "decode_tokens")
# Start of the compute curve's share Q (the example's groups: 0.001-0.05).
Q_START = 0.05
# Least stage-1 share Q: the compute curve's intercept is then a quarter of a request's compute
# time at a full batch (B·Q = 0.26), and groups whose curves do not bend (the example's 70B at
# 1,024-token prompts and 512-token outputs) fit any smaller value as well.
Q_FLOOR = 1e-3
# Least term of a stage-1 law of the intercept (s per verify cycle, a_v or a_d per drafted
# token) that a group's curves measure: 10 us, a hundredth of a step; groups whose curves do not
# bend fit ~1e-9 s (the example's 70B), which a new workload's law leaves out.
A_FLOOR = 1e-5
# Most share Q a stage-1 fit or a law of the intercept centres a configuration on.
Q_CAP = 0.9
# Share of each configuration's top rate at which its share Q is sampled, shifted (the module's
# docstring): low enough that a wall near the top rate does not drag it, high enough that the
# top points still pin it (at 0.8 the fit took fewer steps a draw but reached a third less
# ESS in as many draws).
QUEUE_AT = 0.9
# A configuration's parts: the paper's, the compute wall's, and the power of the norm that joins
# the two curves (theory.soft_power: a function of k, not sampled).
WALL_PARTS = ("C1", "C2", "C3", "Q", "P")
# The stage-1 law of the compute curve's intercept per verify cycle: a verify step's, a drafted
# token's, and the baseline's (models.start.intercept), as logs.
LAW_TERMS = ("log_a_v", "log_a_d", "log_a_b")
# Spread of log Q between the configurations of a group (with the queue's form before it, the
# example's per-configuration posterior medians scattered by 0.24-0.67 within a group).
TAU_Q = 0.5


def _compute_start(model) -> pd.Series:
    """``C3`` start per configuration of ``model.rows`` (indexed by factorised config codes)."""
    rows = model.rows
    codes, labels = pd.factorize(rows["config"])
    ceilings = model.ceilings.groupby("config")["rps"].max()
    ceilings = pd.Series(ceilings.reindex(labels).to_numpy())
    return st.compute_fits(codes, rows["rps"].to_numpy(), ceilings.dropna())


def _group_law(mine: np.ndarray, shared) -> np.ndarray | None:
    """:func:`~bayeslat.models.start.group_fit` of the rows at positions ``mine`` of ``rows``,
    their walls ``c3`` (``shared = (rows, c3)``), robust to a few outliers."""
    rows, c3 = shared
    one = rows.iloc[mine]
    drafts = pd.Index(pd.unique(one.loc[one["k"] > 0, "drafter"]))
    return st.group_fit(one, drafts, c3[mine], loss="soft_l1")


def headroom_transform(log_top):
    """The sampler's coordinates of ``log C3`` for configurations whose top rates have logs
    ``log_top`` (:class:`HeadroomTransform`)."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    class HeadroomTransform(Transform):
        r"""``log C3`` ↔ ``y = logit(1 − r·C3)``: :math:`\log C_3 = -\mathrm{softplus}(y)
        - \log r`, :math:`\log|J| = -\mathrm{softplus}(-y)`."""

        name = "headroom"

        def forward(self, value, *inputs):
            a = value + log_top  # log(r·C3) < 0
            return pt.log1mexp(a) - a

        def backward(self, value, *inputs):
            return -pt.softplus(value) - log_top

        def log_jac_det(self, value, *inputs):
            return -pt.softplus(-value)

    return HeadroomTransform()


def queue_shift(log_c3, log_rate):
    r"""``log(C3·ρ/(1 − ρ))``, ``ρ = r·C3`` at the rate ``r`` (``log_rate``): ``log Q`` plus
    this is the log of the queue's wait at that rate, which the top points pin whatever the
    wall's exact place (sampling it, not ``log Q``, takes the wall–queue ridge out of the
    sampler's way; :meth:`CapacityModel.queue_rates`). Works on tensors and arrays; needs
    ``r·C3 < 1``, which the headroom transform keeps for any rate up to the top one."""
    # log ρ, kept below 0 for the forward draws of the prior, which know nothing of the
    # headroom transform (the sampler never leaves ρ < 1)
    if isinstance(log_c3, np.ndarray):
        a = np.minimum(log_c3 + log_rate, -1e-9)
        return log_c3 + a - np.log(-np.expm1(a))
    import pytensor.tensor as pt  # on use: its import is seconds of a decide

    a = pt.minimum(log_c3 + log_rate, -1e-9)
    return log_c3 + a - pt.log1mexp(a)


def read_laws(text: str) -> pd.DataFrame:
    """The stage-1 intercept laws stored with a fit (JSON, a row per group, the columns
    :data:`LAW_TERMS`); a fit from before the baseline's own term gives its baselines
    ``a_v``, the law they had then."""
    laws = pd.read_json(io.StringIO(text))
    if "log_a_b" not in laws:
        laws["log_a_b"] = laws["log_a_v"]
    return laws[list(LAW_TERMS)]


def log_odds(log_share):
    """``log(Q/(1 − Q))`` of a share with log ``log_share``, the share capped at
    :data:`Q_CAP` (a tensor or array): the coordinates ``Q`` is sampled in, so that it stays
    a share (``Q = sigmoid``), and near ``log Q`` for the small shares of a real server."""
    if isinstance(log_share, np.ndarray | float | xr.DataArray):
        capped = np.minimum(log_share, np.log(Q_CAP))
        return capped - np.log(-np.expm1(capped))
    import pytensor.tensor as pt

    capped = pt.minimum(log_share, np.log(Q_CAP))
    return capped - pt.log1mexp(capped)


class CapacityModel(HierarchicalModel):
    """Six per-stage coefficients with scaling priors, plus a compute wall and queue factor per
    configuration around its group's."""

    variant = "capacity"
    parts = WALL_PARTS
    fits_ceilings = True
    coef_names = scaling.ALL_COEFS
    # c1v centred with its server contrasts: 1,500 draws at 189 steps, non-centred 1,875 at 251
    contrast_noncentered = ()
    # Within a group the walls tell only c3v + c3d (per drafted token) and c3v + (p + g/2)·c3r
    # (per cycle) apart; with all three spreads sampled the fit ran along that ridge (bulk
    # ESS 21 in 500 draws, a divergence), and with c3d's fixed it still did (ESS 91 in 1,900
    # draws, a divergence). A drafted token's arithmetic and a context token's read are the
    # drafter's, the verifier's and the hardware's, not the workload's: with both spreads fixed
    # at tau_mean, as every spread is in a fold of nine groups (benchmarks/README.md,
    # thirty-second session).
    # c2d's too: the data leave it at its prior but for a bound, and a sampled spread funnels
    # in the memory triple (benchmarks/README.md, thirty-eighth session)
    fixed_spread = ("c2d", "c3d", "c3r")
    # The compute wall's laws leave their intercepts unidentified (the drafters' c3d from 1e-8
    # to 3e-6 s, 1% to 99%): in log beta the fits diverged at the intercept's tail
    # (benchmarks/README.md, thirty-sixth session)
    law_coordinate_coefs = ("c3v", "c3d")

    @classmethod
    def default_config(cls) -> ScalingConfig:
        """The default design and priors, with ``c3v``, ``c3p`` and ``c3d`` non-centred as
        well as ``c1p`` (module docstring), and the ceilings' shortfall below the
        capacity sampled (``ceiling_shortfall_sd`` 0.05)."""
        return ScalingConfig(design=scaling.DEFAULT_DESIGN | {"c2p": CAPACITY_STALL},
                             priors=copy.deepcopy(scaling.DEFAULT_PRIORS)
                             | {"ceiling_shortfall_sd": 0.05},
                             noncentered=("c1p", "c3v", "c3p", "c3d"))

    def curve_inputs(self, curves):
        return super().curve_inputs(curves) | {
            "prefill_tokens": curves["prefill_tokens"].to_numpy(float)}

    def setup(self, scales):
        super().setup(scales)
        self.configs = pd.Index(pd.unique(self.rows["config"]))

    def coords(self):
        return super().coords() | {"config": self.configs.to_numpy()}

    def coefficients(self, curves, data, dim):
        import pymc as pm
        import pytensor.tensor as pt

        vectors, index = self.unit_vectors(curves, dim)
        c = {coef: vectors[coef][index[_dim(coef)]] for coef in self.coef_names}
        alpha, k, g = data["alpha"], data["k"], data["decode_tokens"]
        c1, c2 = theory.effective_coefficients(*(c[q] for q in scaling.COEFS), alpha, k, g)
        law = theory.compute_coefficient(*(c[q] for q in scaling.COMPUTE_COEFS), alpha, k,
                                         data["prefill_tokens"], g)
        # each configuration's wall around its group's compute time, its queue factor around
        # its group's stage-1 value: the fitted configurations' values, then new ones'
        compute = self._group_compute(vectors)
        log_top = np.log(self.top_rates())
        cidx, new = unit_index(curves["config"], self.configs)
        if len(new):
            pm.modelcontext(None).add_coord("new_config", new.to_numpy())
        labels = curves["config"].reset_index(drop=True).drop_duplicates()
        first = labels.index.to_numpy()[pd.Index(labels).get_indexer(new)]  # a row of each
        index = pm.Data("config_idx", cidx, dims=dim)
        tau_c3 = self.wall_spread(pm.Gamma("tau_C3", alpha=2.0,
                                           beta=2.0 / self.config.prior("tau_mean")))
        fitted_c3, log_c3 = self._per_config("C3", tau_c3, pt.log(compute), pt.log(law)[first],
                                             transform=headroom_transform(log_top))
        # logit Q around its configuration's stage-1 law, sampled shifted by the wall's place
        # near the top rate (logit Q + queue_shift); a new configuration's centre is its
        # group's (or server's) law over its own wall. The shift takes the fitted walls alone: were
        # it a slice of all of them, the new walls' fresh draws would be its ancestors, and
        # posterior prediction would redraw the fitted log_Q_wait from its prior
        shift = queue_shift(fitted_c3, np.log(self.queue_rates()))
        new_a, new_tau = self.new_shares(curves.iloc[first]) if len(new) else (
            np.zeros(0), np.zeros(0))
        _, log_q = self._per_config("Q", TAU_Q, self.config_shares(),
                                    log_odds(new_a - log_c3[len(self.configs):]), shift=shift,
                                    tau_new=new_tau)
        return {"C1": c1, "C2": c2, "C3": pt.exp(log_c3)[index], "Q": pt.sigmoid(log_q)[index],
                "P": theory.soft_power(k)}

    def known_parts(self, rows: pd.DataFrame, seed=0) -> dict | None:
        """``C1``, ``C2``, ``C3``, ``Q`` (and the norm's power ``P``) of ``rows``
        (:func:`~bayeslat.models.base.prepare`) from the stored posterior, without building
        the model's graph, when every group and drafter of ``rows`` was fitted (None
        otherwise). A fitted configuration gets its own ``C3`` and ``Q``, the graph's values;
        one never measured gets its group's compute time and stage-1 queue factor times fresh
        deviations ``exp(s_C3·z)`` and ``exp(TAU_Q·z)``, one ``z`` per draw and configuration
        (seeded by ``seed``): the graph's distribution, not its random numbers."""
        index = self.fitted_units(rows)
        if index is None:
            return None
        post = self.posterior
        out = self.parts_of(post, rows, *index)
        labels = rows["config"].reset_index(drop=True)
        cidx, new = unit_index(labels, self.configs)
        fitted = xr.DataArray(np.minimum(cidx, len(self.configs) - 1), dims="obs")
        log_c3 = post["log_C3"].isel(config=fitted).drop_vars("config")
        log_rate = xr.DataArray(np.log(self.queue_rates()), dims="config").isel(config=fitted)
        log_q = post["log_Q_wait"].isel(config=fitted).drop_vars("config") - xr.apply_ufunc(
            queue_shift, log_c3, log_rate)
        if len(new):
            # one deviation per draw and new configuration, shared by its rows
            z = np.random.default_rng(seed).standard_normal(
                (2, post.sizes["chain"], post.sizes["draw"], len(new)))
            pick = xr.DataArray(np.maximum(cidx - len(self.configs), 0), dims="obs")
            z_c3, z_q = (xr.DataArray(one, dims=("chain", "draw", "new")).isel(new=pick)
                         for one in z)
            at = {dim: xr.DataArray(i, dims="obs") for dim, i in zip(("group", "draft"), index,
                                                                      strict=True)}
            column = {name: xr.DataArray(rows[name].to_numpy(float), dims="obs")
                      for name in COMPUTE_INPUTS}
            compute = theory.compute_coefficient(
                *(post[q].isel({_dim(q): at[_dim(q)]}).drop_vars(_dim(q))
                  for q in scaling.COMPUTE_COEFS), *column.values())
            log_a, tau = (xr.DataArray(one, dims="obs") for one in self.new_shares(rows))
            is_new = xr.DataArray(cidx >= len(self.configs), dims="obs")
            log_c3 = xr.where(is_new, np.log(compute) + self.wall_spread(post["tau_C3"]) * z_c3,
                              log_c3)
            log_q = xr.where(is_new, xr.apply_ufunc(log_odds, log_a - log_c3) + tau * z_q,
                             log_q)
        power = theory.soft_power(xr.DataArray(rows["k"].to_numpy(float), dims="obs"))
        return out | {"C3": np.exp(log_c3), "Q": 1.0 / (1.0 + np.exp(-log_q)),
                      "P": power.broadcast_like(log_c3)}

    def attrs(self) -> dict[str, str]:
        """The base's, and the stage-1 shares per group and configuration
        (:meth:`queue_factors`, :meth:`config_shares`): part of the prior, and seconds to
        recompute, so a loaded fit reads them (:meth:`from_file`)."""
        self.queue_factors()
        return super().attrs() | {
            "queue_factors": json.dumps(self._queue_factors.to_dict()),
            "config_shares": json.dumps(self._config_shares.to_dict()),
            "intercept_laws": self._laws.to_json()}

    @classmethod
    def from_file(cls, path, groups):
        model = super().from_file(path, groups)
        attrs = groups["posterior"].attrs
        if "intercept_laws" in attrs:
            model._queue_factors, model._config_shares = (
                pd.Series(json.loads(attrs[name]), dtype=float)
                for name in ("queue_factors", "config_shares"))
            model._laws = read_laws(attrs["intercept_laws"])
        return model

    def wall_spread(self, tau):
        """The spread of the log walls around their group's compute time: ``tau_C3`` (a
        tensor or array) combined with the ``wall_spread_floor`` prior, ``hypot(tau, floor)``."""
        return (tau**2 + self.config.prior("wall_spread_floor") ** 2) ** 0.5

    def top_rates(self) -> np.ndarray:
        """Each fitted configuration's highest measured rate (req/s), in :attr:`configs` order."""
        return self.rows.groupby("config")["rps"].max().reindex(self.configs).to_numpy()

    def queue_rates(self) -> np.ndarray:
        """The rate (req/s) at which each fitted configuration's queue wait is sampled,
        :data:`QUEUE_AT` of its top rate, in :attr:`configs` order."""
        return QUEUE_AT * self.top_rates()

    def queue_factors(self) -> pd.Series:
        """Each fitted group's stage-1 log share ``Q``, the geometric mean of its
        configurations' (:meth:`config_shares`): its six coefficients and the law of its
        compute curve's intercept, ``A = g/E·(a_v + k·a_d)`` (``g·a_b`` at ``k = 0``), by
        robust least squares over its unsaturated rows
        (:func:`~bayeslat.models.start.group_fit`, each configuration's wall at its start,
        :func:`_compute_start`; the groups one per core), each configuration's ``Q =
        A/(B_max·C3)`` floored at :data:`Q_FLOOR`; :data:`Q_START` where the fit fails.
        Computed once per model; a new configuration of a fitted group is centred on its
        group's."""
        if getattr(self, "_queue_factors", None) is None:
            rows = self.rows
            c3 = _compute_start(self).to_numpy()[pd.factorize(rows["config"])[0]]
            out, laws, shares = {}, {}, pd.Series(np.nan, index=self.configs)
            groups = rows.groupby("group").indices
            thetas = parallel.fork_map(_group_law, list(groups.values()), (rows, c3))
            for (group, mine), theta in zip(groups.items(), thetas, strict=True):
                one = rows.iloc[mine]
                if theta is None:
                    out[group] = Q_START
                    continue
                laws[group] = np.log(theta[-3:])
                q = pd.Series(st.cycles_of(one) * st.intercept(theta[-3:], one["k"])
                              / (theory.BATCH_CAP * c3[mine]), index=one["config"].to_numpy())
                q = q.groupby(level=0).first()
                shares[q.index] = q.to_numpy()
                out[group] = float(np.exp(np.log(q).mean()))
            self._queue_factors = np.log(np.maximum(pd.Series(out), Q_FLOOR))
            self._laws = pd.DataFrame(laws, index=list(LAW_TERMS)).T
            self._config_shares = np.log(np.clip(shares.fillna(Q_START), Q_FLOOR, Q_CAP))
        return self._queue_factors

    def new_shares(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The log intercept ``log A = log(g/E·(a_v + k·a_d))`` (``g·a_b`` at ``k = 0``) of the
        compute curve for each of ``rows`` (configurations never measured), from its group's
        stage-1 law where that group was fitted, else the geometric mean of its server's
        fitted groups' terms ``a_v``, ``a_d`` and ``a_b`` that their curves measure (at least
        :data:`A_FLOOR`), else of every group's; and the spread ``log Q`` gets around
        ``log A − log(B·C3)``: ``TAU_Q``, with the larger spread of the terms it averaged
        added (1 for a term of fewer than two).
        With every term averaged, the 70B's unidentified ones (~1e-9 s) put the spread of a
        new workload's ``log Q`` near 6, its latency's upper quantiles near the wall in most
        draws, and the risk-aware choice at no SD where SD was 3-5 times faster
        (benchmarks/README.md, thirty-fifth session)."""
        self.queue_factors()
        laws = self._laws
        if laws.empty:
            return np.full(len(rows), np.log(Q_START)), np.full(len(rows), TAU_Q)
        fitted = self.rows.drop_duplicates("group").set_index("group")
        server = schema.server_labels(fitted).reindex(laws.index)
        measured = laws.where(laws >= np.log(A_FLOOR))
        terms, tau = np.empty((len(rows), len(LAW_TERMS))), np.empty(len(rows))
        for i, (group, srv) in enumerate(zip(rows["group"], schema.server_labels(rows),
                                             strict=True)):
            if group in laws.index:
                terms[i], tau[i] = laws.loc[group].to_numpy(), TAU_Q
                continue
            # the server's measured intercepts, each term on its own (a group whose curves do
            # not bend leaves its a_v or a_d at ~1e-9 s, unidentified, not small)
            pool = measured[(server == srv).to_numpy()]
            terms[i] = pool.mean().fillna(measured.mean()).fillna(np.log(A_FLOOR)).to_numpy()
            tau[i] = np.hypot(TAU_Q, pool.std(ddof=0).where(pool.count() > 1, 1.0).max())
        log_a = np.log(st.cycles_of(rows) * st.intercept(np.exp(terms.T), rows["k"]))
        return log_a - np.log(theory.BATCH_CAP), tau

    def config_shares(self) -> np.ndarray:
        """Each fitted configuration's stage-1 share as log odds (:func:`log_odds`), the
        centre of its ``logit Q``, in :attr:`configs` order (:meth:`queue_factors`)."""
        self.queue_factors()
        return log_odds(self._config_shares.reindex(self.configs).to_numpy())

    def _per_config(self, name, tau, log_fitted, log_new, transform=None, shift=None,
                    tau_new=None):
        r"""``log_<name> ~ N(log_fitted, tau)`` per fitted configuration, then
        ``log_new + tau_new·z`` per configuration never measured (dim ``new_config``;
        ``tau_new`` None: ``tau``): the fitted configurations' log values, and all of them
        concatenated. With ``shift``, the variable sampled is ``log_<name> + shift`` (named
        ``log_<name>_wait``), a change of location with unit Jacobian."""
        import pymc as pm
        import pytensor.tensor as pt

        if shift is None:
            log_value = pm.Normal(f"log_{name}", mu=log_fitted, sigma=tau, dims="config",
                                  transform=transform)
        else:
            log_value = pm.Normal(f"log_{name}_wait", mu=log_fitted + shift, sigma=tau,
                                  dims="config") - shift
        if "new_config" not in pm.modelcontext(None).coords:
            return log_value, log_value
        z = pm.Normal(f"new_z_{name}", 0.0, 1.0, dims="new_config")
        return log_value, pt.concatenate([log_value, log_new + (tau if tau_new is None
                                                                else tau_new) * z])

    def _group_compute(self, values):
        """Each fitted configuration's group compute time ``C3`` from the per-unit ``c3*`` in
        ``values`` (tensors or arrays)."""
        fitted = self.rows.drop_duplicates("config")
        return self._compute(values, fitted, *self.positions(fitted))

    @staticmethod
    def _compute(values, rows, gidx, didx):
        """The compute time ``C3`` of ``rows`` from the per-unit ``c3*`` in ``values``
        (tensors or arrays), each row's group and drafter at ``gidx``, ``didx``."""
        index = {"group": gidx, "draft": didx}
        return theory.compute_coefficient(*(values[q][index[_dim(q)]]
                                            for q in scaling.COMPUTE_COEFS),
                                          *(rows[name].to_numpy(float)
                                            for name in COMPUTE_INPUTS))

    def start(self):
        out = super().start()
        values = self.unit_start()
        compute = self._group_compute(values)
        log_c3 = np.log(_compute_start(self).to_numpy())
        dev = log_c3 - np.log(compute)
        log_q = self.config_shares()
        return out | {"log_C3": log_c3, "tau_C3": float(np.clip(dev.std(), 0.05, 1.0)),
                      "log_Q_wait": log_q + queue_shift(log_c3, np.log(self.queue_rates()))}

    def unit_start(self):
        """The six coefficients' start, then the compute wall's ``c3p``, ``c3v``, ``c3r`` per
        group and ``c3d`` per drafter in it by non-negative least squares on the
        configurations' ``C3`` starts, shrunk until every observed point is below
        :data:`~bayeslat.models.start.MAX_LOAD` of the compute capacity."""
        from scipy.optimize import nnls

        out = super().unit_start()
        rows = self.rows
        codes, _ = pd.factorize(rows["config"])
        c3 = _compute_start(self)
        cfg = rows.groupby(codes).first().loc[c3.index]
        k = cfg["k"].to_numpy(float)
        cycles = st.cycles_of(cfg)
        reads = cycles * theory.mean_context(cfg["prefill_tokens"], cfg["decode_tokens"]).to_numpy()
        units = self.units
        start = {q: np.zeros(len(units[_dim(q)])) for q in scaling.COMPUTE_COEFS}
        for label in cfg["group"].unique():
            m = (cfg["group"] == label).to_numpy()
            local, drafts = pd.factorize(cfg.loc[m, "draft"])
            # C3 ≈ c3p + cycles·((k+1)·c3v + k·c3d[draft]) + reads·c3r, relative least squares
            design = np.zeros((m.sum(), 3 + len(drafts)))
            design[:, :3] = np.column_stack([np.ones(m.sum()), cycles[m] * (k[m] + 1), reads[m]])
            design[np.arange(m.sum()), 3 + local] = cycles[m] * k[m]
            coef, _ = nnls(design / c3.to_numpy()[m, None], np.ones(m.sum()))
            j = units["group"].index.get_loc(label)
            start["c3p"][j], start["c3v"][j], start["c3r"][j] = coef[:3]
            for i, draft in enumerate(drafts):
                if draft in units["draft"].index:  # not the baseline's "none"
                    start["c3d"][units["draft"].index.get_loc(draft)] = coef[3 + i]
        start = {q: st.floor_positive(v) for q, v in start.items()}
        gidx, didx = self.positions(rows)
        load = pd.Series(rows["rps"].to_numpy() * self._compute(start, rows, gidx, didx))
        shrink = np.minimum(1.0, st.MAX_LOAD / load.groupby(gidx).max().reindex(
            range(len(units["group"]))).fillna(1.0).to_numpy())
        per_unit = {"group": slice(None), "draft": self.draft_groups()}
        return out | {q: v * shrink[per_unit[_dim(q)]] for q, v in start.items()}


class DenseCapacityModel(DenseModel):
    """Per-configuration ``C1``, ``C2``, ``C3``, ``Q`` with partial pooling (and the norm's
    power ``P`` of each configuration's ``k``)."""

    variant = "dense-capacity"
    parts = WALL_PARTS
    fits_ceilings = True

    def coefficients(self, curves, data, dim):
        return super().coefficients(curves, data, dim) | {"P": theory.soft_power(data["k"])}

    def start(self):
        c3 = _compute_start(self)
        # factorised codes follow first appearance, as self.configs does
        return super().start() | self.pooled_start("C3", c3.to_numpy()) | self.pooled_start(
            "Q", np.full(len(c3), Q_START / (1.0 - Q_START)))  # the share's odds
