r"""``dense``: per-configuration ``C1`` and ``C2``, partially pooled (the universal collapse).

Each configuration ``c`` (a group with one drafter at one ``(alpha, k)``, or its baseline) has
its own curve ``L = C1_c / (1 − rps·C2_c)``:

.. math::
    \log C_{1c} \sim N(\mu_1, \tau_1), \quad \log C_{2c} \sim N(\mu_2, \tau_2), \quad
    \mu_q \sim N(\log m_q, s), \quad \tau_q \sim \mathrm{HalfNormal}(t),

with the medians ``m`` and scales ``s``, ``t`` from the config's priors, and the likelihood of
:mod:`bayeslat.models.base`. With fewer than :data:`MIN_POOLED` configurations there is nothing
to pool: each ``log C`` has the population prior ``N(log m_q, s)`` itself. Nothing ties a
configuration to its ``alpha``, ``k`` or lengths, so it predicts new loads for measured
configurations only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayeslat.errors import FitError
from bayeslat.models import start as st
from bayeslat.models.base import LatencyModel

# One or two curves cannot tell a population's spread from its mean (a funnel for NUTS).
MIN_POOLED = 3


class DenseModel(LatencyModel):
    """Per-configuration ``C1``, ``C2`` with partial pooling."""

    variant = "dense"
    per_configuration = True

    def setup(self, scales: dict | None) -> None:
        self.configs = pd.Index(pd.unique(self.rows["config"]))
        self.pooled = len(self.configs) >= MIN_POOLED

    def coords(self):
        return {"config": self.configs.to_numpy()}

    def known(self, rows: pd.DataFrame) -> np.ndarray:
        """Which rows belong to a fitted configuration (the only ones this variant predicts)."""
        return self.configs.get_indexer(rows["config"]) >= 0

    def coefficients(self, curves, data, dim):
        import pymc as pm
        import pytensor.tensor as pt

        idx = self.configs.get_indexer(curves["config"])
        if (idx < 0).any():
            raise FitError(f"the dense model predicts only configurations it was fitted on; "
                           f"'{curves['config'][idx < 0].iloc[0]}' is new: use the hierarchical "
                           "model to predict new configurations")
        cidx = pm.Data("config_idx", idx, dims=dim)
        out = {}
        for name in (n for n in self.parts if n != "P"):  # the norm's power is k's, not sampled
            # Q is a share: its log odds, not its log (the capacity variants' latency)
            median = np.log(self.config.prior(f"dense_{name.lower()}_median"))
            if name == "Q":
                median -= np.log1p(-np.exp(median))
            sd = self.config.prior("dense_q_log_sd" if name == "Q" else "dense_log_sd")
            if self.pooled:
                mu = pm.Normal(f"mu_log_{name}", median, sd)
                tau = pm.HalfNormal(f"tau_log_{name}", sigma=1.0)
                log_c = pm.Normal(f"log_{name}", mu=mu, sigma=tau, dims="config")
            else:
                log_c = pm.Normal(f"log_{name}", median, sd, dims="config")
            out[name] = (pt.sigmoid(log_c) if name == "Q" else pt.exp(log_c))[cidx]
        return out

    def pooled_start(self, name: str, values: np.ndarray) -> dict[str, np.ndarray]:
        """Start values of ``log_<name>`` per configuration (and of its population)."""
        log_c = np.log(values)
        out = {f"log_{name}": log_c}
        if self.pooled:
            out |= {f"mu_log_{name}": float(log_c.mean()),
                    f"tau_log_{name}": float(np.clip(log_c.std(), 0.05, 3.0))}
        return out

    def start(self):
        rows = self.rows
        codes = self.configs.get_indexer(rows["config"])
        fits = st.linear_fits(codes, rows["rps"].to_numpy(), rows["latency_mean"].to_numpy())
        return self.pooled_start("C1", fits["C1"].to_numpy()) | self.pooled_start(
            "C2", fits["C2"].to_numpy())
