"""Structure of the model variants with a mocked sampler: groups, dims, attrs, save and load,
prediction on new data. Real NUTS fits are in test_fit_slow.py."""

import copy
import json

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from pymc.testing import mock_sample
from support.sweeps import table

import bayeslat
from bayeslat import fitting, scaling, theory
from bayeslat.data import schema
from bayeslat.errors import FitError, InputError, NumericalError
from bayeslat.models import VARIANTS, get, sampling
from bayeslat.models.base import BARRIER_WIDTH, log_headroom, prepare, psis_loo
from bayeslat.models.capacity import Q_FLOOR, TAU_Q, _compute_start, queue_shift, read_laws
from bayeslat.models.start import MAX_LOAD, cycles_of, group_coefficients, group_fit, intercept
from bayeslat.scaling import ScalingConfig


@pytest.fixture(scope="module")
def mocked():
    original = pm.sample
    pm.sample = mock_sample
    yield
    pm.sample = original


@pytest.fixture(scope="module", params=list(VARIANTS))
def fitted(request, mocked, tmp_path_factory):
    model = get(request.param)(table(request.param))
    sampling.sample(model, draws=12, chains=2, sampler="pymc", progressbar=False)
    path = model.save(tmp_path_factory.mktemp("fits") / f"{request.param}.nc")
    return model, path


def test_scaling_variants_need_the_size_of_every_verifier():
    df = table("hierarchical")
    df.loc[df["verifier"] == "llama-70b", "verifier_params_b"] = np.nan
    with pytest.raises(InputError, match="llama-70b") as info:
        get("hierarchical")(df)
    assert info.value.field == "verifier_params_b"
    # one verifier of unknown size is fine: its size cannot be told from the intercept anyway
    one = df[df["verifier"] == "llama-70b"]
    assert get("hierarchical")(one).scales["c1v"] == get("hierarchical")(
        one.assign(verifier_params_b=70.0)).scales["c1v"]


def test_groups_dims_and_excluded_rows(fitted):
    model, _ = fitted
    idata = model.idata
    for group in ("posterior", "log_likelihood", "observed_data", "constant_data"):
        assert group in idata.groups()
    n = len(model.table)
    assert n == len(table(model.variant)) - 1
    assert idata.log_likelihood["log_latency"].dims == ("chain", "draw", "obs")
    assert idata.log_likelihood.sizes["obs"] == n
    assert idata.constant_data["rps"].dims == ("obs",)
    assert len(model.excluded) == 1 and "throughput strategy" in model.excluded[0]
    if model.variant.startswith("dense"):
        assert idata.posterior["log_C1"].dims == ("chain", "draw", "config")
    else:
        assert idata.posterior["c1v"].dims == ("chain", "draw", "group")
        assert idata.posterior["c1d"].dims == ("chain", "draw", "draft")
        assert idata.posterior["beta_c2v"].dims == ("chain", "draw", "c2v_feature")
        groups = model.rows["group"].nunique()
        assert idata.posterior.sizes["group"] == groups
        features = list(idata.posterior["c2v_feature"].values)
        expected = {"speculative": ["intercept"],  # no scaling laws
                    "moe": ["intercept", "kv_tokens"],  # one verifier: its size is dropped
                    "hierarchical": ["intercept", "verifier_params_b", "kv_tokens"],
                    "capacity": ["intercept", "verifier_params_b", "kv_tokens"],
                    "roofline": ["intercept", "verifier_params_b", "kv_tokens"]}
        assert features == expected[model.variant]


def test_capacity_variants_fit_the_measured_ceilings(fitted):
    model, path = fitted
    idata = model.idata
    # the Student-t keeps a finite variance: nu = 2 + Gamma
    assert float(idata.posterior["nu"].min()) >= 2.0
    # PSIS-LOO compares variants on the latency rows only
    assert list(idata.log_likelihood.data_vars) == ["log_latency"]
    assert len(model.ceilings) == 1 and model.ceilings["strategy"].iloc[0] == "throughput"
    if not model.fits_ceilings:
        assert "log_ceiling" not in idata.observed_data
        return
    assert idata.observed_data["log_ceiling"].dims == ("ceiling",)
    np.testing.assert_allclose(idata.observed_data["log_ceiling"],
                               np.log(model.ceilings["rps"]))
    assert "sigma_ceiling" in idata.posterior
    # one shortfall of the ceilings below the capacity, shared by the hierarchical variant's
    # configurations; dense-capacity's walls are free per configuration and have none
    shortfall = idata.posterior.get("ceiling_shortfall")
    assert (shortfall is not None) == (model.variant in ("capacity", "roofline"))
    if shortfall is not None:
        assert shortfall.dims == ("chain", "draw") and float(shortfall.min()) >= 0.0
    loaded = fitting.load(path)
    assert loaded.ceilings["config"].tolist() == model.ceilings["config"].tolist()
    pred = model.predict(model.table.iloc[[0, 5]], seed=0)
    if model.variant == "roofline":  # its capacity: test_roofline.py
        assert {"f", "knee", "capacity"} <= set(pred.data_vars)
        return
    assert {"C3", "Q", "capacity"} <= set(pred.data_vars)
    cap = 1 / np.maximum(pred["C2"], pred["C3"])
    np.testing.assert_allclose(pred["capacity"], cap)


