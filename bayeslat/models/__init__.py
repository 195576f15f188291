"""The PyMC model variants, one module each, with one interface (build, fit, save, load, predict).

=================  =====================================================================
``dense``          per-configuration ``C1``, ``C2``, partially pooled (the collapse)
``speculative``    six per-stage coefficients per group, ``E(alpha, k)``; no scaling laws
``hierarchical``   the six coefficients tied by linear scaling priors (the paper's model)
``moe``            hierarchical plus the expert-coverage split of an MoE verifier
``capacity``       hierarchical plus the compute wall near capacity, with the measured
                   ceilings as data
``dense-capacity`` dense plus the compute wall (per configuration; baseline-only sweeps)
=================  =====================================================================

Modules import PyMC; :func:`get` imports only the one asked for.
"""

from __future__ import annotations

import importlib

from bayeslat.errors import InputError

VARIANTS = {"dense": "DenseModel", "speculative": "SpeculativeModel",
            "hierarchical": "HierarchicalModel", "moe": "MoEModel",
            "capacity": "CapacityModel", "dense-capacity": "DenseCapacityModel"}
# Module of each variant (several variants can share one).
MODULES = {"dense-capacity": "capacity"}
DEFAULT = "hierarchical"


def check(variant: str) -> str:
    """``variant`` if it names a model variant (without importing it), else an error."""
    if variant not in VARIANTS:
        raise InputError(f"unknown model {variant!r}; use one of {', '.join(VARIANTS)}",
                         field="model")
    return variant


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
