"""A map over forked processes that inherit their inputs: the report's figures and the
decisions of many setups are independent pieces of seconds each, over data (a fitted model, its
predictions) that would cost more to pickle than to share."""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

_SHARED: Any = None  # a worker's shared inputs (set before the fork, read by _call)


def jobs_for(jobs: int | None, items: int) -> int:
    """Processes to use: ``jobs`` (None: one per core), at most one per item."""
    return max(1, min(jobs or os.cpu_count() or 1, items))


def fork_map(fn: Callable[[Any, Any], Any], items: Sequence, shared: Any = None,
             jobs: int | None = None, each: Callable[[int], None] | None = None) -> list:
    """``[fn(item, shared) for item in items]``, in :func:`jobs_for` processes forked from this
    one, in order.

    ``shared`` reaches the workers through the fork, unpickled; each item and result is
    pickled. Where the platform cannot fork, or with one job, the calls run here, one at a
    time. A worker's exception is raised here. ``each``, if given, is called here with the
    index of each result as it arrives (in order): a progress report.
    """
    n = jobs_for(jobs, len(items))
    if n < 2 or not _can_fork():
        results = (fn(item, shared) for item in items)
        return _reported(results, each)
    with _forked(n, (fn, shared)) as pool:
        return _reported(pool.map(_call, items), each)


def _reported(results, each) -> list:
    out = []
    for result in results:
        out.append(result)
        if each is not None:
            each(len(out) - 1)
    return out


def beside(there: Callable[[], Any], here: Callable[[], Any],
           jobs: int | None = None) -> tuple[Any, Any]:
    """``(there(), here())``, run at the same time: ``there`` in a process forked from this
    one (its result pickled back; it may fork processes of its own), ``here`` in this one.

    With one job (:func:`jobs_for`), or where the platform cannot fork, one after the other.
    An exception of ``there`` is raised here.
    """
    if jobs_for(jobs, 2) < 2 or not _can_fork():
        return there(), here()
    with _forked(1, (lambda _item, _shared: there(), None)) as pool:
        future = pool.submit(_call, None)  # forks now
        mine = here()
        return future.result(), mine


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


@contextmanager
def _forked(n: int, shared: tuple) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``n`` processes, forked from this one when work is first given to them,
    which inherit ``shared`` (``(fn, shared input)`` for :func:`_call`).

    What is alive when they fork is frozen out of the garbage collector (:func:`gc.freeze`):
    a worker's collections would walk the whole inherited heap (the fitted model, its
    predictions) and copy every page they touch.
    """
    global _SHARED
    _SHARED = shared
    gc.freeze()
    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            yield pool
    finally:
        gc.unfreeze()
        _SHARED = None


def _call(item):
    fn, shared = _SHARED
    return fn(item, shared)
