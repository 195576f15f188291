"""The paper's sweep protocol over simulated benchmarks, and the tidy table it produces.

For each configuration (a deployment at one prefill length, decode length, alpha and k):

1. a *synchronous* benchmark (one request at a time) gives the zero-load latency and its rate;
2. a *throughput* benchmark (every request sent at once) gives the throughput ceiling;
3. nine *constant*-rate benchmarks (or Poisson, if asked) at rates evenly spaced strictly between
   the two.

Each rated benchmark sends warm-up, measured and cool-down requests and measures the middle ones,
as GuideLLM does with its warm-up and cool-down constraints (phase lengths: :class:`Protocol`);
it records what GuideLLM records (mean, median, p95, p99 latency, TTFT, ITL, achieved rate,
counts). If the standard error of the mean latency is above ``target_se`` of the mean, or the
latency is well above what the phases were sized for, the benchmark is run again with more
requests or longer phases. Rows are flagged with
:func:`bayeslat.data.saturation.flag_saturated` (latency growth measured on the per-request
records) and, as the latency model requires, rows where requests were preempted are flagged too.

Seeds: benchmark ``b`` of configuration ``c`` draws from ``SeedSequence([seed, c, b, attempt])``,
so a table is identical to the bit for the same seed whatever the number of worker processes.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayeslat.data.saturation import flag_saturated, latency_grows
from bayeslat.data.schema import COLUMN_NAMES, RATED
from bayeslat.errors import InputError
from bayeslat.simulate.engine import (
    Deployment,
    RunRecord,
    Workload,
    acceptance_by_position,
    simulate_run,
)

N_RATES = 9
PREEMPTED = "requests preempted (KV cache full)"


@dataclass(frozen=True)
class Protocol:
    """How each benchmark of a sweep is run.

    A constant-rate benchmark must run long against the latency it measures, or the measured
    requests see a queue still filling (or, at the end, already draining). Its phases are set in
    units of the latency ``L`` it expects: ``warmup·L`` seconds of sends before the measured ones,
    ``measure·L`` seconds (at least ``requests`` requests) measured, then ``cooldown·L`` seconds
    so that the last measured requests still share the server. ``L`` starts as the latency at the
    previous, lower rate (the synchronous latency for the first) and a benchmark is rerun with
    longer phases when it measures more than 1.25 times that.

    Parameters
    ----------
    requests
        Fewest measured requests per benchmark.
    warmup, measure, cooldown
        Phase lengths in units of the expected latency.
    throughput_batches
        The throughput benchmark sends this many times ``max_num_seqs`` requests at once.
    target_se
        Largest standard error of the mean latency, relative to the mean, before a rerun with
        more requests.
    max_requests
        Most measured requests a rerun may use.
    arrivals
        ``"constant"`` (evenly spaced sends) or ``"poisson"``.
    rates
        Load levels strictly between the synchronous rate and the throughput ceiling.
    """

    requests: int = 100
    warmup: float = 4.0
    measure: float = 12.0
    cooldown: float = 2.0
    throughput_batches: int = 8
    target_se: float = 0.02
    max_requests: int = 20000
    arrivals: str = "constant"
    rates: int = N_RATES

    def __post_init__(self):
        if self.arrivals not in RATED:
            raise InputError(f"arrivals must be 'constant' or 'poisson', got {self.arrivals!r}",
                             field="arrivals")
        if self.requests < 10:
            raise InputError("a benchmark needs at least 10 measured requests", field="requests")


@dataclass(frozen=True)
class Configuration:
    """One latency curve: a deployment at a workload, with ``alpha`` and ``k`` (0: baseline).

    ``decay`` < 1 makes acceptance fall by position (``alpha·decay^j``); the table then records
    the acceptance measured over the sweep (accepted / drafted tokens, as vLLM's metrics do).
    """

    deployment: Deployment
    prefill_tokens: int
    decode_tokens: int
    k: int = 0
    alpha: float = math.nan
    decay: float = 1.0

    @property
    def workload(self) -> Workload:
        acc = acceptance_by_position(self.alpha, self.k, self.decay) if self.k > 0 else ()
        return Workload(self.prefill_tokens, self.decode_tokens, acc)

    def identity(self) -> dict:
        """The table's identity columns for this configuration."""
        dep, sd = self.deployment, self.k > 0
        v, d = dep.verifier, dep.drafter
        return {
            "verifier": v.name, "verifier_params_b": v.params_b,
            "drafter": d.name if sd else "none", "drafter_params_b": d.params_b if sd else 0.0,
            "method": dep.method if sd else "none", "hardware": dep.gpu.name,
            "moe_experts_active": v.experts_active, "moe_experts_total": v.experts_total,
            "prefill_tokens": float(self.prefill_tokens),
            "decode_tokens": float(self.decode_tokens), "k": self.k,
            "alpha": self.alpha if sd else math.nan,
            "alpha_source": ("forced" if self.decay == 1.0 else "measured") if sd else "none",
        }


@dataclass(frozen=True)
class Benchmark:
    """One simulated benchmark: its metrics row (tidy-table columns) and the run behind it."""

    row: dict
    record: RunRecord
    measured: slice

    @property
    def growing(self) -> bool:
        m = self.measured
        return latency_grows(self.record.arrival[m], self.record.latency[m])


@dataclass(frozen=True)
class Requests:
    """The measured requests of one benchmark: send times and latencies, seconds."""

    start: np.ndarray
    latency: np.ndarray


def _seed(seed: int, *key: int) -> int:
    return int(np.random.SeedSequence([seed, *key]).generate_state(1)[0])


def _send_times(strategy: str, rate: float, n: int, seed: int) -> np.ndarray:
    if strategy in ("synchronous", "throughput"):
        return np.zeros(n)
    if strategy == "constant":
        return np.arange(n) / rate
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    return np.cumsum(gaps) - gaps[0]


def metrics(record: RunRecord, measured: slice, decode_tokens: int) -> dict:
    """What GuideLLM reports for the ``measured`` requests of a run (seconds, req/s)."""
    lat = record.latency[measured]
    first = record.first_token[measured]
    fin = np.sort(record.finish[measured])
    arr = record.arrival[measured]
    itl = (fin - first).mean() / (decode_tokens - 1) if decode_tokens > 1 else 0.0
    return {
        "rps": achieved_rate(arr, fin),
        "latency_mean": lat.mean(), "latency_std": lat.std(ddof=1),
        "latency_p50": np.percentile(lat, 50), "latency_p95": np.percentile(lat, 95),
        "latency_p99": np.percentile(lat, 99), "ttft_mean": (first - arr).mean(),
        "itl_mean": itl, "n_successful": lat.size, "n_errored": 0, "n_incomplete": 0,
        "duration_s": fin[-1] - arr.min(),
    }


def achieved_rate(arrival: np.ndarray, finish: np.ndarray) -> float:
    """Completions per second: the arrival rate while the server keeps up, its throughput when
    it does not.

    The inverse slope of a least-squares line through the sorted completion times (less noisy
    than first-to-last, which two early or late requests can move); when the requests were all
    sent at once (the throughput benchmark, whose completions come in waves), completions over
    the whole run.
    """
    if np.ptp(arrival) == 0 or np.ptp(finish) <= 0:
        return arrival.size / (finish.max() - arrival.min())
    ordered = np.sort(finish)
    return 1.0 / np.polyfit(np.arange(ordered.size), ordered, 1)[0]


def mean_concurrency(record: RunRecord, start: float, stop: float) -> float:
    """Time-averaged number of requests in the server over ``[start, stop]`` (Little's ``B``)."""
    inside = np.clip(record.finish, start, stop) - np.clip(record.arrival, start, stop)
    return float(inside.sum() / (stop - start))


def run_benchmark(config: Configuration, strategy: str, rate: float, protocol: Protocol,
                  seed: int, key: tuple[int, int], expected_latency: float = 0.0) -> Benchmark:
    """Run one benchmark, again with longer phases or more requests until it is steady and
    precise (at most four attempts).

    ``expected_latency`` sets the phase lengths of constant and Poisson benchmarks.
    """
    guess, n_se = expected_latency, protocol.requests
    for attempt in range(4):
        n_meas, warm, cool = _phases(config, strategy, rate, protocol, guess, n_se)
        s = _seed(seed, *key, attempt)
        sends = _send_times(strategy, rate, warm + n_meas + cool, s)
        record = simulate_run(config.deployment, config.workload, sends,
                              concurrency=1 if strategy == "synchronous" else None, seed=s)
        measured = slice(warm, warm + n_meas)
        row = metrics(record, measured, config.decode_tokens)
        bench = Benchmark(row, record, measured)
        rel_se = row["latency_std"] / math.sqrt(n_meas) / row["latency_mean"]
        precise = rel_se <= protocol.target_se or n_meas >= protocol.max_requests
        steady = strategy not in RATED or row["latency_mean"] <= 1.25 * guess
        if (precise and steady) or strategy == "throughput" or bench.growing:
            break
        guess = max(guess, row["latency_mean"])
        if not precise:
            n_se = math.ceil(n_meas * 1.2 * (rel_se / protocol.target_se) ** 2)
    row.update(strategy=strategy,
               rate_target=rate if strategy in RATED else math.nan)
    return bench


def _phases(config: Configuration, strategy: str, rate: float, protocol: Protocol,
            latency: float, least: int) -> tuple[int, int, int]:
    """Measured, warm-up and cool-down request counts of one benchmark."""
    least = min(max(least, protocol.requests), protocol.max_requests)
    if strategy == "synchronous":
        return least, 0, 0
    if strategy == "throughput":
        return max(least, protocol.throughput_batches * config.deployment.max_num_seqs), 0, 0
    sends = rate * latency  # requests sent per expected latency
    n_meas = min(max(least, math.ceil(protocol.measure * sends)), protocol.max_requests)
    return n_meas, math.ceil(protocol.warmup * sends), math.ceil(protocol.cooldown * sends)


def sweep_configuration(config: Configuration, protocol: Protocol, seed: int, index: int,
                        source: str = "simulate", keep_requests: bool = False
                        ) -> tuple[pd.DataFrame, dict[str, Requests]]:
    """The paper's sweep of one configuration: synchronous, throughput, then ``rates`` rates.

    Returns
    -------
    rows
        Tidy-table rows (flagged), one per benchmark, in the order run.
    requests
        Per benchmark (keyed by its ``source``), the measured requests' send times and
        latencies; empty unless ``keep_requests``.
    """
    sync = run_benchmark(config, "synchronous", math.nan, protocol, seed, (index, 0))
    ceiling = run_benchmark(config, "throughput", math.nan, protocol, seed, (index, 1))
    lo, hi = sync.row["rps"], ceiling.row["rps"]
    rates = np.linspace(lo, hi, protocol.rates + 2)[1:-1]
    benches = [sync, ceiling]
    for j, r in enumerate(rates):
        expected = max(b.row["latency_mean"] for b in (sync, *benches[2:]))
        benches.append(run_benchmark(config, protocol.arrivals, float(r), protocol, seed,
                                     (index, 2 + j), expected))
    ident = config.identity()
    if config.k > 0 and config.decay != 1.0:
        drafted = sum(b.record.drafted for b in benches)
        ident["alpha"] = sum(b.record.accepted for b in benches) / max(drafted, 1)
    sources = [f"{source}#c{index}b{j}" for j in range(len(benches))]
    rows = pd.DataFrame([{**ident, **b.row, "source": s} for s, b in zip(sources, benches,
                                                                        strict=True)])
    rows = flag_saturated(rows, pd.Series([b.growing for b in benches], index=rows.index))
    preempted = np.array([b.record.preemptions > 0 for b in benches])
    reasons = rows["saturation_reason"]
    rows["saturation_reason"] = reasons.where(
        ~preempted, reasons.map(lambda r: f"{r}; {PREEMPTED}" if r else PREEMPTED))
    rows["saturated"] = rows["saturation_reason"].str.len() > 0
    kept = {s: Requests(b.record.arrival[b.measured], b.record.latency[b.measured])
            for s, b in zip(sources, benches, strict=True)} if keep_requests else {}
    return rows[list(COLUMN_NAMES)], kept


def _sweep_task(args):
    return sweep_configuration(*args)


def sweep(configs: Sequence[Configuration], protocol: Protocol = Protocol(), seed: int = 0,
          source: str = "simulate", workers: int = 1,
          progress: Callable[[int], None] | None = None,
          requests: dict[str, Requests] | None = None) -> pd.DataFrame:
    """Sweep every configuration and return one tidy table (validated by ``write_table``).

    Parameters
    ----------
    configs
        The configurations; their position is part of each benchmark's seed.
    protocol, seed
        How to run each benchmark, and the root seed.
    source
        Prefix of the ``source`` column (``<source>#c<config>b<benchmark>``).
    workers
        Processes to use; the table does not depend on it.
    progress
        Called with 1 after each configuration (e.g. a rich progress bar's advance).
    requests
        If given, filled with each benchmark's measured requests, keyed by ``source``
        (for GuideLLM-style reports).
    """
    keep = requests is not None
    tasks = [(c, protocol, seed, i, source, keep) for i, c in enumerate(configs)]
    parts = []
    for rows, kept in _map(_sweep_task, tasks, workers):
        parts.append(rows)
        if keep:
            requests.update(kept)
        if progress is not None:
            progress(1)
    return pd.concat(parts, ignore_index=True)


def _map(fn, tasks, workers: int) -> Iterator:
    if workers <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(fn, tasks, chunksize=1)

