r"""The row likelihood fused into one compiled kernel: its value and gradient in one pass.

The exact likelihood of a fit is a Student-t on each row's log latency (:meth:`LatencyModel.build
<bayeslat.models.base.LatencyModel.build>`),

.. math::
    \log L_i = \tfrac1P\log\bigl((L^{\mathrm{mem}}_i)^P + (L^{\mathrm{comp}}_i)^P - A^P\bigr)
    + s\,[\text{sync}_i], \qquad L^{\mathrm{mem}}_i = \frac{C_{1}}{h(1 - r_i C_{2})}, \qquad
    L^{\mathrm{comp}}_i = \frac{A}{h(1 - \rho_i)}, \quad A = Q\,B_{\max}\,C_{3}, \quad
    \rho_i = (1 - Q)\,r_i C_{3},

.. math::
    y_i \sim t_\nu\bigl(\log L_i,\ s_i\bigr), \qquad
    s_i^2 = \sigma^2 + \mathrm{se}_i^2 + \bigl(\sigma_{\mathrm{wall}}\,v_i\bigr)^2, \qquad
    v_i = \frac{(L^{\mathrm{comp}}_i)^P / L_i^P}{h(1 - r_i C_3)},

with ``h`` the saturation barrier (:func:`~bayeslat.models.base.log_headroom`, whose width the
caller gives) and each row's ``C1``, ``C2`` (and, with the compute wall, ``C3``, ``Q`` and the
norm's power ``P``, :func:`~bayeslat.theory.soft_power`, data) its curve's. Built from PyTensor's
elementwise operations, the rows cost about 0.17 µs each in the forward pass and as much again
in the backward one, over a dozen logs, square roots and softpluses and two gathers and
scatters per coefficient: two thirds of the ``capacity`` model's gradient on the shipped example
(benchmarks/README.md). :class:`RowStudentT` computes the sum and its gradient with respect to
every curve's coefficients and the scalars in one loop over the rows, in linear terms (one log
for the mean where the graph takes three and a softplus, no square root for the scale), sharing
the forward pass's values with the backward one, a curve's gradient summed in registers over its
run of rows and the logs of the scales taken of running products (:func:`_kernel`: 50 µs on the
example's 1,560 rows, against 100 µs with a log and a scatter per row and 0.34 µs a row in the
graph). The Student-t's normalising constant, a function of ``nu`` alone, stays in
the graph (:func:`row_student_t`), so PyTensor differentiates its log-gamma functions.

Derivatives (:func:`_kernel`): with the residual :math:`e = y - \mu`, the variance
:math:`v = s^2` and :math:`z^2 = e^2/v`,
:math:`\partial/\partial\mu = (\nu+1)e/(v(\nu+z^2))`,
:math:`\partial/\partial v = ((\nu+1)z^2/(\nu+z^2) - 1)/(2v)`; through the mean and the scale to
:math:`\log L^{\mathrm{mem}}`, :math:`\log A` and :math:`-\log h(1 - \rho)` (:math:`\mu` moves
with them by :math:`1 - x`, :math:`x` and :math:`w = (L^{\mathrm{comp}})^P/L^P`, with
:math:`x = 1 - (L^{\mathrm{mem}})^P/L^P`; :math:`\log v` by :math:`-P(1 - x)`, :math:`P(1 - x)`
and :math:`P(1 - w)`), then to the coefficients with
:math:`d\log h(d)/dd = 1/\sqrt{d^2 + 4w^2}`.

The sampler uses it for every exact fit it compiles with numba (nutpie:
:func:`bayeslat.models.sampling.sample`; not ``moe``, whose mean is not the kernel's): on the
example one log density and gradient of ``capacity`` costs 100 µs with it against 128 µs
with the old kernel, of ``hierarchical`` 50 µs against 90–97 µs in the graph.
``tests/test_likelihood.py`` checks the value and gradient against the graph of the same model
built from PyTensor's operations, for every variant.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math

import numba
import numpy as np

from bayeslat.theory import BATCH_CAP

# Names of the coefficient inputs, with and without the compute wall.
PARTS_WALL = ("C1", "C2", "C3", "Q")
PARTS_PAPER = ("C1", "C2")


# Floating-point freedoms the kernel takes: reassociation, contraction and cheaper reciprocals,
# not the assumption that no value is NaN or infinite (a sampler's wild proposal may make one,
# and must see it).
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}
# Bounds of a running product of the rows' variances (or Student-t denominators) before its log
# is taken: one log per a few dozen rows instead of one per row, far from over- and underflow.
_BIG, _TINY = 1e100, 1e-100


@numba.njit(cache=True, fastmath=FASTMATH)
def _inverse_headroom(d: float, root: float, half_inv_w2: float) -> float:
    """``1/h(d)`` of the barrier given ``root = sqrt(d² + 4w²)`` and ``half_inv_w2 = 1/(2w²)``
    (as ``log_headroom``: no cancellation on either side of saturation)."""
    return 2.0 / (d + root) if d >= 0 else (root - d) * half_inv_w2


@numba.njit(cache=True, fastmath=FASTMATH)
def _log_product(value: float, product: float, logs: float) -> tuple[float, float]:
    """Multiply ``value`` into a running ``product`` whose flushed logs sum to ``logs``: the
    log of the product of every value so far is ``logs + log(product)``."""
    if not _TINY < value < _BIG:
        return product, logs + math.log(value)
    product *= value
    if not _TINY < product < _BIG:
        return 1.0, logs + math.log(product)
    return product, logs


@numba.njit(cache=True, fastmath=FASTMATH)
def _kernel(c1, c2, c3, q, sigma, sigma_wall, nu, shift, idx, rps, y, se_rel, sync, power,
            wall, width, batch):
    """Sum over the rows of the Student-t log density without its normalising constant, and
    its gradient with respect to ``c1``, ``c2``, ``c3``, ``q`` (per curve), ``sigma``,
    ``sigma_wall``, ``nu`` and ``shift``; ``width`` is the barrier's, ``power`` each curve's
    norm (data). Without the ``wall``, ``c3``, ``q``, ``power`` and ``sigma_wall`` are ignored
    (their gradients 0).

    A curve's gradient is summed in registers over each run of its rows (a fit's rows come
    curve by curve; any order gives the same sums), and the logs of the variances and of the
    Student-t's ``ν + z²`` are taken of running products (:func:`_log_product`): on the
    example half the time of a log per row and a scatter per row."""
    n = c1.shape[0]
    g1, g2, g3, gq = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    w4, half_inv_w2 = 4.0 * width * width, 0.5 / (width * width)
    sigma2, wall2, nu1 = sigma * sigma, sigma_wall * sigma_wall, nu + 1.0
    p_var = p_den = 1.0
    log_var = log_den = sum_dvar = sum_moved = sum_weight = g_shift = 0.0
    cur = -1
    a1 = a2 = a3 = aq = cc1 = cc2 = cc3 = cq = intercept = slope = intercept_p = 0.0
    cp, inv_p = 1.0, 1.0  # without the wall log L = log mem: the "norm" of one curve
    for i in range(rps.shape[0]):
        c, r = idx[i], rps[i]
        if c != cur:  # a new run: the last one's gradient out, this curve's values in
            if cur >= 0:  # a1, a3, aq were taken with respect to the logs
                g1[cur] += a1 / cc1
                g2[cur] += a2
                if wall:
                    g3[cur] += a3 / cc3
                    gq[cur] += aq / cq
            cur, a1, a2, a3, aq = c, 0.0, 0.0, 0.0, 0.0
            cc1, cc2 = c1[c], c2[c]
            if wall:
                cc3, cq, cp = c3[c], q[c], power[c]
                inv_p = 1.0 / cp
                intercept, slope = cq * batch * cc3, (1.0 - cq) * cc3
                intercept_p = intercept**cp
        d2 = 1.0 - r * cc2
        root2 = math.sqrt(d2 * d2 + w4)
        mem = cc1 * _inverse_headroom(d2, root2, half_inv_w2)
        latency_p, excess, share, moves, root3, root4 = mem, 0.0, 0.0, 0.0, 1.0, 1.0
        if wall:  # mu = log(mem^P + comp^P − A^P)/P, comp = A/h3; moves = comp^P/L^P/h4
            d3 = 1.0 - r * slope
            root3 = math.sqrt(d3 * d3 + w4)
            inv_h3 = _inverse_headroom(d3, root3, half_inv_w2)
            comp_p = (intercept * inv_h3) ** cp
            mem_p = mem**cp
            latency_p = mem_p + (comp_p - intercept_p)
            excess = 1.0 - mem_p / latency_p
            share = comp_p / latency_p
            d4 = 1.0 - r * cc3  # the batch's headroom at the wall
            root4 = math.sqrt(d4 * d4 + w4)
            moves = share * _inverse_headroom(d4, root4, half_inv_w2)
        var = sigma2 + se_rel[i] * se_rel[i] + wall2 * moves * moves
        e = y[i] - inv_p * math.log(latency_p) - shift * sync[i]
        inv_var = 1.0 / var
        z2 = e * e * inv_var
        den = nu + z2
        inv_den = 1.0 / den
        p_var, log_var = _log_product(var, p_var, log_var)
        p_den, log_den = _log_product(den, p_den, log_den)
        d_mu = nu1 * e * inv_var * inv_den
        d_var = (nu1 * z2 * inv_den - 1.0) * 0.5 * inv_var
        sum_dvar += d_var
        sum_weight += z2 * inv_den
        g_shift += d_mu * sync[i]
        # with respect to log mem, log A and -log h3 (d_moves: to log moves)
        d_moves = 2.0 * wall2 * moves * d_var * moves
        g_mem = (1.0 - excess) * (d_mu - cp * d_moves)
        a1 += g_mem
        a2 += g_mem * r / root2
        if wall:
            sum_moved += moves * moves * d_var
            g_a = excess * d_mu + cp * (1.0 - excess) * d_moves
            g_h = share * d_mu + cp * (1.0 - share) * d_moves
            t = r * cc3 / root3
            a3 += g_a + g_h * (1.0 - cq) * t + d_moves * r * cc3 / root4
            aq += g_a - g_h * cq * t
    if cur >= 0:
        g1[cur] += a1 / cc1
        g2[cur] += a2
        if wall:
            g3[cur] += a3 / cc3
            gq[cur] += aq / cq
    # sum of log1p(z²/ν) = sum of log(ν + z²) − n log ν
    log_tail = log_den + math.log(p_den) - rps.shape[0] * math.log(nu)
    total = -0.5 * (log_var + math.log(p_var)) - 0.5 * nu1 * log_tail
    g_nu = -0.5 * log_tail + 0.5 * nu1 / nu * sum_weight
    return (total, g1, g2, g3, gq, 2.0 * sigma * sum_dvar, 2.0 * sigma_wall * sum_moved, g_nu,
            g_shift)


@functools.cache
def _op_class():
    """:class:`RowStudentT`, built on first use (PyTensor's import is seconds of a verb that
    never samples), with its numba implementation registered (:func:`_register`)."""
    import pytensor.tensor as pt
    from pytensor.gradient import DisconnectedType
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class RowStudentT(Op):
        """The rows' Student-t log density without its constant (a scalar) and its gradient,
        as outputs of one node: inputs the per-curve ``C1``, ``C2`` (and ``C3``, ``Q`` with
        the ``wall``), ``sigma``, ``sigma_wall`` (with the wall), ``nu``, ``shift``, then the
        data ``idx``, ``rps``, ``y``, ``se_rel``, ``sync`` (and the per-curve ``P`` with the
        wall; no gradient); ``width`` is the saturation barrier's
        (:data:`~bayeslat.models.base.BARRIER_WIDTH`)."""

        __props__ = ("wall", "width")

        def __init__(self, wall: bool, width: float):
            self.wall, self.width = bool(wall), float(width)

        @property
        def n_params(self) -> int:
            """The inputs with a gradient: the parts, then the scalars."""
            return 8 if self.wall else 5

        def make_node(self, *inputs):
            inputs = [pt.as_tensor_variable(x) for x in inputs]
            parts = inputs[:4 if self.wall else 2]
            scalars = inputs[len(parts):self.n_params]
            outputs = [pt.dscalar()] + [p.type() for p in parts] + [pt.dscalar()
                                                                  for _ in scalars]
            return Apply(self, inputs, outputs)

        def perform(self, node, inputs, output_storage):
            outputs = _select(_kernel(*_full(self.wall, inputs), self.width, BATCH_CAP),
                              self.wall)
            for store, value in zip(output_storage, outputs, strict=True):
                store[0] = np.asarray(value, dtype=float)

        def connection_pattern(self, node):
            n_out = len(node.outputs)
            return [[True] * n_out if i < self.n_params else [False] * n_out
                    for i in range(len(node.inputs))]

        def grad(self, inputs, output_grads):
            g = output_grads[0]
            out = self(*inputs)
            grads = [g * value for value in out[1:]]
            return grads + [DisconnectedType()() for _ in inputs[self.n_params:]]

    _register(RowStudentT)
    return RowStudentT


def _full(wall: bool, inputs):
    """The kernel's arguments from an Op's inputs: without the wall, ``c3``, ``q`` and the
    power stand in as ``c1`` (unread) and ``sigma_wall`` as 0."""
    inputs = [np.asarray(x) for x in inputs]
    if wall:
        c1, c2, c3, q, sigma, sigma_wall, nu, shift, *data = inputs
    else:
        c1, c2, sigma, nu, shift, *data = inputs
        c3, q, sigma_wall = c1, c1, np.zeros(())
        data.append(c1)
    return (c1, c2, c3, q, float(sigma), float(sigma_wall), float(nu), float(shift),
            *data, wall)


def _select(out, wall: bool):
    """The Op's outputs from the kernel's: the total, the parts' gradients, the scalars'."""
    total, g1, g2, g3, gq, g_sigma, g_wall, g_nu, g_shift = out
    if wall:
        return total, g1, g2, g3, gq, g_sigma, g_wall, g_nu, g_shift
    return total, g1, g2, g_sigma, g_nu, g_shift


@functools.cache
def op(wall: bool, width: float):
    """The :class:`RowStudentT` Op with or without the compute wall, for a barrier of
    ``width`` (one instance each)."""
    return _op_class()(wall, width)


def _register(cls) -> None:
    """Give the Op ``cls`` a numba implementation, cached under a key that names the kernel's
    source: nutpie's compiled log density then calls the kernel inside compiled code."""
    from pytensor.link.numba.dispatch import basic

    source = "".join(inspect.getsource(getattr(f, "py_func", f))
                     for f in (_inverse_headroom, _log_product, _kernel, _numba_impl))
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    @basic.register_funcify_and_cache_key(cls)
    def _funcify(op, node, **kwargs):
        return (_numba_impl(op.wall, op.width),
                f"bayeslat-rowstudentt-{key}-{int(op.wall)}-{op.width!r}-{BATCH_CAP}")


