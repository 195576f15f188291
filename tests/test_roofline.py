"""The ``roofline`` variant: its compiled root and gradient against the theory, its Op in a
graph, its ceilings and its predictions (structure with a mocked sampler; model-wide checks of
every variant are in test_models.py)."""

import numpy as np
import pandas as pd
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
import xarray as xr
from pymc.testing import mock_sample
from support.sweeps import table

from bayeslat import theory
from bayeslat.errors import FitError
from bayeslat.models import get, sampling
from bayeslat.models.base import prepare
from bayeslat.models.roofline import (
    F_GRID,
    KNEE_GRID,
    ROOFLINE_PARTS,
    capacity,
    log_latency,
    row_terms,
    solve,
)


def _settings(n, seed):
    """Random rows of the form: rates, the memory line, a server's roofline, workloads."""
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 7, n).astype(float)
    return {"rps": rng.uniform(1.0, 100.0, n), "c1": rng.uniform(0.5, 3.0, n),
            "c2": rng.uniform(1e-3, 8e-3, n), "f": 10 ** rng.uniform(-6.0, -4.5, n),
            "knee": rng.uniform(60.0, 300.0, n), "knee_d": rng.uniform(60.0, 300.0, n),
            "cycles": rng.uniform(20.0, 500.0, n),
            "k": k, "prefill": rng.choice([128.0, 256.0, 1024.0], n),
            "ratio": np.where(k > 0, rng.uniform(0.01, 0.2, n), 0.0)}


PARAMS = ("c1", "c2", "f", "knee", "knee_d")


ARGS = ("rps", *PARAMS, "cycles", "k", "prefill", "ratio")


@pytest.mark.parametrize("arrivals", theory.ARRIVALS)
def test_the_compiled_root_is_the_theorys_and_its_gradients_the_finite_differences(arrivals):
    """The root and its amplification against :mod:`bayeslat.theory`, and the gradient of
    both against central differences (in elasticities; the form's corners are rounded, so
    every row but those at their wall, where rounding swamps the differences)."""
    s = _settings(400, seed=1)
    poisson = np.full(400, float(arrivals == "poisson"))
    log_lat, amp, grad, grad_amp = solve(*[s[n] for n in ARGS], poisson)
    form = (*[s[n] for n in ("rps", "c1", "c2", "f", "knee", "cycles", "k", "prefill")],
            s["f"] * s["ratio"], s["knee_d"])
    want = theory.roofline_latency(*form, arrivals=arrivals, batch_cap=np.inf)
    steady = np.isfinite(want)
    assert 0.2 < steady.mean() < 0.95  # both outcomes are checked
    np.testing.assert_array_equal(np.isfinite(log_lat), steady)
    np.testing.assert_allclose(np.exp(log_lat[steady]), want[steady], rtol=1e-10)
    np.testing.assert_allclose(amp[steady], theory.roofline_amplification(
        *form, arrivals=arrivals, batch_cap=np.inf)[steady], rtol=1e-8)
    assert (amp[steady] >= 0).all() and amp[steady].max() > 1  # some rows near their wall
    assert (grad[~steady] == 0).all() and (grad_amp[~steady] == 0).all()
    for j, name in enumerate(PARAMS):
        moved = []
        for sign in (1, -1):
            shifted = dict(s, **{name: s[name] * (1 + sign * 1e-6)})
            moved.append(solve(*[shifted[n] for n in ARGS], poisson))
        with np.errstate(invalid="ignore"):  # inf − inf where a move crosses the wall
            numeric = [(moved[0][i] - moved[1][i]) / 2e-6 for i in (0, 1)]  # d/d log θ
        for exact, fd in ((grad[:, j], numeric[0]), (grad_amp[:, j], numeric[1])):
            ok = steady & np.isfinite(fd) & (amp < 10.0)
            close = np.abs(exact[ok] * s[name][ok] - fd[ok]) < 1e-5 + 1e-4 * np.abs(fd[ok])
            assert close.all(), name
            assert np.abs(exact).max() > 0  # each parameter moves some row


