r"""``moe``: the hierarchical model plus the expert-coverage split of an MoE verifier.

A share ``s1`` of the verify coefficient ``c1v`` and ``s2`` of ``c2v`` (the expert weights read
per verify pass) grows with the coverage :math:`\varphi(T) = 1 - (1 - m/M)^T` of the ``T`` tokens
routed per step (:func:`bayeslat.scaling.moe_split`, :func:`bayeslat.theory.moe_coverage`):

.. math::
    L = \frac{C_{1u} + \varphi(T)\,C_{1s}}{1 - \mathrm{rps}\,(C_{2u} + \varphi(T)\,C_{2s})},
    \qquad T = \mathrm{rps}\cdot L\cdot(k+1), \qquad s_1, s_2 \sim \mathrm{Beta}(a, b).

``T`` depends on ``L``: the graph solves the fixed point by :data:`ITERATIONS` steps from full
coverage (monotone, see :func:`bayeslat.theory.moe_latency`), never plugging in the observed
latency; prediction solves it exactly with :func:`~bayeslat.theory.moe_latency`. Every row must
be an MoE verifier (``moe_experts_total > 0``). The rest is :mod:`~bayeslat.models.hierarchical`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from bayeslat import scaling, theory
from bayeslat.errors import FitError
from bayeslat.models.base import log_headroom
from bayeslat.models.hierarchical import HierarchicalModel

ITERATIONS = 12  # from full coverage: within 1e-4 in log latency on paper-style sweeps


class MoEModel(HierarchicalModel):
    """Hierarchical coefficients with a coverage-dependent share of the verify cost."""

    variant = "moe"
    parts = ("C1u", "C1s", "C2u", "C2s")

    def prefill_stall(self, rows) -> None:
        """None: an MoE verifier's latency is the coverage fixed point, not the smooth curve
        the staircase of evenly spaced requests is built about
        (:meth:`~bayeslat.models.base.LatencyModel.evenly_spaced` leaves it as it is)."""
        return None

    def setup(self, scales):
        if (self.rows["moe_experts_total"] <= 0).any():
            raise FitError("the moe model needs every row to be an MoE verifier "
                           "(moe_experts_total > 0); fit dense verifiers with the hierarchical "
                           "variant (--model hierarchical; model='hierarchical' in Python)")
        super().setup(scales)

    def curve_inputs(self, curves):
        return super().curve_inputs(curves) | {
            "moe_active": curves["moe_experts_active"].to_numpy(float),
            "moe_total": curves["moe_experts_total"].to_numpy(float)}

    def coefficients(self, curves, data, dim):
        import pymc as pm

        if (curves["moe_experts_total"] <= 0).any():
            raise FitError("the moe model predicts MoE verifiers only (moe_experts_total > 0)")
        c = self.stage_coefficients(curves, dim)
        a, b = self.config.prior("moe_share_beta")
        share1, share2 = pm.Beta("moe_share_c1", a, b), pm.Beta("moe_share_c2", a, b)
        parts = scaling.moe_split(*(c[q] for q in scaling.COEFS), data["alpha"], data["k"],
                                  data["decode_tokens"], share1, share2)
        return dict(zip(self.parts, parts, strict=True))

    # the mean is a fixed point of the expert coverage, not the fused kernel's
    fuses = False

    def log_mean(self, parts, data):
        import pytensor.tensor as pt

        rps = data["rps"]

        def log_latency(phi):
            return (pt.log(parts["C1u"] + phi * parts["C1s"])
                    - log_headroom(1.0 - rps * (parts["C2u"] + phi * parts["C2s"])))

        log_lat = log_latency(1.0)
        for _ in range(ITERATIONS):
            tokens = rps * pt.exp(log_lat) * (data["k"] + 1.0)
            log_lat = log_latency(theory.moe_coverage(tokens, data["moe_active"],
                                                      data["moe_total"]))
        return log_lat

    def start(self):
        return super().start() | {"moe_share_c1": 0.3, "moe_share_c2": 0.3}

    def capacity(self, parts, rows):
        """Saturation rate (req/s) at full coverage, ``1/(C2u + C2s)``: a lower bound."""
        return theory.capacity(parts["C2u"] + parts["C2s"])

    def latency(self, parts, rows):
        def col(name):
            return xr.DataArray(rows[name].to_numpy(float), dims="obs")

        lat = theory.moe_latency(col("rps"), parts["C1u"], parts["C1s"], parts["C2u"],
                                 parts["C2s"], col("moe_experts_active"), col("moe_experts_total"),
                                 col("k"))
        return lat.transpose("chain", "draw", "obs").astype(np.float64)
