"""Exceptions of bayeslat.

Every error a user can cause (a bad file, a bad option, a fit that did not converge) is raised as a
subclass of :class:`BayeslatError`. The CLI prints its message on one line and exits with status 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from os import PathLike

# The "path" of a value the user gave as an option rather than in a file.
COMMAND_LINE = "command line"


class BayeslatError(Exception):
    """Base class of every error bayeslat reports to its user.

    Parameters
    ----------
    message
        What was wrong and what to do about it, in one sentence or two.
    """

    exit_code = 2


class InputError(BayeslatError):
    """A file or option the user gave cannot be used.

    Parameters
    ----------
    message
        What is wrong with the value and what to do.
    path
        The file it came from, if any.
    field
        The field (key path, column or option) that is wrong, if any.
    """

    def __init__(self, message: str, path: str | PathLike | None = None, field: str | None = None):
        self.path = None if path is None else str(path)
        self.field = field
        self.detail = message
        where = ": ".join(p for p in (self.path, field and f"field '{field}'") if p)
        super().__init__(f"{where}: {message}" if where else message)


class SchemaError(InputError):
    """A sweep table does not satisfy the tidy-table contract (see :mod:`bayeslat.data.schema`)."""


class FitError(BayeslatError):
    """A fit could not be started, did not converge under ``--strict``, or cannot be loaded."""


class NumericalError(BayeslatError):
    """An iterative computation (a fixed point, a start point search) did not converge."""
