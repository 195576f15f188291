r"""The row likelihood fused into one compiled kernel: its value and gradient in one pass.

The exact likelihood of a fit is a Student-t on each row's log latency (:meth:`LatencyModel.build
<bayeslat.models.base.LatencyModel.build>`),

.. math::
    \log L_i = \log\bigl(L^{\mathrm{mem}}_i + L^{\mathrm{queue}}_i\bigr) + s\,[\text{sync}_i],
    \qquad L^{\mathrm{mem}}_i = \frac{C_{1}}{h(1 - r_i C_{2})}, \qquad
    L^{\mathrm{queue}}_i = \frac{Q\,C_{3}\,\rho_i}{h(1 - \rho_i)}, \quad \rho_i = r_i C_{3},

.. math::
    y_i \sim t_\nu\bigl(\log L_i,\ s_i\bigr), \qquad
    s_i^2 = \sigma^2 + \mathrm{se}_i^2 + \bigl(\sigma_{\mathrm{wall}}\,v_i\bigr)^2, \qquad
    v_i = \frac{L^{\mathrm{queue}}_i / (L^{\mathrm{mem}}_i + L^{\mathrm{queue}}_i)}{h(1 - \rho_i)},

with ``h`` the saturation barrier (:func:`~bayeslat.models.base.log_headroom`, whose width the
caller gives) and each row's ``C1``, ``C2`` (and, with the compute wall, ``C3``, ``Q``) its
curve's. Built from PyTensor's
elementwise operations, the rows cost about 0.17 µs each in the forward pass and as much again
in the backward one, over a dozen logs, square roots and softpluses and two gathers and
scatters per coefficient: two thirds of the ``capacity`` model's gradient on the shipped example
(benchmarks/README.md). :class:`RowStudentT` computes the sum and its gradient with respect to
every curve's coefficients and the scalars in one loop over the rows, in linear terms (one log
for the mean where the graph takes three and a softplus), sharing the forward pass's values with
the backward one. The Student-t's normalising constant, a function of ``nu`` alone, stays in
the graph (:func:`row_student_t`), so PyTensor differentiates its log-gamma functions.

Derivatives (:func:`_kernel`): with :math:`z = (y - \mu)/s`,
:math:`\partial/\partial\mu = (\nu+1)z/(s(\nu+z^2))`,
:math:`\partial/\partial s = -1/s + (\nu+1)z^2/(s(\nu+z^2))`; through the mean and the scale to
:math:`L^{\mathrm{mem}}` and :math:`L^{\mathrm{queue}}`, then to the coefficients with
:math:`d\log h(d)/dd = 1/\sqrt{d^2 + 4w^2}`.

The sampler uses it for the variants with the compute wall where it compiles with numba (nutpie:
:func:`bayeslat.models.sampling.sample`); for the paper's variants, whose rows the graph already
evaluates in about 95 µs on the example against the kernel's 82 µs, it keeps the graph.
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

# Names of the coefficient inputs, with and without the compute wall.
PARTS_WALL = ("C1", "C2", "C3", "Q")
PARTS_PAPER = ("C1", "C2")


@numba.njit(cache=True)
def _headroom(d: float, root: float, w2: float) -> float:
    """The barrier's ``h(d)`` given ``root = sqrt(d² + 4w²)`` and ``w2 = w²`` (as
    ``log_headroom``: no cancellation past saturation)."""
    return 0.5 * (d + root) if d >= 0 else 2.0 * w2 / (root - d)


@numba.njit(cache=True)
def _kernel(c1, c2, c3, q, sigma, sigma_wall, nu, shift, idx, rps, y, se_rel, sync, wall,
            width):
    """Sum over the rows of the Student-t log density without its normalising constant, and
    its gradient with respect to ``c1``, ``c2``, ``c3``, ``q`` (per curve), ``sigma``,
    ``sigma_wall``, ``nu`` and ``shift``; ``width`` is the barrier's. Without the ``wall``,
    ``c3``, ``q`` and ``sigma_wall`` are ignored (their gradients 0)."""
    n = c1.shape[0]
    g1, g2, g3, gq = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    total = g_sigma = g_wall = g_nu = g_shift = 0.0
    w2 = width * width
    w4 = 4.0 * w2
    sigma2, wall2, nu1 = sigma * sigma, sigma_wall * sigma_wall, nu + 1.0
    for i in range(rps.shape[0]):
        c, r = idx[i], rps[i]
        d2 = 1.0 - r * c2[c]
        root2 = math.sqrt(d2 * d2 + w4)
        h2 = _headroom(d2, root2, w2)
        mem = c1[c] / h2
        latency, que, h3, root3, moves = mem, 0.0, 1.0, 1.0, 0.0
        if wall:
            d3 = 1.0 - r * c3[c]
            root3 = math.sqrt(d3 * d3 + w4)
            h3 = _headroom(d3, root3, w2)
            que = q[c] * c3[c] * c3[c] * r / h3
            latency = mem + que
            moves = que / latency / h3
        var = sigma2 + se_rel[i] * se_rel[i] + wall2 * moves * moves
        s = math.sqrt(var)
        z = (y[i] - math.log(latency) - shift * sync[i]) / s
        z2 = z * z
        den = nu + z2
        log_tail = math.log1p(z2 / nu)
        total += -0.5 * math.log(var) - 0.5 * nu1 * log_tail
        d_mu = nu1 * z / (s * den)
        d_var = (-1.0 / s + nu1 * z2 / (s * den)) / (2.0 * s)
        g_nu += -0.5 * log_tail + 0.5 * nu1 * z2 / (nu * den)
        g_sigma += 2.0 * sigma * d_var
        g_shift += d_mu * sync[i]
        # mu = log(mem + que); moves = que/(mem + que)/h3
        d_moves = 2.0 * wall2 * moves * d_var
        d_mem = (d_mu - d_moves * moves) / latency
        g1[c] += d_mem / h2
        g2[c] += d_mem * mem * r / root2
        if wall:
            g_wall += 2.0 * sigma_wall * moves * moves * d_var
            d_que = (d_mu + d_moves * (1.0 - que / latency) / h3) / latency
            gq[c] += d_que * que / q[c]
            g3[c] += d_que * que * (2.0 / c3[c] + r / root3) + d_moves * moves * r / root3
    return total, g1, g2, g3, gq, g_sigma, g_wall, g_nu, g_shift


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
        data ``idx``, ``rps``, ``y``, ``se_rel``, ``sync`` (no gradient); ``width`` is the
        saturation barrier's (:data:`~bayeslat.models.base.BARRIER_WIDTH`)."""

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
            outputs = _select(_kernel(*_full(self.wall, inputs), self.width), self.wall)
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
    """The kernel's arguments from an Op's inputs: without the wall, ``c3``, ``q`` stand in
    as ``c1`` (unread) and ``sigma_wall`` as 0."""
    inputs = [np.asarray(x) for x in inputs]
    if wall:
        c1, c2, c3, q, sigma, sigma_wall, nu, shift, *data = inputs
    else:
        c1, c2, sigma, nu, shift, *data = inputs
        c3, q, sigma_wall = c1, c1, np.zeros(())
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
                     for f in (_headroom, _kernel, _numba_impl))
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    @basic.register_funcify_and_cache_key(cls)
    def _funcify(op, node, **kwargs):
        return (_numba_impl(op.wall, op.width),
                f"bayeslat-rowstudentt-{key}-{int(op.wall)}-{op.width!r}")