def _numba_impl(wall: bool, width: float):
    """The Op as a numba function of its inputs (scalars as 0-d arrays), outputs as arrays."""
    if wall:
        @numba.njit
        def fused(c1, c2, c3, q, sigma, sigma_wall, nu, shift, idx, rps, y, se_rel, sync,
                  power):
            total, g1, g2, g3, gq, gs, gw, gn, gh = _kernel(
                c1, c2, c3, q, sigma.item(), sigma_wall.item(), nu.item(), shift.item(), idx,
                rps, y, se_rel, sync, power, True, width, BATCH_CAP)
            return (np.asarray(total), g1, g2, g3, gq, np.asarray(gs), np.asarray(gw),
                    np.asarray(gn), np.asarray(gh))
    else:
        @numba.njit
        def fused(c1, c2, sigma, nu, shift, idx, rps, y, se_rel, sync):
            total, g1, g2, g3, gq, gs, gw, gn, gh = _kernel(
                c1, c2, c1, c1, sigma.item(), 0.0, nu.item(), shift.item(), idx, rps, y,
                se_rel, sync, c1, False, width, BATCH_CAP)
            return np.asarray(total), g1, g2, np.asarray(gs), np.asarray(gn), np.asarray(gh)
    return fused


def row_student_t(parts: dict, sigma, nu, shift, sigma_wall, data: dict, width: float):
    """The rows' Student-t log likelihood (a scalar tensor), normalising constant included.

    Parameters
    ----------
    parts
        Per-curve tensors ``C1``, ``C2`` (and ``C3``, ``Q`` and the norm's power ``P``, data,
        for the variants with the wall).
    sigma, nu, shift, sigma_wall
        Scalar tensors (``shift`` 0 and ``sigma_wall`` None where the model has none).
    data
        Per-row tensors: ``idx`` (each row's curve), ``rps``, ``y`` (log latency),
        ``se_rel``, ``sync`` (1 for a synchronous row).
    width
        The saturation barrier's width (:data:`~bayeslat.models.base.BARRIER_WIDTH`).
    """
    import pytensor.tensor as pt

    wall = "C3" in parts
    names = PARTS_WALL if wall else PARTS_PAPER
    scalars = (sigma, sigma_wall, nu, shift) if wall else (sigma, nu, shift)
    inputs = [pt.as_tensor_variable(parts[n], dtype="float64") for n in names]
    inputs += [pt.as_tensor_variable(s, dtype="float64") for s in scalars]
    inputs += [pt.as_tensor_variable(data[n]) for n in ("idx", "rps", "y", "se_rel", "sync")]
    if wall:
        inputs.append(pt.as_tensor_variable(parts["P"], dtype="float64"))
    total = op(wall, width)(*inputs)[0]
    n = pt.as_tensor_variable(data["rps"]).shape[0]
    const = (pt.gammaln((nu + 1.0) / 2.0) - pt.gammaln(nu / 2.0) - 0.5 * pt.log(nu * np.pi))
    return total + n * const
