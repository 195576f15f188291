r"""``roofline``: the paper's memory-bound line, and each step's arithmetic past the knee.

A verify step costs the larger of reading the weights and KV cache and the arithmetic on its
tokens (DESIGN.md §2a). The paper's model is the first; this variant adds the second as the
GPU's roofline, one compute time per token ``f`` and one knee ``T*`` (tokens a step) per
server, and solves for each row's latency the mean-field fixed point of
:func:`bayeslat.theory.roofline_latency`:

.. math::
    L = C_1 + C_2 B + n\,\mathrm{E}_m\bigl[f\,(B(k+1) + m\,p - T^*)^+
        + f\,r\,(B + m\,p - T^*)^+\bigr], \qquad B = \mathrm{rps}\,L,
    \quad \bar m = \mathrm{rps}\,L/n,

``n = g/E(alpha, k)`` verify steps a request, ``p`` its prompt's tokens, ``m`` the prompts
that join a step (its floor and ceiling for evenly spaced arrivals, a Poisson count for
Poisson ones) and ``r`` the drafter's size over the verifier's (its first pass, past the same
knee; 0 for the baseline). ``C1`` and ``C2`` keep the hierarchical six-coefficient law of
:mod:`~bayeslat.models.hierarchical` (the prefill stall linear in its arithmetic, as in
:mod:`~bayeslat.models.capacity`: the knee is now the roofline's), and the server's two
constants follow its verifier's size:

.. math::
    \log f_s \sim N\bigl(\log(\phi\,N_s),\ s_\phi\bigr), \qquad
    \log T^*_s \sim N(\log T_0,\ s_T),

``N_s`` the verifier's parameters (billions), ``(φ, s_φ)`` the ``token_compute`` prior (s per
token per billion parameters: ``2·10⁹/FLOPs`` at the utilisation a real GPU reaches) and
``(T_0, s_T)`` the ``roofline_knee`` prior. Where no step passes its knee the form is the
paper's curve; past it the curve bends by the arithmetic each step adds, and the capacity is
where the fixed point has no root (:func:`~bayeslat.theory.roofline_capacity`). There are no
walls, shares or powers per configuration: two constants per server carry the bend of every
curve it serves.

The measured ceilings are data: a throughput benchmark, every request sent at once, runs a
full batch, and :func:`~bayeslat.theory.roofline_throughput` is that batch's rate,

.. math::
    \log \mathrm{ceiling}_c \sim N\bigl(\log \mathrm{throughput}_c - \delta,\
    \sigma_{\mathrm{cap}}\bigr),

with the shortfall ``δ`` and the scale of :meth:`~bayeslat.models.base.LatencyModel.
ceiling_likelihood`. The batch's cap is :data:`~bayeslat.theory.BATCH_CAP` (vLLM's default
``max_num_seqs``): where the KV cache binds first (a long context on a large model) the
ceiling sits below it, which this variant does not yet read.

The likelihood is the base's Student-t on each row's log latency. Each row's root is found in
compiled code (:func:`solve`: Newton's method from ``C1``; the right side is convex in ``L``)
with its gradient by the implicit function theorem, ``dL/dθ = (∂F/∂θ)/(1 − ∂F/∂L)``
(:class:`RooflineLatency`). A proposal whose fixed point has no root at an observed rate has
log density ``-inf`` (the sampler rejects it).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
from functools import partial

import numba
import numpy as np
import pandas as pd
import xarray as xr

from bayeslat import scaling, theory
from bayeslat.data import schema
from bayeslat.errors import FitError
from bayeslat.models.capacity import CAPACITY_STALL
from bayeslat.models.hierarchical import HierarchicalModel, _dim
from bayeslat.scaling import ScalingConfig

# The parts of a row: its curve's memory-bound line, its server's roofline.
ROOFLINE_PARTS = ("C1", "C2", "f", "knee")
# Newton steps a row may take (from C1 it takes about four).
ITERATIONS = 100


@numba.njit(cache=True)
def _excess(x, m, prefill, poisson):
    """``E[(x + m'·p)^+]`` over the prompts ``m'`` that join a step (mean ``m``), and its
    derivatives with respect to ``x`` (the share of steps past the knee) and ``m``:
    :func:`bayeslat.theory._prompt_excess` in compiled code."""
    if not poisson:
        lo = math.floor(m)
        w = m - lo
        below, above = x + lo * prefill, x + (lo + 1.0) * prefill
        on = (1.0 - w) * (below > 0) + w * (above > 0)
        return ((1.0 - w) * max(below, 0.0) + w * max(above, 0.0), on,
                max(above, 0.0) - max(below, 0.0))
    if m <= 0.0:
        return max(x, 0.0), 1.0 * (x > 0), max(x + prefill, 0.0) - max(x, 0.0)
    # the counts within ten standard deviations and a dozen of the mean carry all the mass
    half = int(math.ceil(10.0 * math.sqrt(m) + 12.0))
    mode = math.floor(m)
    value = on = step = 0.0
    log_m = math.log(m)
    for j in range(max(0, int(mode) - half), int(mode) + half + 1):
        weight = math.exp(j * log_m - m - math.lgamma(j + 1.0))
        tokens = x + j * prefill
        value += weight * max(tokens, 0.0)
        on += weight * (tokens > 0)
        step += weight * (max(tokens + prefill, 0.0) - max(tokens, 0.0))
    return value, on, step


@numba.njit(cache=True)
def _side(lat, rps, c1, c2, f, knee, cycles, k, prefill, ratio, poisson):
    """The fixed point's right side ``F(L)``, ``∂F/∂L``, and ``∂F/∂`` ``c2``, ``f`` and
    ``knee`` (``∂F/∂c1`` is 1)."""
    batch = rps * lat
    m = batch / cycles
    v, on_v, step_v = _excess(batch * (k + 1.0) - knee, m, prefill, poisson)
    d, on_d, step_d = _excess(batch - knee, m, prefill, poisson)
    excess = v + ratio * d
    d_excess = rps * ((k + 1.0) * on_v + ratio * on_d) + rps / cycles * (step_v
                                                                         + ratio * step_d)
    return (c1 + c2 * batch + cycles * f * excess, c2 * rps + cycles * f * d_excess, batch,
            cycles * excess, -cycles * f * (on_v + ratio * on_d))


@numba.njit(cache=True)
def solve(rps, c1, c2, f, knee, cycles, k, prefill, ratio, poisson):
    """Each row's log latency, the smallest root of ``L = F(L)`` (Newton's method from
    ``C1``; ``inf`` where no root is ahead), and its gradient with respect to ``c1``, ``c2``,
    ``f`` and ``knee`` (rows × 4, ``d log L/dθ``; 0 where there is no root)."""
    n = rps.shape[0]
    out = np.empty(n)
    grad = np.zeros((n, 4))
    for i in range(n):
        lat = c1[i]
        found = False
        for _ in range(ITERATIONS):
            side, d_lat, g2, gf, gk = _side(lat, rps[i], c1[i], c2[i], f[i], knee[i],
                                            cycles[i], k[i], prefill[i], ratio[i],
                                            poisson[i] > 0)
            gap, slope = side - lat, d_lat - 1.0
            if abs(gap) <= 1e-13 * lat:
                found = slope < 0.0
                break
            if slope >= 0.0:  # the convex gap no longer falls: no root ahead
                break
            lat -= gap / slope
        if not found:
            out[i] = np.inf
            continue
        out[i] = math.log(lat)
        scale = 1.0 / ((1.0 - d_lat) * lat)  # d log L/dθ = (∂F/∂θ)/((1 − ∂F/∂L)·L)
        grad[i, 0], grad[i, 1], grad[i, 2], grad[i, 3] = scale, g2 * scale, gf * scale, \
            gk * scale
    return out, grad


@functools.cache
def _op_class():
    """:class:`RooflineLatency`, built on first use (PyTensor's import is seconds of a verb
    that never samples), with its numba implementation registered."""
    import pytensor.tensor as pt
    from pytensor.gradient import DisconnectedType
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class RooflineLatency(Op):
        """Each row's log latency under the roofline form (a vector) and its gradient with
        respect to the row's ``c1``, ``c2``, ``f`` and ``knee`` (four vectors), as outputs of
        one node; inputs those four, then the data ``rps``, ``cycles``, ``k``, ``prefill``,
        ``ratio`` and ``poisson`` (1 for Poisson arrivals)."""

        __props__ = ()
        n_params = 4

        def make_node(self, *inputs):
            inputs = [pt.as_tensor_variable(x) for x in inputs]
            outputs = [pt.dvector() for _ in range(1 + self.n_params)]
            return Apply(self, inputs, outputs)

        def perform(self, node, inputs, output_storage):
            c1, c2, f, knee, rps, *data = (np.asarray(x, dtype=float) for x in inputs)
            log_lat, grad = solve(rps, c1, c2, f, knee, *data)
            for j, store in enumerate(output_storage):
                store[0] = log_lat if j == 0 else np.ascontiguousarray(grad[:, j - 1])

        def connection_pattern(self, node):
            return [[True] * 5 if i < self.n_params else [False] * 5
                    for i in range(len(node.inputs))]

        def grad(self, inputs, output_grads):
            g = output_grads[0]
            out = self(*inputs)
            return ([g * out[1 + j] for j in range(self.n_params)]
                    + [DisconnectedType()() for _ in inputs[self.n_params:]])

    _register(RooflineLatency)
    return RooflineLatency


def _register(cls) -> None:
    """Give the Op ``cls`` a numba implementation, cached under a key that names the kernel's
    source, so that nutpie's compiled log density calls :func:`solve` in compiled code."""
    from pytensor.link.numba.dispatch import basic

    source = "".join(inspect.getsource(getattr(f, "py_func", f))
                     for f in (_excess, _side, solve))
    key = hashlib.sha256(source.encode()).hexdigest()[:16]

    @numba.njit
    def fused(c1, c2, f, knee, rps, cycles, k, prefill, ratio, poisson):
        log_lat, grad = solve(rps, c1, c2, f, knee, cycles, k, prefill, ratio, poisson)
        return (log_lat, np.ascontiguousarray(grad[:, 0]), np.ascontiguousarray(grad[:, 1]),
                np.ascontiguousarray(grad[:, 2]), np.ascontiguousarray(grad[:, 3]))

    @basic.register_funcify_and_cache_key(cls)
    def _funcify(op, node, **kwargs):
        return fused, f"bayeslat-roofline-{key}-{ITERATIONS}"


def log_latency(parts: dict, data: dict):
    """Each row's log latency (a tensor) from its ``parts`` (``C1``, ``C2``, ``f``, ``knee``)
    and ``data`` (``rps``, ``cycles``, ``k``, ``prompt``, ``ratio``, ``poisson``:
    :func:`row_terms`)."""
    import pytensor.tensor as pt

    inputs = [parts[n] for n in ROOFLINE_PARTS] + [data[n] for n in (
        "rps", "cycles", "k", "prompt", "ratio", "poisson")]
    return _op_class()()(*(pt.as_tensor_variable(x, dtype="float64") for x in inputs))[0]


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
    time per token and a knee (module docstring)."""

    variant = "roofline"
    parts = ROOFLINE_PARTS
    fits_ceilings = True
    fuses = False  # the row likelihood is the roofline Op's, in the graph
    decides = False  # decide's closed forms are the P-norm's (bayeslat.decide.require_decisions)
    coef_names = scaling.COEFS

    @classmethod
    def default_config(cls) -> ScalingConfig:
        """The hierarchical defaults with the prefill stall linear in its arithmetic (the knee
        is the roofline's) and the ceilings' shortfall sampled (``ceiling_shortfall_sd``
        0.05, as ``capacity``)."""
        return ScalingConfig(design=scaling.DEFAULT_DESIGN | {"c2p": CAPACITY_STALL},
                             priors=copy.deepcopy(scaling.DEFAULT_PRIORS)
                             | {"ceiling_shortfall_sd": 0.05},
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

    def server_sizes(self) -> np.ndarray:
        """Each fitted server's verifier size (billions of parameters), in :attr:`servers`
        order."""
        first = self.rows.drop_duplicates("group")
        return first.groupby(schema.server_labels(first).to_numpy(), sort=False)[
            "verifier_params_b"].first().reindex(self.servers).to_numpy(float)

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
        log_f = pm.Normal("log_f", np.log(median * self.server_sizes()), log_sd, dims="server")
        median, log_sd = self.config.prior("roofline_knee")
        log_knee = pm.Normal("log_knee", np.log(median), log_sd, dims="server")
        idx = pm.Data("server_idx", self.server_index(curves), dims=dim)
        return out | {"f": pt.exp(log_f)[idx], "knee": pt.exp(log_knee)[idx]}

    def log_mean(self, parts, data):
        return log_latency(parts, data)

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
            parts["f"] * terms["ratio"])
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
            for name in ("f", "knee")}

    def prefill_stall(self, rows):
        """None: the prompts' stalls are the form's own (each prompt joins a step, past the
        knee or not), not a staircase about a smooth curve."""
        return None

    def latency(self, parts, rows):
        """The roofline form's latency (s, ``inf`` past the steady state or the batch cap)."""
        rps = xr.DataArray(rows["rps"].to_numpy(float), dims="obs")
        return self._on_rows(partial(theory.roofline_latency, rps), parts, rows,
                             row_terms(rows)["prompt"]).transpose("chain", "draw", "obs")

    def capacity(self, parts, rows):
        """Where the steady state ends (req/s, :func:`~bayeslat.theory.roofline_capacity`),
        every row's under the arrivals of its benchmark."""
        return self._on_rows(theory.roofline_capacity, parts, rows,
                             rows["prefill_tokens"].to_numpy(float))

    @staticmethod
    def _on_rows(func, parts, rows, prompt):
        """``func`` of the roofline form on the predicted ``parts`` of ``rows`` (prepared),
        with ``prompt`` tokens a joining prompt, its Poisson rows with Poisson arrivals."""
        terms = {name: xr.DataArray(value, dims="obs") for name, value in row_terms(rows).items()}

        def on(arrivals):
            return func(parts["C1"], parts["C2"], parts["f"], parts["knee"], terms["cycles"],
                        xr.DataArray(rows["k"].to_numpy(float), dims="obs"),
                        xr.DataArray(prompt, dims="obs"), parts["f"] * terms["ratio"],
                        arrivals=arrivals)

        out = on("constant")
        if terms["poisson"].any():
            out = xr.where(terms["poisson"] > 0, on("poisson"), out)
        return out

    def start(self):
        """The hierarchical start, each server's knee at its prior's median and its ``f`` the
        largest of its prior's median halved until every one of its rows has a root at the
        start's ``C1``, ``C2``."""
        out = super().start()
        rows = self.rows
        values = xr.Dataset({q: xr.DataArray(v, dims=_dim(q)) for q, v in
                             self.unit_start().items() if q in scaling.COEFS}).assign_coords(
            group=self.units["group"].index, draft=self.units["draft"].index)
        parts = self.parts_of(values, rows, *self.positions(rows))
        terms = row_terms(rows)
        server = self.server_index(rows)
        median, _ = self.config.prior("token_compute")
        knee = self.config.prior("roofline_knee")[0]
        log_f = np.log(median * self.server_sizes())
        for s in range(len(self.servers)):
            mine = server == s
            for _ in range(40):
                lat = theory.roofline_latency(
                    rows["rps"].to_numpy(float)[mine], parts["C1"].to_numpy()[mine],
                    parts["C2"].to_numpy()[mine], np.exp(log_f[s]), knee,
                    terms["cycles"][mine], rows["k"].to_numpy(float)[mine],
                    terms["prompt"][mine],
                    np.exp(log_f[s]) * terms["ratio"][mine], batch_cap=np.inf)
                if np.isfinite(lat).all():
                    break
                log_f[s] -= np.log(2.0)
        return out | {"log_f": log_f, "log_knee": np.full(len(self.servers), np.log(knee))}

