"""Saturation flags and their reasons."""

import numpy as np
import pandas as pd
import pytest

from bayeslat.data.saturation import flag_saturated, latency_grows, shortfall_ratio


def rows():
    return pd.DataFrame(dict(
        strategy=["synchronous", "constant", "constant", "constant", "throughput"],
        rate_target=[np.nan, 2.0, 4.0, 4.0, np.nan],
        rps=[0.5, 1.99, 3.5, 3.9, 6.0],
        latency_mean=[1.0, 1.1, 1.2, 1.3, 2.0],
        n_successful=[100, 100, 100, 80, 100],
        n_errored=[0, 0, 0, 10, 0],
        n_incomplete=[0, 1, 0, 10, 0],
    ))


def test_reasons():
    out = flag_saturated(rows())
    assert out["saturated"].tolist() == [False, False, True, True, True]
    assert "below 95% of target" in out.loc[2, "saturation_reason"]
    assert "errored or incomplete" in out.loc[3, "saturation_reason"]
    assert "throughput" in out.loc[4, "saturation_reason"]
    assert out.loc[1, "saturation_reason"] == ""


def test_requests_in_flight_when_the_run_stops_are_not_failures():
    """A timed run ends with about rps·L requests in flight, incomplete by construction: one
    of eleven at 0.5 req/s is not saturation; more than that, beyond 5%, is."""
    low = pd.DataFrame(dict(strategy=["constant"] * 3, rate_target=[0.5] * 3, rps=[0.5] * 3,
                            latency_mean=[1.8] * 3, n_successful=[10] * 3, n_errored=[0, 1, 0],
                            n_incomplete=[1, 0, 3]))
    out = flag_saturated(low)
    assert out["saturated"].tolist() == [False, True, True]
    assert "beyond those in flight" in out.loc[2, "saturation_reason"]


def test_poisson_arrivals_short_of_their_target_by_chance_are_not_saturation():
    """Poisson arrivals at rate λ reach a rate below 0.95·λ by chance (one benchmark in
    fifteen at 800 requests, more than one in four at 100); a Poisson benchmark is flagged only
    below what its own count reaches with probability 0.1%, evenly spaced sends at 95%."""
    rng = np.random.default_rng(1)
    n = np.array([100, 800, 3000])
    ratio = shortfall_ratio(["poisson"] * 3, n)
    assert ratio == pytest.approx([0.7476, 0.8986, 0.9457], abs=1e-4)
    assert shortfall_ratio(["constant"] * 3, n).tolist() == [0.95] * 3
    # seeded draws of the achieved rate n / (duration of n arrivals at rate 1)
    achieved = n[:, None] / rng.gamma(n[:, None], 1.0, size=(3, 20_000))
    assert (achieved < 0.95).mean(axis=1)[:2] == pytest.approx([0.28, 0.068], abs=0.01)
    assert (achieved < ratio[:, None]).mean(axis=1) == pytest.approx([0.001] * 3, abs=6e-4)
    table = pd.DataFrame(dict(strategy=["poisson", "constant", "poisson"],
                              rate_target=[1.0] * 3, rps=[0.92, 0.92, 0.85],
                              latency_mean=[1.0] * 3, n_successful=[800] * 3,
                              n_errored=[0] * 3, n_incomplete=[0] * 3))
    assert flag_saturated(table)["saturated"].tolist() == [False, True, True]


def test_growth_joins_other_reasons():
    growing = pd.Series([False, True, True, False, False])
    out = flag_saturated(rows(), growing)
    assert out.loc[1, "saturation_reason"] == "latency grows through the run"
    assert out.loc[2, "saturation_reason"].count(";") == 1


def test_latency_grows():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 60, 300))
    stable = 2.0 + rng.normal(0, 0.3, t.size)
    assert not latency_grows(t, stable)
    assert latency_grows(t, stable + 0.1 * t)  # rises 6 s over a 2 s mean
    assert not latency_grows(t[:5], stable[:5] + t[:5])  # too few requests to judge