@pytest.mark.parametrize(("cycles", "f", "top"), [(100.0, 1e-5, 95.0), (400.0, 2e-6, 130.0)],
                         ids=["a whole prompt", "the knee"])
def test_the_amplification_moves_continuously_across_the_forms_corners(cycles, f, top,
                                                                        monkeypatch):
    """A row whose load crosses a corner of the form (``m`` = 1 prompt a step with the
    tokens below the knee; the knee with fewer than one prompt a step) on rates 0.05% apart:
    the smoothed form's amplification, the kernel's as the theory's, moves by less than 0.01
    a step, where the sharp form's (widths to 0) jumps by more than 0.2."""
    form = {"c1": 1.0, "c2": 2e-3, "f": f, "knee": 400.0, "cycles": cycles, "k": 2.0,
            "prefill": 256.0}
    rps = np.geomspace(50.0, top, 2000)
    lat = theory.roofline_latency(rps, **form)
    assert np.isfinite(lat).all()
    batch = rps * lat
    assert (np.diff(np.sign(batch / cycles - 1.0)).any()
            or np.diff(np.sign(3.0 * batch - 400.0)).any())  # a corner is crossed
    amp = theory.roofline_amplification(rps, **form)
    ones = np.ones_like(rps)
    kernel = solve(rps, *(form[n] * ones for n in ("c1", "c2", "f", "knee", "knee")),
                   *(form[n] * ones for n in ("cycles", "k", "prefill")), 0 * ones, 0 * ones)
    np.testing.assert_allclose(kernel[1], amp, rtol=1e-8)
    assert np.abs(np.diff(amp)).max() < 0.01
    monkeypatch.setattr(theory, "HINGE_WIDTH", 1e-9)
    monkeypatch.setattr(theory, "COUNT_WIDTH", 1e-9)
    assert np.abs(np.diff(theory.roofline_amplification(rps, **form))).max() > 0.2


def test_the_op_has_the_kernels_gradients_in_python_and_numba_modes():
    s = _settings(60, seed=2)
    data = {"rps": 0.1 * s["rps"], "cycles": s["cycles"], "k": s["k"],
            "prompt": s["prefill"], "ratio": s["ratio"], "poisson": np.zeros(60)}
    theta = [pt.dvector(n) for n in PARAMS]
    log_lat, amp = log_latency(dict(zip(ROOFLINE_PARTS, theta, strict=True)), data)
    weights = np.linspace(0.5, 2.0, 60)
    grads = pytensor.grad(log_lat.sum() + (weights * amp).sum(), theta)
    values = [0.5 * s["c1"], s["c2"], 0.3 * s["f"], s["knee"], s["knee_d"]]
    want_lat, want_amp, want_grad, want_grad_amp = solve(
        data["rps"], *values, s["cycles"], s["k"], s["prefill"], s["ratio"], data["poisson"])
    assert np.isfinite(want_lat).all() and want_amp.max() > 0.1
    for mode in ("FAST_COMPILE", "NUMBA"):
        out = pytensor.function(theta, [log_lat, amp, *grads], mode=mode)(*values)
        np.testing.assert_allclose(out[0], want_lat, rtol=1e-12)
        np.testing.assert_allclose(out[1], want_amp, rtol=1e-12)
        for j in range(len(PARAMS)):
            want = want_grad[:, j] + weights * want_grad_amp[:, j]
            np.testing.assert_allclose(out[2 + j], want, rtol=1e-10,
                                       atol=1e-12 * np.abs(want).max())


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


