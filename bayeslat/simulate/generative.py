r"""The model sampler: sweep tables drawn from the Bayesian generative model itself.

For each group (verifier, hardware, prefill ``p``, decode ``g``) and each drafter in it, the six
per-stage coefficients are the scaling laws of :mod:`bayeslat.scaling` times a log-normal group
deviation,

.. math:: c_{qj} = \Bigl(\beta_{q0} + \sum_f \beta_{qf}\,x_{fj}\Bigr)\,e^{\tau_q z_{qj}},
          \qquad z_{qj} \sim N(0, 1),

with raw (unscaled) features ``x`` and betas in physical units. Each configuration (group, drafter,
``alpha``, ``k``; plus the baseline ``k = 0``) is measured, as the paper's protocol does, at nine
evenly spaced constant rates strictly between the synchronous rate ``1/C1`` and the saturation
rate ``1/C2``. The observed mean latency is

.. math:: \log L_i = \log \frac{C_1}{1 - \mathrm{rps}_i C_2} + s_i\,\varepsilon_i, \qquad
          s_i^2 = \sigma^2 + (\mathrm{se}_i / L_i)^2,

with ``eps`` standard normal or Student-t, and ``se`` the standard error of a mean of ``n``
requests whose latency has coefficient of variation ``latency_cv``. With an MoE verifier the
latency solves the expert-coverage fixed point of :func:`bayeslat.theory.moe_latency`, a share of
the verify coefficients growing with coverage (:func:`bayeslat.scaling.moe_split`).

:func:`sample_sweep` returns the table (valid under :mod:`bayeslat.data.schema`) and the
:class:`Truth` that generated it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bayeslat import scaling, theory
from bayeslat.data import schema

# Raw betas (physical units) of an 8B-class verifier on an H100-class GPU with a 0.25B drafter:
# at p = 512, g = 100 they give the worked example of DESIGN.md §2 (C1_D = 1.2 s, C2_D = 0.07).
DEFAULT_BETAS: dict[str, dict[str, float]] = {
    "c1p": {"intercept": 0.01, "verifier_params_b": 0.005},
    "c1v": {"intercept": 0.002, "verifier_params_b": 0.0012},
    "c1d": {"intercept": 0.0005, "drafter_params_b": 0.007},
    # a prefill's arithmetic past the roofline knee (prefill_knee), size times the prompt's
    # tokens past it (s per B·token): an 8B's 512 tokens 5.5 ms
    "c2p": {"intercept": 0.0005, "verifier_params_b": 0.0002, "prefill_excess": 1.9e-6},
    "c2v": {"intercept": 2e-5, "verifier_params_b": 1e-5, "kv_tokens": 1e-6},
    "c2d": {"intercept": 5e-5, "drafter_params_b": 0.0011},
}
DEFAULT_TAU = {"c1p": 0.15, "c1v": 0.1, "c1d": 0.15, "c2p": 0.15, "c2v": 0.1, "c2d": 0.15}


@dataclass(frozen=True)
class SamplerSpec:
    """What to sweep and the true parameters to draw it from.

    Parameters
    ----------
    verifiers
        ``(name, params_b)`` per verifier; with ``moe`` they are MoE models.
    hardware, prefill_tokens, decode_tokens
        Every combination with every verifier is one group.
    drafters
        ``(method, name, params_b)``; every group is swept with each.
    alphas, ks
        SD configurations per drafter (``k = 0``, the baseline, is always added).
    n_rates
        Constant rates per configuration.
    betas
        True raw betas per coefficient, feature -> value (``intercept`` included).
    tau
        True sd of the log group deviation per coefficient.
    sigma, nu
        Model scatter on log latency; Student-t degrees of freedom (None: normal).
    latency_cv, duration_s
        Spread of request latency relative to its mean, and benchmark length (sets ``n``).
    moe
        ``(active, total, share1, share2)`` for an MoE verifier, None for dense.
    prefill_knee
        The roofline knee (tokens) of the laws on ``prefill_excess``
        (:func:`bayeslat.theory.prefill_excess`): the default betas' prefill stall.
    """

    verifiers: tuple[tuple[str, float], ...] = (("llama-8b", 8.0),)
    hardware: tuple[str, ...] = ("H100",)
    prefill_tokens: tuple[float, ...] = (128.0, 512.0, 2048.0)
    decode_tokens: tuple[float, ...] = (64.0, 256.0)
    drafters: tuple[tuple[str, str, float], ...] = (("eagle3", "eagle3-8b", 0.25),)
    alphas: tuple[float, ...] = (0.5, 0.7, 0.9)
    ks: tuple[int, ...] = (1, 3, 5)
    n_rates: int = 9
    betas: dict[str, dict[str, float]] = field(default_factory=lambda: dict(DEFAULT_BETAS))
    tau: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TAU))
    sigma: float = 0.02
    nu: float | None = None
    latency_cv: float = 0.3
    duration_s: float = 120.0
    prefill_knee: float = 150.0
    moe: tuple[int, int, float, float] | None = None


@dataclass
class Truth:
    """What generated a sampled table.

    Attributes
    ----------
    groups
        One row per group: the group columns, features and the true ``c1p, c1v, c2p, c2v``.
    drafts
        One row per (group, drafter): the group and drafter columns and the true ``c1d, c2d``.
    configs
        One row per configuration with its true ``C1`` and ``C2`` (full coverage for MoE).
    spec
        The :class:`SamplerSpec`.
    """

    groups: pd.DataFrame
    drafts: pd.DataFrame
    configs: pd.DataFrame
    spec: SamplerSpec


def _with_deviation(units: pd.DataFrame, coefs, spec: SamplerSpec, rng) -> pd.DataFrame:
    out = units.copy()
    for coef in coefs:
        z = rng.standard_normal(len(units))
        out[coef] = scaling.population_coefficient(units, spec.betas[coef]) * np.exp(
            spec.tau[coef] * z)
    return out


def _units(spec: SamplerSpec, rng):
    moe_active, moe_total = (spec.moe[0], spec.moe[1]) if spec.moe else (0, 0)
    groups = pd.DataFrame(
        [dict(verifier=v, verifier_params_b=vp, hardware=hw, prefill_tokens=p, decode_tokens=g,
              moe_experts_active=moe_active, moe_experts_total=moe_total,
              prefill_knee=spec.prefill_knee)
         for v, vp in spec.verifiers for hw in spec.hardware
         for p in spec.prefill_tokens for g in spec.decode_tokens])
    groups = _with_deviation(groups, scaling.VERIFIER_COEFS, spec, rng)
    drafters = pd.DataFrame(spec.drafters, columns=["method", "drafter", "drafter_params_b"])
    drafts = groups.drop(columns=list(scaling.VERIFIER_COEFS)).merge(drafters, how="cross")
    drafts = _with_deviation(drafts, scaling.DRAFTER_COEFS, spec, rng)
    return groups, drafts


def _configs(spec: SamplerSpec, groups: pd.DataFrame, drafts: pd.DataFrame) -> pd.DataFrame:
    base = groups.assign(method="none", drafter="none", drafter_params_b=0.0, c1d=0.0, c2d=0.0,
                         alpha=np.nan, k=0)
    sd = drafts.merge(groups[list(schema.GROUP_COLUMNS) + list(scaling.VERIFIER_COEFS)],
                      on=list(schema.GROUP_COLUMNS))
    sd = sd.merge(pd.DataFrame([(a, k) for a in spec.alphas for k in spec.ks],
                               columns=["alpha", "k"]), how="cross")
    configs = pd.concat([base, sd], ignore_index=True)
    coefs = [configs[c].to_numpy() for c in scaling.COEFS]
    alpha = configs["alpha"].fillna(0.0).to_numpy()
    k, g = configs["k"].to_numpy(), configs["decode_tokens"].to_numpy()
    configs["C1"], configs["C2"] = theory.effective_coefficients(*coefs, alpha, k, g)
    return configs


def _latency(spec: SamplerSpec, rows: pd.DataFrame) -> np.ndarray:
    if spec.moe is None:
        return theory.latency(rows["rps"].to_numpy(), rows["C1"].to_numpy(), rows["C2"].to_numpy())
    active, total, share1, share2 = spec.moe
    parts = scaling.moe_split(*(rows[c].to_numpy() for c in scaling.COEFS),
                              rows["alpha"].fillna(0.0).to_numpy(), rows["k"].to_numpy(),
                              rows["decode_tokens"].to_numpy(), share1, share2)
    return theory.moe_latency(rows["rps"].to_numpy(), *parts, active, total, rows["k"].to_numpy())


def sample_sweep(spec: SamplerSpec | None = None, seed: int = 0) -> tuple[pd.DataFrame, Truth]:
    """Draw a sweep table from the generative model.

    Parameters
    ----------
    spec
        What to sweep and the true parameters; the default is one 8B verifier, six groups.
    seed
        Seed of the numpy Generator; the same seed gives the same table to the bit.

    Returns
    -------
    (table, truth)
        A table valid under :func:`bayeslat.data.schema.validate` and the :class:`Truth`.
    """
    spec = spec or SamplerSpec()
    rng = np.random.default_rng(seed)
    groups, drafts = _units(spec, rng)
    configs = _configs(spec, groups, drafts)
    # nine evenly spaced rates strictly between the synchronous rate and saturation
    frac = np.arange(1, spec.n_rates + 1) / (spec.n_rates + 1)
    sync, ceiling = 1.0 / configs["C1"].to_numpy(), 1.0 / configs["C2"].to_numpy()
    rates = sync[:, None] + (ceiling - sync)[:, None] * frac[None, :]
    rows = configs.loc[configs.index.repeat(spec.n_rates)].reset_index(drop=True)
    rows["rps"] = np.clip(rates.ravel(), 1e-3, None)
    lat = _latency(spec, rows)
    n = np.maximum(np.round(rows["rps"].to_numpy() * spec.duration_s), 2).astype(int)
    se_rel = spec.latency_cv / np.sqrt(n)
    noise = (rng.standard_normal(len(rows)) if spec.nu is None
             else rng.standard_t(spec.nu, len(rows)))
    observed = lat * np.exp(np.sqrt(spec.sigma**2 + se_rel**2) * noise)
    table = _table(rows, observed, n, spec)
    return schema.validate(table), Truth(groups=groups, drafts=drafts, configs=configs, spec=spec)


def _table(rows: pd.DataFrame, observed: np.ndarray, n: np.ndarray,
           spec: SamplerSpec) -> pd.DataFrame:
    std = spec.latency_cv * observed
    ttft = np.minimum(rows["c1p"].to_numpy() / (1 - rows["rps"] * rows["C2"]), 0.5 * observed)
    sd = rows["k"] > 0
    return pd.DataFrame({
        "verifier": rows["verifier"], "verifier_params_b": rows["verifier_params_b"],
        "drafter": rows["drafter"], "drafter_params_b": rows["drafter_params_b"],
        "method": rows["method"], "hardware": rows["hardware"],
        "moe_experts_active": rows["moe_experts_active"],
        "moe_experts_total": rows["moe_experts_total"],
        "prefill_tokens": rows["prefill_tokens"], "decode_tokens": rows["decode_tokens"],
        "k": rows["k"], "alpha": rows["alpha"],
        "alpha_source": np.where(sd, "forced", "none"), "strategy": "constant",
        "rate_target": rows["rps"], "rps": rows["rps"], "latency_mean": observed,
        "latency_std": std, "latency_p50": observed * 0.95,
        "latency_p95": observed * (1 + 1.645 * spec.latency_cv),
        "latency_p99": observed * (1 + 2.326 * spec.latency_cv),
        "ttft_mean": ttft, "itl_mean": (observed - ttft) / rows["decode_tokens"],
        "n_successful": n, "n_errored": 0, "n_incomplete": 0, "duration_s": n / rows["rps"],
        "saturated": False, "saturation_reason": "",
        "source": [f"model-sampler#{i}" for i in range(len(rows))],
    })


def write_sweep(path, spec: SamplerSpec | None = None, seed: int = 0, overwrite: bool = False):
    """Draw a table with :func:`sample_sweep` and write it with :func:`schema.write_table`."""
    table, truth = sample_sweep(spec, seed)
    schema.write_table(table, path, overwrite=overwrite)
    return truth
