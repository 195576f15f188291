r"""The scaling design and the priors of the Bayesian models, as configuration.

Each of the six per-stage coefficients of a group is a non-negative linear function of the group's
features times a log-normal group deviation (DESIGN.md §3):

.. math:: c_{qj} = (x_{qj} \cdot \beta_q)\, e^{\tau_q z_{qj}}, \qquad \beta_q \ge 0,
          \quad z_{qj} \sim N(0, 1).

*Which* features each coefficient scales with is configuration (:class:`ScalingConfig`), not code.
Features are standardised by dividing by their mean over the fitted units (groups for the verifier
coefficients, drafters for the drafter ones): they become O(1) and stay non-negative, so every
``beta`` is "the coefficient's share due to that feature at its typical value", in the
coefficient's own physical unit (seconds, or seconds per request), and its prior scale is set in
that unit. A feature that does not vary over the fitted units (one verifier size only, say) cannot
be told apart from the intercept and is dropped from that fit (:func:`standardise` says which).

This module is shared by the model sampler (:mod:`bayeslat.simulate.generative`) and the PyMC
models, so it imports neither PyMC nor anything of a later stage.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bayeslat import theory
from bayeslat.errors import InputError

COEFS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
VERIFIER_COEFS = ("c1p", "c1v", "c2p", "c2v")
DRAFTER_COEFS = ("c1d", "c2d")
# The compute wall of the ``capacity`` variants (bayeslat.theory.compute_coefficient): per
# group, the compute time of a request's prefill ``c3p`` (s per request), of one verified token
# ``c3v`` (s per token) and the time to read one token of KV cache ``c3r`` (s per context
# token and verify cycle); per drafter in its group, the compute time of one drafted token
# ``c3d`` (s per token).
COMPUTE_COEFS = ("c3p", "c3v", "c3d", "c3r")
ALL_COEFS = COEFS + COMPUTE_COEFS
# The coefficients of a drafter in its group (dim ``draft``); the others are a group's.
PER_DRAFT = DRAFTER_COEFS + ("c3d",)
INTERCEPT = "intercept"

# Raw features a coefficient can scale with, computed from a table of units (groups or drafters).
FEATURES = {
    INTERCEPT: lambda u: np.ones(len(u)),
    "verifier_params_b": lambda u: u["verifier_params_b"].to_numpy(float),
    "drafter_params_b": lambda u: u["drafter_params_b"].to_numpy(float),
    "prefill_tokens": lambda u: u["prefill_tokens"].to_numpy(float),
    "decode_tokens": lambda u: u["decode_tokens"].to_numpy(float),
    # time-averaged KV length over a request's decode
    "kv_tokens": lambda u: theory.mean_context(u["prefill_tokens"], u["decode_tokens"]).to_numpy(
        float),
    # arithmetic of a prefill: proportional to model size times prompt length
    "prefill_compute": lambda u: (u["verifier_params_b"] * u["prefill_tokens"]).to_numpy(float),
    # ... past the GPU's roofline knee (theory.prefill_excess): the knee is a parameter of the
    # hierarchical models, one per server (KNEE_FEATURE); without a ``prefill_knee`` column
    # (the knee not yet known) the knee-free value, which sets the feature's scale
    "prefill_excess": lambda u: np.asarray(
        excess_arithmetic(u["verifier_params_b"], u["prefill_tokens"], u["prefill_knee"])
        if "prefill_knee" in u else u["verifier_params_b"] * u["prefill_tokens"], dtype=float),
}
def excess_arithmetic(size, prefill_tokens, knee):
    """The ``prefill_excess`` feature: the verifier's size times the prompt's tokens past the
    knee (:func:`bayeslat.theory.prefill_excess`); NumPy, pandas or PyTensor knees alike."""
    return size * theory.prefill_excess(prefill_tokens, knee)


# The feature with a roofline knee, which the hierarchical models sample per server (prior:
# ``prefill_knee``).
KNEE_FEATURE = "prefill_excess"

# The paper's findings (DESIGN.md §3); every coefficient also has an intercept. A prefill's
# stall c2p grows with the prefill's arithmetic, model size times prompt length, not with
# either alone: as a sum of the two the law missed the example's twelve groups by factors up to
# e^4 (tau_c2p 1.6), and a workload left out was predicted with 116% error, 59% of its points
# inside their 90% bands; with the product, 28% and 79% (benchmarks/README.md). And only
# with the arithmetic past the GPU's roofline knee (prefill_excess, a knee per server): a
# workload left out 6.5-11% off, against 9-17% with the product alone (thirty-first session).
DEFAULT_DESIGN: dict[str, tuple[str, ...]] = {
    "c1p": ("verifier_params_b",),
    "c1v": ("verifier_params_b",),
    "c1d": ("drafter_params_b",),
    "c2p": ("verifier_params_b", "prefill_excess"),
    "c2v": ("verifier_params_b", "kv_tokens"),
    "c2d": ("drafter_params_b",),
    # compute per token grows with the verifier's size; a prefill's with size × prompt length;
    # the KV cache's bytes per token with the size (its layers and heads)
    "c3p": ("prefill_compute",),
    "c3v": ("verifier_params_b",),
    "c3d": ("drafter_params_b",),
    "c3r": ("verifier_params_b",),
}

DEFAULT_PRIORS: dict[str, Any] = {
    # HalfNormal scale of every beta of a coefficient, in the coefficient's unit: s (c1*) or
    # s per request in the system (c2*). Wide: ten times a typical 8B-class value.
    "beta_scale": {"c1p": 0.5, "c1v": 0.1, "c1d": 0.02, "c2p": 0.1, "c2v": 0.005,
                   "c2d": 0.002,
                   # s per request (a 70B prefill of 1k tokens: ~0.3 s), s per verified token
                   # (8B on an H100: ~3e-5) or drafted token, s per context token read (8B
                   # on an H100: ~3e-8)
                   "c3p": 0.5, "c3v": 0.001, "c3d": 0.001, "c3r": 1e-6},
    # Prior mean of the sd of the log group deviations (0.25: typical factor 1.3), a
    # Gamma(2, 2/mean) that keeps away from 0, where few groups would leave a funnel.
    "tau_mean": 0.25,
    # The fewest units (groups, or drafters within groups) from which that sd is sampled;
    # with fewer it is fixed at tau_mean: four workloads of one verifier cannot estimate a
    # spread, and its posterior reached 0 and funnelled (benchmarks/few_groups.py).
    "tau_min_units": 10,
    # Sd of the log deviation of a server (a verifier on its hardware) from the scaling laws,
    # shared by its groups (hierarchical.MIN_SERVERS): a law linear in the verifier's size
    # does not know the bytes a token reads or the bandwidth that reads them, and on the
    # example it misses the 1B and 8B on an H100 and the 70B in fp8 on an H200 by factors of
    # 0.8, 1.55 and 0.74 in every one of their workloads (benchmarks/README.md).
    "server_spread": 0.5,
    # LogNormal prior of each server's roofline knee (tokens, theory.prefill_excess): median,
    # sd of its log. The GPUs' FLOPs per byte put it near 200-300 for bf16 weights on an
    # H100 and 60-100 for fp8 on an H200; the example's fit: 274, 180 and 74.
    "prefill_knee": [150.0, 1.0],
    # LogNormal prior of the roofline variant's compute time per token past the knee, per
    # billion verifier parameters (s): median, sd of its log. 2e9 FLOPs a token over a GPU's
    # dense 16-bit FLOP/s at the 60-70% a serving step reaches: ~3e-6 on an H100, ~1e-5 on an
    # A100, ~1.5e-6 in fp8 on an H200.
    "token_compute": [3e-6, 1.0],
    # LogNormal prior of the roofline variant's knee (tokens a step at which the arithmetic
    # takes as long as reading the weights): the GPUs' FLOPs per byte, ~100-300.
    "roofline_knee": [150.0, 0.7],
    # Sd of the log of the drafter's knee about the verifier's in the roofline variant: the
    # knee is the GPU's FLOPs over its bandwidth times the bytes a weight takes, so the same
    # GPU at the same precision has one knee (x2 for a bf16 drafter beside an fp8 verifier).
    "drafter_knee_spread": 0.35,
    # HalfNormal scale of the model's scatter on log latency (0.1 = 10%).
    "sigma_scale": 0.1,
    # Least spread of the capacity variants' walls around their group's compute time, in log
    # terms: the spread is hypot(tau_C3, floor). A law cannot place a wall closer than a
    # benchmark measures it, and without the floor a sweep whose walls all lie near their law
    # (the engine simulator's Llama-1B: tau_C3 ~ 0.003) funnels (benchmarks/README.md).
    "wall_spread_floor": 0.02,
    # Prior mean (of a Gamma(2, 2/mean)) of the jitter of the compute wall, in log terms (the
    # capacity variants: a point's scatter grows by it times how far its latency moves with
    # the wall; 0.02 = 2%, which moves a point at 90% of the wall that is all queue by 20%;
    # the example's posterior: about 1%).
    "sigma_wall_mean": 0.02,
    # Normal sd of the log offset of synchronous benchmarks from the curve at their rate: a
    # lone request's steps have a batch of one, cheaper than the curve's (llm-d: 14% below
    # the constant rates' intercept; 0.2 leaves that well inside the prior).
    "sync_shift_sd": 0.2,
    # Gamma(alpha, beta) on the Student-t degrees of freedom above 2: nu = 2 + Gamma, so the
    # likelihood keeps a finite variance and cannot turn a systematic misfit into "outliers".
    "nu_gamma": [2.0, 0.1],
    # Prior mean (of a Gamma(5, 5/mean)) of the scatter of the measured ceiling (throughput
    # benchmark) around the model's capacity, on the log scale (0.05 = 5%).
    "ceiling_sigma_mean": 0.05,
    # Least scatter of a measured ceiling around the model's capacity, in log terms: the
    # scatter is hypot(sigma_ceiling, floor). A finite throughput benchmark does not measure
    # its ceiling closer than this, and where the walls' law fits the ceilings closely (the
    # example's, to 0.2%), a scatter free to reach them funnelled with the walls (bulk ESS
    # 286 in 12,000 draws; benchmarks/README.md, thirty-second session).
    "ceiling_sigma_floor": 0.01,
    # HalfNormal scale of the log shortfall of the measured ceilings below the model's
    # capacity, one shared by every configuration; 0: none. A throughput benchmark counts its
    # completions over the whole run, its fill and drain included, so it delivers at most the
    # capacity that constant arrivals can sustain, and less where its batches run in waves
    # (the engine simulator's 70B with 512-token outputs: 4-10% less). The `capacity`
    # variant's default is 0.05 (CapacityModel.default_config); `dense-capacity` keeps 0, its
    # walls free per configuration (one ceiling each, llm-d's one: the shortfall and the wall
    # trade freely, and its fit diverged).
    "ceiling_shortfall_sd": 0.0,
    # Beta(a, b) on the MoE share of the verify coefficients that grows with expert coverage.
    "moe_share_beta": [2.0, 2.0],
    # dense variant: log C1, log C2 per configuration ~ Normal(mu, tau) with
    # mu ~ Normal(log median, log_sd) and tau ~ HalfNormal(1).
    "dense_c1_median": 1.0,
    "dense_c2_median": 0.05,
    # dense-capacity: the same for C3 (s per request: a compute capacity of 50 req/s) and Q
    "dense_c3_median": 0.02,
    "dense_q_median": 0.05,
    # ... with its own sd, of its log odds: the compute curve's share Q of a full batch's
    # compute time (the example's groups: 0.001-0.05; sampled as logit Q, so below 1)
    "dense_q_log_sd": 1.5,
    "dense_log_sd": 2.0,
}


@dataclass(frozen=True)
class ScalingConfig:
    """Which features each coefficient scales with, the priors, and the parameterisation.

    Parameters
    ----------
    design
        Coefficient name -> the features (keys of :data:`FEATURES`) it scales with, besides the
        intercept, which every coefficient has.
    priors
        Prior settings, keys as in :data:`DEFAULT_PRIORS`.
    noncentered
        Coefficients whose group deviations are sampled non-centred (through standard-normal
        ``z``); the others (by default all but ``c1p``) sample the units' log coefficients directly
        (centred), which mixes well when every unit has tens to hundreds of points and the
        ``tau`` prior keeps away from 0. Non-centring suits coefficients that the data barely
        inform (few points per unit).
    """

    design: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_DESIGN))
    priors: Mapping[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_PRIORS))
    noncentered: tuple[str, ...] = ("c1p",)

    def __post_init__(self):
        for coef, feats in self.design.items():
            if coef not in ALL_COEFS:
                raise InputError(f"unknown coefficient {coef!r}; use one of "
                                 f"{', '.join(ALL_COEFS)}", field=f"design.{coef}")
            unknown = [f for f in feats if f not in FEATURES]
            if unknown:
                raise InputError(f"unknown feature(s) {', '.join(unknown)}; use any of "
                                 f"{', '.join(FEATURES)}", field=f"design.{coef}")
            if KNEE_FEATURE in feats and coef in PER_DRAFT:
                raise InputError(f"{KNEE_FEATURE} has a knee per server, a verifier on its "
                                 "hardware; use it for the verifier coefficients "
                                 f"({', '.join(c for c in ALL_COEFS if c not in PER_DRAFT)})",
                                 field=f"design.{coef}")
        unknown = [c for c in self.noncentered if c not in ALL_COEFS]
        if unknown:
            raise InputError(f"unknown coefficient(s) {', '.join(unknown)}", field="noncentered")
        missing = [c for c in ALL_COEFS if c not in self.design]
        if missing:
            raise InputError(f"no design for {', '.join(missing)}", field="design")
        unknown = [k for k in self.priors if k not in DEFAULT_PRIORS]
        if unknown:
            raise InputError(f"unknown prior(s) {', '.join(unknown)}; known: "
                             f"{', '.join(DEFAULT_PRIORS)}", field="priors")

    def features(self, coef: str) -> tuple[str, ...]:
        """The features of ``coef``, intercept first."""
        return (INTERCEPT, *(f for f in self.design[coef] if f != INTERCEPT))

    def prior(self, name: str):
        """One prior setting (the default where the config does not set it)."""
        return self.priors.get(name, DEFAULT_PRIORS[name])

    def to_dict(self) -> dict[str, Any]:
        return {"design": {c: list(self.design[c]) for c in ALL_COEFS},
                "priors": {k: self.prior(k) for k in DEFAULT_PRIORS},
                "noncentered": list(self.noncentered)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None,
                  base: ScalingConfig | None = None) -> ScalingConfig:
        """``base`` (the defaults when None; a variant's :meth:`default_config`) overridden by
        ``data`` (keys ``design``, ``priors``, ``noncentered``)."""
        unknown = [k for k in data if k not in ("design", "priors", "noncentered")]
        if unknown:
            raise InputError(f"unknown key(s) {', '.join(unknown)}; use design, priors, "
                             "noncentered", source, unknown[0])
        base = base or cls()
        design = dict(base.design) | {c: tuple(f) for c, f in data.get("design", {}).items()}
        priors = copy.deepcopy(dict(base.priors))
        for key, value in data.get("priors", {}).items():
            priors[key] = (priors.get(key, {}) | value) if isinstance(value, dict) else value
        try:
            return cls(design=design, priors=priors,
                       noncentered=tuple(data.get("noncentered", base.noncentered)))
        except InputError as exc:
            raise InputError(exc.detail, source, exc.field) from None

    @classmethod
    def from_json(cls, text: str) -> ScalingConfig:
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, path: str | os.PathLike, base: ScalingConfig | None = None) -> ScalingConfig:
        """Read overrides of ``base`` (:meth:`from_dict`) from a TOML (``.toml``) or JSON
        file."""
        path = Path(path)
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except FileNotFoundError:
            raise InputError("no such file; give a TOML or JSON model config", path) from None
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot parse ({exc}); give TOML (.toml) or JSON", path) from None
        return cls.from_dict(data, source=str(path), base=base)


def raw_features(units: pd.DataFrame, names: tuple[str, ...]) -> np.ndarray:
    """The raw (unscaled) features ``names`` of each unit, shape ``(units, features)``."""
    return np.column_stack([FEATURES[n](units) for n in names]).astype(float)


def standardise(units: pd.DataFrame, names: tuple[str, ...],
                scales: Mapping[str, float] | None = None):
    """Features divided by their scale (the mean over ``units`` unless ``scales`` is given).

    Parameters
    ----------
    units
        One row per unit (group or drafter) with the columns the features need.
    names
        Features, intercept first.
    scales
        Feature -> scale from a fitted model, to put new units on the fit's scale. Without it the
        scales are the means over ``units``, and features that do not vary (or are all zero)
        are dropped.

    Returns
    -------
    (X, scales)
        ``X`` of shape ``(units, kept features)`` and the kept features' scales, in order.
    """
    raw = raw_features(units, names)
    if scales is None:
        mean = raw.mean(axis=0)
        spread = raw.max(axis=0) - raw.min(axis=0) if len(raw) else np.zeros(len(names))
        keep = [i for i, n in enumerate(names)
                if n == INTERCEPT or (mean[i] > 0 and spread[i] > 1e-9 * mean[i])]
        scales = {names[i]: float(mean[i]) for i in keep}
    cols = [names.index(n) for n in scales]
    return raw[:, cols] / np.array(list(scales.values())), dict(scales)


def population_coefficient(units: pd.DataFrame, betas_raw: Mapping[str, float]) -> np.ndarray:
    """``x · beta`` for raw (unscaled) betas: the coefficient of each unit before deviations."""
    names = tuple(betas_raw)
    return raw_features(units, names) @ np.array([betas_raw[n] for n in names])


def moe_split(c1p, c1v, c1d, c2p, c2v, c2d, alpha, k, decode_tokens, share1, share2):
    r"""Split a configuration's ``C1``, ``C2`` into uncovered and coverage-dependent parts.

    The verify pass reads the routed experts' weights, so a share ``share1`` of ``c1v`` and
    ``share2`` of ``c2v`` grows with expert coverage :math:`\varphi`; the rest does not:

    .. math:: C_1 = C_{1u} + \varphi\,C_{1s}, \quad C_{1s} = \tfrac{g}{E}\,s_1 c_{1v},
              \qquad C_2 = C_{2u} + \varphi\,C_{2s}, \quad C_{2s} = \tfrac{g}{E}\,s_2 c_{2v}.

    Works on NumPy arrays and PyTensor tensors alike (through :mod:`bayeslat.theory`).

    Returns
    -------
    (C1u, C1s, C2u, C2s)
    """
    c1, c2 = theory.effective_coefficients(c1p, c1v, c1d, c2p, c2v, c2d, alpha, k, decode_tokens)
    c1s, c2s = theory.effective_coefficients(0.0, share1 * c1v, 0.0, 0.0, share2 * c2v, 0.0,
                                             alpha, k, decode_tokens)
    return c1 - c1s, c1s, c2 - c2s, c2s