def _on_the_form(f_scale: float, knee: float):
    """The test sweep with every latency replaced by the roofline form's at a point of the
    start's grid (``f`` that multiple of its prior's median), each configuration's ``C1``
    its lowest measured latency and ``C2`` what puts its top rate at 30% of the paper's
    capacity; and those ``C1``, ``C2`` (one row per configuration, in order)."""
    df = table("roofline")
    model = get("roofline")(df)
    rows = model.rows
    codes, _ = pd.factorize(rows["config"])
    by = rows.groupby(codes)
    truth = pd.DataFrame({"C1": by["latency_mean"].min(), "C2": 0.3 / by["rps"].max()})
    terms = row_terms(rows)
    f = f_scale * model.config.prior("token_compute")[0] * model.server_sizes[
        model.server_index(rows)]
    lat = theory.roofline_latency(rows["rps"].to_numpy(), truth["C1"].to_numpy()[codes],
                                  truth["C2"].to_numpy()[codes], f, knee, terms["cycles"],
                                  rows["k"].to_numpy(float), terms["prompt"],
                                  f * terms["ratio"], batch_cap=np.inf)
    assert np.isfinite(lat).all()
    fitted = ~df["saturated"].to_numpy()
    df.loc[fitted, "latency_mean"] = lat
    return df, truth


def test_the_start_finds_the_roofline_and_the_curves_of_data_on_the_form():
    f_scale, knee = F_GRID[4], KNEE_GRID[2]
    df, truth = _on_the_form(f_scale, knee)
    model = get("roofline")(df)
    roofline, fits = model.roofline_start()
    median = model.config.prior("token_compute")[0] * model.server_sizes
    np.testing.assert_allclose(roofline["f"], f_scale * median)
    np.testing.assert_allclose(roofline["knee"], knee)
    np.testing.assert_allclose(fits[["C1", "C2"]], truth, rtol=1e-5)
    # the laws' start may miss the curves a little; its rows still have roots
    assert np.isfinite(model.check_start(model.build()))
    start = model.start()
    assert (start["log_f"] <= np.log(f_scale * median) + 1e-12).all()
    np.testing.assert_allclose(start["log_knee_d"], np.log(knee))


def test_the_drafters_knee_is_centred_on_its_servers_verifier_knee():
    """A knee is its GPU's FLOPs per byte times the bytes a weight takes: the drafter's prior
    is the verifier's knee times a spread of ``drafter_knee_spread`` (its precision)."""
    model = get("roofline")(table("roofline"))
    pm_model = model.build()
    knee, knee_d = pm.draw([pm_model["log_knee"], pm_model["log_knee_d"]], draws=4000,
                           random_seed=3)
    spread = model.config.prior("drafter_knee_spread")
    np.testing.assert_allclose((knee_d - knee).std(), spread, rtol=0.05)
    np.testing.assert_allclose(knee.std(), model.config.prior("roofline_knee")[1], rtol=0.05)


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
        *latency.inputs[:5]])
    row = np.flatnonzero(model.rows["config"] == model.ceilings["config"].iloc[0])[0]
    c1, c2, f, knee, knee_d = (p[row] for p in parts)
    terms = {name: value[row] for name, value in row_terms(model.rows).items()}
    want = theory.roofline_throughput(c1, c2, f, knee, terms["cycles"],
                                      model.rows["k"].iloc[row],
                                      model.rows["prefill_tokens"].iloc[row],
                                      f * terms["ratio"], knee_d)
    np.testing.assert_allclose(mu, [np.log(want) - shortfall], rtol=1e-10)


def test_predictions_are_the_theorys_latency_of_their_parts(fitted):
    # low loads: the mocked sampler's draws are the prior's, whose rooflines are far off
    rows = fitted.rows.groupby("k").head(4).reset_index(drop=True)
    rows["rps"] *= 0.05
    assert (rows["k"] > 0).any() and (rows["k"] == 0).any()
    pred = fitted.predict(rows)
    terms = row_terms(rows)

    def at(rates):
        return theory.roofline_latency(rates, pred["C1"].values, pred["C2"].values,
                                       pred["f"].values, pred["knee"].values, terms["cycles"],
                                       rows["k"].to_numpy(float),
                                       rows["prefill_tokens"].to_numpy(float),
                                       pred["f"].values * terms["ratio"],
                                       pred["knee_d"].values)

    want = at(rows["rps"].to_numpy()[None, None])
    assert np.isfinite(want).any()
    np.testing.assert_allclose(pred["latency"].values, want)
    # the capacity is where the steady state ends: just below it there is one, just past none
    cap = pred["capacity"].values
    assert np.isfinite(at(0.999 * cap)).all()
    assert np.isinf(at(1.001 * cap)).all()


