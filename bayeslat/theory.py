r"""The closed-form latency model of speculative decoding under continuous batching.

This module is the single source of truth for the formulas; the PyMC models, the simulators, the
decisions and the tests all call it. Every function is vectorised and broadcasts over NumPy arrays
and xarray ``DataArray`` objects (dims and coords are kept); the arithmetic ones
(:func:`tokens_per_cycle`, :func:`effective_coefficients`, :func:`moe_coverage`) also accept
PyTensor variables, so a PyMC model builds its graph from these same lines. Nothing here imports
PyMC; PyTensor is imported only when a tensor is passed in.

Notation (seconds, requests per second)
---------------------------------------
Mean request latency in the unsaturated regime is ``L = C1 + B·C2`` with ``B`` the mean number of
requests in the system; Little's law ``B = rps·L`` gives

.. math:: L = \frac{C_1}{1 - \mathrm{rps}\,C_2}, \qquad \mathrm{rps}\,C_2 < 1 .

With acceptance rate :math:`\alpha` (i.i.d. per drafted token) and draft length :math:`k` a verify
cycle yields :math:`E = (1-\alpha^{k+1})/(1-\alpha)` tokens, so a request of :math:`g` decode
tokens takes :math:`g/E` cycles and

.. math::
    C_1 = c_{1p} + \tfrac{g}{E}(c_{1v} + k\,c_{1d}), \qquad
    C_2 = c_{2p} + \tfrac{g}{E}(c_{2v} + k\,c_{2d}).

``k = 0`` is the baseline without SD. Against the baseline D, with
:math:`r = \mathrm{rps}\,C_{2,D}`,

.. math:: S = \frac{L_D}{L_{SD}} = \frac{1}{C_{1R}}\Bigl(1 + (1 - C_{2R})\frac{r}{1-r}\Bigr),
          \qquad r^* = \frac{C_{1R}-1}{C_{1R}-C_{2R}}, \quad \mathrm{RPS}^* = r^*/C_{2,D}.

Near capacity (DESIGN.md §2a) the formula above is the memory-bound regime. A step's time is the
larger of moving the weights and KV cache and doing the arithmetic on its tokens, each nearly
linear in the batch ``B``: ``s(B) = max(a_m + b_m B, a_c + b_c B)``. A request takes ``n``
steps, so at a steady rate (Little's law, ``B = rps·L``) ``L = n·s(rps·L)``, whose solution is
the larger of two curves of the paper's form, the memory-bound one and the compute-bound one
with its own intercept ``A = n·a_c`` and per-request cost ``n·b_c``. The scheduler runs at most
``B_max`` requests at once (vLLM's ``max_num_seqs``), so the capacity is the rate at which the
batch reaches ``B_max``: ``1/C3 = n·s(B_max)/B_max``, the compute time of a request at a full
batch. The *capacity* form writes the compute-bound curve in ``C3`` and the share ``Q`` of it
that is the intercept (``A = Q·B_max·C3``, per-request cost ``(1 − Q)·C3``), and takes a soft
maximum of the two curves (the batch fluctuates about its mean, so the latency bends
gradually from one to the other), a ``P``-norm less the compute curve's value at zero load,
where the memory curve alone is the latency:

.. math::
    L = \Bigl(L_m^P + L_c^P - A^P\Bigr)^{1/P}, \qquad P = 2 + k/4, \qquad
    L_m = \frac{C_1}{1 - \mathrm{rps}\,C_2}, \qquad
    L_c = \frac{A}{1 - (1 - Q)\,\mathrm{rps}\,C_3}, \qquad A = Q\,B_{\max}\,C_3,

.. math::
    C_3 = c_{3p} + \tfrac{g}{E}\bigl((k+1)\,c_{3v} + k\,c_{3d} + (p + g/2)\,c_{3r}\bigr),

``C3`` (s per request) the compute time of one request at a full batch (its prefill, the
``k+1`` tokens scored and ``k`` drafted per verify cycle, and each cycle's read of its KV cache,
:func:`compute_coefficient`). The capacity is ``1/max(C2, C3)``: at ``rps = 1/C3`` the batch is
full and the compute curve has reached ``B_max/rps``, past it requests queue without bound (the
latency is ``inf``). The compute curve's own pole, ``1/((1 − Q)·C3)``, lies beyond the capacity:
the throughput benchmark, run at a full batch, measures ``1/C3``, not that pole. With ``Q = 0``
or ``C3 = 0`` it is the paper's model; every function below takes ``c3`` and ``q`` with default
0 for that. Fitted one configuration at a time to the shipped example with ``C3`` at the measured
ceiling, this form (with ``P = 2``) predicts each configuration's held-out top rate with a mean
error of 5.6% against 9.7% for an M/G/1 queue's wait added to the memory-bound curve
(benchmarks/README.md, thirty-third session).

The norm's power ``P`` (:func:`soft_power`) sharpens the bend with the draft length: a verify
step of ``k + 1`` tokens a request crosses the roofline knee at a batch ``k + 1`` times smaller
and more abruptly, and with ``P = 2`` for every ``k`` the held-out top rates of short drafts
were over-predicted and of long ones (``k >= 6``) under-predicted by 9-16% on five engine sweeps.
``P = 2 + k/4`` took the mean error of a group law's held-out top rate from 6.1 to 5.1% on the
example and lowered it on four other sweeps (benchmarks/README.md, forty-first session);
every function below takes ``p`` with default 2 (:data:`SOFT_POWER`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import xarray as xr

from bayeslat.errors import NumericalError

__all__ = [
    "tokens_per_cycle",
    "verify_cycles",
    "effective_coefficients",
    "prefill_excess",
    "compute_coefficient",
    "mean_context",
    "latency",
    "roofline_latency",
    "roofline_amplification",
    "roofline_capacity",
    "roofline_throughput",
    "compute_latency",
    "soft_power",
    "evenly_spaced",
    "staircase_offset",
    "capacity",
    "speedup",
    "ratios",
    "break_even_rps",
    "best_k",
    "moe_coverage",
    "moe_latency",
    "collapse",
]

# Most requests the scheduler runs at once: vLLM's default ``max_num_seqs``, and the engine
# simulator's. The compute curve's intercept is Q·BATCH_CAP·C3 (module docstring).
BATCH_CAP = 256

# The capacity form's power at k = 0 and its growth per drafted token (soft_power).
SOFT_POWER = 2.0
POWER_SLOPE = 0.25

# Stand-in for log(alpha) at alpha = 1, small enough to be exact in the E ratio and still normal.
_TINY_LOG = -1e-300


def _is_tensor(*xs: Any) -> bool:
    return any(type(x).__module__.partition(".")[0] == "pytensor" for x in xs)


def _ops(*xs: Any):
    """NumPy, or ``pytensor.tensor`` when any argument is a PyTensor variable."""
    if _is_tensor(*xs):
        import pytensor.tensor as pt

        return pt
    return np


def _where(cond, a, b):
    """``where`` that keeps xarray dims when any input is a DataArray."""
    if any(isinstance(x, xr.DataArray) for x in (cond, a, b)):
        return xr.where(cond, a, b)
    return np.where(cond, a, b)


def tokens_per_cycle(alpha, k):
    r"""Expected tokens produced per verify cycle, :math:`E = \sum_{i=0}^{k} \alpha^i`.

    Computed as ``expm1((k+1)·log α) / expm1(log α)``, which has no cancellation near
    :math:`\alpha = 1` and is exact at the ends: ``E = k + 1`` at ``alpha = 1`` and ``E = 1`` at
    ``k = 0`` or ``alpha = 0``.

    Parameters
    ----------
    alpha
        Acceptance rate per drafted token, in [0, 1].
    k
        Draft length (tokens proposed per cycle), ``k >= 0``; 0 means no speculation.

    Returns
    -------
    E, broadcast over the inputs, in ``[1, k + 1]``.
    """
    ops = _ops(alpha, k)
    with np.errstate(divide="ignore"):
        log_a = ops.minimum(ops.log(alpha), _TINY_LOG)
    e = ops.expm1((k + 1) * log_a) / ops.expm1(log_a)
    # Rounding can leave E a hair outside its exact bounds; the bounds are part of the contract.
    return ops.minimum(ops.maximum(e, 1.0), k + 1.0)


# Width of a prefill's roofline knee, as a share of the knee (prefill_excess).
KNEE_SOFTNESS = 0.125


def prefill_excess(prefill_tokens, knee):
    r"""The prompt tokens of a prefill past the roofline knee, :math:`\approx \max(p - \kappa, 0)`.

    A step reads the weights once however many tokens it carries, so a prefill of
    :math:`p` tokens costs the requests running beside it (its stall ``c2p``) little more than
    one step until its arithmetic outweighs that read, at :math:`\kappa` tokens (the GPU's
    FLOPs per byte read per token: about 200-300 for bf16 weights on an H100, a third of that
    for fp8 on an H200), and grows with :math:`p - \kappa` past it. Smoothed so that its
    gradient is continuous,

    .. math:: w\,\log\bigl(1 + e^{(p - \kappa)/w}\bigr), \qquad w = \kappa/8
              \ (:data:`KNEE_SOFTNESS`),

    which is within :math:`0.7\,w` of the kink and tends to :math:`p - \kappa` above it and
    to 0 below.
    """
    ops = _ops(prefill_tokens, knee)
    width = KNEE_SOFTNESS * knee
    x = (prefill_tokens - knee) / width
    soft = ops.softplus(x) if ops is not np else np.logaddexp(0.0, x)
    return width * soft


def effective_coefficients(c1p, c1v, c1d, c2p, c2v, c2d, alpha, k, decode_tokens):
    r"""Load-independent and load-dependent latency coefficients of one configuration.

    .. math::
        C_1 = c_{1p} + \tfrac{g}{E}(c_{1v} + k\,c_{1d}), \qquad
        C_2 = c_{2p} + \tfrac{g}{E}(c_{2v} + k\,c_{2d}), \qquad E = E(\alpha, k).

    Parameters
    ----------
    c1p, c1v, c1d
        Fixed per-request cost of prefill (s), of one verify pass (s per cycle), of one drafter
        step (s per drafted token).
    c2p, c2v, c2d
        The same costs per concurrent request (s per request in the system).
    alpha, k
        Acceptance rate and draft length (``k = 0``: no speculation).
    decode_tokens
        Output tokens per request, ``g``.

    Returns
    -------
    (C1, C2)
        ``C1`` in seconds, ``C2`` in seconds per request (``1/C2`` is the saturation rate).
    """
    cycles = verify_cycles(decode_tokens, alpha, k)
    return c1p + cycles * (c1v + k * c1d), c2p + cycles * (c2v + k * c2d)


def verify_cycles(decode_tokens, alpha, k):
    """Verify cycles a request's decode takes, ``g/E(alpha, k)`` (``g`` at ``k = 0``)."""
    return decode_tokens / tokens_per_cycle(alpha, k)


