"""A map over forked processes that inherit their inputs: the report's figures and the
decisions of many setups are independent pieces of seconds each, over data (a fitted model, its
predictions) that would cost more to pickle than to share."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_SHARED: Any = None  # a worker's shared inputs (set before the fork, read by _call)


def jobs_for(jobs: int | None, items: int) -> int:
    """Processes to use: ``jobs`` (None: one per core), at most one per item."""
    return max(1, min(jobs or os.cpu_count() or 1, items))


def fork_map(fn: Callable[[Any, Any], Any], items: Sequence, shared: Any = None,
             jobs: int | None = None) -> list:
    """``[fn(item, shared) for item in items]``, in :func:`jobs_for` processes forked from this
    one, in order.

    ``shared`` reaches the workers through the fork, unpickled; each item and result is
    pickled. Where the platform cannot fork, or with one job, the calls run here, one at a
    time. A worker's exception is raised here.
    """
    global _SHARED
    n = jobs_for(jobs, len(items))
    if n < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(item, shared) for item in items]
    _SHARED = (fn, shared)
    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_call, items))
    finally:
        _SHARED = None


def _call(item):
    fn, shared = _SHARED
    return fn(item, shared)