def test_capacity_centres_queue_factors_on_their_group_and_samples_c3v_c3d_noncentred(
        fitted):
    """Q per configuration around its group's stage-1 law (no hyperparameters), c3v, c3p and
    c3d sampled non-centred by the variant's default config, and the memory slopes with the
    drafter's as one centred triple (its spread fixed); the paper's variants keep theirs."""
    model, _ = fitted
    post = model.idata.posterior
    if model.variant != "capacity":
        assert "z_c2d" not in post
        assert model.config.noncentered == ("c1p",)
        return
    assert model.config.noncentered == ("c1p", "c3v", "c3p", "c3d")
    assert "z_c2d" not in post and "log_c2d" not in post and "tau_c2d" not in post
    assert "log_c2" in post and "z_c2v" not in post
    assert list(post["memory"].values) == ["c2p", "c2v", "c2d"]
    for coef in ("c3v", "c3p", "c3d"):
        assert f"z_{coef}" in post and f"log_{coef}" not in post
    assert post["log_Q_wait"].dims == ("chain", "draw", "config")
    assert "q" not in post and "tau_q" not in post and "mu_log_Q" not in post
    # centred on its group's stage-1 law of the intercept, floored: the start sits there
    groups, shares = model.queue_factors(), model.config_shares()
    assert set(groups.index) == set(model.rows["group"]) and (groups >= np.log(Q_FLOOR)).all()
    assert len(shares) == len(model.configs) and (shares >= np.log(Q_FLOOR)).all()
    start = model.start()
    log_q = start["log_Q_wait"] - queue_shift(start["log_C3"], np.log(model.queue_rates()))
    np.testing.assert_allclose(log_q, shares)


def test_capacity_wall_scores_drafts_and_reads_the_kv_cache_per_cycle():
    """The compute wall's law: ``c3r`` (a KV-cache read per context token and cycle) per
    group, ``c3d`` (a drafted token's arithmetic) per drafter, both with their spread fixed
    at ``tau_mean`` however many units there are (sampled, they ran along the ridge the walls
    leave with ``c3v``), not reported as fixed for want of units. Each group's start puts
    its configurations' walls below every measured rate."""
    many = ScalingConfig(priors=scaling.DEFAULT_PRIORS | {"tau_min_units": 1})
    model = get("capacity")(table("capacity"), many)
    built = model.build()
    free = {v.name for v in built.free_RVs}
    assert built.named_vars_to_dims["c3d"] == ("draft",)
    assert built.named_vars_to_dims["c3r"] == ("group",)
    assert not {"tau_c3d", "tau_c3r"} & free and {"tau_c3v", "tau_c3p"} <= free
    assert model.fixed_tau("c3d") == model.fixed_tau("c3r") == model.config.prior("tau_mean")
    line = fitting.spreads_line(get("capacity")(table("capacity")))
    assert "c3p" in line and "c3d" not in line and "c3r" not in line
    start = model.unit_start()
    assert all((start[q] > 0).all() for q in scaling.COMPUTE_COEFS)
    rows = model.rows
    c3 = model._compute(start, rows, *model.positions(rows))
    assert (rows["rps"].to_numpy() * c3 <= MAX_LOAD + 1e-9).all()
    assert np.isfinite(model.check_start(built))


def test_memory_slopes_are_one_pair_in_coordinates_with_unit_jacobian(fitted):
    """The scaling variants sample each group's ``(log c2p, log c2v)`` as one variable whose
    sampler coordinates are ``(log(c2p + g·m·c2v), log c2p − log(g·m·c2v))``, and ``capacity``
    (one drafter a group, ``c2d``'s spread fixed) each group's drafter's ``log c2d`` with them:
    the map and its inverse agree, its Jacobian determinant is 1 in magnitude (numerically),
    and the coefficients the rest of the model reads are its columns."""
    from bayeslat.models.hierarchical import memory_pair

    model, _ = fitted
    post = model.idata.posterior
    if model.per_configuration or "c2v" in model.config.noncentered:
        assert "log_c2" not in post
        return
    assert post["log_c2"].dims == ("chain", "draw", "group", "memory")
    for coef in post["memory"].values:
        logs = post["log_c2"].sel(memory=coef)
        if coef == "c2d":
            logs = logs.isel(group=model.draft_groups()).rename(group="draft")
        np.testing.assert_allclose(np.exp(logs), post[coef], rtol=1e-6)
    weight = np.log(model.memory_weights())
    assert np.isfinite(weight).all() and len(weight) == post.sizes["group"]
    assert model.triple() == ("c2d" in post["memory"])
    assert model.triple() or model.variant != "capacity"
    if model.triple():
        weight = np.stack([weight, np.log(model.draft_weights())], axis=-1)
        assert np.isfinite(weight).all()
    _assert_unit_jacobian(memory_pair(weight),
                          len(weight), post.sizes["memory"])


def _assert_unit_jacobian(transform, units, width):
    """``transform``'s map of ``(units, width)`` values and its inverse agree, and its
    Jacobian determinant is 1 in magnitude (numerically) and its log 0 (as it says)."""
    import pytensor
    import pytensor.tensor as pt

    x = pt.dmatrix("x")
    forward, backward = (pytensor.function([x], f(x)) for f in (transform.forward,
                                                                  transform.backward))
    ab = np.random.default_rng(0).normal(-3.0, 2.0, (units, width))
    np.testing.assert_allclose(backward(forward(ab)), ab, rtol=1e-10, atol=1e-10)
    su = forward(ab)
    det = np.linalg.det(_jacobians(backward, su))
    np.testing.assert_allclose(np.abs(det), 1.0, atol=1e-6)
    assert not pytensor.function([x], transform.log_jac_det(x))(su).any()


def _jacobians(backward, su, h=1e-6):
    """The central-difference Jacobian of a row-wise map ``backward`` at each row of ``su``
    (units × width): shape (units, width, width)."""
    jac = np.empty(su.shape + su.shape[-1:])
    for i in range(su.shape[-1]):
        step = np.zeros_like(su)
        step[:, i] = h
        jac[:, :, i] = (backward(su + step) - backward(su - step)) / (2 * h)
    return jac