def _numba_impl(wall: bool, width: float):
    """The Op as a numba function of its inputs (scalars as 0-d arrays), outputs as arrays."""
    if wall:
        @numba.njit
        def fused(c1, c2, c3, q, sigma, sigma_wall, nu, shift, idx, rps, y, se_rel, sync):
            total, g1, g2, g3, gq, gs, gw, gn, gh = _kernel(
                c1, c2, c3, q, sigma.item(), sigma_wall.item(), nu.item(), shift.item(), idx,
                rps, y, se_rel, sync, True, width)
            return (np.asarray(total), g1, g2, g3, gq, np.asarray(gs), np.asarray(gw),
                    np.asarray(gn), np.asarray(gh))
    else:
        @numba.njit
        def fused(c1, c2, sigma, nu, shift, idx, rps, y, se_rel, sync):
            total, g1, g2, g3, gq, gs, gw, gn, gh = _kernel(
                c1, c2, c1, c1, sigma.item(), 0.0, nu.item(), shift.item(), idx, rps, y,
                se_rel, sync, False, width)
            return np.asarray(total), g1, g2, np.asarray(gs), np.asarray(gn), np.asarray(gh)
    return fused


def row_student_t(parts: dict, sigma, nu, shift, sigma_wall, data: dict, width: float):
    """The rows' Student-t log likelihood (a scalar tensor), normalising constant included.

    Parameters
    ----------
    parts
        Per-curve tensors ``C1``, ``C2`` (and ``C3``, ``Q`` for the variants with the wall).
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
    total = op(wall, width)(*inputs)[0]
    n = pt.as_tensor_variable(data["rps"]).shape[0]
    const = (pt.gammaln((nu + 1.0) / 2.0) - pt.gammaln(nu / 2.0) - 0.5 * pt.log(nu * np.pi))
    return total + n * const
