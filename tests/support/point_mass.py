"""A stand-in for ``pm.sample`` that puts every draw at the model's start point.

The start is the per-configuration point fits (:meth:`LatencyModel.initial_values`), so the
posterior is a sensible curve that did not converge: fast tests of what reads a fit (adequacy,
reports, unconverged refusals) use it instead of NUTS.
"""

from __future__ import annotations

import arviz as az
import numpy as np


def point_mass(*, draws=10, chains=2, initvals, model, **kwargs):
    """``pm.sample``'s signature; every draw of every free variable at ``initvals``."""
    import pymc as pm

    start = model.initial_point()
    posterior = {}
    for rv in model.free_RVs:
        shape = np.shape(start[model.rvs_to_values[rv].name])
        value = np.broadcast_to(np.asarray(initvals[rv.name], float), shape)
        posterior[rv.name] = np.broadcast_to(value, (chains, draws, *shape)).copy()
    idata = az.from_dict(posterior=posterior,
                         dims={n: list(d) for n, d in model.named_vars_to_dims.items()},
                         coords={k: np.asarray(v) for k, v in model.coords.items()},
                         sample_stats={"diverging": np.zeros((chains, draws), bool)})
    idata.posterior = pm.compute_deterministics(idata.posterior, model=model,
                                                merge_dataset=True, progressbar=False)
    return idata
