"""The forked map and the forked side task that the report and decide use."""

import os

import pytest

from bayeslat import parallel
from bayeslat.errors import InputError


def test_fork_map_keeps_the_order_and_shares_its_input_unpickled():
    shared = {"offset": 10, "unpicklable": lambda: None}  # a lambda cannot be pickled
    out = parallel.fork_map(lambda item, s: (item + s["offset"], os.getpid()), range(6),
                            shared, jobs=2)
    assert [value for value, _ in out] == list(range(10, 16))
    assert os.getpid() not in {pid for _, pid in out}


@pytest.mark.parametrize("jobs", [1, 2])
def test_fork_map_reports_each_result_in_order_as_it_arrives(jobs):
    seen = []
    out = parallel.fork_map(lambda item, _: item * 3, range(5), jobs=jobs,
                            each=lambda i: seen.append((i, len(seen))))
    assert out == [0, 3, 6, 9, 12] and seen == [(i, i) for i in range(5)]


def test_fork_map_with_one_job_runs_here():
    out = parallel.fork_map(lambda item, _: os.getpid(), range(3), jobs=1)
    assert set(out) == {os.getpid()}


def test_beside_runs_there_in_a_fork_and_here_in_this_process():
    state = {"seen": "before the fork"}
    there, here = parallel.beside(lambda: (os.getpid(), state["seen"]),
                                  lambda: os.getpid(), jobs=2)
    assert here == os.getpid() and there[0] != os.getpid()
    assert there[1] == "before the fork"
    # the forked side may fork processes of its own (the report's decisions do)
    nested, _ = parallel.beside(lambda: parallel.fork_map(lambda i, _: i * 2, range(4), jobs=2),
                                lambda: None, jobs=2)
    assert nested == [0, 2, 4, 6]


def test_beside_raises_the_forked_side_s_error_here():
    def fails():
        raise InputError("no baseline rows", field="k")

    with pytest.raises(InputError, match="no baseline rows"):
        parallel.beside(fails, lambda: None, jobs=2)


def test_beside_with_one_job_runs_both_here_in_order():
    calls = []
    there, here = parallel.beside(lambda: calls.append("there") or 1,
                                  lambda: calls.append("here") or 2, jobs=1)
    assert (there, here, calls) == (1, 2, ["there", "here"])
