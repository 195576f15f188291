"""What the samplers' compiled log density needs beyond PyTensor's numba backend.

PyTensor 2.38 compiles the digamma function (``Psi``, in the gradient of a Student-t's degrees
of freedom through ``gammaln``) as a call to SciPy's Cython ``psi``: a function pointer, which
numba cannot cache, so no graph that contains it is cached either, and the call runs outside
the compiled code. :func:`register` gives ``Psi`` a numba implementation of its own, with a
cache key, and each gradient evaluation stays in compiled code.

A refit of the same data then loads its compiled log density from PyTensor's cache, as long as
every constant array of the graph is contiguous: numba reads any other by its address, and a
compiled function holding an address is never cached (silently: nutpie hides the warning).
The models therefore hand PyTensor C-ordered design matrices and contrasts
(:func:`bayeslat.scaling.standardise`, :func:`bayeslat.models.hierarchical.memory_pair`);
the example's capacity fit compiles in 27 s when cached against 55–74 s afresh
(``tests/test_compiled.py`` checks the constants).

A cached log density must also be the one compiled afresh, to the last bit, or a seed's fit
depends on what the machine compiled before: with PyTensor's default fastmath flags (``reassoc``
among them) the first compile of the example's capacity model and every later, cached one
differed by one ulp in the log density, enough to send NUTS down another trajectory (one met a
divergence that the other did not). :func:`compile_nutpie` compiles without them: the same
bits either way, at the same speed (the rows' kernel, most of a gradient, keeps its own flags,
:mod:`bayeslat.models.likelihood`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math

import numpy as np

# Below this, the recurrence psi(x) = psi(x + 1) - 1/x moves the argument up; from here the
# asymptotic series below is exact to double precision (its next term is < 5e-17 at x = 10).
ASYMPTOTIC_FROM = 10.0


def digamma(x: float) -> float:
    """The digamma function ψ(x) = d log Γ(x)/dx for a float ``x`` (NaN at 0 and the negative
    integers, its poles), to 1e-13 relative for x > 0: the reflection formula below 0, the
    recurrence up to :data:`ASYMPTOTIC_FROM`, then the asymptotic series. Plain Python that
    numba compiles (:func:`register`)."""
    if x <= 0.0 and x == math.floor(x):
        return np.nan
    out = 0.0
    if x < 0.0:  # ψ(x) = ψ(1 - x) - π/tan(πx)
        out = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < ASYMPTOTIC_FROM:
        out -= 1.0 / x
        x += 1.0
    # psi(x) ~ log x - 1/(2x) - sum_n B_2n / (2n x^2n), Horner in f = 1/x^2
    f = 1.0 / (x * x)
    tail = f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f * (
        1 / 132 - f * (691 / 32760 - f / 12))))))
    return out + math.log(x) - 0.5 / x - tail


@functools.cache
def register() -> None:
    """Give PyTensor's ``Psi`` the cacheable numba implementation :func:`digamma` (once per
    process; call before compiling a model)."""
    from pytensor.link.numba.dispatch import basic
    from pytensor.link.numba.dispatch.scalar import scalar_op_cache_key
    from pytensor.scalar.math import Psi

    # the key names this implementation, by the hash of its source: a cached entry is used
    # whenever the key matches, so a changed digamma must never meet an old key
    source = hashlib.sha256(inspect.getsource(digamma).encode()).hexdigest()[:16]

    @basic.register_funcify_and_cache_key(Psi)
    def _funcify_psi(op, node, **kwargs):
        return basic.numba_njit(digamma), f"bayeslat-digamma-{source}-{scalar_op_cache_key(op)}"


def compile_nutpie(pm_model, **kwargs):
    """nutpie's compiled model of the PyMC model ``pm_model`` (``kwargs``: those of
    ``nutpie.compile_pymc_model``), with :func:`register`'s digamma and PyTensor's numba
    fastmath off (the module's docstring)."""
    import nutpie
    import pytensor

    register()
    with pytensor.config.change_flags(numba__fastmath=False):
        return nutpie.compile_pymc_model(pm_model, **kwargs)
