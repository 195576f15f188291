"""The ``roofline`` variant: its compiled root and gradient against the theory, its Op in a
graph, its ceilings and its predictions (structure with a mocked sampler; model-wide checks of
every variant are in test_models.py)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.testing import mock_sample
from support.sweeps import table

from bayeslat import theory
from bayeslat.errors import FitError
from bayeslat.models import get, sampling
from bayeslat.models.roofline import log_latency, row_terms, solve


def _settings(n, seed):
    """Random rows of the form: rates, the memory line, a server's roofline, workloads."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 7, n).astype(float)
    return {"rps": rng.uniform(1.0, 100.0, n), "c1": rng.uniform(0.5, 3.0, n),
            "c2": rng.uniform(1e-3, 8e-3, n), "f": 10 ** rng.uniform(-6.0, -4.5, n),
            "knee": rng.uniform(60.0, 300.0, n), "cycles": rng.uniform(20.0, 500.0, n),
            "k": k, "prefill": rng.choice([128.0, 256.0, 1024.0], n),
            "ratio": np.where(k > 0, rng.uniform(0.01, 0.2, n), 0.0)}


PARAMS = ("c1", "c2", "f", "knee")


@pytest.mark.parametrize("arrivals", theory.ARRIVALS)
def test_the_compiled_root_is_the_theorys_and_its_gradient_the_finite_differences(arrivals):
    s = _settings(400, seed=1)
    poisson = np.full(400, float(arrivals == "poisson"))
    args = [s[n] for n in ("rps", *PARAMS, "cycles", "k", "prefill", "ratio")]
    log_lat, grad = solve(*args, poisson)
    want = theory.roofline_latency(*args[:8], s["f"] * s["ratio"], arrivals=arrivals,
                                   batch_cap=np.inf)
    steady = np.isfinite(want)
    assert 0.2 < steady.mean() < 0.95  # both outcomes are checked
    np.testing.assert_array_equal(np.isfinite(log_lat), steady)
    np.testing.assert_allclose(np.exp(log_lat[steady]), want[steady], rtol=1e-10)
    assert (grad[~steady] == 0).all()
    for j, name in enumerate(PARAMS):
        moved = []
        for sign in (1, -1):
            shifted = dict(s, **{name: s[name] * (1 + sign * 1e-6)})
            moved.append(solve(*[shifted[n] for n in ("rps", *PARAMS, "cycles", "k", "prefill",
                                                      "ratio")], poisson)[0])
        with np.errstate(invalid="ignore"):  # inf − inf where a move crosses the wall
            numeric = (moved[0] - moved[1]) / 2e-6  # d log L / d log θ
        ok = steady & np.isfinite(numeric)
        # elasticities: the piecewise form has kinks, where one side's slope is the other's
        close = np.abs(grad[ok, j] * s[name][ok] - numeric[ok]) < 1e-5 + 1e-4 * np.abs(numeric[ok])
        assert close.mean() > 0.98, name
        assert np.abs(grad[:, j]).max() > 0  # each parameter moves some row


def test_the_op_has_the_kernels_gradient_in_python_and_numba_modes():
    s = _settings(60, seed=2)
    data = {"rps": 0.1 * s["rps"], "cycles": s["cycles"], "k": s["k"],
            "prompt": s["prefill"], "ratio": s["ratio"], "poisson": np.zeros(60)}
    theta = [pt.dvector(n) for n in PARAMS]
    log_lat = log_latency(dict(zip(("C1", "C2", "f", "knee"), theta, strict=True)), data)
    total = log_lat.sum()
    grads = pytensor.grad(total, theta)
    values = [0.5 * s["c1"], s["c2"], 0.3 * s["f"], s["knee"]]
    want_lat, want_grad = solve(data["rps"], *values, s["cycles"], s["k"], s["prefill"],
                                s["ratio"], data["poisson"])
    assert np.isfinite(want_lat).all()
    for mode in ("FAST_COMPILE", "NUMBA"):
        out = pytensor.function(theta, [log_lat, *grads], mode=mode)(*values)
        np.testing.assert_allclose(out[0], want_lat, rtol=1e-12)
        for j in range(4):
            np.testing.assert_allclose(out[1 + j], want_grad[:, j], rtol=1e-12)


