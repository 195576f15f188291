r"""``roofline``: the paper's memory-bound line, and each step's arithmetic past the knee.

A verify step costs the larger of reading the weights and KV cache and the arithmetic on its
tokens (DESIGN.md §2a). The paper's model is the first; this variant adds the second as the
GPU's roofline, one compute time per token ``f`` and knees ``T*`` (tokens a step) per
server, and solves for each row's latency the mean-field fixed point of
:func:`bayeslat.theory.roofline_latency`:

.. math::
    L = C_1 + C_2 B + n\,\mathrm{E}_m\bigl[f\,(B(k+1) + m\,p - T^*)^+
        + f\,r\,(B + m\,p - T^*_d)^+\bigr], \qquad B = \mathrm{rps}\,L,
    \quad \bar m = \mathrm{rps}\,L/n,

``n = g/E(alpha, k)`` verify steps a request, ``p`` its prompt's tokens, ``m`` the prompts
that join a step (its floor and ceiling for evenly spaced arrivals, a Poisson count for
Poisson ones) and ``r`` the drafter's size over the verifier's (its first pass, which sees the
prompts too, past the drafter's own knee ``T*_d``: its weights need not be the verifier's
precision, and with one knee for both the 70B FP8 verifier's fit split into two modes;
0 for the baseline). ``C1`` and ``C2`` keep the hierarchical six-coefficient law of
:mod:`~bayeslat.models.hierarchical` (the prefill stall linear in its arithmetic, as in
:mod:`~bayeslat.models.capacity`: the knee is now the roofline's), and the server's two
constants follow its verifier's size:

.. math::
    \log f_s \sim N\bigl(\log(\phi\,N_s),\ s_\phi\bigr), \qquad
    \log T^*_s \sim N(\log T_0,\ s_T), \qquad \log T^*_{d,s} \sim N(\log T^*_s,\ s_d),

``N_s`` the verifier's parameters (billions), ``(φ, s_φ)`` the ``token_compute`` prior (s per
token per billion parameters: ``2·10⁹/FLOPs`` at the utilisation a real GPU reaches),
``(T_0, s_T)`` the ``roofline_knee`` prior and ``s_d`` the ``drafter_knee_spread``: a knee is
the GPU's FLOPs per byte read times the bytes a weight takes, so drafter and verifier on one
GPU share it but for their weights' precision (twice the verifier's for a 16-bit drafter beside
an fp8 verifier). The data see the drafter's knee only through the prompts its first pass
carries; sampled apart from the verifier's, the 8B's on the shipped example had two modes
(about 280 and 450 tokens) and mixed slowest of all variables (bulk ESS 29 of 600 draws; tied,
205). Where no step passes its knee the form is the paper's curve; past it the curve bends
by the arithmetic each step adds, and the capacity is where the fixed point has no root
(:func:`~bayeslat.theory.roofline_capacity`). There are no walls, shares or powers per
configuration: three constants per server carry the bend of every curve it serves.

The measured ceilings are data: a throughput benchmark, every request sent at once, runs a
full batch, and :func:`~bayeslat.theory.roofline_throughput` is that batch's rate,

.. math::
    \log \mathrm{ceiling}_c \sim N\bigl(\log \mathrm{throughput}_c - \delta,\
    \sigma_{\mathrm{cap}}\bigr),

with the shortfall ``δ`` and the scale of :meth:`~bayeslat.models.base.LatencyModel.
ceiling_likelihood`. The batch's cap is :data:`~bayeslat.theory.BATCH_CAP` (vLLM's default
``max_num_seqs``): where the KV cache binds first (a long context on a large model) the
ceiling sits below it, which this variant does not yet read.

The fit's curves are the form's; requests sent evenly spaced (GuideLLM's constant rate) meet
``⌊rps·L⌋`` prompts a life, not its mean, so the predictive checks and the decisions put a
constant-rate fit's latencies on that staircase (:meth:`RooflineModel.evenly_spaced`: each
step a prompt's ``c2p`` and its arithmetic past the knees, flat at its bottom step while
requests run alone).

The likelihood is the base's Student-t on each row's log latency. The form's corners
(``(·)^+`` at the knees, the whole prompts of the floor-and-ceiling mixture) are rounded as in
the theory (:data:`~bayeslat.theory.HINGE_WIDTH`, :data:`~bayeslat.theory.COUNT_WIDTH`):
sharp, a row's scale jumps where its load crosses one, and the sampler's steps shrank a
thousandfold. Each row's root is found in compiled code (:func:`solve`: Newton's method from
the paper's root; the right side is convex in ``L``) with its gradient by the implicit
function theorem, ``dL/dθ = (∂F/∂θ)/(1 − ∂F/∂L)`` (:class:`RooflineLatency`). A proposal whose
fixed point has no root at an observed rate has log density ``-inf`` (the sampler rejects it).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math

import numba
import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import scaling, theory
from bayeslat.data import schema
from bayeslat.errors import FitError, NumericalError
from bayeslat.models.base import prepare
from bayeslat.models.capacity import CAPACITY_STALL
from bayeslat.models.hierarchical import HierarchicalModel, _dim
from bayeslat.scaling import ScalingConfig
from bayeslat.theory import COUNT_WIDTH, HINGE_WIDTH, SOFTPLUS_LINEAR

# The parts of a row: its curve's memory-bound line, its server's roofline.
ROOFLINE_PARTS = ("C1", "C2", "f", "knee", "knee_d")
# Prior mean of the jitter of the server's speed (likelihood_scale), a quarter of the capacity
# variants': the amplification at the example's top rates is 2-7 (median 3.2), so 0.005 is
# 1.6% there. At their 0.02 a short fit found a second mode, sigma 1.3% and f a third of the
# engine's (benchmarks/README.md, forty-fifth session).
SIGMA_WALL_MEAN = 0.005
# The start's grid of each server's roofline (RooflineModel.roofline_start): f as multiples
# of its prior's median, and knees (tokens), the verifier's and the drafter's alike.
F_GRID = 2.0 ** np.arange(-3.0, 3.0, 0.5)
KNEE_GRID = (64.0, 96.0, 128.0, 192.0, 256.0, 384.0)
# Newton steps a row may take (from C1 it takes about four).
ITERATIONS = 100
# Bisections of the batch at the capacity (theory.roofline_capacity's).
CAPACITY_BISECTIONS = 50


@numba.njit(cache=True)
def _hinge(t, width):
    """``width·softplus(t/width)`` (:func:`bayeslat.theory._hinge`) and its first and second
    derivatives in ``t``; exactly ``0`` or ``t`` past :data:`~bayeslat.theory.SOFTPLUS_LINEAR`
    widths, which is most rows and terms."""
    z = t / width
    if z < -SOFTPLUS_LINEAR:
        return 0.0, 0.0, 0.0
    if z > SOFTPLUS_LINEAR:
        return t, 1.0, 0.0
    e = math.exp(-abs(z))
    on = 1.0 / (1.0 + e) if z >= 0.0 else e / (1.0 + e)
    return width * (max(z, 0.0) + math.log1p(e)), on, on * (1.0 - on) / width


@numba.njit(cache=True)
def _excess(x, m, prefill, poisson, hinge, count):
    """``V = E[h(x + m'·p)]`` over the prompts ``m'`` that join a step (mean ``m``) and its
    derivatives ``V_x`` (about the share of steps past the knee), ``V_m``, ``V_xm``, ``V_mm``
    and ``V_xx``: :func:`bayeslat.theory._prompt_excess` in compiled code, with the second
    derivatives the amplification's gradient needs."""
    a = _hinge(x, hinge)  # g(j), g(j + 1), g(j + 2) as the sums walk up the counts
    b = _hinge(x + prefill, hinge)
    if not poisson:  # the line through the g(j) with its corners smoothed (theory)
        value, vx, vxx = a[0] + (b[0] - a[0]) * m, a[1] + (b[1] - a[1]) * m, a[2] + (
            b[2] - a[2]) * m
        vm, vxm, vmm = b[0] - a[0], b[1] - a[1], 0.0
        if prefill <= 0.0:
            return value, vx, vm, vxm, vmm, vxx
        # the bends vanish but near the knee's crossing, n = -x/p (theory.bend_window)
        half = 1 + int(math.ceil(SOFTPLUS_LINEAR * hinge / prefill))
        cross = math.floor(-x / prefill)
        n = max(1.0, cross - half)
        if n > 1.0:
            a = _hinge(x + (n - 1.0) * prefill, hinge)
            b = _hinge(x + n * prefill, hinge)
        while n <= cross + half + 1.0:
            ramp, d_ramp, dd_ramp = _hinge(m - n, count)
            if ramp == 0.0:  # and for every count past this one
                break
            c = _hinge(x + (n + 1.0) * prefill, hinge)
            bend, bend_x, bend_xx = (c[0] - 2.0 * b[0] + a[0], c[1] - 2.0 * b[1] + a[1],
                                     c[2] - 2.0 * b[2] + a[2])
            value += bend * ramp
            vx += bend_x * ramp
            vxx += bend_xx * ramp
            vm += bend * d_ramp
            vxm += bend_x * d_ramp
            vmm += bend * dd_ramp
            a, b = b, c
            n += 1.0
        return value, vx, vm, vxm, vmm, vxx
    # Poisson: d/dm E[φ(m')] = E[φ(m' + 1) − φ(m')]; the counts within ten standard deviations
    # and a dozen of the mean carry all the mass (m = 0: all of it at 0)
    half = int(math.ceil(10.0 * math.sqrt(max(m, 0.0)) + 12.0))
    first = max(0, int(math.floor(max(m, 0.0))) - half)
    if first > 0:
        a = _hinge(x + first * prefill, hinge)
        b = _hinge(x + (first + 1.0) * prefill, hinge)
    weight = math.exp(first * math.log(m) - m - math.lgamma(first + 1.0)) if m > 0.0 else 1.0
    value = vx = vm = vxm = vmm = vxx = 0.0
    for j in range(first, first + 2 * half + 1):
        c = _hinge(x + (j + 2.0) * prefill, hinge)
        value += weight * a[0]
        vx += weight * a[1]
        vxx += weight * a[2]
        vm += weight * (b[0] - a[0])
        vxm += weight * (b[1] - a[1])
        vmm += weight * (c[0] - 2.0 * b[0] + a[0])
        weight *= m / (j + 1.0)  # the next count's
        a, b = b, c
    return value, vx, vm, vxm, vmm, vxx


@numba.njit(cache=True)
def _side(lat, rps, c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson, hinge, count):
    """The fixed point's right side ``F(L)``; its slope ``S = ∂F/∂L``; ``∂F/∂`` ``c2``,
    ``f``, ``knee``, ``knee_d`` (``∂F/∂c1`` is 1); ``∂S/∂L`` and ``∂S/∂`` ``knee``,
    ``knee_d`` (``∂S/∂c2 = rps``, ``∂S/∂f = (S − c2·rps)/f``, ``∂S/∂c1 = 0``)."""
    batch = rps * lat
    per_step = rps / cycles  # dm/dL
    m = batch / cycles
    # the verifier's tokens move by rps·(k+1) along L, the drafter's first pass's by rps
    dv, dd = rps * (k + 1.0), rps
    v, vx, vm, vxm, vmm, vxx = _excess(batch * (k + 1.0) - knee, m, prefill, poisson, hinge,
                                       count)
    d, dx, dm, dxm, dmm, dxx = _excess(batch - knee_d, m, prefill, poisson, hinge, count)
    slope = c2 * rps + cycles * f * (dv * vx + per_step * vm + ratio * (dd * dx + per_step * dm))
    s_lat = cycles * f * (dv * dv * vxx + 2.0 * dv * per_step * vxm + per_step * per_step * vmm
                          + ratio * (dd * dd * dxx + 2.0 * dd * per_step * dxm
                                     + per_step * per_step * dmm))
    return (c1 + c2 * batch + cycles * f * (v + ratio * d), slope, batch,
            cycles * (v + ratio * d), -cycles * f * vx, -cycles * f * ratio * dx, s_lat,
            -cycles * f * (dv * vxx + per_step * vxm),
            -cycles * f * ratio * (dd * dxx + per_step * dxm))


def solve(rps, c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson):
    """Each row's log latency, the smallest root of ``L = F(L)`` (Newton's method from the
    paper's root ``C1/(1 − rps·C2)``, below it; ``inf`` where no root is ahead), its
    amplification ``A = S/(1 − S)`` (``S`` the right side's slope at the root: how much more
    than in proportion the latency moves when every step's cost does; 0 at zero load), and the
    gradients of both with respect to ``c1``, ``c2``, ``f``, ``knee`` and ``knee_d`` (rows × 5:
    ``d log L/dθ`` and ``dA/dθ``; 0 where there is no root), the form's corners rounded to
    :data:`~bayeslat.theory.HINGE_WIDTH` and :data:`~bayeslat.theory.COUNT_WIDTH`. By the
    implicit function theorem, ``dL/dθ = (∂F/∂θ)/(1 − S)`` and
    ``dS/dθ = ∂S/∂θ + (∂S/∂L)·dL/dθ``."""
    return _solve(rps, c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson,
                  HINGE_WIDTH, COUNT_WIDTH)


@numba.njit(cache=True)
def _solve(rps, c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson, hinge, count):
    """:func:`solve` with the widths as arguments: numba's disk cache keys a function on its
    own file, so a global read from :mod:`bayeslat.theory` would stay what it was compiled
    with (:data:`~bayeslat.theory.SOFTPLUS_LINEAR`, a property of doubles, is read so)."""
    n = rps.shape[0]
    out, amp = np.empty(n), np.zeros(n)
    grad, grad_amp = np.zeros((n, 5)), np.zeros((n, 5))
    for i in range(n):
        # from the paper's root, below the form's (F ≥ C1 + C2·B), which is most rows' own
        # where no step passes a knee; none where the memory line alone has none
        found = False
        lat = c1[i] / (1.0 - rps[i] * c2[i]) if rps[i] * c2[i] < 1.0 else np.inf
        for _ in range(ITERATIONS if lat < np.inf else 0):
            side, s, g2, gf, gk, gd, s_lat, s_k, s_kd = _side(
                lat, rps[i], c1[i], c2[i], f[i], knee[i], knee_d[i], cycles[i], k[i],
                prefill[i], ratio[i], poisson[i] > 0, hinge, count)
            gap = side - lat
            if abs(gap) <= 1e-13 * lat:
                found = s < 1.0
                break
            if s >= 1.0:  # the convex gap no longer falls: no root ahead
                break
            lat -= gap / (s - 1.0)
        if not found:
            out[i] = np.inf
            continue
        out[i] = math.log(lat)
        inv = 1.0 / (1.0 - s)
        amp[i] = s * inv
        d_lat = (inv, g2 * inv, gf * inv, gk * inv, gd * inv)
        s_theta = (0.0, rps[i], (s - c2[i] * rps[i]) / f[i], s_k, s_kd)
        for j in range(5):
            grad[i, j] = d_lat[j] / lat
            grad_amp[i, j] = (s_theta[j] + s_lat * d_lat[j]) * inv * inv
    return out, amp, grad, grad_amp


def prompt_stall(lat, rps, f, knee, knee_d, cycles, k, prefill, ratio, poisson):
    """What one more prompt a life adds to each row's latency ``lat`` (s) at ``rps`` under
    the form, ``f·(∂V/∂m + r·∂D/∂m)``: its arithmetic in the step it joins, past the
    verifier's knee and the drafter's (:func:`_excess`, the form's corners rounded as
    :func:`solve`'s; NaN where ``lat`` is not finite). With ``c2p`` it is the step of the
    staircase evenly spaced requests climb (:meth:`RooflineModel.evenly_spaced`)."""
    return _prompt_stall(lat, rps, f, knee, knee_d, cycles, k, prefill, ratio, poisson,
                         HINGE_WIDTH, COUNT_WIDTH)


@numba.njit(cache=True)
def _prompt_stall(lat, rps, f, knee, knee_d, cycles, k, prefill, ratio, poisson, hinge,
                  count):
    """:func:`prompt_stall` with the widths as arguments (:func:`_solve`)."""
    out = np.full(lat.shape[0], np.nan)
    for i in range(lat.shape[0]):
        if not np.isfinite(lat[i]):
            continue
        batch = rps[i] * lat[i]
        m = batch / cycles[i]
        vm = _excess(batch * (k[i] + 1.0) - knee[i], m, prefill[i], poisson[i] > 0, hinge,
                     count)[2]
        dm = _excess(batch - knee_d[i], m, prefill[i], poisson[i] > 0, hinge, count)[2]
        out[i] = f[i] * (vm + ratio[i] * dm)
    return out


def capacity(c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson):
    """Each row's capacity (req/s): :func:`~bayeslat.theory.roofline_capacity` in compiled
    code, the peak of ``B/F(B)`` by bisection on the sign of ``B·F'(B) − F(B)``, or the full
    batch's rate where the batch fills first (flat rows as :func:`solve`'s, less ``rps``)."""
    return _capacity(c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson,
                     HINGE_WIDTH, COUNT_WIDTH, float(theory.BATCH_CAP))


@numba.njit(cache=True)
def _capacity(c1, c2, f, knee, knee_d, cycles, k, prefill, ratio, poisson, hinge, count,
              batch_cap):
    """:func:`capacity` with the widths and the batch cap as arguments (:func:`_solve`).
    At unit rate the latency is the batch, so :func:`_side`'s ``F`` and slope are ``F(B)``
    and ``F'(B)``."""
    n = c1.shape[0]
    out = np.empty(n)
    for i in range(n):
        args = (c1[i], c2[i], f[i], knee[i], knee_d[i], cycles[i], k[i], prefill[i], ratio[i],
                poisson[i] > 0, hinge, count)
        side, slope = _side(batch_cap, 1.0, *args)[:2]
        batch = batch_cap
        if batch_cap * slope > side:  # the peak comes before the batch fills
            lo, hi = 0.0, batch_cap
            for _ in range(CAPACITY_BISECTIONS):
                mid = 0.5 * (lo + hi)
                side, slope = _side(mid, 1.0, *args)[:2]
                if mid * slope > side:
                    hi = mid
                else:
                    lo = mid
            batch = 0.5 * (lo + hi)
        out[i] = batch / _side(batch, 1.0, *args)[0]
    return out


@functools.cache
def _op_class():
    """:class:`RooflineLatency`, built on first use (PyTensor's import is seconds of a verb
    that never samples), with its numba implementation registered."""
    import pytensor.tensor as pt
    from pytensor.gradient import DisconnectedType
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class RooflineLatency(Op):
        """Each row's log latency under the roofline form and its amplification (two
        vectors, :func:`solve`), then the gradient of each with respect to the row's
        ``c1``, ``c2``, ``f``, ``knee`` and ``knee_d`` (five vectors each), as outputs of one
        node; inputs those five, then the data ``rps``, ``cycles``, ``k``, ``prompt``,
        ``ratio`` and ``poisson`` (1 for Poisson arrivals)."""

        __props__ = ()
        n_params = len(ROOFLINE_PARTS)

        def make_node(self, *inputs):
            inputs = [pt.as_tensor_variable(x) for x in inputs]
            outputs = [pt.dvector() for _ in range(2 + 2 * self.n_params)]
            return Apply(self, inputs, outputs)

        def perform(self, node, inputs, output_storage):
            *parts, rps = (np.asarray(x, dtype=float) for x in inputs[:self.n_params + 1])
            data = (np.asarray(x, dtype=float) for x in inputs[self.n_params + 1:])
            for store, value in zip(output_storage, _outputs(*solve(rps, *parts, *data)),
                                    strict=True):
                store[0] = value

        def connection_pattern(self, node):
            n_out = len(node.outputs)
            return [[i < self.n_params] * n_out for i in range(len(node.inputs))]

        def grad(self, inputs, output_grads):
            out = self(*inputs)
            n = self.n_params
            grads = [pt.zeros_like(inputs[j]) for j in range(n)]
            for which, g in enumerate(output_grads[:2]):  # log L, then the amplification
                if isinstance(g.type, DisconnectedType):
                    continue
                grads = [total + g * out[2 + which * n + j] for j, total in enumerate(grads)]
            return grads + [DisconnectedType()() for _ in inputs[n:]]

    _register(RooflineLatency)
    return RooflineLatency


@numba.njit
def _outputs(log_lat, amp, grad, grad_amp):
    """The Op's outputs from :func:`solve`'s: the two vectors, then each gradient's columns."""
    return (log_lat, amp, np.ascontiguousarray(grad[:, 0]), np.ascontiguousarray(grad[:, 1]),
            np.ascontiguousarray(grad[:, 2]), np.ascontiguousarray(grad[:, 3]),
            np.ascontiguousarray(grad[:, 4]), np.ascontiguousarray(grad_amp[:, 0]),
            np.ascontiguousarray(grad_amp[:, 1]), np.ascontiguousarray(grad_amp[:, 2]),
            np.ascontiguousarray(grad_amp[:, 3]), np.ascontiguousarray(grad_amp[:, 4]))


def _register(cls) -> None:
    """Give the Op ``cls`` a numba implementation, cached under a key that names the kernel's
    source, so that nutpie's compiled log density calls :func:`solve` in compiled code."""
    from pytensor.link.numba.dispatch import basic

    source = "".join(inspect.getsource(getattr(f, "py_func", f))
                     for f in (_hinge, _excess, _side, _solve, _outputs))
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    @numba.njit
    def fused(c1, c2, f, knee, knee_d, rps, cycles, k, prefill, ratio, poisson):
        return _outputs(*_solve(rps, c1, c2, f, knee, knee_d, cycles, k, prefill, ratio,
                                poisson, HINGE_WIDTH, COUNT_WIDTH))

    @basic.register_funcify_and_cache_key(cls)
    def _funcify(op, node, **kwargs):
        return fused, f"bayeslat-roofline-{key}-{ITERATIONS}-{HINGE_WIDTH}-{COUNT_WIDTH}"


def _bare(value: xr.DataArray) -> xr.DataArray:
    """``value`` without coordinates: its dims alone say how it broadcasts."""
    return xr.DataArray(np.asarray(value), dims=value.dims)


def _flat(parts, rows: pd.DataFrame, rps: xr.DataArray, prompt=None):
    """The inputs of :func:`solve` for the predicted ``parts`` of ``rows`` (prepared) at the
    loads ``rps``, broadcast together and flattened: a template DataArray of their shape
    (dims, no other coordinates) and the flat arrays, ``rps`` first (``prompt``: the tokens of
    a joining prompt, :func:`row_terms`' when None)."""
    terms = row_terms(rows)
    data = [xr.DataArray(value, dims="obs") for value in (
        terms["cycles"], rows["k"].to_numpy(float),
        terms["prompt"] if prompt is None else prompt, terms["ratio"], terms["poisson"])]
    args = xr.broadcast(rps, *(parts[name].reset_coords(drop=True) for name in ROOFLINE_PARTS),
                        *data)
    dims = args[0].dims
    template = args[0].transpose(*dims)
    template = template.drop_vars(template.coords.keys() - set(dims))
    return template, [np.ascontiguousarray(a.transpose(*dims).values, dtype=float).ravel()
                      for a in args]


def _solve_flat(rps, inputs, chunk: int = 200_000):
    """Latency (s) and amplification of flat rows (:func:`_flat`) by :func:`solve`, ``chunk``
    rows at a time: ``inf`` and 0 where there is no steady state or the batch passes
    :data:`~bayeslat.theory.BATCH_CAP`."""
    lat, amp = np.empty(rps.size), np.empty(rps.size)
    for start in range(0, rps.size, chunk):
        part = slice(start, start + chunk)
        log_lat, amp[part], _, _ = solve(np.ascontiguousarray(rps[part]),
                                         *(a[part] for a in inputs))
        lat[part] = np.exp(log_lat)
    full = ~(rps * lat <= theory.BATCH_CAP)
    lat[full], amp[full] = np.inf, 0.0
    return lat, amp


def log_latency(parts: dict, data: dict):
    """Each row's log latency and amplification (:func:`solve`; tensors) from its ``parts``
    (:data:`ROOFLINE_PARTS`) and ``data`` (``rps``, ``cycles``, ``k``, ``prompt``,
    ``ratio``, ``poisson``: :func:`row_terms`)."""
    import pytensor.tensor as pt

    inputs = [parts[n] for n in ROOFLINE_PARTS] + [data[n] for n in (
        "rps", "cycles", "k", "prompt", "ratio", "poisson")]
    out = _op_class()()(*(pt.as_tensor_variable(x, dtype="float64") for x in inputs))
    return out[0], out[1]


def row_terms(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each row's inputs to the roofline form besides its parts and rate: verify steps
    ``cycles`` (:func:`~bayeslat.theory.verify_cycles`), the drafter's size over the
    verifier's ``ratio`` (0 for the baseline), ``poisson`` (1 for Poisson arrivals) and
    ``prompt``, the tokens of a prompt that joins a step: the prefill's, but 0 for a
    synchronous benchmark, whose lone request meets no other's prompt (its own prefill is in
    ``C1``; the mean-field count of ``rps·L = 1`` arrival a lifetime would charge it twice)."""
    k = rows["k"].to_numpy(float)
    ratio = (rows["drafter_params_b"] / rows["verifier_params_b"]).to_numpy(float)
    strategy = rows["strategy"] if "strategy" in rows else pd.Series("constant", rows.index)
    return {"cycles": theory.verify_cycles(rows["decode_tokens"].to_numpy(float),
                                           rows["alpha0"].to_numpy(float), k),
            "ratio": np.where(k > 0, np.nan_to_num(ratio), 0.0),
            "poisson": (strategy == "poisson").to_numpy(float),
            "prompt": np.where(strategy == "synchronous", 0.0,
                               rows["prefill_tokens"].to_numpy(float))}


class RooflineModel(HierarchicalModel):
    """Six per-stage coefficients with scaling priors, and each server's roofline: a compute
    time per token and the verifier's and the drafter's knees (module docstring)."""

    variant = "roofline"
    parts = ROOFLINE_PARTS
    fits_ceilings = True
    fuses = False  # the row likelihood is the roofline Op's, in the graph
    implicit = True  # decide reads latency, capacity and break_even (no closed form)
    coef_names = scaling.COEFS

    @classmethod
    def default_config(cls) -> ScalingConfig:
        """The hierarchical defaults with the prefill stall linear in its arithmetic (the knee
        is the roofline's) and the ceilings' shortfall sampled (``ceiling_shortfall_sd``
        0.05, as ``capacity``)."""
        return ScalingConfig(design=scaling.DEFAULT_DESIGN | {"c2p": CAPACITY_STALL},
                             priors=copy.deepcopy(scaling.DEFAULT_PRIORS)
                             | {"ceiling_shortfall_sd": 0.05,
                                "sigma_wall_mean": SIGMA_WALL_MEAN},
                             noncentered=("c1p",))

    def curve_inputs(self, curves):
        terms = row_terms(curves)
        return super().curve_inputs(curves) | {
            "prefill_tokens": curves["prefill_tokens"].to_numpy(float),
            "cycles": terms["cycles"], "ratio": terms["ratio"]}

    def row_inputs(self, rows: pd.DataFrame) -> dict[str, np.ndarray]:
        terms = row_terms(rows)
        return {name: terms[name] for name in ("poisson", "prompt")}

    def coords(self):
        return super().coords() | {"server": self.servers.to_numpy()}

    def server_index(self, rows: pd.DataFrame) -> np.ndarray:
        """Each row's position among the fitted servers; a :class:`FitError` for a server the
        fit never measured (its roofline has no law across servers yet)."""
        idx = self.servers.get_indexer(schema.server_labels(rows))
        if (idx < 0).any():
            new = sorted(set(schema.server_labels(rows)[idx < 0]))
            raise FitError(f"the roofline model has no roofline for {', '.join(new)}: it "
                           "knows the servers it was fitted on (each GPU's compute time and "
                           "knee); measure a sweep there, or use --model capacity")
        return idx

    def coefficients(self, curves, data, dim):
        import pymc as pm
        import pytensor.tensor as pt

        out = super().coefficients(curves, data, dim)
        median, log_sd = self.config.prior("token_compute")
        log_f = pm.Normal("log_f", np.log(median * self.server_sizes), log_sd, dims="server")
        median, log_sd = self.config.prior("roofline_knee")
        log_knee = pm.Normal("log_knee", np.log(median), log_sd, dims="server")
        # the drafter's knee is its GPU's, as the verifier's, but for its weights' precision
        knees = {"knee": log_knee, "knee_d": pm.Normal(
            "log_knee_d", log_knee, self.config.prior("drafter_knee_spread"), dims="server")}
        idx = pm.Data("server_idx", self.server_index(curves), dims=dim)
        return out | {"f": pt.exp(log_f)[idx]} | {name: pt.exp(value)[idx]
                                                   for name, value in knees.items()}

    jittered = True  # its scale grows with the amplification (likelihood_scale)

    def log_mean(self, parts, data):
        return log_latency(parts, data)[0]

    @staticmethod
    def likelihood_scale(sigma, se_rel, parts, data, sigma_wall=None):
        r"""The Student-t scale of each row, :math:`s^2 = \sigma^2 + \mathrm{se}^2 +
        (\sigma_{\mathrm{wall}} A)^2`, ``A`` the row's amplification (:func:`solve`; the
        same node as the mean's, which PyTensor merges): a jitter ``sigma_wall`` of the
        server's speed, which each benchmark sees its own of, moves the latency by
        ``sigma_wall·(1 + A)`` in log terms, and ``sigma`` takes the part that does not
        grow. Near capacity the form is an approximation too (the batch fluctuates, the
        token budget and the KV cache bind), and what it misses grows as ``A`` does."""
        import pytensor.tensor as pt

        _, amplification = log_latency(parts, data)
        return pt.sqrt(sigma**2 + se_rel**2 + (sigma_wall * amplification) ** 2)

    def scatter(self, posterior, parts, rps, rows=None):
        """``sqrt(sigma² + (sigma_wall·A)²)`` (:meth:`likelihood_scale`) of the predicted
        ``parts`` of ``rows`` at the loads ``rps`` (the rows' own, or a DataArray broadcast
        against them; ``sigma`` where a draw has no steady state)."""
        if rows is None:
            raise FitError("the roofline model's scatter needs the rows it predicts")
        amp = self.solved(parts, rows, rps)[1]
        return np.sqrt(posterior["sigma"] ** 2 + (posterior["sigma_wall"] * amp) ** 2)

    def ceiling_likelihood(self, parts, curves):
        import pymc as pm
        import pytensor.tensor as pt

        if self.ceilings.empty:
            return
        idx = pd.Index(curves["config"]).get_indexer(self.ceilings["config"])
        terms = row_terms(curves)
        throughput = theory.roofline_throughput(
            parts["C1"], parts["C2"], parts["f"], parts["knee"], terms["cycles"],
            curves["k"].to_numpy(float), curves["prefill_tokens"].to_numpy(float),
            parts["f"] * terms["ratio"], parts["knee_d"])
        self.observe_ceilings(pt.log(throughput)[pm.Data("ceiling_idx", idx, dims="ceiling")])

    def known_parts(self, rows, seed=0):
        """``C1``, ``C2`` from the stored per-unit coefficients, ``f`` and the knee from each
        row's server, where every unit of ``rows`` was fitted (None otherwise: the graph)."""
        index = self.fitted_units(rows)
        if index is None:
            return None
        at = xr.DataArray(self.server_index(rows), dims="obs")
        post = self.posterior
        return self.parts_of(post, rows, *index) | {
            name: np.exp(post[f"log_{name}"].isel(server=at).drop_vars("server"))
            for name in ("f", "knee", "knee_d")}

    def stall(self, parts, rows: pd.DataFrame, latency: xr.DataArray, rps) -> xr.DataArray:
        """Draws of the stall (s) one request arriving during another's life adds to it, at
        the loads ``rps`` where the predicted ``parts`` of ``rows`` (prepared, their prompts
        evenly spaced) have the latency ``latency``: ``c2p`` (:meth:`prefill_stall`) and the
        prompt's arithmetic in the step it joins, which depends on the load
        (:func:`prompt_stall`)."""
        rows = rows.assign(strategy="constant")
        if not isinstance(rps, xr.DataArray):
            rps = xr.DataArray(rps)
        template, flat = _flat(parts, rows, rps)
        lat = xr.broadcast(_bare(latency), _bare(template))[0].transpose(*template.dims)
        extra = prompt_stall(np.ascontiguousarray(lat.values).ravel(), flat[0], *flat[3:])
        return self.prefill_stall(rows) + template.copy(data=extra.reshape(template.shape))

    def evenly_spaced(self, parts, rows: pd.DataFrame, latency: xr.DataArray, rps):
        """``latency`` (the form's, of the predicted ``parts`` of ``rows`` at ``rps``) as
        requests sent evenly spaced see it (:func:`bayeslat.theory.evenly_spaced`). The form
        counts ``rps·L`` prompts a life, the mean of Poisson arrivals; evenly spaced ones bring
        ``⌊rps·L⌋``, so the latency climbs a staircase of :meth:`stall`, off the form by up to
        half a stall between steps (on the 70B engine sweeps' 1,024-token prompts a quarter
        of a second: 8% of a lone baseline request's latency, 30% of a k = 6 one's). Three
        regimes: below ``rps = 1/lone`` requests never meet and the latency is :meth:`lone`,
        the staircase's bottom step; up to ``rps·stall`` = ½ the staircase about the form,
        anchored at the configuration's fitted constant rates where it holds
        (:func:`~bayeslat.theory.staircase_offset`); past that, where two counts or more are
        consistent (:data:`~bayeslat.theory.UNIQUE_COUNT`), the form."""
        rows = prepare(rows)
        # the anchor is a configuration's: solved once per configuration at its rates
        first = ~rows["config"].duplicated().to_numpy()
        which = pd.Index(rows.loc[first, "config"]).get_indexer(rows["config"])
        one = {name: parts[name].isel(obs=np.flatnonzero(first)) for name in ROOFLINE_PARTS}
        ones = rows[first].reset_index(drop=True).assign(strategy="constant")
        rates = self.constant_rates(ones)
        at = self.latency(one, ones, rates)
        stall = self.stall(one, ones, at, rates)
        # anchored where the staircase holds: one consistent count, requests meeting
        at = at.where((rates * stall < theory.UNIQUE_COUNT) & (rates * self.lone(one, ones) >= 1))
        offset = theory.staircase_offset(at, rates, stall, "rate")
        return theory.evenly_spaced(latency, rps, self.stall(parts, rows, latency, rps),
                                    _bare(offset).isel(obs=xr.DataArray(which, dims="obs")),
                                    self.lone(parts, rows), theory.UNIQUE_COUNT)

    def lone(self, parts, rows: pd.DataFrame) -> xr.DataArray:
        """Draws of each row's latency (s) when its requests run one at a time: the bottom
        step of the staircase about the form, ``C1 + s/2`` (the form's intercept is the line
        through the steps' midpoints; ``s`` the :meth:`stall` at zero load)."""
        return parts["C1"] + self.stall(parts, rows, parts["C1"], 0.0) / 2

    def latency(self, parts, rows, rps=None):
        """The roofline form's latency (s, ``inf`` past the steady state or the batch cap) of
        ``rows`` at their rates, or at the loads ``rps`` (a DataArray, broadcast)."""
        lat = self.solved(parts, rows, rps)[0]
        return lat if rps is not None else lat.transpose("chain", "draw", "obs")

    @staticmethod
    def solved(parts, rows, rps=None):
        """Each row's latency (s, ``inf`` past the steady state or the batch cap
        :data:`~bayeslat.theory.BATCH_CAP`) and amplification (0 there) under the roofline
        form, from the predicted ``parts`` of ``rows`` (prepared) at their rates or at the
        loads ``rps`` (a DataArray broadcast against them): the compiled :func:`solve`, which
        matches :func:`~bayeslat.theory.roofline_latency` (``tests/test_roofline.py``) at about a
        twentieth of its cost."""
        if rps is None:
            rps = rows["rps"].to_numpy(float)
        if not isinstance(rps, xr.DataArray):
            rps = xr.DataArray(np.asarray(rps, dtype=float), dims="obs")
        template, flat = _flat(parts, rows, rps)
        lat, amp = _solve_flat(flat[0], flat[1:])
        return tuple(template.copy(data=value.reshape(template.shape)).transpose(
            *parts["C1"].dims, ...) for value in (lat, amp))

    def break_even(self, parts, rows, base, capacity=None):
        """RPS* (req/s) of each row's configuration against the row ``base[i]``, its
        baseline: the lowest load below the baseline's capacity (``capacity``, the rows'
        :meth:`capacity` when None) at which their latencies cross
        (:func:`~bayeslat.theory.first_crossing`; NaN where they never do), per draw of the
        predicted ``parts`` of ``rows`` (dims ``chain, draw, obs``)."""
        base = np.asarray(base)

        def of_base(value):
            return value.isel(obs=base).assign_coords(obs=value["obs"].values)

        top = of_base(self.capacity(parts, rows) if capacity is None else capacity)
        template, mine = _flat(parts, rows, top)
        _, theirs = _flat({name: of_base(parts[name]) for name in ROOFLINE_PARTS},
                          rows.iloc[base].reset_index(drop=True), top)

        def gap(rps):
            rps = np.broadcast_to(rps, mine[0].shape)
            return _solve_flat(rps, mine[1:])[0] - _solve_flat(rps, theirs[1:])[0]

        # each step costs two Newton roots a row: half the closed forms' grid, and a
        # precision of 1e-6 of its step, ample for a decision
        star = theory.first_crossing(gap, mine[0], np.sign(gap(0.0)), steps=20,
                                     grid=theory.SPARSE_GRID)
        star = template.copy(data=star.reshape(template.shape)).rename("rps_star")
        return star.transpose(*parts["C1"].dims, ...)

    def capacity(self, parts, rows):
        """Where the steady state ends (req/s, :func:`~bayeslat.theory.roofline_capacity`,
        compiled: :func:`capacity`), every row's under the arrivals of its benchmark (a
        synchronous row's as its rated benchmarks', with its prompts)."""
        ones = xr.DataArray(np.ones(len(rows)), dims="obs")
        template, flat = _flat(parts, rows, ones, rows["prefill_tokens"].to_numpy(float))
        out = template.copy(data=capacity(*flat[1:]).reshape(template.shape))
        return out.transpose(*parts["C1"].dims, ...)

    def config_fits(self, codes):
        """Each configuration's ``C1``, ``C2`` under its server's roofline
        (:meth:`roofline_start`), for the start's laws."""
        return self.roofline_start()[1].loc[np.unique(codes)]

    def roofline_start(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Each server's ``f`` and knee (the drafter's the same) and each configuration's
        ``C1``, ``C2`` (index: factorised codes of :attr:`rows`), by a grid over the servers'
        rooflines (:data:`F_GRID` times the prior's median ``f``, :data:`KNEE_GRID`), each
        point's curves fitted by :func:`fit_curves`, the best point per server by its rows'
        squared log error. Computed once per model: a start far from the roofline (the
        prior's median, ``f`` halved until every row had a root) left chains of the example's
        fit in modes of their own (``f`` a third of the engine's)."""
        if getattr(self, "_roofline_start", None) is None:
            rows = self.rows
            codes, _ = pd.factorize(rows["config"])
            server = self.server_index(rows)
            of_config = pd.Series(server).groupby(codes).first().to_numpy()
            centre = self.config.prior("token_compute")[0] * self.server_sizes
            cost = np.full(len(self.servers), np.inf)
            f, knee = centre.copy(), np.full(len(self.servers), KNEE_GRID[0])
            fits = None
            for scale in F_GRID:
                for point in KNEE_GRID:
                    trial, per_config = fit_curves(rows, codes, scale * centre[server], point)
                    total = np.bincount(of_config, per_config, len(self.servers))
                    better = total < cost
                    cost = np.where(better, total, cost)
                    f, knee = np.where(better, scale * centre, f), np.where(better, point, knee)
                    keep = pd.Series(~better[of_config], index=trial.index)
                    fits = trial if fits is None else fits.where(keep, trial, axis=0)
            if not np.isfinite(cost).all():
                bad = self.servers[~np.isfinite(cost)]
                raise NumericalError(f"no roofline of the start's grid gives every row of "
                                     f"{', '.join(bad)} a steady state; are points past "
                                     "saturation flagged?")
            self._roofline_start = (pd.DataFrame({"f": f, "knee": knee}), fits)
        return self._roofline_start

    def start(self):
        """The hierarchical start from :meth:`roofline_start`'s curves, each server's knees
        and ``f`` from it, ``f`` halved until every one of the server's rows has a root at
        the laws' ``C1``, ``C2`` (which miss the curves a little)."""
        out = super().start()
        rows = self.rows
        values = xr.Dataset({q: xr.DataArray(v, dims=_dim(q)) for q, v in
                             self.unit_start().items() if q in scaling.COEFS}).assign_coords(
            group=self.units["group"].index, draft=self.units["draft"].index)
        parts = self.parts_of(values, rows, *self.positions(rows))
        terms = row_terms(rows)
        server = self.server_index(rows)
        roofline, _ = self.roofline_start()
        log_f, log_knee = np.log(roofline["f"].to_numpy()), np.log(roofline["knee"].to_numpy())
        for s in range(len(self.servers)):
            mine = server == s
            for _ in range(40):
                lat = theory.roofline_latency(
                    rows["rps"].to_numpy(float)[mine], parts["C1"].to_numpy()[mine],
                    parts["C2"].to_numpy()[mine], np.exp(log_f[s]), np.exp(log_knee[s]),
                    terms["cycles"][mine], rows["k"].to_numpy(float)[mine],
                    terms["prompt"][mine], np.exp(log_f[s]) * terms["ratio"][mine],
                    batch_cap=np.inf)
                if np.isfinite(lat).all():
                    break
                log_f[s] -= np.log(2.0)
        return out | {"log_f": log_f, "log_knee": log_knee, "log_knee_d": log_knee}


def fit_curves(rows: pd.DataFrame, codes: np.ndarray, f: np.ndarray, knee: float,
               iterations: int = 30) -> tuple[pd.DataFrame, np.ndarray]:
    """Each configuration's ``C1``, ``C2`` under a given roofline (each row's ``f``, the
    knee of verifier and drafter ``knee``) by Levenberg–Marquardt on the rows' log latency,
    every configuration at once (the kernel's gradient, :func:`solve`), started from the
    paper's curve (:func:`~bayeslat.models.start.linear_fits`) with ``C2`` halved; and each
    row's squared log error (``inf`` for a configuration whose curve has a row without a
    steady state)."""
    from bayeslat.models import start as st

    y = rows["log_latency"].to_numpy(float)
    rps = rows["rps"].to_numpy(float)
    terms = row_terms(rows)
    knees = np.full(len(rows), float(knee))
    n = codes.max() + 1
    first = st.linear_fits(codes, rps, rows["latency_mean"].to_numpy(float))
    theta = np.log(np.column_stack([first["C1"].to_numpy(), 0.5 * first["C2"].to_numpy()]))

    def evaluate(theta):
        c1, c2 = np.exp(theta[codes, 0]), np.exp(theta[codes, 1])
        log_lat, _, grad, _ = solve(rps, c1, c2, f, knees, knees, terms["cycles"],
                                    rows["k"].to_numpy(float), terms["prompt"],
                                    terms["ratio"], terms["poisson"])
        resid = log_lat - y
        cost = np.bincount(codes, resid**2, n)  # inf where a row has no root
        return resid, cost, grad[:, 0] * c1, grad[:, 1] * c2

    damping = np.full(n, 1e-3)
    resid, cost, a, b = evaluate(theta)
    for _ in range(iterations):
        ok = np.isfinite(resid)
        r, a0, b0 = (np.where(ok, x, 0.0) for x in (resid, a, b))
        aa, ab, bb = (np.bincount(codes, w, n) for w in (a0 * a0, a0 * b0, b0 * b0))
        ar, br = np.bincount(codes, a0 * r, n), np.bincount(codes, b0 * r, n)
        aa, bb = aa * (1.0 + damping), bb * (1.0 + damping)
        det = aa * bb - ab * ab
        step = -np.column_stack([bb * ar - ab * br, aa * br - ab * ar]) / np.where(
            det > 0, det, np.inf)[:, None]
        trial = theta + step
        t_resid, t_cost, t_a, t_b = evaluate(trial)
        better = t_cost < cost
        theta = np.where(better[:, None], trial, theta)
        damping = np.where(better, damping / 3.0, damping * 4.0)
        take = better[codes]
        resid, a, b = (np.where(take, t, o) for t, o in ((t_resid, resid), (t_a, a), (t_b, b)))
        cost = np.where(better, t_cost, cost)
    fits = pd.DataFrame({"C1": np.exp(theta[:, 0]), "C2": np.exp(theta[:, 1])})
    return fits, cost