def test_a_server_never_measured_is_refused_with_what_to_do(fitted):
    rows = fitted.rows.head(3).assign(hardware="A100")
    with pytest.raises(FitError, match="measure a sweep there"):
        fitted.predict(rows)


@pytest.mark.parametrize("arrivals", theory.ARRIVALS)
def test_the_compiled_capacity_is_the_theorys(arrivals):
    """:func:`capacity` (compiled) against :func:`bayeslat.theory.roofline_capacity`, on rows
    whose peak comes before the batch fills and rows where the full batch's rate binds."""
    s = _settings(300, seed=3)
    s["c2"] = s["c2"] / np.random.default_rng(4).uniform(1.0, 20.0, 300)
    got = capacity(*[s[n] for n in ARGS[1:]], np.full(300, float(arrivals == "poisson")))
    want = theory.roofline_capacity(s["c1"], s["c2"], s["f"], s["knee"], s["cycles"], s["k"],
                                    s["prefill"], s["f"] * s["ratio"], s["knee_d"],
                                    arrivals=arrivals)
    full = np.isclose(want, theory.roofline_throughput(
        s["c1"], s["c2"], s["f"], s["knee"], s["cycles"], s["k"], s["prefill"],
        s["f"] * s["ratio"], s["knee_d"], arrivals=arrivals), rtol=1e-12)
    assert 0.1 < full.mean() < 0.9  # both ends of the bisection are checked
    np.testing.assert_allclose(got, want, rtol=1e-10)


def _setup_rows(ks=(0, 1, 2, 4, 6), strategy="constant"):
    """One setup's rows (an 8B verifier on an H100 with its EAGLE head), prepared."""
    return prepare(pd.DataFrame({
        "verifier": "llama-8b", "hardware": "H100", "prefill_tokens": 256,
        "decode_tokens": 128, "verifier_params_b": 8.0, "k": list(ks),
        "method": ["none" if k == 0 else "eagle3" for k in ks],
        "drafter": ["none" if k == 0 else "eagle3-8b" for k in ks],
        "drafter_params_b": [0.0 if k == 0 else 0.4 for k in ks],
        "alpha": [np.nan if k == 0 else 0.75 for k in ks], "rps": 0.0,
        "strategy": strategy}))


def _setup_parts(rows, draws=40, seed=0):
    """Draws of the parts of :func:`_setup_rows`, about the example's fit of that server:
    ``C1`` falling and ``C2`` rising with k less than in proportion."""
    rng = np.random.default_rng(seed)
    k = rows["k"].to_numpy(float)
    jitter = rng.lognormal(0.0, 0.05, (1, draws, len(rows)))
    server = rng.lognormal(0.0, 0.1, (1, draws, 1))
    values = {"C1": 1.2 / (1.0 + 0.35 * k) * jitter, "C2": 4e-3 * (1.0 + 0.12 * k) * jitter,
              "f": 2.7e-5 * server, "knee": 224.0 * server, "knee_d": 290.0 * server}
    dims = ("chain", "draw", "obs")
    return {name: xr.DataArray(np.broadcast_to(v, (1, draws, len(rows))), dims=dims)
            for name, v in values.items()}