@pytest.fixture(scope="module")
def fitted():
    original = pm.sample
    pm.sample = mock_sample
    try:
        model = get("roofline")(table("roofline"))
        sampling.sample(model, draws=12, chains=2, sampler="pymc", progressbar=False)
    finally:
        pm.sample = original
    return model


def test_the_start_has_a_root_at_every_row_and_the_prior_centres_f_on_the_size():
    model = get("roofline")(table("roofline"))
    start = model.start()
    assert np.isfinite(model.check_start(model.build()))
    sizes = model.server_sizes()
    median = model.config.prior("token_compute")[0]
    # halved from its prior's centre only as far as the start's roots need
    assert (start["log_f"] <= np.log(median * sizes) + 1e-12).all()
    assert (start["log_f"] > np.log(median * sizes) - 40 * np.log(2)).all()


def _at_start(model, pm_model, outputs):
    """The values of the graph's ``outputs`` at the model's start."""
    from pymc.initial_point import make_initial_point_fn

    point = make_initial_point_fn(model=pm_model, overrides=model.initial_values(pm_model),
                                  jitter_rvs=set(), return_transformed=True)(0)
    fn = pm_model.compile_fn(pm_model.replace_rvs_by_values(outputs),
                             inputs=pm_model.value_vars, point_fn=True, on_unused_input="ignore")
    return [np.asarray(v) for v in fn(point)]


def test_the_ceilings_likelihood_is_the_full_batchs_rate():
    model = get("roofline")(table("roofline"))
    assert len(model.ceilings) == 1
    pm_model = model.build()
    from pytensor.graph.traversal import applys_between

    latency = next(node for node in applys_between(pm_model.value_vars,
                                                    [pm_model.logp()])
                   if type(node.op).__name__ == "RooflineLatency")
    mu, shortfall, *parts = _at_start(model, pm_model, [
        pm_model["log_ceiling"].owner.inputs[2], pm_model["ceiling_shortfall"],
        *latency.inputs[:4]])
    row = np.flatnonzero(model.rows["config"] == model.ceilings["config"].iloc[0])[0]
    c1, c2, f, knee = (p[row] for p in parts)
    terms = {name: value[row] for name, value in row_terms(model.rows).items()}
    want = theory.roofline_throughput(c1, c2, f, knee, terms["cycles"],
                                      model.rows["k"].iloc[row],
                                      model.rows["prefill_tokens"].iloc[row],
                                      f * terms["ratio"])
    np.testing.assert_allclose(mu, [np.log(want) - shortfall], rtol=1e-10)


def test_predictions_are_the_theorys_latency_of_their_parts(fitted):
    model = fitted
    rows = model.rows.head(12).copy()
    pred = model.predict(rows)
    terms = row_terms(rows)
    want = theory.roofline_latency(rows["rps"].to_numpy()[None, None], pred["C1"].values,
                                   pred["C2"].values, pred["f"].values, pred["knee"].values,
                                   terms["cycles"], rows["k"].to_numpy(float),
                                   rows["prefill_tokens"].to_numpy(float),
                                   pred["f"].values * terms["ratio"])
    np.testing.assert_allclose(pred["latency"].values, want)
    # the capacity is where the steady state ends: just below it there is one, just past none
    cap = pred["capacity"].values

    def at(rates):
        return theory.roofline_latency(rates, pred["C1"].values, pred["C2"].values,
                                       pred["f"].values, pred["knee"].values, terms["cycles"],
                                       rows["k"].to_numpy(float),
                                       rows["prefill_tokens"].to_numpy(float),
                                       pred["f"].values * terms["ratio"])

    assert np.isfinite(at(0.999 * cap)).all()
    assert np.isinf(at(1.001 * cap)).all()


def test_a_server_never_measured_is_refused_with_what_to_do(fitted):
    rows = fitted.rows.head(3).assign(hardware="A100")
    with pytest.raises(FitError, match="measure a sweep there"):
        fitted.predict(rows)


def test_decisions_refuse_its_fits_until_they_read_its_latency(fitted):
    from bayeslat import decide

    with pytest.raises(FitError, match="--model capacity"):
        decide.headline(fitted)
    setup = decide.setups(fitted.table).head(1)
    with pytest.raises(FitError, match="not built yet"):
        decide.from_model(fitted, setup, [0.7], [0, 1], [1.0])