def test_capacitys_compute_laws_are_sampled_in_law_coordinates():
    """``c3v``'s and ``c3d``'s betas are sampled as the log of the law at the mean unit and
    the log shares of its terms (:func:`law_coordinates`): the map and its inverse agree, its
    log Jacobian determinant is the finite-difference one, and the prior is the same
    half-normal (the log density in the new coordinates is the log-transformed one's, moved
    by the two maps' Jacobians); the paper's variant keeps ``log beta``."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    from bayeslat.models.hierarchical import law_coordinates

    capacity = get("capacity")(table("capacity"))
    free = {v.name for v in capacity.build().value_vars}
    for coef in ("c3v", "c3d", "c3p"):  # a law of one feature (the intercept) keeps its log
        law = coef != "c3p" and capacity.x[coef].shape[1] > 1
        assert (f"beta_{coef}_law__" in free) == law and (f"beta_{coef}_log__" in free) != law
    assert "beta_c3v_law__" in free
    assert not any(name.endswith("_law__") for name in
                   (v.name for v in get("hierarchical")(table("hierarchical")).build().value_vars))
    rng = np.random.default_rng(1)
    for n in (2, 3):
        weight = np.log(rng.uniform(0.5, 2.0, n))
        transform, v = law_coordinates(weight), pt.dvector("v")
        forward, backward, log_det = (pytensor.function([v], f(v)) for f in (
            transform.forward, transform.backward, transform.log_jac_det))
        su = rng.normal(0.0, 2.0, n)
        beta = backward(su)
        assert (beta > 0).all()
        np.testing.assert_allclose(forward(beta), su, atol=1e-12)
        np.testing.assert_allclose(np.log(np.sum(np.exp(weight) * beta)), su[0], atol=1e-12)
        (jac,) = _jacobians(np.vectorize(backward, signature="(n)->(n)"), su[None])
        np.testing.assert_allclose(log_det(su), np.log(abs(np.linalg.det(jac))), atol=1e-6)
        with pm.Model() as law:
            pm.HalfNormal("b", 1.0, shape=n, transform=transform, default_transform=None)
        with pm.Model() as logs:
            pm.HalfNormal("b", 1.0, shape=n)
        np.testing.assert_allclose(
            law.compile_logp()({"b_law__": su}),
            logs.compile_logp()({"b_log__": np.log(beta)}) - np.log(beta).sum() + log_det(su))


def test_group_fit_recovers_the_compute_curves_intercept_law():
    """start.group_fit with the walls: the six coefficients and the intercept's law
    ``A = g/E·(a_v + k·a_d)``, ``g·a_b`` for the baseline, of curves drawn from the capacity
    form itself (1% noise, one outlier the robust loss ignores)."""
    rng = np.random.default_rng(0)
    theta = dict(c1p=0.2, c1v=0.004, c1d=0.001, c2p=0.002, c2v=0.0001, c2d=0.00005)
    a_v, a_d = 0.003, 0.001
    configs = [(np.nan, 0)] + [(a, k) for a in (0.6, 0.9) for k in (2, 4)]
    rows = []
    for alpha, k in configs:
        c1, c2 = theory.effective_coefficients(*theta.values(), 0.0 if k == 0 else alpha, k,
                                               128.0)
        cycles = 128.0 / theory.tokens_per_cycle(0.0 if k == 0 else alpha, k)
        c3 = 0.4 * c2 * (k + 1)  # the wall binds before the memory term saturates
        q = cycles * (a_v + k * a_d) / (theory.BATCH_CAP * c3)
        for rps in np.linspace(0.1, 0.93, 8) / max(c2, c3):
            rows.append(dict(verifier="v", hardware="H", prefill_tokens=256.0,
                             decode_tokens=128.0, method="eagle3" if k else "none",
                             drafter="d" if k else "none", alpha=alpha, k=k, rps=rps, c3=c3,
                             latency_mean=theory.latency(rps, c1, c2, c3, q,
                                                         theory.soft_power(k))
                             * np.exp(0.01 * rng.normal())))
    rows = pd.DataFrame(rows)
    rows.loc[13, "latency_mean"] *= 1.5
    out = group_fit(rows, pd.Index(["d"]), rows["c3"].to_numpy(), loss="soft_l1")
    # each configuration's intercept (a_v and a_d apart only through two ks: they trade);
    # the baseline's a_b is its own, here drawn equal to a_v
    k = np.array([k for _, k in configs])
    assert intercept(out[-3:], k) == pytest.approx(a_v + k * a_d, rel=0.1)
    assert out[0] == pytest.approx(theta["c1p"], rel=0.1)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_the_robust_group_fit_follows_an_engine_groups_bends(seed):
    """The 1B's p256 g512 group on an A100 (the engine simulator): its SD curves bend well
    before their walls. From the shares' starts alone, ``soft_l1`` slid to the compute curve
    off at these seeds (``Q`` about 1e-5, misses up to 0.25 in log latency) and the capacity
    fit's prior centred every configuration there; least squares' best as a start finds the
    bends (``Q`` about 0.07)."""
    from dataclasses import replace

    from bayeslat.simulate.presets import preset
    from bayeslat.simulate.protocol import sweep

    base = preset("dense-1b-a100")
    chosen = replace(base, deployments=base.deployments[:1], alphas=(0.6, 0.8, 0.95),
                     ks=(1, 2, 4, 6))
    configs = [c for c in chosen.configurations()
               if (c.prefill_tokens, c.decode_tokens) == (256, 512)]
    model = get("capacity")(sweep(configs, chosen.protocol, seed=seed, workers=1))
    rows = model.rows
    c3 = _compute_start(model).to_numpy()[pd.factorize(rows["config"])[0]]
    drafts = pd.Index(pd.unique(rows.loc[rows["k"] > 0, "drafter"]))
    out = group_fit(rows, drafts, c3, loss="soft_l1")
    c1, c2 = group_coefficients(out[:-3], rows, drafts)
    k = rows["k"].to_numpy(float)
    q = cycles_of(rows) * intercept(out[-3:], k) / (theory.BATCH_CAP * c3)
    fitted = theory.latency(rows["rps"].to_numpy(float), c1, c2, c3, q, theory.soft_power(k))
    assert np.median(q) > 0.03
    assert np.abs(np.log(fitted) - rows["log_latency"].to_numpy()).max() < 0.12


def test_a_fit_from_before_the_baselines_own_intercept_reads_as_it_was_fitted():
    """Fits saved before the stage-1 law had a baseline term (``log_a_b``) stored two terms;
    their baselines' intercept was ``a_v``'s, and a new baseline predicted from them still is."""
    old = pd.DataFrame({"log_a_v": [-7.0, -8.0], "log_a_d": [-9.0, -9.5]}, index=["g1", "g2"])
    laws = read_laws(old.to_json())
    assert list(laws.columns) == ["log_a_v", "log_a_d", "log_a_b"]
    np.testing.assert_array_equal(laws["log_a_b"], old["log_a_v"])
    new = laws.assign(log_a_b=[-6.0, -6.5])
    pd.testing.assert_frame_equal(read_laws(new.to_json()), new)
    assert intercept(np.exp(laws.loc["g1"]), [0, 2]) == pytest.approx(
        np.exp(-7.0) + np.array([0.0, 2 * np.exp(-9.0)]))


def test_the_compute_curves_intercept_stays_below_the_memory_curves_on_the_example():
    """The empirical-Bayes centre of ``Q`` (``CapacityModel.queue_factors``): at zero load a
    step is memory-bound, so each group's law puts the compute curve's intercept ``A`` below
    the memory curve's ``C1``. Fitted with the norm's powers from the first starts, the 1B's
    p256 g128 group slid to ``A`` 8-14 times ``C1`` (Q capped at 0.9, the posterior's
    zero-load speedups 4-12% off the synchronous benchmarks')."""
    model = get("capacity")(schema.read_table(schema.EXAMPLE))
    rows = model.rows
    walls = _compute_start(model).to_numpy()[pd.factorize(rows["config"])[0]]
    for group, mine in rows.groupby("group").indices.items():
        one = rows.iloc[mine]
        drafts = pd.Index(pd.unique(one.loc[one["k"] > 0, "drafter"]))
        theta = group_fit(one, drafts, walls[mine], loss="soft_l1")
        c1, _ = group_coefficients(theta[:-3], one, drafts)
        a = cycles_of(one) * intercept(theta[-3:], one["k"])
        assert (a < c1).all(), (group, float((a / c1).max()))


def test_scatter_grows_as_the_wall_nears_for_the_capacity_variants(fitted):
    """``scatter`` (the predictive checks' scale) is ``sigma`` for the paper's variants and
    ``sqrt(sigma² + (sigma_wall·v)²)`` for the capacity ones, ``v = w/(1 − rps·C3)`` with ``w``
    the queue's share (0 past the wall, where the latency is infinite anyway)."""
    model, _ = fitted
    thin = copy.copy(model)
    thin.idata = model.idata.isel(chain=[0], draw=[0, 5])
    post = thin.idata.posterior
    pred = thin.predict(model.table, seed=0)
    if model.variant == "roofline":  # the amplification in place of the wall's move
        from bayeslat.models.roofline import row_terms

        # low loads: the mocked draws are the prior's, whose rooflines are far off
        rows = model.rows.assign(rps=0.05 * model.rows["rps"])
        scale = thin.scatter(post, pred, rows["rps"], rows)
        terms = {n: xr.DataArray(v, dims="obs") for n, v in row_terms(rows).items()}
        amp = theory.roofline_amplification(
            xr.DataArray(rows["rps"].to_numpy(), dims="obs"), pred["C1"], pred["C2"], pred["f"],
            pred["knee"], terms["cycles"], xr.DataArray(rows["k"].to_numpy(float), dims="obs"),
            terms["prompt"], pred["f"] * terms["ratio"], pred["knee_d"])
        amp = amp.where(np.isfinite(amp), 0.0)
        assert float(amp.max()) > 0
        np.testing.assert_allclose(scale, np.sqrt(post["sigma"] ** 2 + (
            post["sigma_wall"] * amp) ** 2))
        return
    scale = thin.scatter(post, pred, model.rows["rps"], model.rows).broadcast_like(
        pred["latency"])
    if "C3" not in pred:
        np.testing.assert_allclose(scale, post["sigma"].broadcast_like(scale))
        return
    share = theory.compute_share(pred["rps"], pred["C1"], pred["C2"], pred["C3"], pred["Q"],
                                 pred["P"])
    rho = pred["rps"] * pred["C3"]
    # the compute curve's share over the batch's headroom; mocked draws may pass the wall
    moves = (share / (1.0 - rho)).where(rho < 1, 0.0)
    # a share of L^P at most 1 where the compute curve starts below the memory one (A <= C1;
    # prior draws need not)
    below = pred["Q"] * theory.BATCH_CAP * pred["C3"] <= pred["C1"]
    assert float(post["sigma_wall"].min()) > 0 and float(share.max()) > 0
    assert ((share >= 0) & ((share <= 1) | ~below)).all()
    assert (moves >= share).where(rho < 1, True).all()
    np.testing.assert_allclose(
        scale, np.sqrt(post["sigma"] ** 2 + (post["sigma_wall"] * moves) ** 2).broadcast_like(
            scale))
    assert (scale >= post["sigma"]).all()


@pytest.mark.parametrize("fitted", VARIANTS, indirect=True)
def test_discrepancy_draws_have_the_scatter_per_element(fitted):
    """``discrepancy``: one Student-t draw of the likelihood's scatter per posterior draw,
    part and load, seeded (the decisions' draws)."""
    model, _ = fitted
    thin = copy.copy(model)
    thin.idata = model.idata.isel(chain=[0], draw=[0, 5])
    rows = prepare(model.table.iloc[:3])
    pred = thin.predict(rows, seed=0)
    loads = xr.DataArray([1.0, 2.0], dims="rps")
    d = thin.discrepancy(pred, loads, seed=1, rows=rows)
    assert set(d.dims) == {"chain", "draw", "obs", "rps"}
    assert d.sizes == {"chain": 1, "draw": 2, "obs": 3, "rps": 2}
    assert np.unique(d.values).size == d.size  # independent draws, not one per posterior draw
    xr.testing.assert_equal(d, thin.discrepancy(pred, loads, seed=1, rows=rows))
    assert not d.equals(thin.discrepancy(pred, loads, seed=2, rows=rows))
    # shared along the loads: one t per curve, times each load's own scale
    t = thin.discrepancy(pred, loads, seed=1, shared=["rps"], rows=rows) / thin.scatter(
        thin.idata.posterior, pred, loads, rows)
    np.testing.assert_allclose(t.isel(rps=0), t.isel(rps=1))
    assert np.unique(t.isel(rps=0).values).size == t.isel(rps=0).size


def test_synchronous_rows_share_an_offset_of_their_own():
    """A synchronous benchmark (one request at a time) is fitted at its rate plus one shared
    log offset, ``sync_shift``; a sweep without one has no such variable."""
    df = table("hierarchical")
    assert "sync_shift" not in get("hierarchical")(df).build().named_vars
    lowest = df.groupby(["verifier", "prefill_tokens", "alpha", "k"], dropna=False)[
        "rps"].idxmin().to_numpy()[:3]
    df.loc[lowest, "strategy"] = "synchronous"
    model = get("hierarchical")(df)
    built = model.build()
    assert "sync_shift" in [rv.name for rv in built.free_RVs]
    sync = built["synchronous"].get_value()
    assert sync.sum() == 3 and (sync == (model.rows["strategy"] == "synchronous")).all()
    post = xr.Dataset({"sync_shift": (("chain", "draw"), [[0.1, -0.2]])})
    shift = model.protocol_shift(post, model.rows)
    assert shift.dims == ("chain", "draw", "obs")
    np.testing.assert_allclose(shift.sel(obs=sync == 1), [[[0.1] * 3, [-0.2] * 3]])
    assert float(abs(shift.sel(obs=sync == 0)).max()) == 0.0


def test_attrs_carry_variant_config_hash_and_sampler(fitted):
    model, path = fitted
    loaded = fitting.load(path)
    attrs = loaded.idata.posterior.attrs
    assert attrs["variant"] == model.variant
    assert json.loads(attrs["config"]) == model.config.to_dict()
    assert "beta_scale" in json.loads(attrs["priors"])
    assert attrs["data_hash"] == model.data_hash and len(attrs["data_hash"]) == 64
    assert json.loads(attrs["sampler"])["draws"] == 12
    assert attrs["bayeslat_version"] == bayeslat.__version__


def test_save_load_round_trip_predicts_the_same(fitted):
    model, path = fitted
    loaded = fitting.load(path)
    assert type(loaded) is type(model) and loaded.excluded == model.excluded
    np.testing.assert_array_equal(loaded.idata.posterior["sigma"], model.idata.posterior["sigma"])
    # the file holds the draws as float32, the fit in memory as float64 of the same values
    with xr.open_dataset(path, group="posterior", engine="h5netcdf") as stored:
        assert {var.dtype for var in stored.data_vars.values()} == {np.dtype(np.float32)}
        assert stored["sigma"].encoding["shuffle"] and stored["sigma"].encoding["zlib"]
    assert loaded.idata.posterior["sigma"].dtype == np.float64
    new = model.table.iloc[[0, 7, 20]].copy()
    new["rps"] = [0.0, 0.5, 1.0]
    a, b = model.predict(new, seed=1), loaded.predict(new, seed=1)
    assert a["latency"].dims == ("chain", "draw", "obs") and a.sizes["obs"] == 3
    np.testing.assert_array_equal(a["latency"], b["latency"])
    assert list(a["rps"].values) == [0.0, 0.5, 1.0]


# the variants whose rows of fitted units are predicted without the model's graph
KNOWN_PARTS = ("hierarchical", "speculative", "capacity", "roofline")


def test_rows_of_fitted_units_are_predicted_without_the_graph(fitted, monkeypatch):
    """The paper's scaling variants and ``capacity`` compute the parts of rows whose groups and
    drafters were all fitted from the stored per-unit coefficients: the graph's values (to
    1e-12), same dims and coords; a row of a new group goes through the graph."""
    model, path = fitted
    loaded = fitting.load(path)
    rows = model.table.iloc[[0, 7, 20]].assign(rps=[0.0, 0.5, 1.0])
    new = rows.assign(verifier="llama-13b", verifier_params_b=13.0)
    assert loaded.known_parts(prepare(new)) is None
    if model.variant not in KNOWN_PARTS:
        assert loaded.known_parts(prepare(rows)) is None
        return
    assert set(loaded.known_parts(prepare(rows))) == set(model.parts)
    fast = loaded.predict(rows)
    monkeypatch.setattr(type(loaded), "known_parts", lambda self, rows, seed=0: None)
    slow = loaded.predict(rows)
    assert fast["C1"].dims == slow["C1"].dims and set(fast.coords) == set(slow.coords)
    for name in (*model.parts, "latency", "capacity"):
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12)
    np.testing.assert_array_equal(fast["config"], slow["config"])