def mean_context(prefill_tokens, decode_tokens):
    """The KV cache's length averaged over a request's decode, ``p + g/2`` (tokens)."""
    return prefill_tokens + 0.5 * decode_tokens


def compute_coefficient(c3p, c3v, c3d, c3r, alpha, k, prefill_tokens, decode_tokens):
    r"""Compute time of one request at full utilisation,

    .. math:: C_3 = c_{3p} + \tfrac{g}{E}\bigl((k+1)\,c_{3v} + k\,c_{3d}
              + (p + g/2)\,c_{3r}\bigr).

    Past the roofline knee a step's weight GEMMs are compute-bound, so each of the ``k + 1``
    tokens a verify cycle scores costs the verifier's arithmetic and each of the ``k`` it
    drafts the drafter's; attention stays memory-bound, so each cycle also reads the request's
    KV cache once, ``p + g/2`` tokens on average over the decode. The kernels run one after
    another: their times add (a wall without the reads grew with the output length and missed
    a short-output workload's walls by up to 60%; benchmarks/README.md, thirty-second session).

    Parameters
    ----------
    c3p
        Compute time of a request's prefill (s per request).
    c3v
        Compute time of one verified token (s per token); a verify cycle scores ``k + 1``.
    c3d
        Compute time of one drafted token (s per token); a verify cycle drafts ``k``.
    c3r
        Time to read one token of KV cache (s per context token and verify cycle).
    alpha, k, decode_tokens
        As in :func:`effective_coefficients`.
    prefill_tokens
        Prompt tokens per request, ``p``.

    Returns
    -------
    ``C3`` in seconds per request: ``1/C3`` is the compute-bound capacity (req/s).
    """
    cycles = verify_cycles(decode_tokens, alpha, k)
    return c3p + cycles * ((k + 1.0) * c3v + k * c3d
                           + mean_context(prefill_tokens, decode_tokens) * c3r)


