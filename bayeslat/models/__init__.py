"""The PyMC model variants, one module each, with one interface (build, fit, save, load, predict).

=================  =====================================================================
``dense``          per-configuration ``C1``, ``C2``, partially pooled (the collapse)
``speculative``    six per-stage coefficients per group, ``E(alpha, k)``; no scaling laws
``hierarchical``   the default: the six coefficients tied by linear scaling priors
``moe``            hierarchical plus the expert-coverage split of an MoE verifier
=================  =====================================================================

Modules import PyMC; :func:`get` imports only the one asked for.
"""

from __future__ import annotations

import importlib

from bayeslat.errors import InputError

VARIANTS = {"dense": "DenseModel", "speculative": "SpeculativeModel",
            "hierarchical": "HierarchicalModel", "moe": "MoEModel"}
DEFAULT = "hierarchical"


def get(variant: str):
    """The model class of ``variant``."""
    if variant not in VARIANTS:
        raise InputError(f"unknown model {variant!r}; use one of {', '.join(VARIANTS)}",
                         field="--model")
    module = importlib.import_module(f"bayeslat.models.{variant}")
    return getattr(module, VARIANTS[variant])