@pytest.mark.parametrize("fitted", ["capacity"], indirect=True)
def test_capacity_predicts_configurations_never_measured_as_its_graph_does(fitted,
                                                                          monkeypatch):
    """``capacity`` without its graph: a configuration never measured (another k, another
    alpha) gets its group's compute time and queue factor times fresh log-normal deviations,
    the graph's distribution (means and spreads of log C3, log Q over draws and
    configurations agree within sampling error); the fitted configurations predicted in the
    same call keep their posterior ``C3`` and ``Q`` on both paths (the graph once redrew the
    fitted queue factors from their prior whenever a new configuration came along). The
    groups' stage-1 queue factors, the new configurations' centre, are read from the file."""
    model, path = fitted
    loaded = fitting.load(path)
    assert loaded._queue_factors is not None
    pd.testing.assert_series_equal(loaded.queue_factors(), model.queue_factors(),
                                   check_exact=True)
    sd = model.table[(model.table["k"] > 0) & (model.table["strategy"] == "constant")]
    fitted_rows = sd.loc[~prepare(sd)["config"].duplicated().to_numpy()].assign(rps=0.5)
    setups = fitted_rows.loc[~prepare(fitted_rows)["draft"].duplicated().to_numpy()]
    new = pd.concat([setups.assign(k=k, alpha=alpha) for k in (3, 5, 7)
                     for alpha in (0.55, 0.65, 0.75, 0.85)], ignore_index=True)
    rows = pd.concat([fitted_rows, new], ignore_index=True)
    assert len(new) >= 24 and prepare(new)["config"].nunique() == len(new)
    fast = loaded.predict(rows, seed=3)
    monkeypatch.setattr(type(loaded), "known_parts", lambda self, rows, seed=0: None)
    slow = loaded.predict(rows, seed=3)
    alone = loaded.predict(fitted_rows, seed=3)
    n = len(fitted_rows)
    for name in ("C3", "Q"):
        for pred in (fast, slow):
            np.testing.assert_allclose(pred[name].isel(obs=slice(0, n)), alone[name],
                                       rtol=1e-12)
        a, b = (np.log(pred[name].isel(obs=slice(n, None))) for pred in (fast, slow))
        spread = float(b.std())
        assert spread > 0.05
        assert abs(float(a.mean() - b.mean())) < 0.1 * spread
        assert float(a.std()) == pytest.approx(spread, rel=0.1)