def compute_latency(rps, c3, q):
    r"""The compute-bound curve :math:`A/(1 - (1 - Q)\,\mathrm{rps}\,C_3)`,
    :math:`A = Q\,B_{\max}\,C_3` (s; module docstring), finite up to the capacity ``1/C3`` and
    0 with ``c3`` or ``q`` 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return q * BATCH_CAP * c3 / (1.0 - (1.0 - q) * rps * c3)


def soft_power(k):
    """The capacity form's power, ``P = 2 + k/4`` (:data:`SOFT_POWER`, :data:`POWER_SLOPE`;
    module docstring): the bend from the memory curve to the compute curve sharpens with the
    draft length ``k``."""
    return SOFT_POWER + POWER_SLOPE * k


def latency(rps, c1, c2, c3=0.0, q=0.0, p=SOFT_POWER):
    r"""Mean request latency in seconds, :math:`L = (L_m^P + L_c^P - A^P)^{1/P}` with
    :math:`L_m = C_1/(1 - \mathrm{rps}\,C_2)`, :math:`L_c` the compute-bound curve
    (:func:`compute_latency`), :math:`A = Q\,B_{\max}\,C_3` its value at zero load and ``p``
    the norm's power (:func:`soft_power`).

    With the default ``c3 = q = 0`` this is the paper's :math:`C_1/(1 - \mathrm{rps}\,C_2)`.
    Returns ``inf`` (never a negative number or NaN) at or past either saturation,
    ``rps·C2 >= 1`` or ``rps·C3 >= 1`` (a full batch).
    """
    denom = 1.0 - rps * c2
    rho = rps * c3
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (denom > 0) & (rho < 1)
        mem = c1 / _where(denom > 0, denom, 1.0)
        # L_c^P − A^P = A^P·((1 − (1 − Q)·rps·C3)^−P − 1), without cancellation at low load
        fill = (1.0 - q) * _where(rho < 1, rps, 0.0) * c3
        rise = (q * BATCH_CAP * c3) ** p * np.expm1(-p * np.log1p(-fill))
        return _where(ok, (mem**p + rise) ** (1.0 / p), np.inf)


def compute_share(rps, c1, c2, c3=0.0, q=0.0, p=SOFT_POWER):
    r"""The compute curve's share of the latency's ``P``-th power, :math:`L_c^P/L^P`
    (:func:`latency`): how much of ``log L`` moves with its headroom; 0 in the paper's model,
    :math:`(A/C_1)^P` at zero load, towards 1 where compute binds (1 past either saturation)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lat = latency(rps, c1, c2, c3, q, p)
        share = (compute_latency(rps, c3, q) / lat) ** p
    return _where(np.isfinite(lat) & np.isfinite(share), share, 1.0)


def wall_sensitivity(rps, c1, c2, c3=0.0, q=0.0, p=SOFT_POWER):
    r"""How far the latency moves with the compute wall, :math:`w/(1-\rho)` with :math:`w`
    the compute curve's share (:func:`compute_share`) and :math:`\rho = \mathrm{rps}\,C_3` the
    batch's fill: near the wall the batch, fluctuating about its mean, meets its cap and the
    latency follows the wall's place as a queue's does. 0 in the paper's model,
    :math:`(A/C_1)^P` at zero load; ``inf`` at and past the capacity."""
    rho = rps * c3
    with np.errstate(divide="ignore", invalid="ignore"):
        out = compute_share(rps, c1, c2, c3, q, p) / (1.0 - rho)
    return _where(rho < 1.0, out, np.inf)


# Evenly spaced requests meet one count of arrivals a life consistent with its own latency
# while rps·stall is below this: at it and above, ``1/(1 − rps·s) ≥ 2`` counts are
# (evenly_spaced), which one a request meets depends on how the queue filled, and their
# smooth mean is the prediction.
UNIQUE_COUNT = 0.5


