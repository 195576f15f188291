"""Parsers for option values shared by several verbs."""

from __future__ import annotations

import numpy as np

from bayeslat.errors import InputError


def parse_floats(text: str, option: str) -> np.ndarray:
    """Parse ``"0,2.5,5"`` or a range ``"0:10:11"`` (start:stop:count) into floats."""
    try:
        if ":" in text:
            start, stop, count = text.split(":")
            return np.linspace(float(start), float(stop), int(count))
        return np.array([float(v) for v in text.split(",") if v.strip()])
    except ValueError:
        raise InputError(f"cannot read {text!r}; give numbers separated by commas (0,2,4) "
                         "or start:stop:count (0:10:11)", field=option) from None