def test_a_new_workload_takes_its_servers_measured_intercepts():
    """A workload never measured is centred on the geometric mean of its server's stage-1
    intercept terms that the curves measure (at least ``A_FLOOR``): a group whose curves do
    not bend leaves its ``a_v`` at ~1e-9 s, which neither moves the centre nor widens its
    spread; a term measured once gets a spread of 1."""
    model = get("capacity")(table("capacity"))
    model.queue_factors()
    laws = model._laws.copy()
    big = laws.index.str.startswith("llama-70b")
    assert big.sum() == 2
    laws.loc[big, "log_a_v"] = laws.loc[big, "log_a_b"] = np.log([4e-4, 1e-9])
    laws.loc[big, "log_a_d"] = np.log([3e-4, 5e-4])
    model._laws = laws
    rows = prepare(model.table[model.table["verifier"] == "llama-70b"].drop_duplicates("k")
                   .assign(prefill_tokens=2048.0))
    assert not rows["group"].isin(laws.index).any() and (rows["k"] > 0).any()
    log_a, tau = model.new_shares(rows)
    k = rows["k"].to_numpy(float)
    cycles = rows["decode_tokens"].to_numpy(float) / theory.tokens_per_cycle(
        np.where(k > 0, rows["alpha0"].to_numpy(float), 0.0), k)
    intercept = cycles * (4e-4 + k * np.sqrt(3e-4 * 5e-4))
    np.testing.assert_allclose(log_a, np.log(intercept / theory.BATCH_CAP), rtol=1e-12)
    np.testing.assert_allclose(tau, np.hypot(TAU_Q, 1.0), rtol=1e-12)


