"""Which benchmarks lie outside the model's unsaturated regime, and why.

The latency model holds only while ``rps·C2 < 1``. A benchmark is flagged *saturated* (kept in the
table, excluded from fits by default) for any of these reasons, all of which are visible in what
GuideLLM records:

- ``throughput``: the throughput strategy sends as fast as the server takes; it measures the
  ceiling, not a point on the curve;
- ``rate shortfall``: achieved rate below ``min_rate_ratio`` (95%) of the target: the server could
  not keep up. Poisson arrivals (GuideLLM's ``poisson`` profile) fall short of their target by
  chance: ``n`` arrivals at rate ``λ`` take a ``Gamma(n, λ)`` time, so their rate is below
  ``0.95·λ`` for one benchmark in fifteen at 800 requests, more than one in four at 100. A
  Poisson benchmark is flagged only below the rate its own arrivals reach with probability
  :data:`POISSON_FALSE_ALARM` (:func:`shortfall_ratio`);
- ``failed requests``: errored requests, plus the incomplete ones beyond the ``rps·L`` still in
  flight when a timed run stops, above ``max_failed_fraction`` (5%) of all;
- ``latency growth``: latency keeps growing through the run (a queue that never drains), measured
  from the per-request records by :func:`latency_grows`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special

MIN_RATE_RATIO = 0.95
MAX_FAILED_FRACTION = 0.05
MAX_GROWTH = 0.5
# Probability that a Poisson benchmark of a server that keeps up is flagged for its rate.
POISSON_FALSE_ALARM = 0.001


def shortfall_ratio(strategy, sent, min_rate_ratio: float = MIN_RATE_RATIO) -> np.ndarray:
    """The achieved rate, as a fraction of the target, below which a rated benchmark did not
    keep up: ``min_rate_ratio`` for evenly spaced sends; for ``poisson`` arrivals the smaller of
    that and the ratio ``n / x`` that ``n`` arrivals reach by chance with probability
    :data:`POISSON_FALSE_ALARM` (``x`` the Gamma(n, 1) quantile: their duration in units of
    ``1/λ``), 0.90 at 800 requests, 0.75 at 100.

    Parameters
    ----------
    strategy
        Each benchmark's strategy (``constant``, ``poisson``, ...).
    sent
        Requests each benchmark sent (successful, errored and incomplete).
    min_rate_ratio
        The ratio for evenly spaced sends.
    """
    sent = np.maximum(np.asarray(sent, dtype=float), 1.0)
    chance = sent / special.gammainccinv(sent, POISSON_FALSE_ALARM)
    return np.where(np.asarray(strategy) == "poisson", np.minimum(min_rate_ratio, chance),
                    min_rate_ratio)


def latency_grows(start_times, latencies, max_growth: float = MAX_GROWTH) -> bool:
    """Whether request latency grows without bound within one run.

    Fits ``latency ~ a + b·start`` by least squares and calls the run unbounded when the fitted
    rise over the run, ``b·(last start − first start)``, exceeds ``max_growth`` times the mean
    latency. A stable queue has no trend; a queue past saturation grows linearly in time.

    Parameters
    ----------
    start_times, latencies
        Per-request start time and latency, both in seconds, in any order.
    max_growth
        Largest rise over the run, relative to the mean latency, still taken as stable.
    """
    t = np.asarray(start_times, dtype=float)
    lat = np.asarray(latencies, dtype=float)
    if t.size < 10 or np.ptp(t) <= 0:
        return False  # too few requests to see a trend
    slope = np.polyfit(t - t.mean(), lat, 1)[0]
    return bool(slope * np.ptp(t) > max_growth * lat.mean())


def saturation_reasons(
    df: pd.DataFrame,
    growing: pd.Series | None = None,
    min_rate_ratio: float = MIN_RATE_RATIO,
    max_failed_fraction: float = MAX_FAILED_FRACTION,
) -> pd.Series:
    """The reasons each row is saturated, joined by ``"; "`` (empty string when it is not).

    Parameters
    ----------
    df
        Rows with the tidy-table columns ``strategy``, ``rate_target``, ``rps``,
        ``latency_mean``, ``n_successful``, ``n_errored``, ``n_incomplete``.
    growing
        Optional boolean per row from :func:`latency_grows`.
    """
    total = df["n_successful"] + df["n_errored"] + df["n_incomplete"]
    # a run that stops on time leaves about rps·L requests in flight (Little's law): those are
    # incomplete by construction, not failures (one of eleven at 0.5 req/s is not saturation)
    in_flight = np.ceil((df["rps"] * df["latency_mean"]).fillna(0.0))
    failed = (df["n_errored"] + (df["n_incomplete"] - in_flight).clip(lower=0)) / total.where(
        total > 0, 1)
    checks = {
        "throughput strategy (measures the ceiling)": df["strategy"] == "throughput",
        f"achieved rate below {min_rate_ratio:.0%} of target (for Poisson "
        "arrivals, below what chance allows)": (
            df["rate_target"].notna() & (df["rps"] < shortfall_ratio(
                df["strategy"], total, min_rate_ratio) * df["rate_target"])
        ),
        f"errored or incomplete requests (beyond those in flight at the end) above "
        f"{max_failed_fraction:.0%}": (
            failed > max_failed_fraction
        ),
    }
    if growing is not None:
        checks["latency grows through the run"] = growing.astype(bool)
    reasons = pd.Series("", index=df.index, dtype=object)
    for reason, mask in checks.items():
        mask = mask.fillna(False).to_numpy(dtype=bool)
        reasons[mask] = reasons[mask].map(lambda r, why=reason: f"{r}; {why}" if r else why)
    return reasons


def flag_saturated(df: pd.DataFrame, growing: pd.Series | None = None,
                   **thresholds) -> pd.DataFrame:
    """``df`` with ``saturated`` and ``saturation_reason`` set by :func:`saturation_reasons`."""
    reasons = saturation_reasons(df, growing, **thresholds)
    return df.assign(saturated=reasons.str.len() > 0, saturation_reason=reasons)
