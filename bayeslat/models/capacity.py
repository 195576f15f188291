r"""``capacity`` and ``dense-capacity``: the paper's model plus the compute wall.

Near capacity a step's time is set by its arithmetic, not by moving the weights (DESIGN.md §2a),
and requests queue for compute. Both variants add that queue to the paper's latency
(:func:`bayeslat.theory.latency`):

.. math::
    L = \frac{C_1}{1 - \mathrm{rps}\,C_2} + Q\,C_3\,\frac{\rho}{1-\rho}, \qquad
    \rho = \mathrm{rps}\,C_3, \qquad \text{capacity} = 1/\max(C_2, C_3),

the second term the Pollaczek–Khinchine waiting time of an M/G/1 server whose service time is a
request's compute time ``C3``, with ``Q = (1 + c_s^2)/2``. The measured ceilings (throughput
benchmarks) are data of their own, so the fitted capacity must agree with them:

.. math::
    \log \mathrm{ceiling}_c \sim N\bigl(-\log\max(C_{2c}, C_{3c}) - \delta,\
    \sigma_{\mathrm{cap}}\bigr), \qquad \sigma_{\mathrm{cap}} \sim \mathrm{Gamma}(5, 5/m),
    \qquad \delta \sim \mathrm{HalfNormal}(0.05).

``capacity`` (not ``dense-capacity``, whose walls are free per configuration) samples the
shortfall ``δ``, one for the sweep (the ``ceiling_shortfall_sd`` prior): a throughput benchmark
counts its completions over its whole run, its fill and drain included, so it delivers at most
the capacity constant arrivals can sustain, and less where its batches run in waves. In the
engine simulator the 70B's ceilings with 512-token outputs lie 4–10% below the rates its
constant-rate benchmarks sustain, the 1B's and 8B's within 1–3%; fitted, ``δ`` is 0.024 on the
70B sweep and near 0 on the others (benchmarks/README.md, twenty-first session).

``capacity`` is :mod:`~bayeslat.models.hierarchical` with three more coefficients per group
and one more per drafter, under the same linear scaling priors (:mod:`bayeslat.scaling`:
``c3p`` with the prefill's arithmetic, ``c3v`` and ``c3r`` with the verifier's size, ``c3d``
with the drafter's), a wall per configuration that scatters log-normally around its group's
compute time, and a queue factor per configuration around its group's stage-1 value,

.. math::
    \log C_{3c} \sim N\bigl(\log(c_{3p} + \tfrac{g}{E}\,((k+1)\,c_{3v} + k\,c_{3d}
    + (p + g/2)\,c_{3r})),\ s_{C3}\bigr),
    \qquad \log Q_c \sim N\bigl(\log \hat Q_{j(c)},\ \tau_Q\bigr), \quad \tau_Q = 0.5,

a request's prefill plus, in each of its ``g/E`` verify cycles, the ``k+1`` tokens it scores,
the ``k`` it drafts and the read of its KV cache (:func:`~bayeslat.theory.compute_coefficient`).
Without the reads the law's per-request intercept grew with the output length and a held-out
short-output workload's walls came out up to 60% too slow (benchmarks/README.md,
thirty-second session). The walls tell ``c3v``, ``c3d`` and ``c3r`` apart only across
groups, so the spreads of the last two are fixed (:attr:`CapacityModel.fixed_spread`). The walls'
spread :math:`s_{C3} = (\tau_{C3}^2 + f^2)^{1/2}` has a floor ``f`` (the ``wall_spread_floor``
prior, 2%): no law places a wall closer than a benchmark measures it, and where a sweep's walls
all lie near their law (the engine simulator's Llama-1B), a spread free to reach 0 funnelled.
:math:`\hat Q_j` is an empirical-Bayes centre (:meth:`CapacityModel.queue_factors`): group
``j``'s six coefficients and one queue factor by robust least squares, each wall at its
measured ceiling, floored at :data:`Q_FLOOR`. The queue factor differs most between groups
(the example: log Q from −4.6 to +2.6 between groups, 0.24–0.67 within one), and which of a
group's memory term (``c2p``) and its queue carries its load growth is weakly identified: with
``Q`` hyperparameters sampled (a population ``N(μ_Q, τ_Q)``), a configuration's ``Q`` drifted
between a spike and a slab reaching e^−11 and a group-level ``q`` gave two modes against the
group's ``C2``; with a fixed per-group ``Q`` the two modes moved to ``c2p`` against ``c2d``.
Centred on the stage-1 value with the within-group spread, ``Q`` keeps each configuration's
freedom and the slab is gone (benchmarks/README.md). A configuration never measured gets its
group's ``log Q̂`` or, for a group never measured, the groups' mean with their spread added to
``τ_Q``. ``c2d`` and ``c3v`` are sampled non-centred by default
(:meth:`CapacityModel.default_config`): with the queue there the data leave the drafter's
per-request cost near 0, a funnel for a centred ``log c2d``; and each group's ``c3v`` is
informed only through its configurations' walls, which scatter around it by ``τ_C3``, so a
centred ``log c3v`` and its spread ``tau_c3v`` form a funnel too (centred, the example's fit
stopped at its first divergence after 150 draws with ``tau_c3v`` the slowest, R-hat 1.20;
non-centred it ran 2,000 draws without one).

The scatter of the walls is there because compute is not the only wall: the batch limit
(``max_num_seqs``) and the KV cache cap the concurrency too, and on a small verifier they bind
first (its baseline, with the most steps per request, then has the lowest ceiling). Each
measured configuration's own ceiling pins its ``C3``; a configuration never measured gets the
group's compute time times a fresh deviation ``exp(s_C3·z)``.

Near the wall the likelihood is far from Gaussian in ``log C3`` (a top point at 90% of capacity
moves 10% for a 1% move of the wall), so the sampler works in the headroom at each
configuration's top measured rate ``r``: ``y = logit(1 − r·C3)`` (:class:`HeadroomTransform`),
in which the queue's log latency at that rate is nearly linear. The prior's sliver of mass at
``r·C3 >= 1`` (a wall below a rate that was served), which the barrier excludes anyway, is
dropped. The queue factor is sampled as the queue's wait just below the top rate,
``log Q + log(C3·ρ/(1 − ρ))`` at ``ρ = QUEUE_AT·r·C3`` (:func:`queue_shift`; a shift, so the
prior is unchanged): the top points pin that wait, not ``Q``, which trades against the wall's
place. Not at the top rate itself: where the wall nears the top rate the top point's band
widens (below) and the points beneath it pin the wait instead, so a wait sampled at the top
rate runs along the headroom (correlation −0.9 to −1.0 for 54 of the example's 156
configurations, the narrowest directions of the posterior); at :data:`QUEUE_AT` of it the
median correlation is −0.23 and the example's fit reaches the bar in 1,500 draws a chain
instead of 2,350, with 15% fewer steps a draw (benchmarks/README.md, twenty-sixth session).

The queue's form is an approximation near the wall (the batch limit, the token budget and the
KV cache bind there too, and each bends the curve its own way): fitted one configuration at a
time it still misses the points just below the wall by up to 7%. Those misses are not
outliers, and a Student-t that called them so would let a top point choose between being
fitted and being ignored (two modes). The likelihood's scale therefore grows with how far the
latency moves with the wall, ``s² = sigma² + se² + (sigma_wall·v)²``, ``v = w/(1 − ρ)`` with
``w`` the share of the latency spent queueing
(:meth:`~bayeslat.models.base.LatencyModel.likelihood_scale`,
:func:`~bayeslat.theory.wall_sensitivity`): ``sigma_wall`` is a jitter of the wall itself (each
benchmark, of finite length, sees its own effective wall), so the bands widen as the wall
nears, and a point nearer the wall than any fitted one gets the band its extrapolation needs.
With ``w`` alone the example's top rates, each held out and predicted, fell inside their 90%
band for 0.56 of 156 configurations, nearly all of the misses below it; with ``v``, 0.87
(benchmarks/README.md, fourteenth session).

The queue's pole is the measured ceiling. In the engine simulator the ceiling is where the
batch fills (``max_num_seqs``), and the compute-bound curve's own pole lies 7–16% beyond it; a
soft maximum of a memory-bound and a compute-bound curve built on that predicts the held-out
top rates of single configurations with 5.8% mean error against this form's 9.7%. In this
hierarchical model (branch ``roofline``) it predicts the held-out top rates with 7.3% against
9.9% and the real llm-d sweep's left-out rates with 1.0% against 2.2%, but whole workloads never
measured no better (benchmarks/README.md, thirty-third and thirty-fourth sessions).

``dense-capacity`` is :mod:`~bayeslat.models.dense` with ``log C3`` and ``log Q`` per
configuration, pooled like ``C1`` and ``C2``; it needs no SD rows (a baseline-only sweep).
With ``Q → 0`` both reduce to the paper's model, which stays available as ``hierarchical`` and
``dense``.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import scaling, theory
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
# Start of the queueing factor: a little below exponential service (Q = 1).
Q_START = 0.5
# Least stage-1 queue factor: below it the queue's wait at 95% of the wall is under a fifth of
# a request's compute time, which no measured latency tells from none (the sharp-wall groups
# fit any smaller value as well).
Q_FLOOR = 0.01
# Share of each configuration's top rate at which its queue's wait is sampled (the module's
# docstring): low enough that a wall near the top rate does not drag it, high enough that the
# top points still pin it (at 0.8 the fit took fewer steps a draw but reached a third less
# ESS in as many draws).
QUEUE_AT = 0.9
# Spread of log Q between the configurations of a group (the example's per-configuration
# posterior medians: 0.24-0.67 within a group, -4.6 to +2.6 between groups).
TAU_Q = 0.5


def _compute_start(model) -> pd.Series:
    """``C3`` start per configuration of ``model.rows`` (indexed by factorised config codes)."""
    rows = model.rows
    codes, labels = pd.factorize(rows["config"])
    ceilings = model.ceilings.groupby("config")["rps"].max()
    ceilings = pd.Series(ceilings.reindex(labels).to_numpy())
    return st.compute_fits(codes, rows["rps"].to_numpy(), ceilings.dropna())


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


class CapacityModel(HierarchicalModel):
    """Six per-stage coefficients with scaling priors, plus a compute wall and queue factor per
    configuration around its group's."""

    variant = "capacity"
    parts = ("C1", "C2", "C3", "Q")
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
    fixed_spread = ("c3d", "c3r")

    @classmethod
    def default_config(cls) -> ScalingConfig:
        """The default design and priors, with ``c2d`` and ``c3v`` non-centred as well as
        ``c1p``, and the ceilings' shortfall below the capacity sampled
        (``ceiling_shortfall_sd`` 0.05)."""
        return ScalingConfig(design=scaling.DEFAULT_DESIGN | {"c2p": CAPACITY_STALL},
                             priors=copy.deepcopy(scaling.DEFAULT_PRIORS)
                             | {"ceiling_shortfall_sd": 0.05},
                             noncentered=("c1p", "c2d", "c3v"))

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
        new_groups = pd.Index(curves["group"].to_numpy()[first]) if len(new) else pd.Index([])
        index = pm.Data("config_idx", cidx, dims=dim)
        tau_c3 = self.wall_spread(pm.Gamma("tau_C3", alpha=2.0,
                                           beta=2.0 / self.config.prior("tau_mean")))
        fitted_c3, log_c3 = self._per_config("C3", tau_c3, pt.log(compute), pt.log(law)[first],
                                             transform=headroom_transform(log_top))
        # Q around its group's stage-1 value, sampled as the queue's wait near the top rate
        # (log Q + queue_shift); a new configuration of a group never measured gets the
        # groups' mean, with their spread added. The shift takes the fitted walls alone: were
        # it a slice of all of them, the new walls' fresh draws would be its ancestors, and
        # posterior prediction would redraw the fitted log_Q_wait from its prior
        shift = queue_shift(fitted_c3, np.log(self.queue_rates()))
        groups = self.queue_factors()
        known = new_groups.isin(groups.index) if len(new) else np.zeros(0, bool)
        new_q = np.where(known, groups.reindex(new_groups).to_numpy(), groups.mean())
        spread = np.hypot(TAU_Q, groups.std(ddof=0) if len(groups) > 1 else 1.0)
        _, log_q = self._per_config("Q", TAU_Q,
                                    groups.reindex(self.rows.drop_duplicates("config")["group"])
                                    .to_numpy(), new_q, shift=shift,
                                    tau_new=np.where(known, TAU_Q, spread))
        return {"C1": c1, "C2": c2, "C3": pt.exp(log_c3)[index], "Q": pt.exp(log_q)[index]}

    def known_parts(self, rows: pd.DataFrame, seed=0) -> dict | None:
        """``C1``, ``C2``, ``C3``, ``Q`` of ``rows`` (:func:`~bayeslat.models.base.prepare`)
        from the stored posterior, without building the model's graph, when every group and
        drafter of ``rows`` was fitted (None otherwise). A fitted configuration gets its own
        ``C3`` and ``Q``, the graph's values; one never measured gets its group's compute time
        and stage-1 queue factor times fresh deviations ``exp(s_C3·z)`` and
        ``exp(TAU_Q·z)``, one ``z`` per draw and configuration (seeded by ``seed``): the
        graph's distribution, not its random numbers."""
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
            queue = xr.DataArray(self.queue_factors().reindex(rows["group"]).to_numpy(),
                                 dims="obs")
            is_new = xr.DataArray(cidx >= len(self.configs), dims="obs")
            log_c3 = xr.where(is_new, np.log(compute) + self.wall_spread(post["tau_C3"]) * z_c3,
                              log_c3)
            log_q = xr.where(is_new, queue + TAU_Q * z_q, log_q)
        return out | {"C3": np.exp(log_c3), "Q": np.exp(log_q)}

    def attrs(self) -> dict[str, str]:
        """The base's, and the stage-1 queue factors (:meth:`queue_factors`): part of the
        prior, and seconds to recompute, so a loaded fit reads them (:meth:`from_file`)."""
        return super().attrs() | {"queue_factors": json.dumps(self.queue_factors().to_dict())}

    @classmethod
    def from_file(cls, path, groups):
        model = super().from_file(path, groups)
        stored = groups["posterior"].attrs.get("queue_factors")
        if stored is not None:
            model._queue_factors = pd.Series(json.loads(stored), dtype=float)
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
        """Each fitted group's stage-1 log queue factor: its six coefficients and one ``Q``
        by robust least squares over its unsaturated rows
        (:func:`~bayeslat.models.start.group_fit`, each configuration's wall at its start,
        :func:`_compute_start`), floored at :data:`Q_FLOOR`; :data:`Q_START` where the fit
        fails. Computed once per model."""
        if getattr(self, "_queue_factors", None) is None:
            rows = self.rows
            c3 = _compute_start(self).to_numpy()[pd.factorize(rows["config"])[0]]
            rho = rows["rps"].to_numpy() * c3
            wait = c3 * rho / (1.0 - rho)
            out = {}
            for group, mine in rows.groupby("group").indices.items():
                one = rows.iloc[mine]
                drafts = pd.Index(pd.unique(one.loc[one["k"] > 0, "drafter"]))
                theta = st.group_fit(one, drafts, wait[mine], loss="soft_l1")
                out[group] = theta[-1] if theta is not None else Q_START
            self._queue_factors = np.log(np.maximum(pd.Series(out), Q_FLOOR))
        return self._queue_factors

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
        log_q = self.queue_factors().reindex(
            self.rows.drop_duplicates("config")["group"]).to_numpy()
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
        cycles = (cfg["decode_tokens"] / theory.tokens_per_cycle(cfg["alpha0"], k)).to_numpy()
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
    """Per-configuration ``C1``, ``C2``, ``C3``, ``Q`` with partial pooling."""

    variant = "dense-capacity"
    parts = ("C1", "C2", "C3", "Q")
    fits_ceilings = True

    def start(self):
        c3 = _compute_start(self)
        # factorised codes follow first appearance, as self.configs does
        return super().start() | self.pooled_start("C3", c3.to_numpy()) | self.pooled_start(
            "Q", np.full(len(c3), Q_START))