def test_a_fit_that_only_predicts_skips_the_log_likelihood(mocked):
    model = get("hierarchical")(table("hierarchical"))
    sampling.sample(model, draws=12, chains=2, sampler="pymc", progressbar=False,
                    log_likelihood=False)
    assert "log_likelihood" not in model.idata.groups()
    assert {"posterior", "observed_data", "constant_data"} <= set(model.idata.groups())
    pred = model.predict(model.rows.head(3))
    assert pred["latency"].sizes == {"chain": 2, "draw": 12, "obs": 3}


def test_saved_fit_keeps_its_psis_loo_not_its_log_likelihood(fitted):
    """The file stores the pointwise elpd and Pareto k (one value per row) in place of the
    log-likelihood (one per draw and row); the PSIS-LOO read back is the one computed."""
    model, path = fitted
    loaded = fitting.load(path)
    assert "log_likelihood" not in loaded.idata.groups()
    assert "log_likelihood" in model.idata.groups()  # the fit in memory keeps it
    a, b = psis_loo(model.idata), psis_loo(loaded.idata)
    # (NaN for the roofline: prior draws, as the mocked sampler gives, may have no root)
    assert b.elpd_loo == pytest.approx(a.elpd_loo, nan_ok=True) and b.n_samples == a.n_samples
    np.testing.assert_allclose(b.loo_i, a.loo_i)
    np.testing.assert_allclose(b.pareto_k, a.pareto_k)
    assert b.loo_i.sizes["obs"] == len(model.rows)
    unfitted = copy.copy(loaded)
    unfitted.idata = loaded.idata.copy()
    del unfitted.idata.psis_loo
    with pytest.raises(FitError, match="refit"):
        psis_loo(unfitted.idata)


