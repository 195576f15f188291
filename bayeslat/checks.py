"""Checks of the values a user asks about (acceptance rates, loads, draft lengths, shares).

Shared by the Python API (:mod:`bayeslat.api`) and the CLI, which checks its options with them
before it imports anything heavy. Each raises :class:`~bayeslat.errors.InputError` naming the
parameter (``field``; the CLI shows it as its option, ``alpha`` as ``--alpha``).
"""

from __future__ import annotations

import numpy as np

from bayeslat.errors import InputError


def _floats(values, field: str) -> np.ndarray:
    try:
        out = np.atleast_1d(np.asarray(values, dtype=float))
    except (TypeError, ValueError):
        raise InputError(f"cannot read {values!r} as numbers", field=field) from None
    if out.ndim != 1 or out.size == 0 or not np.isfinite(out).all():
        raise InputError("give one or more finite numbers", field=field)
    return out


def alphas(values, field: str = "alpha") -> np.ndarray:
    """Acceptance rates, each in [0, 1]."""
    out = _floats(values, field)
    if ((out < 0) | (out > 1)).any():
        raise InputError("acceptance rates must lie in [0, 1]", field=field)
    return out


def loads(values, field: str = "rps") -> np.ndarray:
    """Loads in req/s, none negative."""
    out = _floats(values, field)
    if (out < 0).any():
        raise InputError("loads must not be negative", field=field)
    return out


def draft_lengths(values, field: str = "k") -> np.ndarray:
    """Draft lengths: whole numbers >= 0, as ints."""
    out = _floats(values, field)
    if (out < 0).any() or (out != np.round(out)).any():
        raise InputError("draft lengths are whole numbers >= 0", field=field)
    return out.astype(int)


def share(value: float, field: str, *, below_one: bool = False) -> float:
    """A probability in [0, 1] (or [0, 1) with ``below_one``)."""
    value = float(value)
    if not (0 <= value < 1 if below_one else 0 <= value <= 1):
        raise InputError(f"must be a probability in [0, {'1)' if below_one else '1]'}",
                         field=field)
    return value


def positive(value: float, field: str) -> float:
    """A positive number (a length in tokens, a model size)."""
    value = float(value)
    if not value > 0:
        raise InputError("must be positive", field=field)
    return value
