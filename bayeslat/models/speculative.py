"""``speculative``: the paper's speculation-aware model (six coefficients per group, no scaling)."""

from __future__ import annotations

from bayeslat import scaling
from bayeslat.models.hierarchical import HierarchicalModel


class SpeculativeModel(HierarchicalModel):
    r"""``speculative``: the paper's speculation-aware model, six coefficients per group.

    The same units and likelihood as :class:`HierarchicalModel`, without scaling laws: every
    coefficient's population is an intercept only, :math:`\log c_{qu} \sim N(\log\beta_q,
    \tau_q)`, so groups are partially pooled per coefficient but share nothing through their
    lengths or model sizes (the design in the config is ignored). It predicts new groups only
    as draws from that population.
    """

    variant = "speculative"

    def features(self, coef: str) -> tuple[str, ...]:
        return (scaling.INTERCEPT,)