def test_loaded_fit_answers_decide_without_arviz_then_reads_the_rest(fitted, tmp_path):
    """What ``decide`` needs of a fit file written by ``bayeslat fit`` (load, its stored
    convergence, prediction of fitted units) runs in a process that never imports ArviZ nor
    PyTensor;
    ``idata`` then holds every group the file has."""
    import subprocess
    import sys

    model, _ = fitted
    model = copy.copy(model)
    model.idata = model.idata.copy()
    model.idata.posterior.attrs["diagnostics"] = fitting._diagnostics_json(sampling.diagnostics(
        model.idata))  # as fitting.run stores them
    path = model.save(tmp_path / "fit.nc")
    script = f"""
import sys
import bayeslat
from bayeslat import fitting
loaded = fitting.load({str(path)!r})
fitting.convergence(loaded)
rows = loaded.table.iloc[[0, 7]].assign(rps=[0.0, 0.5])
known = loaded.known_parts(bayeslat.models.base.prepare(rows))
if known is not None:
    loaded.predict(rows)
print(known is not None, "arviz" in sys.modules, "pytensor" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(model.variant in KNOWN_PARTS), "False", "False"]
    loaded = fitting.load(path)
    assert loaded.posterior is not None and loaded.fitted
    expected = set(model.idata.groups()) - {"log_likelihood"} | {"psis_loo", "fit_data"}
    assert set(loaded.idata.groups()) == expected
    xr.testing.assert_identical(loaded.idata.posterior.drop_attrs(),
                                model.idata.posterior.drop_attrs())
    for group in expected - {"posterior", "psis_loo", "fit_data"}:  # read on first use
        xr.testing.assert_equal(getattr(loaded.idata, group), getattr(model.idata, group))


def test_save_refuses_to_overwrite(fitted):
    model, path = fitted
    with pytest.raises(Exception, match="overwrite"):
        model.save(path)
    model.save(path, overwrite=True)


@pytest.mark.parametrize("variant", ["hierarchical", "speculative", "capacity"])
def test_predicts_configurations_never_measured(mocked, variant):
    model = get(variant)(table(variant))
    sampling.sample(model, draws=12, chains=2, sampler="pymc", progressbar=False)
    new = model.table.iloc[[10]].copy()
    new = pd.concat([new.assign(verifier="llama-13b", verifier_params_b=13.0,
                                prefill_tokens=2048.0, decode_tokens=300.0, alpha=0.75, k=3,
                                drafter="eagle3-13b", drafter_params_b=0.5)] * 2)
    new["rps"] = [0.0, 0.2]
    pred = model.predict(new, seed=0)
    assert (pred["C1"] > 0).all() and np.isfinite(pred["C1"]).all()
    # the same new group at two loads shares its drawn coefficients
    np.testing.assert_array_equal(pred["C2"].isel(obs=0), pred["C2"].isel(obs=1))


def test_group_coefficients_deviate_per_server_then_per_group():
    """Three servers of three sizes: every group coefficient has one server contrast the law
    of an intercept and the size cannot make (orthonormal, orthogonal to both), the drafter's
    none. Two servers: no contrast is sampled, but a new server's groups draw a fresh
    deviation (dim ``new_server``) and a new workload of a measured server none. One server:
    no server level."""
    from bayeslat.simulate.generative import SamplerSpec, sample_sweep

    three, _ = sample_sweep(SamplerSpec(
        verifiers=(("llama-1b", 1.2), ("llama-8b", 8.0), ("llama-70b", 70.0)),
        prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,), alphas=(0.6,), ks=(2,),
        n_rates=4), seed=2)
    model = get("capacity")(three)
    assert list(model.servers) == ["llama-1b H100", "llama-8b H100", "llama-70b H100"]
    basis = model.contrasts
    law = np.column_stack([np.ones(3), [1.2, 8.0, 70.0]])
    assert basis.shape == (3, 1)
    np.testing.assert_allclose(basis.T @ basis, np.eye(1), atol=1e-12)
    np.testing.assert_allclose(basis.T @ law, 0.0, atol=1e-9)
    built = model.build()
    per_server = {v.name for v in built.free_RVs if v.name.startswith("u_")}
    assert per_server == {f"u_{c}" for c in ("c1p", "c1v", "c2p", "c2v", "c3p", "c3v", "c3r")}
    assert all(built.named_vars_to_dims[n] == ("server_contrast",) for n in per_server)
    assert np.isfinite(model.check_start(built))
    # the per-token decode cost non-centred in the paper's variant where its spread is sampled
    # too (centred, it funnelled), centred where the spread is fixed (six groups) and in the
    # capacity variant; with no contrast sampled, centred in both
    sampled = ScalingConfig(priors=scaling.DEFAULT_PRIORS | {"tau_min_units": 6})
    paper = get("hierarchical")(three, sampled)
    assert {"z_c1v", "u_c1v", "tau_c1v"} <= {v.name for v in paper.build().free_RVs}
    assert "z_c1v" in paper.start() and "log_c1v" not in paper.start()
    assert get("hierarchical")(three).centred("c1v")
    assert get("capacity")(three, sampled).centred("c1v")

    two = get("capacity")(table("capacity"))
    assert list(two.servers) == ["llama-8b H100", "llama-70b H100"]
    assert two.contrasts.shape == (2, 0)
    assert not any(v.name.startswith("u_") for v in two.build().free_RVs)
    one = two.table.iloc[[10]].copy()
    known = one.assign(prefill_tokens=2048.0)  # a workload the 8B was never measured at
    fresh = one.assign(verifier="llama-13b", verifier_params_b=13.0)
    assert schema.server_labels(fresh).iloc[0] not in two.servers
    for new, drawn in ((known, False), (fresh, True)):
        names = {v.name for v in two.build(prepare(new)).free_RVs}
        assert {n for n in names if n.startswith("new_u_")} == (
            {f"new_u_{c}" for c in ("c1p", "c1v", "c2p", "c2v", "c3p", "c3v", "c3r")} if drawn
            else set())
    assert get("hierarchical")(two.table).centred("c1v")
    alone = get("hierarchical")(three[three["verifier"] == "llama-8b"])
    assert alone.contrasts is None
    assert not any(v.name.startswith("u_") for v in alone.build().free_RVs)


def test_a_prefill_stall_past_its_knee_samples_a_knee_per_server():
    """The stall's default law, on ``prefill_excess``: each server's knee is sampled (dim
    ``server``), started where its groups' stalls put it, between 20% and 95% of its shortest
    prompt; a new workload of a measured server uses its knee, a server never measured draws
    one from the prior. The capacity variant's stall is linear in the prefill's arithmetic."""
    from bayeslat.simulate.generative import DEFAULT_BETAS, SamplerSpec, sample_sweep

    betas = DEFAULT_BETAS | {"c2p": {"intercept": 1e-4, "prefill_excess": 4e-6}}
    sweep, truth = sample_sweep(SamplerSpec(
        verifiers=(("llama-8b", 8.0), ("llama-70b", 70.0)), prefill_tokens=(128.0, 1024.0),
        decode_tokens=(64.0, 256.0), alphas=(0.6,), ks=(2,), n_rates=4, betas=betas,
        prefill_knee=200.0, tau={c: 0.02 for c in scaling.COEFS}), seed=3)
    stall = truth.groups.groupby("prefill_tokens")["c2p"].median()
    assert stall[1024.0] / stall[128.0] > 10  # past the knee against nearly nothing below it
    model = get("hierarchical")(sweep)
    built = model.build()
    assert built.named_vars_to_dims["prefill_knee"] == ("server",)
    assert model.coords()["server"].tolist() == ["llama-8b H100", "llama-70b H100"]
    start = model.start()["prefill_knee"]
    assert ((start >= 0.2 * 128) & (start <= 0.95 * 128)).all()
    assert np.isfinite(model.check_start(built))
    one = sweep.iloc[[10]].copy()
    known = one.assign(prefill_tokens=2048.0)
    fresh = one.assign(verifier="llama-13b", verifier_params_b=13.0)
    for new, drawn in ((known, False), (fresh, True)):
        names = {v.name for v in model.build(prepare(new)).free_RVs}
        assert ("new_prefill_knee" in names) == drawn
    assert "prefill_knee" not in {v.name for v in get("capacity")(sweep).build().free_RVs}
    # the memory slopes: one centred pair where the spreads are fixed (eight groups), apart
    # and non-centred where they are sampled (centred, with the knees' small spread, funnelled)
    assert "log_c2" in model.start()
    sampled = get("hierarchical")(sweep, ScalingConfig(
        priors=scaling.DEFAULT_PRIORS | {"tau_min_units": 6}))
    assert {"z_c2p", "z_c2v"} <= set(sampled.start()) and "log_c2" not in sampled.start()


def test_dense_refuses_new_configurations(mocked):
    model = get("dense")(table("dense"))
    sampling.sample(model, draws=12, chains=2, sampler="pymc", progressbar=False)
    new = model.table[model.table["k"] > 0].iloc[[0]].assign(alpha=0.77)
    with pytest.raises(FitError, match="dense model predicts only"):
        model.predict(new)


def test_start_is_feasible_and_finite():
    model = get("hierarchical")(table("hierarchical"))
    start = model.unit_start()
    rows = model.rows
    g = model.units["group"].index.get_indexer(rows["group"])
    d = np.maximum(model.units["draft"].index.get_indexer(rows["draft"]), 0)
    from bayeslat import theory

    _, c2 = theory.effective_coefficients(0, 0, 0, start["c2p"][g], start["c2v"][g],
                                          start["c2d"][d], rows["alpha0"], rows["k"],
                                          rows["decode_tokens"])
    assert (rows["rps"] * c2).max() <= MAX_LOAD + 1e-9
    assert np.isfinite(model.check_start(model.build()))


@pytest.mark.parametrize("variant", ["hierarchical", "capacity"])
def test_spreads_of_levels_with_few_units_are_fixed_at_their_prior_mean(variant):
    # SPEC: 4 groups and 4 drafts, fewer than tau_min_units (10): every spread fixed
    model = get(variant)(table(variant))
    free = {rv.name for rv in model.build().free_RVs}
    coefs = model.coef_names
    assert not free & {f"tau_{c}" for c in coefs}
    assert all(model.fixed_tau(c) == model.config.prior("tau_mean") for c in coefs)
    assert np.isfinite(model.check_start(model.build()))
    # the same data with the threshold lowered: every spread sampled, and started, but those
    # the variant always fixes
    config = ScalingConfig.from_dict({"priors": {"tau_min_units": 4}})
    model = get(variant)(table(variant), config=config)
    sampled = [c for c in coefs if c not in model.fixed_spread]
    assert {f"tau_{c}" for c in sampled} <= {rv.name for rv in model.build().free_RVs}
    assert all(model.fixed_tau(c) is None for c in sampled)
    assert {f"tau_{c}" for c in sampled} <= set(model.start())
    assert np.isfinite(model.check_start(model.build()))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_start_check_works_without_a_c_compiler(variant):
    """PyTensor's Python mode (no C compiler) cannot build one Add of more than 32 terms, which
    the moe model's log density has; the start check must not need it."""
    import pytensor

    model = get(variant)(table(variant))
    with pytensor.config.change_flags(cxx=""):
        assert np.isfinite(model.check_start(model.build()))


