"""A discrete-event simulation of a continuous-batching LLM server with speculative decoding.

The engine knows nothing of the latency formula it is used to test: it steps a vLLM-like scheduler
through time and costs each step with the roofline of :mod:`bayeslat.simulate.hardware`.

One iteration (a scheduler step)
--------------------------------
1. Requests whose arrival time has come join the waiting queue (FIFO; preempted requests go back
   to its front).
2. The scheduler keeps every running request. If the KV cache cannot hold their next step, it
   preempts the most recently admitted running request (recompute: its cache is freed and it will
   prefill its prompt plus what it had generated) until the rest fit.
3. Every decoding request is scheduled for one verify of ``k + 1`` tokens (one token when
   ``k = 0``); what is left of the token budget (``max_batched_tokens``) goes to chunked prefill:
   first the running requests whose prompt is not done, then waiting requests, while there are
   free sequence slots (``max_num_seqs``) and KV blocks, and no request was preempted this step.
4. The step costs ``k`` drafter passes over the decoding requests (the first one also over the
   prefill chunk) plus one verifier pass over all tokens. Each pass runs its weight GEMMs and
   then its attention, each at its own roofline (:mod:`bayeslat.simulate.hardware`):
   ``t0 + max(weight bytes / bandwidth, GEMM FLOPs / compute rate)
   + max(KV bytes / bandwidth, attention FLOPs / compute rate)``. A decoding request verifying
   ``k + 1`` tokens on ``c`` cached ones adds ``(k + 1)·c + (k + 1)(k + 2)/2`` (query, context)
   pairs to the attention FLOPs, a prefill chunk of ``x`` tokens after ``d`` done adds
   ``x·d + x(x + 1)/2``. An MoE verifier reads its dense part plus the experts hit when each of
   its ``T`` tokens routes to ``m`` of ``M`` experts (the number of distinct experts hit is
   drawn, per step, as Binomial(M, 1 − (1 − m/M)^T)).
5. Each decoding request accepts drafted tokens left to right, token ``j`` with probability
   ``acceptance[j]`` until the first rejection, and gains the accepted tokens plus one. A request
   whose prompt finishes gains its first token (its TTFT); a request that reaches its decode
   length leaves and frees its cache.

The hot loop is compiled with numba; one run of a few hundred requests takes milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numba
import numpy as np

from bayeslat.errors import InputError
from bayeslat.simulate.hardware import GPU, Model, kv_capacity_tokens

# Layout of the cost vector handed to the compiled loop (numba takes arrays, not objects).
_V_T0, _V_W, _V_WEXP, _V_M, _V_MTOT, _V_KV, _V_FLOP, _V_ATTN = range(8)
_D_T0, _D_W, _D_KV, _D_FLOP, _D_ATTN = range(8, 13)
_BW, _F = 13, 14
_N_COST = 15


@dataclass(frozen=True)
class Deployment:
    """A verifier (and optional drafter) served on one GPU by a vLLM-like scheduler.

    Parameters
    ----------
    verifier, drafter
        The models; ``drafter`` is None for a deployment that only runs the baseline.
    gpu
        The accelerator.
    method
        The SD method as the table names it (``eagle3``, ``draft_model``); ``none`` without one.
    max_num_seqs
        Most requests running at once.
    max_batched_tokens
        Token budget of one step (decode verifies plus prefill chunks).
    memory_utilization
        Share of GPU memory for weights and KV cache.
    """

    verifier: Model
    gpu: GPU
    drafter: Model | None = None
    method: str = "none"
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    memory_utilization: float = 0.9

    @property
    def kv_capacity(self) -> int:
        """KV-cache capacity in tokens (each token held by the verifier and the drafter)."""
        models = (self.verifier,) if self.drafter is None else (self.verifier, self.drafter)
        return kv_capacity_tokens(self.gpu, models, self.memory_utilization)

    def cost_vector(self) -> np.ndarray:
        """The roofline constants in the layout the compiled loop reads."""
        v, d = self.verifier, self.drafter
        c = np.zeros(_N_COST)
        c[_V_T0] = v.overhead_s
        c[_V_WEXP] = v.expert_bytes
        c[_V_W] = v.weight_bytes - v.expert_bytes
        c[_V_M], c[_V_MTOT] = v.experts_active, v.experts_total
        c[_V_KV], c[_V_FLOP] = v.kv_bytes_per_token, v.flops_per_token
        c[_V_ATTN] = v.attention_flops_per_pair
        if d is not None:
            c[_D_T0], c[_D_W] = d.overhead_s, d.weight_bytes
            c[_D_KV], c[_D_FLOP] = d.kv_bytes_per_token, d.flops_per_token
            c[_D_ATTN] = d.attention_flops_per_pair
        c[_BW], c[_F] = self.gpu.bytes_per_s, self.gpu.flops
        return c


@dataclass(frozen=True)
class Workload:
    """What every request of a run asks for, and how its drafts are accepted.

    Parameters
    ----------
    prefill_tokens, decode_tokens
        Prompt and output length of every request (GuideLLM's synthetic data: fixed lengths).
    acceptance
        Probability that drafted token ``j`` (0-based) is accepted given that the ones before it
        were; its length is the draft length ``k`` (empty: no SD).
    """

    prefill_tokens: int
    decode_tokens: int
    acceptance: tuple[float, ...] = field(default=())

    @property
    def k(self) -> int:
        return len(self.acceptance)


def acceptance_by_position(alpha: float, k: int, decay: float = 1.0) -> tuple[float, ...]:
    """Per-position acceptance ``alpha·decay^j`` for ``j = 0..k-1``; ``decay = 1`` is i.i.d."""
    return tuple(float(alpha * decay**j) for j in range(k))


@dataclass(frozen=True)
class RunRecord:
    """What one simulated benchmark run observed, per request and in total.

    Times are seconds from the start of the run. ``arrival`` is when the request was sent,
    ``first_token`` when its first output token was produced, ``finish`` when its last was.
    """

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    accepted: int
    drafted: int
    preemptions: int
    iterations: int

    @property
    def latency(self) -> np.ndarray:
        return self.finish - self.arrival


def check(deployment: Deployment, workload: Workload) -> None:
    """Raise :class:`InputError` when the deployment cannot serve the workload at all."""
    if workload.k > 0 and deployment.drafter is None:
        raise InputError("a draft length k > 0 needs a drafter", field="drafter")
    if workload.prefill_tokens < 1 or workload.decode_tokens < 1:
        raise InputError("prefill and decode lengths must be at least one token",
                         field="prefill_tokens")
    if not all(0.0 <= a <= 1.0 for a in workload.acceptance):
        raise InputError("acceptance probabilities must lie in [0, 1]", field="alpha")
    need = workload.prefill_tokens + workload.decode_tokens + workload.k + 1
    if need > deployment.kv_capacity:
        raise InputError(f"one request needs {need} KV tokens but the cache holds "
                         f"{deployment.kv_capacity}", field="prefill_tokens")


def simulate_run(deployment: Deployment, workload: Workload, arrivals: np.ndarray,
                 concurrency: int | None = None, seed: int = 0) -> RunRecord:
    """Serve requests sent at ``arrivals`` and record when each one finished.

    Parameters
    ----------
    deployment, workload
        The server and what each request asks of it.
    arrivals
        Scheduled send times, seconds, non-decreasing.
    concurrency
        Most requests in flight at once (closed loop: a request is sent at its scheduled time or
        when a slot frees, whichever is later); None for an open loop. GuideLLM's synchronous
        strategy is ``concurrency = 1``.
    seed
        Seed of the acceptance and expert-routing draws; the same seed gives the same record.
    """
    check(deployment, workload)
    arrivals = np.ascontiguousarray(arrivals, dtype=np.float64)
    n = arrivals.size
    if n == 0 or np.any(np.diff(arrivals) < 0):
        raise InputError("arrivals must be a non-empty, non-decreasing array", field="arrivals")
    out = _run(arrivals, n if concurrency is None else int(concurrency), concurrency is not None,
               workload.prefill_tokens, workload.decode_tokens,
               np.asarray(workload.acceptance, dtype=np.float64), deployment.cost_vector(),
               deployment.max_batched_tokens, deployment.max_num_seqs, deployment.kv_capacity,
               np.random.default_rng(seed))
    arr, first, fin, stats = out
    return RunRecord(arr, first, fin, int(stats[0]), int(stats[1]), int(stats[2]),
                     int(stats[3]))


def lone_request_latency(deployment: Deployment, workload: Workload) -> float:
    """Latency of a request alone in the server: the engine's own per-request service time.

    The prompt's chunked prefill, then the decode cycles, each one verify over ``k + 1`` tokens
    and ``k`` drafter passes, costed exactly as the compiled loop costs them. With ``k = 0`` or
    acceptance 1 the result is exact (``ceil((g − 1)/(k + 1))`` cycles); otherwise it is the
    expectation to first order, ``(g − 1)/E`` cycles with the context growing by ``E`` tokens
    per cycle. MoE verifiers use the expected expert coverage.
    """
    check(deployment, workload)
    c, k = deployment.cost_vector(), workload.k
    p, g, budget = workload.prefill_tokens, workload.decode_tokens, deployment.max_batched_tokens
    total, done = 0.0, 0
    while done < p:
        chunk = min(budget, p - done)
        total += _step_time(c, k, 0, 0.0, chunk, done + chunk, _prefill_pairs(chunk, done),
                            _expected_touched(c, chunk))
        done += chunk
    if k == 0 or all(a == 1.0 for a in workload.acceptance):
        cycles, per_cycle = math.ceil((g - 1) / (k + 1)), k + 1.0
    else:
        per_cycle = 1.0 + float(np.cumprod(workload.acceptance).sum())
        cycles = (g - 1) / per_cycle
    touched = _expected_touched(c, k + 1)
    # Context is p, p + E, p + 2E, ... per cycle; a fractional last cycle counts pro rata.
    for j in range(math.ceil(cycles)):
        share = min(1.0, cycles - j)
        total += share * _step_time(c, k, 1, p + j * per_cycle, 0, 0.0, 0.0, touched)
    return total


def _expected_touched(c: np.ndarray, tokens: int) -> float:
    if c[_V_MTOT] == 0:
        return 0.0
    return c[_V_MTOT] * (1.0 - (1.0 - c[_V_M] / c[_V_MTOT]) ** tokens)


@numba.njit(cache=True)
def _prefill_pairs(chunk, done):
    """(query, context) pairs of a causal prefill chunk of ``chunk`` tokens after ``done``."""
    return chunk * done + chunk * (chunk + 1) // 2


@numba.njit(cache=True)
def _pass_time(t0, weight_bytes, flops_per_token, tokens, kv_bytes, ctx_tokens,
               flops_per_pair, pairs, c):
    """Time of one forward pass: weight GEMMs, then attention, each at its own roofline."""
    gemm = max(weight_bytes / c[_BW], flops_per_token * tokens / c[_F])
    attention = max(kv_bytes * ctx_tokens / c[_BW], flops_per_pair * pairs / c[_F])
    return t0 + gemm + attention


@numba.njit(cache=True)
def _step_time(c, k, n_dec, dec_ctx, pf_tokens, pf_ctx, pf_pairs, touched):
    """Time of one step: ``k`` drafter passes, then one verifier pass.

    ``n_dec`` decoding requests with ``dec_ctx`` context tokens in all; ``pf_tokens`` prefill
    tokens attending to ``pf_ctx`` context tokens in ``pf_pairs`` (query, context) pairs;
    ``touched`` distinct experts hit (MoE).
    """
    tokens = n_dec * (k + 1) + pf_tokens
    weights = c[_V_W]
    if c[_V_MTOT] > 0:
        weights += c[_V_WEXP] * touched / c[_V_MTOT]
    # Each decode's k + 1 query tokens see its cache plus the drafts before them (causal).
    pairs = (k + 1) * dec_ctx + n_dec * (k + 1) * (k + 2) // 2 + pf_pairs
    t = _pass_time(c[_V_T0], weights, c[_V_FLOP], tokens, c[_V_KV],
                   dec_ctx + n_dec * (k + 1) + pf_ctx, c[_V_ATTN], pairs, c)
    if k > 0:
        # The drafter sees the prompt chunk in its first pass, then one token per request.
        for j in range(k):
            d_tokens = n_dec + (pf_tokens if j == 0 else 0)
            if d_tokens == 0:
                break
            d_ctx = dec_ctx + n_dec * (j + 1)
            d_pairs = d_ctx  # one query token per decoding request
            if j == 0:
                d_ctx += pf_ctx
                d_pairs += pf_pairs
            t += _pass_time(c[_D_T0], c[_D_W], c[_D_FLOP], d_tokens, c[_D_KV], d_ctx,
                            c[_D_ATTN], d_pairs, c)
    return t


@numba.njit(cache=True)
def _run(sched, concurrency, closed, p, g, acc, c, budget, max_seqs, capacity, rng):
    """The event loop; see the module docstring. Returns arrival, first token, finish, stats."""
    n = sched.size
    k = acc.size
    arrival = np.full(n, np.nan)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    target = np.full(n, p, dtype=np.int64)  # tokens to prefill (prompt, plus output if preempted)
    done_pf = np.zeros(n, dtype=np.int64)   # prefilled so far
    gen = np.zeros(n, dtype=np.int64)       # output tokens produced
    ctx = np.zeros(n, dtype=np.int64)       # KV tokens held
    running = np.empty(max_seqs, dtype=np.int64)
    chunk = np.zeros(max_seqs, dtype=np.int64)
    preempted = np.empty(n, dtype=np.int64)  # a stack: the last preempted runs first
    n_run = n_pre = head = nxt = finished = 0
    accepted = drafted = preemptions = iterations = 0
    now = 0.0
    while finished < n:
        # Arrivals (a closed loop sends only while fewer than `concurrency` are in flight).
        while nxt < n and sched[nxt] <= now and (n_run + n_pre + nxt - head) < concurrency:
            arrival[nxt] = max(sched[nxt], now) if closed else sched[nxt]
            nxt += 1
        if n_run == 0 and n_pre == 0 and head == nxt:
            now = max(now, sched[nxt])  # idle: jump to the next send
            continue
        # KV: running requests need their context plus k + 1 slots if decoding.
        need = 0
        for r in range(n_run):
            i = running[r]
            need += ctx[i] + (k + 1 if done_pf[i] == target[i] else 0)
        preempted_now = 0
        while need > capacity and n_run > 1:
            n_run -= 1
            i = running[n_run]
            need -= ctx[i] + (k + 1 if done_pf[i] == target[i] else 0)
            target[i] = p + gen[i]
            done_pf[i] = 0
            ctx[i] = 0
            preempted[n_pre] = i
            n_pre += 1
            preempted_now += 1
        # Budget: decodes first, then prefill chunks of running, then of waiting requests.
        n_dec = 0
        dec_ctx = 0.0
        for r in range(n_run):
            i = running[r]
            chunk[r] = 0
            if done_pf[i] == target[i]:
                n_dec += 1
                dec_ctx += ctx[i]
        left = budget - n_dec * (k + 1)
        pf_tokens = 0
        pf_ctx = 0.0
        pf_pairs = 0.0
        for r in range(n_run):
            i = running[r]
            if done_pf[i] < target[i] and left > 0:
                x = min(target[i] - done_pf[i], left, capacity - need)
                if x > 0:
                    chunk[r] = x
                    left -= x
                    need += x
                    pf_tokens += x
                    pf_ctx += done_pf[i] + x
                    pf_pairs += _prefill_pairs(x, done_pf[i])
        # As vLLM's scheduler does, admit no waiting request in a step that had to preempt.
        while (left > 0 and n_run < max_seqs and (n_pre > 0 or head < nxt)
               and preempted_now == 0):
            i = preempted[n_pre - 1] if n_pre > 0 else head
            x = min(target[i], left, capacity - need)
            if x <= 0:
                break
            if n_pre > 0:
                n_pre -= 1
            else:
                head += 1
            running[n_run] = i
            chunk[n_run] = x
            n_run += 1
            left -= x
            need += x
            pf_tokens += x
            pf_ctx += x
            pf_pairs += _prefill_pairs(x, 0)
        if n_dec == 0 and pf_tokens == 0:
            break  # nothing can run: the caller checks that a request fits, so this is a bug
        preemptions += preempted_now
        # Cost of the step.
        touched = 0.0
        if c[_V_MTOT] > 0:
            tokens = n_dec * (k + 1) + pf_tokens
            miss = (1.0 - c[_V_M] / c[_V_MTOT]) ** tokens
            touched = rng.binomial(int(c[_V_MTOT]), 1.0 - miss)
        now += _step_time(c, k, n_dec, dec_ctx, pf_tokens, pf_ctx, pf_pairs, touched)
        iterations += 1
        # Outcomes: prefill progress, accepted drafts, finished requests.
        keep = 0
        for r in range(n_run):
            i = running[r]
            if chunk[r] > 0:
                done_pf[i] += chunk[r]
                ctx[i] += chunk[r]
                if done_pf[i] == target[i]:
                    gen[i] += 1
                    if np.isnan(first[i]):
                        first[i] = now
            elif done_pf[i] == target[i]:
                a = 0
                while a < k and rng.random() < acc[a]:
                    a += 1
                accepted += a
                drafted += k
                made = min(a + 1, g - gen[i])
                gen[i] += made
                ctx[i] += made
            if gen[i] >= g:
                finish[i] = now
                finished += 1
            else:
                running[keep] = i
                keep += 1
        n_run = keep
    stats = np.array([accepted, drafted, preemptions, iterations], dtype=np.int64)
    return arrival, first, finish, stats
