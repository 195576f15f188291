"""Which benchmarks lie outside the model's unsaturated regime, and why.

The latency model holds only while ``rps·C2 < 1``. A benchmark is flagged *saturated* (kept in the
table, excluded from fits by default) for any of these reasons, all of which are visible in what
GuideLLM records:

- ``throughput``: the throughput strategy sends as fast as the server takes; it measures the
  ceiling, not a point on the curve;
- ``rate shortfall``: achieved rate below ``min_rate_ratio`` (95%) of the target: the server could
  not keep up;
- ``failed requests``: errored requests, plus the incomplete ones beyond the ``rps·L`` still in
  flight when a timed run stops, above ``max_failed_fraction`` (5%) of all;
- ``latency growth``: latency keeps growing through the run (a queue that never drains), measured
  from the per-request records by :func:`latency_grows`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MIN_RATE_RATIO = 0.95
MAX_FAILED_FRACTION = 0.05
MAX_GROWTH = 0.5


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
        f"achieved rate below {min_rate_ratio:.0%} of target": (
            df["rate_target"].notna() & (df["rps"] < min_rate_ratio * df["rate_target"])
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