def evenly_spaced(smooth, rps, stall, offset=0.0, lone=None, unique=1.0):
    r"""Mean latency (s) of requests sent evenly spaced at ``rps``, from the smooth curve's.

    A request's latency grows by the prefill stall :math:`s` (s, the prefill part ``c2p`` of
    :math:`C_2`) for each request that arrives during its life. Arrivals at random (Poisson)
    number :math:`\mathrm{rps}\,L` on average, which the smooth curve :math:`\bar L` (the
    model's :func:`latency`) counts; evenly spaced ones number exactly
    :math:`n = \lfloor \mathrm{rps}\,L \rfloor`, so the latency climbs a staircase, one stall a
    step, flat between (none while requests run alone, below ``rps = 1/L``). A curve fitted
    through such steps runs through their midpoints,
    :math:`\bar L = b + s(\mathrm{rps}\,\bar L - \tfrac12)`, and the staircase about it is

    .. math::
        L = b + s\,n, \qquad n = \max\Bigl(0,\ \Bigl\lfloor
        \frac{\mathrm{rps}\,b - 1}{1 - \mathrm{rps}\,s}\Bigr\rfloor + 1\Bigr), \qquad
        b = \bar L - s\bigl(\mathrm{rps}\,\bar L - \tfrac12\bigr),

    :math:`n` the smallest count consistent with its own latency
    (:math:`n = \lfloor \mathrm{rps}(b + s\,n) \rfloor`; ``rps·s < 1`` below capacity): where
    a stall is long against the gap between requests two counts can be, and a server filling
    up from empty reaches the lower one. ``inf`` stays ``inf``; ``stall`` 0 (or NaN: unknown)
    gives the smooth curve. Within a step the latency is off the smooth curve by up to about
    half a stall: 8.5% of a lone request's latency for a 70B verifier at 1,024-token prompts,
    0.3% for a 1B at 256 (benchmarks/README.md).

    ``offset`` (s) moves the staircase (:func:`staircase_offset`). The staircase holds where
    ``rps·s < unique``; elsewhere the smooth curve is kept (:data:`UNIQUE_COUNT`: where two
    counts or more are consistent). Given ``lone``, a lone request's latency (s),
    requests sent below ``rps = 1/lone`` never meet and the latency is ``lone`` exactly.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        b = smooth - stall * (rps * smooth - 0.5)
        n = np.maximum(np.floor((rps * b - 1.0) / (1.0 - rps * stall)) + 1.0, 0.0)
        stairs = b + stall * n + offset
        keep = np.isfinite(smooth) & np.isfinite(stairs) & (stall > 0) & (rps * stall < unique)
    out = _where(keep, stairs, smooth)
    return out if lone is None else _where(rps * lone < 1.0, lone, out)


def staircase_offset(smooth, rps, stall, dim: str):
    r"""The shift that centres the staircase (:func:`evenly_spaced`) on a curve fitted through
    measurements at the rates ``rps`` (along ``dim``; NaN for none).

    :func:`evenly_spaced` takes the smooth curve for the line through the steps' midpoints.
    A curve fitted to a sweep runs through its points, which sit at whatever places on their
    steps the sweep's rates fell (GuideLLM spaces them evenly, so their places can repeat from
    step to step): the curve is off the midpoints by their mean displacement. Its negative,

    .. math:: \delta = -\frac1m \sum_{j=1}^{m} \bigl(L(r_j) - \bar L(r_j)\bigr),

    added to the staircase puts the staircase through the measurements on average. 0 where
    there are none (a configuration never measured: the midpoints) and where ``stall`` is 0 or
    unknown. ``smooth`` holds the curve's latency at ``rps`` (dims ``rps``'s and any others).
    """
    dev = evenly_spaced(smooth, rps, stall) - smooth
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a configuration without rates
        mean = dev.where(np.isfinite(dev)).mean(dim, skipna=True)
    return -mean.fillna(0.0)


# Arrival processes of the mean-field roofline form (roofline_latency): how many prompts join
# a step.
ARRIVALS = ("constant", "poisson")

# Widths of the roofline form's two kinks (roofline_latency), each smoothed by a softplus so
# that the latency's slope, and with it the roofline variant's scatter, moves continuously
# with the parameters: a step's tokens past the knee (tokens; a batch of B requests verifying
# k + 1 tokens each wanders by about (k + 1)·sqrt(B), tens of tokens, about its mean), and the
# prompts that join a step between its floor and its ceiling (prompts).
HINGE_WIDTH = 16.0
COUNT_WIDTH = 0.02
# Widths past which softplus is linear (or 0) to double precision: log1p(e^-37) < 1e-16.
SOFTPLUS_LINEAR = 37.0


def _hinge(t, width):
    """``width·softplus(t/width)``, a smooth ``max(t, 0)``, and its derivative in ``t``."""
    ops = _ops(t)
    z = t / width
    if ops is np:
        from scipy.special import expit

        return width * np.logaddexp(0.0, z), expit(z)
    return width * ops.softplus(z), ops.sigmoid(z)


def bend_window(prefill):
    """Half-width (in prompts) of the window about the knee's crossing outside which the
    smooth hinge's second differences in the prompt count vanish: its softplus is linear to
    double precision past :data:`SOFTPLUS_LINEAR` widths."""
    return 1 + int(np.ceil(SOFTPLUS_LINEAR * HINGE_WIDTH / prefill))


def _prompt_excess(x, slope_x, m, slope_m, prefill, arrivals):
    """``E[h(x + m'·p)]`` over the prompts ``m'`` that join a step (mean ``m``), ``h`` the
    smooth hinge of :data:`HINGE_WIDTH`, and its derivative along ``L``, given ``x`` and
    ``m`` and their derivatives ``slope_x``, ``slope_m`` along ``L``. Evenly spaced arrivals
    bring ``floor(m)`` or ``floor(m) + 1`` prompts, in the proportions that make their mean
    ``m``: the line through ``g(j) = h(x + j·p)`` at the integers, written as
    ``g(0) + (g(1) − g(0))·m + Σ_{n≥1} (g(n+1) − 2g(n) + g(n−1))·(m − n)^+`` with each
    ``(m − n)^+`` smoothed to :data:`COUNT_WIDTH`; the bends ``g(n+1) − 2g(n) + g(n−1)``
    vanish but within :func:`bend_window` of the knee's crossing ``n = −x/p``. Poisson
    arrivals bring a Poisson count. ``m`` and ``p`` are NumPy; ``x`` may be a tensor."""
    ops = _ops(x)
    if arrivals == "constant":
        (g0, d0), (g1, d1) = _hinge(x, HINGE_WIDTH), _hinge(x + prefill, HINGE_WIDTH)
        value, d_x, d_m = g0 + (g1 - g0) * m, d0 + (d1 - d0) * m, g1 - g0
        prefill = np.broadcast_to(prefill, np.shape(m))
        if (prefill > 0).any():
            half = bend_window(prefill[prefill > 0].min())
            at = np.where(prefill > 0, prefill, 1.0)[..., None]
            cross = ops.floor(-ops.expand_dims(x, -1) / at)
            n = cross + np.arange(-half, half + 2)  # the counts whose bends can be non-zero
            mm = m[..., None]
            real = (n >= 1) & (n <= mm + 2) & (prefill[..., None] > 0)
            (lo, d_lo), (mid, d_mid), (hi, d_hi) = (
                _hinge(ops.expand_dims(x, -1) + (n + j) * at, HINGE_WIDTH) for j in (-1, 0, 1))
            ramp, d_ramp = _hinge(mm - n, COUNT_WIDTH)
            bend = ops.where(real, hi - 2.0 * mid + lo, 0.0)
            value = value + (bend * ramp).sum(-1)
            d_x = d_x + (ops.where(real, d_hi - 2.0 * d_mid + d_lo, 0.0) * ramp).sum(-1)
            d_m = d_m + (bend * d_ramp).sum(-1)
        return value, d_x * slope_x + d_m * slope_m
    from scipy.special import gammaln

    # the counts within 10 standard deviations and a dozen of the mean carry all the mass
    half = int(np.ceil(10.0 * np.sqrt(float(np.max(m, initial=0.0))) + 12.0))
    mm = m[..., None]
    j = np.floor(mm) + np.arange(-half, half + 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        weight = np.exp(j * np.log(mm) - mm - gammaln(np.maximum(j, 0.0) + 1.0))
    weight = np.where(j < 0, 0.0, np.where(mm > 0, weight, j == 0))
    tokens = x[..., None] + j * prefill[..., None]
    excess, on = _hinge(tokens, HINGE_WIDTH)
    # d/dμ E[φ(m')] = E[φ(m' + 1) − φ(m')] for a Poisson count m' of mean μ
    step = _hinge(tokens + prefill[..., None], HINGE_WIDTH)[0] - excess
    value = (weight * excess).sum(-1)
    slope = (weight * on).sum(-1) * slope_x + (weight * step).sum(-1) * slope_m
    return value, slope


def _on_arrays(func, args, **kwargs):
    """``func(*args, **kwargs)`` on float NumPy arrays broadcast together, or through
    ``xr.apply_ufunc`` where any argument is a DataArray (its dims kept)."""
    def on_numpy(*arrays):
        return func(*np.broadcast_arrays(*(np.asarray(a, float) for a in arrays)), **kwargs)

    if any(isinstance(a, xr.DataArray) for a in args):
        return xr.apply_ufunc(on_numpy, *args)
    return on_numpy(*args)


def _right_side(batch, prompts, d_batch, d_prompts, c1, c2, f, knee, cycles, k, prefill, f_d,
                knee_d, arrivals):
    """The roofline form's right side ``F`` (:func:`roofline_latency`) at ``batch`` running
    requests and a mean of ``prompts`` joining each step, and its derivative along ``L``
    given theirs (``d_batch``, ``d_prompts``)."""
    verify, d_verify = _prompt_excess(batch * (k + 1.0) - knee, d_batch * (k + 1.0), prompts,
                                      d_prompts, prefill, arrivals)
    draft, d_draft = _prompt_excess(batch - knee_d, d_batch, prompts, d_prompts, prefill,
                                    arrivals)
    return (c1 + c2 * batch + cycles * (f * verify + f_d * draft),
            c2 * d_batch + cycles * (f * d_verify + f_d * d_draft))


def roofline_latency(rps, c1, c2, f, knee, cycles, k, prefill, f_d=0.0, knee_d=None,
                     arrivals="constant", batch_cap=BATCH_CAP, iterations=200):
    r"""Mean request latency (s) of a server whose every step is its roofline: a mean-field
    form of the capacity regime (DESIGN.md §2a), derived from how the engine steps.

    A verify step of ``B`` decoding requests carries ``B(k+1)`` tokens and the prompts that
    arrived since the last step, ``m`` of ``p`` tokens each. Reading the weights takes as long
    as the arithmetic on ``T*`` tokens (the roofline's knee), so the step costs the memory-bound
    time (the paper's line: ``C1 + C2·B`` over a request's ``n`` steps) plus ``f`` seconds for
    each token past the knee; the drafter's first pass, which also sees the prompts, likewise
    past its own knee ``T*_d`` at ``f_d`` a token. A request takes ``n = g/E`` steps, during
    which ``B = rps·L`` others run (Little's law) and ``rps·L/n`` prompts join each step:

    .. math::
        L = C_1 + C_2 B + n\,\mathrm{E}_m\bigl[f\,(B(k+1) + m\,p - T^*)^+
            + f_d\,(B + m\,p - T^*_d)^+\bigr],
        \qquad B = \mathrm{rps}\,L, \quad \bar m = \mathrm{rps}\,L/n,

    the expectation over the prompts ``m`` a step carries: ``floor(m̄)`` or ``floor(m̄) + 1``
    for evenly spaced arrivals (GuideLLM's constant rate), Poisson for Poisson ones. ``L`` is
    the smallest root (Newton's method from the paper's root, which is below it: the right
    side is convex in ``L``). The
    form's corners are rounded a little, ``(·)^+`` to a softplus :data:`HINGE_WIDTH` tokens
    wide and the floor-and-ceiling mixture's corners at whole prompts to :data:`COUNT_WIDTH`
    of a prompt, so that its slope, and the ``roofline`` variant's scatter with it, moves
    continuously with the parameters (a sampler's step across a corner otherwise jumps the
    log density); they move the predictions checked against the engine below by at most
    0.2 points. With
    ``f = f_d = 0`` it is the paper's :math:`C_1/(1 - \mathrm{rps}\,C_2)`; below the knee the
    prompts cost nothing, so the curve bends where a step's tokens first pass ``T*`` (short
    drafts at large batches, long drafts early) and becomes the compute-bound line past it.
    With the engine simulator's own ``f`` and knees, and ``C1``, ``C2`` fitted to its steady
    state below 55% of its ceiling, it predicts that steady state at 80% and 90% of the ceiling
    within 3.5% (Llama-8B on an H100, ``k`` = 0, 1, 2, 6; the paper's curve fitted to the same
    points falls 10–50% short) and the full batch's rate within 2.5% of the throughput
    benchmark's (:func:`roofline_throughput`; ``tests/test_simulate_theory.py``). Not yet a
    model variant: benchmarks/README.md, forty-fourth session.

    Parameters
    ----------
    rps
        Arrival rate (req/s).
    c1, c2
        The memory-bound line: latency at zero load (s) and its growth per running request (s).
    f, knee
        Compute time per token past the verifier's knee (s) and the knee (tokens per step).
    cycles, k, prefill
        Verify steps per request ``n = g/E`` (:func:`verify_cycles`), draft length and prompt
        tokens.
    f_d, knee_d
        The drafter's first pass: compute time per token past its knee and the knee (default
        the verifier's); ``f_d = 0`` for the baseline.
    arrivals
        ``"constant"`` or ``"poisson"`` (:data:`ARRIVALS`).
    batch_cap
        Most requests that run at once: past it requests queue (``inf``).

    Returns
    -------
    The latency (s), ``inf`` where no steady state exists (the right side grows faster than
    ``L``, or the batch would pass ``batch_cap``). NumPy arrays broadcast; xarray inputs give a
    DataArray with their dims.
    """
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals must be one of {ARRIVALS}, got {arrivals!r}")
    args = (rps, c1, c2, f, knee, cycles, k, prefill, f_d, knee if knee_d is None else knee_d)
    return _on_arrays(_newton, args, arrivals=arrivals, batch_cap=batch_cap,
                      iterations=iterations)


def roofline_amplification(rps, c1, c2, f, knee, cycles, k, prefill, f_d=0.0, knee_d=None,
                           arrivals="constant", batch_cap=BATCH_CAP):
    r"""How much more than in proportion :func:`roofline_latency` moves when every step's
    cost does: :math:`A = S/(1 - S)`, ``S`` the fixed point's slope :math:`\partial F/\partial
    L` at its root (a step's cost scaled by :math:`1 + \epsilon` moves :math:`\log L` by
    :math:`\epsilon\,(1 + A)`). 0 at zero load, growing without bound as the steady state
    ends (``inf`` past it): the ``roofline`` variant's scatter grows with it, as the
    ``capacity`` variants' with :func:`wall_sensitivity`. Arguments as
    :func:`roofline_latency`'s."""

    def amplification(rps, c1, c2, f, knee, cycles, k, prefill, f_d, knee_d):
        lat = _newton(rps, c1, c2, f, knee, cycles, k, prefill, f_d, knee_d,
                      arrivals=arrivals, batch_cap=batch_cap, iterations=200)
        steady = np.isfinite(lat)
        at = np.where(steady, lat, c1)
        _, slope = _right_side(rps * at, rps / cycles * at, rps, rps / cycles, c1, c2, f, knee,
                               cycles, k, prefill, f_d, knee_d, arrivals)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(steady, slope / (1.0 - slope), np.inf)

    return _on_arrays(amplification, (rps, c1, c2, f, knee, cycles, k, prefill, f_d,
                                      knee if knee_d is None else knee_d))


def _newton(rps, c1, c2, f, knee, cycles, k, prefill, f_d, knee_d, *, arrivals, batch_cap,
            iterations):
    """:func:`roofline_latency` on broadcast arrays: Newton's method from the paper's root,
    below the form's (``F ≥ C1 + C2·B``; none where that line has none)."""
    steady = rps * c2 < 1.0
    lat = np.where(steady, c1 / np.where(steady, 1.0 - rps * c2, 1.0), c1)
    per_step = rps / cycles  # prompts a step per second of latency
    with np.errstate(divide="ignore"):
        full = np.nextafter(batch_cap / rps, np.inf)  # a latency past which the batch is full
    for _ in range(iterations):
        side, slope = _right_side(rps * lat, per_step * lat, rps, per_step, c1, c2, f, knee,
                                  cycles, k, prefill, f_d, knee_d, arrivals)
        gap, slope = side - lat, slope - 1.0
        # from below a root the convex gap falls; where it no longer does, none is ahead
        steady &= (slope < 0) | (gap <= 1e-12 * lat)
        move = np.where(steady & (gap > 1e-12 * lat), -gap / np.where(slope < 0, slope, -1.0), 0)
        # a root past the full batch is no steady state: stop there (its prompt counts, and
        # the sums over them, would grow without bound)
        lat = np.minimum(lat + move, full)
        steady &= lat < full
        if not (move * steady).any():
            break
    return np.where(steady & (rps * lat <= batch_cap), lat, np.inf)


def roofline_throughput(c1, c2, f, knee, cycles, k, prefill, f_d=0.0, knee_d=None,
                        arrivals="constant", batch_cap=BATCH_CAP):
    r"""The rate (req/s) at which a full batch completes requests in :func:`roofline_latency`'s
    server, :math:`B_{\max}/F(B_{\max})`: ``F`` its fixed point's right side with the batch at
    ``batch_cap`` and :math:`B_{\max}/n` prompts a step (a request joins as one leaves). What
    a throughput benchmark, every request sent at once, measures; the steady state under
    arrivals may end before it or after (:func:`roofline_capacity`). Closed form: PyTensor
    inputs give a tensor (evenly spaced arrivals only)."""

    def full(c1, c2, f, knee, cycles, k, prefill, f_d, knee_d):
        side, _ = _right_side(batch_cap, batch_cap / cycles, 0.0, 0.0, c1, c2, f, knee, cycles,
                              k, prefill, f_d, knee_d, arrivals)
        return batch_cap / side

    args = (c1, c2, f, knee, cycles, k, prefill, f_d, knee if knee_d is None else knee_d)
    if _is_tensor(*args):
        return full(*args)
    return _on_arrays(full, args)


def roofline_capacity(c1, c2, f, knee, cycles, k, prefill, f_d=0.0, knee_d=None,
                      arrivals="constant", batch_cap=BATCH_CAP, iterations=50):
    r"""The rate (req/s) up to which :func:`roofline_latency` has a steady state: where its
    batch reaches ``batch_cap``, or earlier where its smallest root meets the next (the right
    side, convex in ``L``, no longer comes down to ``L``).

    The right side ``F`` depends on ``L`` only through the batch ``B = rps·L`` (and the
    prompts ``B/n`` a step), so a steady state at rate ``r`` is a batch with
    :math:`r = B/F(B)`. With ``F`` convex, :math:`B F'(B) - F(B)` grows with ``B`` from
    :math:`-C_1`: :math:`B/F(B)` rises to one peak and falls past it. The capacity is that
    peak (bisection on the sign of :math:`B F' - F`), or the full batch's rate
    :func:`roofline_throughput` where the batch fills before it."""

    def peak(c1, c2, f, knee, cycles, k, prefill, f_d, knee_d):
        def side(batch):
            return _right_side(batch, batch / cycles, 1.0, 1.0 / cycles, c1, c2, f, knee,
                               cycles, k, prefill, f_d, knee_d, arrivals)

        lo, hi = np.zeros(c1.shape), np.full(c1.shape, float(batch_cap))
        value, slope = side(hi)
        before = hi * slope > value  # the peak comes before the batch fills
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            value, slope = side(mid)
            past = mid * slope > value
            lo, hi = np.where(past, lo, mid), np.where(past, mid, hi)
        batch = np.where(before, 0.5 * (lo + hi), batch_cap)
        return batch / side(batch)[0]

    return _on_arrays(peak, (c1, c2, f, knee, cycles, k, prefill, f_d,
                             knee if knee_d is None else knee_d))


def capacity(c2, c3=0.0):
    """The saturation rate ``1/max(C2, C3)`` in req/s (``inf`` where both are 0)."""
    with np.errstate(divide="ignore"):
        top = np.maximum(c2, c3)
        return _where(top > 0, 1.0 / _where(top > 0, top, 1.0), np.inf)


def speedup(rps, c1_d, c2_d, c1_sd, c2_sd, c3_d=0.0, q_d=0.0, c3_sd=0.0, q_sd=0.0,
            p_d=SOFT_POWER, p_sd=SOFT_POWER):
    r"""Speedup of SD over the baseline at load ``rps``, :math:`S = L_D / L_{SD}`.

    Equal to :math:`(1/C_{1R})(1 + (1 - C_{2R})\,r/(1-r))` with :math:`r = \mathrm{rps}\,C_{2,D}`
    while both are unsaturated and the capacity terms are 0; ``inf`` where only the baseline is
    saturated, 0 where only SD is, NaN where both are.
    """
    with np.errstate(invalid="ignore"):
        return (latency(rps, c1_d, c2_d, c3_d, q_d, p_d)
                / latency(rps, c1_sd, c2_sd, c3_sd, q_sd, p_sd))


def ratios(c1_d, c2_d, c1_sd, c2_sd):
    """``(C1R, C2R) = (C1_SD / C1_D, C2_SD / C2_D)``: SD's cost relative to the baseline."""
    return c1_sd / c1_d, c2_sd / c2_d


def break_even_rps(c1_d, c2_d, c1_sd, c2_sd, c3_d=0.0, q_d=0.0, c3_sd=0.0, q_sd=0.0,
                   p_d=SOFT_POWER, p_sd=SOFT_POWER):
    r"""The load at which SD and the baseline have the same latency, :math:`\mathrm{RPS}^*`.

    For the paper's model (every ``c3``, ``q`` zero) it is closed-form:

    .. math:: r^* = \frac{C_{1R} - 1}{C_{1R} - C_{2R}}, \qquad \mathrm{RPS}^* = r^* / C_{2,D}.

    A break-even inside the baseline's unsaturated range ``(0, 1/C2_D)`` exists exactly when
    ``C1R`` and ``C2R`` lie on opposite sides of 1. The usual case is ``C1R < 1 < C2R``: SD helps
    below RPS* and hurts above. With ``C1R > 1 > C2R`` the crossing runs the other way (SD hurts
    at low load and helps above); tell the two apart by the sign of ``1 - C1R``.

    With capacity terms the crossing has no closed form; it is the lowest load in the
    baseline's unsaturated range at which the sign of ``L_SD − L_D`` differs from its sign at
    zero load, found on a grid dense near capacity and refined by bisection (relative
    precision 1e-10). An SD configuration whose capacity is below the baseline's always
    crosses before its own wall when it helps at zero load.

    Returns
    -------
    RPS* in requests per second; NaN where no break-even exists below the baseline's capacity.
    """
    extra = (c3_d, q_d, c3_sd, q_sd)
    if all(np.ndim(v) == 0 and not _is_tensor(v) and float(v) == 0.0 for v in extra):
        c1r, c2r = ratios(c1_d, c2_d, c1_sd, c2_sd)
        num, den = c1r - 1.0, c1r - c2r
        with np.errstate(divide="ignore", invalid="ignore"):
            r_star = num / _where(den != 0, den, np.nan)
        inside = (r_star > 0) & (r_star < 1)
        return _where(inside, r_star / c2_d, np.nan)
    args = (c1_d, c2_d, c1_sd, c2_sd, *extra, p_d, p_sd)
    if any(isinstance(a, xr.DataArray) for a in args):
        arrays = xr.broadcast(*(a if isinstance(a, xr.DataArray) else xr.DataArray(a)
                                for a in args))
        out = _crossing(*(np.asarray(a.values, dtype=float) for a in arrays))
        return arrays[0].copy(data=out)
    return _crossing(*np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in args)))


# Fractions of the baseline's capacity searched for a crossing (denser towards the wall), and
# the bisection steps that refine it.
_GRID = 1.0 - np.concatenate([np.linspace(1.0, 0.0, 65)[1:-1] ** 3, [1e-6, 1e-9]])
_BISECT = 40
# Every other point of it (and its last), for crossings whose latencies cost a root each.
SPARSE_GRID = np.append(_GRID[1:-1:2], _GRID[-1])


def _crossing(c1_d, c2_d, c1_sd, c2_sd, c3_d, q_d, c3_sd, q_sd, p_d, p_sd):
    """:func:`break_even_rps` on broadcast NumPy arrays (:func:`first_crossing`)."""

    def gap(rps):  # L_SD − L_D
        with np.errstate(invalid="ignore"):
            return (latency(rps, c1_sd, c2_sd, c3_sd, q_sd, p_sd)
                    - latency(rps, c1_d, c2_d, c3_d, q_d, p_d))

    return first_crossing(gap, capacity(c2_d, c3_d), np.sign(c1_sd - c1_d))


def first_crossing(gap, top, start, steps: int = _BISECT, grid: np.ndarray = _GRID):
    """The lowest load in ``(0, top)`` at which the sign of ``gap(rps)`` (an SD latency less
    the baseline's: ``inf − finite`` is +, both ``inf`` never a crossing) differs from
    ``start``, its sign at zero load: searched on ``grid`` (:data:`_GRID`: fractions of
    ``top`` dense towards it), then ``steps`` bisections. Arrays broadcast; NaN where the
    sign never changes (or ``start`` is 0)."""
    top = np.where(np.isfinite(top), top, 1e12)

    def sign(rps):
        with np.errstate(invalid="ignore"):
            return np.sign(gap(rps))

    signs = np.stack([sign(u * top) for u in grid])
    flipped = (signs != start) & (signs != 0) & ~np.isnan(signs) & (start != 0)
    found = flipped.any(axis=0)
    j = np.argmax(flipped, axis=0)
    lo = np.where(j > 0, grid[np.maximum(j - 1, 0)], 0.0) * top
    hi = grid[j] * top
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        same = sign(mid) == start
        lo, hi = np.where(same, mid, lo), np.where(same, hi, mid)
    return np.where(found, 0.5 * (lo + hi), np.nan)


def best_k(rps, c1p, c1v, c1d, c2p, c2v, c2d, alpha, decode_tokens, ks: Iterable[int] = range(11)):
    """The draft length with the lowest mean latency at each load, k*(alpha, rps).

    Parameters
    ----------
    rps, c1p, ..., c2d, alpha, decode_tokens
        As in :func:`effective_coefficients` and :func:`latency`; broadcast together.
    ks
        Candidate draft lengths; include 0 to allow "no speculation".

    Returns
    -------
    k* as float (NaN where every candidate is saturated), the shape of the broadcast inputs;
    a DataArray when any input is one. Ties go to the smallest k.
    """
    ks = np.asarray(list(ks), dtype=float)
    args = (rps, c1p, c1v, c1d, c2p, c2v, c2d, alpha, decode_tokens)
    if any(isinstance(a, xr.DataArray) for a in args):
        k = xr.DataArray(ks, dims="k", coords={"k": ks})
        lat = latency(rps, *effective_coefficients(c1p, c1v, c1d, c2p, c2v, c2d, alpha, k,
                                                    decode_tokens))
        finite = np.isfinite(lat).any("k")
        best = lat.where(finite, 0.0).idxmin("k").where(finite)
        return best.drop_vars("k", errors="ignore").rename("k_star")
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    k = ks.reshape((-1,) + (1,) * len(shape))
    lat = np.broadcast_to(
        latency(rps, *effective_coefficients(c1p, c1v, c1d, c2p, c2v, c2d, alpha, k,
                                             decode_tokens)),
        (len(ks), *shape),
    )
    out = ks[np.argmin(lat, axis=0)]
    return np.where(np.isfinite(lat).any(axis=0), out, np.nan)


def moe_coverage(tokens, active, total):
    r"""Expected fraction of experts touched when ``tokens`` tokens are routed in one step.

    :math:`\varphi(T) = 1 - (1 - m/M)^T` with ``m = active`` experts routed per token out of
    ``M = total``. 0 at ``T = 0``, tends to 1 as ``T`` grows; ``T`` may be fractional (a mean).
    """
    ops = _ops(tokens, active, total)
    return 1.0 - ops.power(1.0 - active / total, tokens)


def moe_latency(rps, c1u, c1s, c2u, c2s, active, total, k=0, tol: float = 1e-10,
                max_iter: int = 1000):
    r"""Mean latency of an MoE verifier, solving the expert-coverage fixed point.

    .. math::
        L = \frac{C_{1u} + \varphi(T)\,C_{1s}}{1 - \mathrm{rps}\,(C_{2u} + \varphi(T)\,C_{2s})},
        \qquad T = \mathrm{rps}\cdot L\cdot(k+1),

    ``T`` being the tokens the verifier scores per step (``k + 1`` per request in the batch).
    ``C*u`` are the coefficients' uncovered parts and ``C*s`` the parts that grow with coverage;
    for SD pass the effective coefficients of :func:`effective_coefficients` split the same way.

    Convergence: the map :math:`f(L)` on the right is non-decreasing in ``L`` (coverage grows with
    tokens, latency with coverage) and bounded above by its value at full coverage
    :math:`\varphi = 1`. Iterating :math:`L_{n+1} = f(L_n)` from that bound therefore gives a
    non-increasing sequence that converges monotonically to the largest fixed point, linearly with
    rate :math:`f'(L^*) < 1`; a handful of iterations suffices in practice. Iteration stops when
    every element moves by less than ``tol`` relative, or raises after ``max_iter``. The result is
    ``inf`` where the system saturates even at that fixed point.

    Returns
    -------
    L in seconds, the shape of the broadcast inputs.
    """
    lat = latency(rps, c1u + c1s, c2u + c2s)  # phi = 1
    lat = np.asarray(lat, dtype=float) if not isinstance(lat, xr.DataArray) else lat
    for _ in range(max_iter):
        finite = np.isfinite(lat)
        phi = moe_coverage(rps * _where(finite, lat, 0.0) * (k + 1), active, total)
        phi = _where(finite, phi, 1.0)
        new = latency(rps, c1u + phi * c1s, c2u + phi * c2s)
        with np.errstate(invalid="ignore"):
            step = np.abs(new - lat) / np.maximum(np.abs(new), 1e-300)
        done = bool((~np.isfinite(new) | (step <= tol)).all())
        lat = new
        if done:
            return lat
    raise NumericalError(
        f"moe_latency: the coverage fixed point did not converge in {max_iter} iterations; "
        "check that the coefficients are positive and finite"
    )


def collapse(rps, lat, c1, c2):
    """The universal collapse: ``x = rps·C2``, ``y = L/C1``; theory says ``y = 1/(1 - x)``."""
    return rps * c2, lat / c1