@pytest.mark.parametrize("strategy", ["constant", "poisson"])
def test_break_even_is_where_the_latencies_cross_below_the_baselines_capacity(fitted, strategy):
    """RPS* of each draw: the SD and baseline latencies are equal there, SD is faster at half
    of it, and it lies below the baseline's capacity; none for the baseline itself."""
    rows = _setup_rows(strategy=strategy)
    parts = _setup_parts(rows)
    star = fitted.break_even(parts, rows, np.zeros(len(rows), int))
    assert star.dims == ("chain", "draw", "obs")
    assert np.isnan(star.isel(obs=0)).all()
    sd = star.isel(obs=slice(1, None))
    assert np.isfinite(sd).mean() > 0.9
    cap = fitted.capacity(parts, rows).isel(obs=0)
    assert (sd.fillna(0) < cap).all()

    base = np.zeros(len(rows), int)
    base_parts = {name: value.isel(obs=base) for name, value in parts.items()}

    def gap(at):  # SD's latency over the baseline's at the loads ``at`` (chain, draw, obs)
        at = at.fillna(0.0)
        return (fitted.latency(parts, rows, at) / fitted.latency(
            base_parts, rows.iloc[base].reset_index(drop=True), at)).isel(obs=slice(1, None))

    found = np.isfinite(sd.values)
    # SD is faster just below RPS* and at half of it, not just above (where SD's batch fills
    # first, the cap, its latency jumps to inf: the crossing is there)
    for scale, faster in ((0.5, True), (1 - 1e-5, True), (1 + 1e-5, False)):
        assert ((gap(star * scale).values[found] < 1.0) == faster).all()
    assert np.isfinite(gap(star * (1 + 1e-5)).values[found]).mean() > 0.9


def test_latency_at_loads_is_the_theorys_with_the_batch_cap(fitted):
    """The compiled latency at a grid of loads: the theory's, ``inf`` past the batch cap or
    the steady state, and ``inf`` exactly where the theory's is."""
    rows = _setup_rows()
    parts = _setup_parts(rows, draws=5)
    loads = xr.DataArray(np.linspace(0.0, 120.0, 25), dims="rps")
    got = fitted.latency(parts, rows, loads).transpose("chain", "draw", "obs", "rps")
    terms = row_terms(rows)
    want = theory.roofline_latency(
        loads, parts["C1"], parts["C2"], parts["f"], parts["knee"],
        xr.DataArray(terms["cycles"], dims="obs"), xr.DataArray(rows["k"].to_numpy(float),
                                                                dims="obs"),
        256.0, parts["f"] * xr.DataArray(terms["ratio"], dims="obs"), parts["knee_d"])
    want = want.transpose(*got.dims)
    assert np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got.values[np.isfinite(want.values)],
                               want.values[np.isfinite(want.values)], rtol=1e-10)


def test_decisions_read_its_latency_capacity_and_break_even(fitted):
    """decide from a fit of the variant: the headline's RPS* and the decision Dataset's agree
    (the same draws), and the Dataset's latency and capacity are the model's."""
    from bayeslat import decide

    setup = decide.setups(fitted.table).head(1)
    alpha = fitted.rows.loc[fitted.rows["k"] > 0, "alpha"].iloc[0]
    ks = sorted(fitted.rows.loc[(fitted.rows["k"] > 0)
                                & (fitted.rows["alpha"] == alpha), "k"].unique())
    loads = decide.default_loads(fitted, setup)[setup["setup"].iloc[0]]
    ds = decide.from_model(fitted, setup, [alpha], ks, loads)
    assert ds["capacity"].notnull().all()
    assert (ds["capacity"].sel(stat="q50") > 0).all()
    head = decide.headline(fitted).set_index("config")
    configs = fitted.rows[(fitted.rows["k"] > 0) & (fitted.rows["alpha"] == alpha)
                          & (fitted.rows["group"] == fitted.rows["group"].iloc[0])]
    for k, config in configs.drop_duplicates("k")[["k", "config"]].itertuples(index=False):
        if k in ks:
            np.testing.assert_allclose(
                ds["rps_star"].sel(stat="q50", k=k).item(), head.loc[config, "rps_star"],
                rtol=1e-6, equal_nan=True)
    latency = ds["latency"].sel(stat="q50")
    assert np.isfinite(latency.isel(rps=0)).all()


