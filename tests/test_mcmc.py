"""The vectorised R-hat and ESS give ArviZ's values, variable by variable."""

import arviz as az
import numpy as np
import pytest

from bayeslat import mcmc
from bayeslat.models import sampling


def ar1(shape, phi, seed):
    """Autocorrelated draws (chain, draw, K): AR(1) with coefficient ``phi``."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=shape)
    x = np.zeros(shape)
    for t in range(1, shape[1]):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def arviz(x, fn, **kw):
    return np.array([float(fn(x[:, :, i], **kw)) for i in range(x.shape[2])])


@pytest.mark.parametrize(("shape", "phi"), [
    ((2, 100, 6), 0.5), ((4, 101, 6), 0.9), ((2, 950, 8), 0.3), ((3, 37, 5), -0.4),
    ((4, 600, 5), 0.99), ((2, 8, 4), 0.2), ((1, 200, 4), 0.7),
])
def test_rhat_and_ess_are_arviz_s(shape, phi):
    x = ar1(shape, phi, seed=shape[1])
    x[:, :, 0] = 3.0  # a constant (the curve summaries' fixed nu)
    x[:, :, 1] = np.round(x[:, :, 1])  # ties
    for mine, ref in ((mcmc.rhat(x), arviz(x, az.rhat)),
                      (mcmc.ess_bulk(x), arviz(x, az.ess, method="bulk")),
                      (mcmc.ess_tail(x), arviz(x, az.ess, method="tail"))):
        np.testing.assert_allclose(mine, ref, rtol=1e-9, equal_nan=True)


def test_average_ranks_are_scipys():
    from scipy import stats

    rng = np.random.default_rng(0)
    a = np.round(rng.normal(size=(57, 6)), 1)  # many ties
    a[:, 0] = 2.0  # one value
    a[3, 1] = np.nan
    a[:, 2] = np.inf
    a[5:9, 2] = -1.0
    with np.errstate(invalid="ignore"):
        want = stats.rankdata(a, method="average", axis=0)
    np.testing.assert_array_equal(mcmc.average_ranks(a), want)


def test_too_few_draws_or_chains_give_nan():
    x = ar1((2, 3, 2), 0.5, seed=0)
    assert np.isnan(mcmc.rhat(x)).all() and np.isnan(mcmc.ess_bulk(x)).all()
    assert np.isnan(mcmc.rhat(ar1((1, 50, 2), 0.5, seed=0))).all()


def test_diagnostics_of_a_trace_are_arviz_s_extremes():
    post = {"a": ar1((2, 300, 3), 0.8, 1), "b": ar1((2, 300, 1), 0.2, 2)[:, :, 0]}
    idata = az.from_dict(posterior=post, sample_stats={"diverging": np.zeros((2, 300), bool)})
    diag = sampling.diagnostics(idata)
    assert diag.max_rhat == pytest.approx(
        max(float(az.rhat(idata.posterior)[v].max()) for v in post), rel=1e-9)
    for method, value in (("bulk", diag.min_ess_bulk), ("tail", diag.min_ess_tail)):
        ess = az.ess(idata.posterior, method=method)
        assert value == pytest.approx(min(float(ess[v].min()) for v in post), rel=1e-9)
