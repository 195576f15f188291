"""The digamma that the compiled log density uses (bayeslat.compiled)."""

import numpy as np
import pytest
import scipy.special

from bayeslat import compiled


def test_digamma_matches_scipy_on_both_sides_of_zero():
    positive = np.geomspace(1e-6, 1e8, 3000)
    got = np.array([compiled.digamma(float(x)) for x in positive])
    # relative to 1e-12 (measured: 9e-14 at worst, near psi's root at 1.46), and absolutely
    # there: the last bits of log and tan differ between CPUs and libms
    np.testing.assert_allclose(got, scipy.special.psi(positive), rtol=1e-12, atol=1e-14)
    # negative non-integers, at least 1e-3 from a pole (the reflection's tan loses digits there)
    negative = -np.linspace(0.001, 40.999, 2000)
    negative = negative[np.abs(negative - np.round(negative)) > 1e-3]
    got = np.array([compiled.digamma(float(x)) for x in negative])
    np.testing.assert_allclose(got, scipy.special.psi(negative), rtol=1e-10, atol=0)


@pytest.mark.parametrize("pole", [0.0, -1.0, -7.0])
def test_digamma_is_nan_at_its_poles(pole):
    assert np.isnan(compiled.digamma(pole))


def test_registered_digamma_is_cacheable_and_gives_the_same_gradient():
    import pymc as pm
    import pytensor
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
    from pytensor.scalar.math import psi

    compiled.register()
    assert numba_funcify_and_cache_key(psi, node=None)[1].startswith("bayeslat-digamma")
    with pm.Model() as model:
        nu = pm.Gamma("nu", 2.0, 0.1)
        pm.StudentT("y", nu=nu, mu=0.0, sigma=1.0, observed=[0.3, -2.0, 5.0, 0.1])
    point = {"nu_log__": np.array(np.log(3.7))}
    grads = {}
    for mode in ("NUMBA", "FAST_COMPILE"):
        fn = model.compile_dlogp(mode=mode)
        grads[mode] = fn(point)
    np.testing.assert_allclose(grads["NUMBA"], grads["FAST_COMPILE"], rtol=1e-9)
    # the graph really goes through Psi (else the comparison would prove nothing)
    graph = model.compile_dlogp(mode="FAST_COMPILE").f.maker.fgraph
    text = pytensor.printing.debugprint(graph, file="str")
    assert "psi" in text.lower()


@pytest.mark.parametrize("variant", ["hierarchical", "capacity"])
def test_every_constant_of_the_log_density_is_one_numba_can_cache(variant):
    """numba reads a constant array that is not contiguous (or is over 1 MB) by its address,
    and a compiled function holding such an address is never written to the cache: the
    example's log density was compiled afresh (about 40 s) on every fit of the same data. The
    shipped example has three servers, so the server contrasts are there too."""
    from pathlib import Path

    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import ancestors

    from bayeslat.data import schema
    from bayeslat.models import config_of, get

    sweep = schema.read_table(Path(__file__).parents[1] / "data" / "example" / "sweep.parquet")
    model = get(variant)(sweep, config_of(variant, None))
    pm_model = model.build(fused=True)
    arrays = [v.data for v in ancestors([pm_model.logp(), *pm_model.deterministics])
              if isinstance(v, Constant) and isinstance(v.data, np.ndarray) and v.data.ndim]
    assert any(a.ndim == 2 and min(a.shape) > 1 for a in arrays)  # the design matrices
    bad = [a.shape for a in arrays if not (a.flags.c_contiguous or a.flags.f_contiguous)
           or a.nbytes > 10**6]
    assert not bad
