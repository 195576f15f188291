"""Option parsers and terminal helpers shared by several verbs."""

from __future__ import annotations

import logging
import sys

import numpy as np
import typer
from rich.console import Console

from bayeslat import checks
from bayeslat.errors import InputError


def parse_floats(text: str, option: str) -> np.ndarray:
    """Parse ``"0,2.5,5"`` or a rising range ``"0:10:11"`` (start:stop:count) into floats."""
    try:
        if ":" in text:
            start, stop, count = text.split(":")
            start, stop, count = float(start), float(stop), int(count)
            if stop < start or count < 1:
                raise ValueError
            return np.linspace(start, stop, count)
        return np.array([float(v) for v in text.split(",") if v.strip()])
    except ValueError:
        raise InputError(f"cannot read {text!r}; give numbers separated by commas (0,2,4) "
                         "or start:stop:count with stop >= start (0:10:11)",
                         field=option) from None


def check_alphas(text: str, option: str = "alpha") -> np.ndarray:
    """Acceptance rates from ``text`` (:func:`parse_floats`), each in [0, 1]."""
    return checks.alphas(parse_floats(text, option), option)


def check_loads(text: str | None, option: str = "rps") -> np.ndarray | None:
    """Loads in req/s from ``text`` (:func:`parse_floats`), none negative; None for None."""
    return None if not text else checks.loads(parse_floats(text, option), option)




def number(value: float, fmt: str = "{:.2f}") -> str:
    """A figure for a table: ``fmt`` of it, or "–" for NaN (not measured or undefined)."""
    return "–" if value != value else fmt.format(value)


def make_console() -> Console:
    """A console for tables: the terminal's width, or 120 columns when piped to a file."""
    return Console() if sys.stdout.isatty() else Console(width=120)


def quiet_pymc() -> None:
    """Silence PyMC's INFO lines ("Sampling: [...]"); the verbs print their own progress.

    PyMC, when imported, sets its logger to INFO with a handler of its own unless the root
    logger has a handler: give the root one (warnings and errors, the message alone) so that
    nothing needs importing here (a verb that never needs PyMC does not pay for it).
    """
    if "pymc" in sys.modules:
        logging.getLogger("pymc").setLevel(logging.WARNING)
    elif not logging.root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.setLevel(logging.WARNING)
        logging.root.addHandler(handler)


# The sampler's options, shared by the verbs that fit (fit, validate). TUNE is
# models.sampling.TUNE, written out so that `bayeslat --help` need not import the fitting stack.
DRAWS = typer.Option(None, "--draws", min=1, show_default=False,
                     help="Draws per chain after tuning (default: until the convergence bar "
                     "holds, checked as sampling goes, at most 6000; 1000 with --sampler pymc "
                     "or numpyro).")
TUNE = typer.Option(500, "--tune", min=0, help="Tuning steps per chain.")
CHAINS = typer.Option(None, "--chains", min=1, show_default=False,
                      help="Chains (default: one per core, 2 to 8).")
SAMPLER = typer.Option("nutpie", "--sampler", help="nutpie, pymc or numpyro.")
CONFIG = typer.Option(None, "--config", help="TOML or JSON file overriding scaling and priors.")
EXACT = typer.Option(False, "--exact", help="Sample the likelihood of every row, not the curve "
                     "summaries (which the paper's variants use where the scatter is near "
                     "Gaussian).")
