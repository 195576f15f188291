"""The PyMC model variants, one module each, with one interface (build, fit, save, load, predict).

=================  =====================================================================
``dense``          per-configuration ``C1``, ``C2``, partially pooled (the collapse)
``speculative``    six per-stage coefficients per group, ``E(alpha, k)``; no scaling laws
``hierarchical``   the six coefficients tied by linear scaling priors (the paper's model)
``moe``            hierarchical plus the expert-coverage split of an MoE verifier
``capacity``       hierarchical plus the compute wall near capacity, with the measured
                   ceilings as data
``dense-capacity`` dense plus the compute wall (per configuration; baseline-only sweeps)
``roofline``       hierarchical plus each server's roofline (a compute time per token past
                   a knee) in the mean-field form near capacity; the ceilings as data
=================  =====================================================================

The default, ``auto``, chooses one for the sweep (:func:`choose`): the compute wall's
variants where the sweep measured its ceilings. Modules import PyMC; :func:`get` imports only
the one asked for.
"""

from __future__ import annotations

import importlib

from bayeslat.errors import InputError

VARIANTS = {"dense": "DenseModel", "speculative": "SpeculativeModel",
            "hierarchical": "HierarchicalModel", "moe": "MoEModel",
            "capacity": "CapacityModel", "dense-capacity": "DenseCapacityModel",
            "roofline": "RooflineModel"}
# Module of each variant (several variants can share one).
MODULES = {"dense-capacity": "capacity"}
# The default: a variant chosen for the sweep (:func:`choose`).
AUTO = "auto"
DEFAULT = AUTO


def check(variant: str) -> str:
    """``variant`` if it names a model variant or :data:`AUTO` (without importing it), else
    an error."""
    if variant != AUTO and variant not in VARIANTS:
        raise InputError(f"unknown model {variant!r}; use one of {AUTO}, "
                         f"{', '.join(VARIANTS)}", field="model")
    return variant


def choose(table) -> tuple[str, str]:
    """The variant :data:`AUTO` fits to the sweep table ``table``, and why, in words.

    With the sweep's measured ceilings (GuideLLM's throughput benchmark), the variant with the
    compute wall: ``capacity`` for a sweep with SD rows, ``dense-capacity`` for a baseline-only
    one. Near capacity the paper's curve bends too little, and on held-out data (the engine
    simulator, each configuration's top rate left out of the shipped example, the real llm-d
    sweep) the wall's variants predict the top loads and choose k where the paper's cannot
    (benchmarks/README.md, ``capacity.py``). Without a ceiling nothing places the wall (its
    fit does not converge on such data), so the paper's ``hierarchical`` or ``dense``. The
    coefficient variants need SD rows to tell the verify and draft costs apart."""
    sd = bool((table["k"] > 0).any())
    if bool((table["strategy"] == "throughput").any()):
        return ("capacity" if sd else "dense-capacity",
                "the sweep measured its ceilings with throughput benchmarks, so the model with "
                "the compute wall")
    return ("hierarchical" if sd else "dense",
            "no throughput benchmark in the sweep, so nothing places the compute wall: the "
            "paper's model")


def resolve(variant: str, table) -> tuple[str, str | None]:
    """``variant`` itself (and no reason), or for :data:`AUTO` :func:`choose`'s."""
    return choose(table) if check(variant) == AUTO else (variant, None)


def get(variant: str):
    """The model class of ``variant``."""
    module = importlib.import_module(f"bayeslat.models.{MODULES.get(check(variant), variant)}")
    return getattr(module, VARIANTS[variant])


def config_of(variant: str, config=None):
    """``variant``'s scaling configuration: ``config`` itself when one is given, read from a
    TOML or JSON file as overrides of the variant's own defaults when a path is (a file that
    leaves ``noncentered`` out keeps the variant's), None for the defaults."""
    from bayeslat.scaling import ScalingConfig

    if config is None or isinstance(config, ScalingConfig):
        return config
    return ScalingConfig.load(config, base=get(variant).default_config())