def test_evenly_spaced_requests_climb_the_forms_stalls_from_the_lone_latency(fitted):
    """A constant-rate configuration's latency on the staircase of its prompts' stalls: at
    zero load the stall is ``c2p`` and one prompt's arithmetic past the verifier's knee and
    the drafter's; the lone latency is the staircase's bottom step, and below ``rps = 1/lone``
    it is the latency; past it the first step."""
    rows = prepare(fitted.rows[(fitted.rows["k"] > 0)
                               & (fitted.rows["strategy"] == "constant")].head(1))
    parts = fitted.predict(rows).drop_vars(["config", "rps"], errors="ignore")
    terms = row_terms(rows)

    def h(t):
        return theory._hinge(t, theory.HINGE_WIDTH)[0]

    p = rows["prefill_tokens"].to_numpy(float)
    want = (fitted.prefill_stall(rows) + parts["f"] * (h(p - parts["knee"]) - h(-parts["knee"]))
            + parts["f"] * terms["ratio"] * (h(p - parts["knee_d"]) - h(-parts["knee_d"])))
    got = fitted.stall(parts, rows, parts["C1"], 0.0)
    assert float((got - fitted.prefill_stall(rows)).min()) > 0  # a prompt's arithmetic counts
    np.testing.assert_allclose(got.transpose(*want.dims), want, rtol=1e-9)

    lone = fitted.lone(parts, rows)  # the staircase's bottom step, at zero load
    np.testing.assert_allclose(lone, theory.evenly_spaced(parts["C1"], 0.0, got), rtol=1e-12)
    assert float((lone - parts["C1"]).min()) > 0

    rps = xr.DataArray([0.5, 0.99, 1.01], dims="rps") / lone
    smooth = fitted.latency(parts, rows, rps)
    stairs = fitted.evenly_spaced(parts, rows, smooth, rps)
    xr.testing.assert_allclose(stairs.isel(rps=[0, 1]), lone.broadcast_like(stairs.isel(
        rps=[0, 1])).transpose(*stairs.dims), rtol=1e-12)
    first = fitted.stall(parts, rows, smooth, rps).isel(rps=2)
    moved = stairs.isel(rps=2) != smooth.isel(rps=2)
    assert bool((moved == (1.01 * first / lone < theory.UNIQUE_COUNT)).all())
    assert bool(moved.any())  # the first step, above the lone latency


def test_the_staircase_averages_to_the_form_where_anchored(fitted, monkeypatch):
    """At the rates the staircase is anchored at (the configuration's fitted rates, here
    scaled to where the mocked sampler's prior draws have a steady state) it averages to the
    form, wherever each rate is on it (requests meeting, one consistent count)."""
    rows = prepare(fitted.rows[(fitted.rows["k"] > 0)
                               & (fitted.rows["strategy"] == "constant")].head(1))
    parts = fitted.predict(rows).drop_vars(["config", "rps"], errors="ignore")
    lone = float(fitted.lone(parts, rows).median())
    anchors = fitted.constant_rates(rows)
    anchors = anchors * (1.5 / lone) / anchors.min()
    monkeypatch.setattr(fitted, "constant_rates", lambda _: anchors)
    rates = anchors.isel(obs=0, drop=True).dropna("rate").rename(rate="rps")
    smooth = fitted.latency(parts, rows, rates)
    stairs = fitted.evenly_spaced(parts, rows, smooth, rates)
    on = ((rates * fitted.stall(parts, rows, smooth, rates) < theory.UNIQUE_COUNT)
          & (rates * fitted.lone(parts, rows) >= 1) & np.isfinite(smooth))
    steady = on.all("rps")
    assert steady.sum() >= 3
    off = (stairs - smooth).where(steady)
    assert float(np.abs(off).max()) > 1e-6  # the steps leave the curve between the rates
    np.testing.assert_allclose(off.mean("rps").where(steady, 0.0), 0.0, atol=1e-12)