def test_start_check_names_the_term_that_is_not_finite(monkeypatch):
    model = get("hierarchical")(table("hierarchical"))
    start = model.initial_values()
    monkeypatch.setattr(model, "initial_values", lambda pm_model=None: start | {"sigma": 0.0})
    with pytest.raises(NumericalError, match="sigma"):
        model.check_start(model.build())


def test_sampling_from_a_start_that_is_not_finite_names_the_term(monkeypatch):
    """nutpie fails first (every jittered start of sigma = 0 is too); the check then says why."""
    model = get("hierarchical")(table("hierarchical"))
    start = model.initial_values()
    monkeypatch.setattr(model, "initial_values", lambda pm_model=None: start | {"sigma": 0.0})
    with pytest.raises(NumericalError, match="sigma"):
        sampling.sample(model, draws=20, tune=20, chains=2, progressbar=False, exact=True)


def test_barrier_is_exact_when_unsaturated_and_finite_far_past():
    import pytensor
    import pytensor.tensor as pt

    x = pt.dvector("x")
    f = pytensor.function([x], log_headroom(x))
    head = np.array([0.5, 0.1, 25 * BARRIER_WIDTH, -1.0, -1e6])
    out = f(head)
    np.testing.assert_allclose(np.exp(out[:3]), head[:3], rtol=2e-3)
    assert np.all(np.isfinite(out)) and out[4] < out[3] < out[2]


def test_unknown_variant_and_missing_file():
    from bayeslat.errors import InputError

    with pytest.raises(InputError, match="unknown model"):
        get("gaussian")
    with pytest.raises(FitError, match="no such file"):
        fitting.load("nowhere.nc")


def test_load_rejects_a_netcdf_that_is_not_a_fit(tmp_path):
    import arviz as az

    path = tmp_path / "other.nc"
    az.from_dict(posterior={"x": np.zeros((1, 3))}).to_netcdf(str(path), engine="h5netcdf")
    with pytest.raises(FitError, match="not a bayeslat fit"):
        fitting.load(path)


def test_baseline_only_data_needs_dense():
    df = table("hierarchical")
    with pytest.raises(FitError, match="--model dense"):
        get("hierarchical")(df[df["k"] == 0])

