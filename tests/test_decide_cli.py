"""``bayeslat decide`` on fits made with a mocked sampler (structure, formats, errors)."""

import json

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr
from pymc.testing import mock_sample
from typer.testing import CliRunner

from bayeslat import decide, fitting
from bayeslat.cli import app
from bayeslat.data import schema
from bayeslat.models import get, sampling
from bayeslat.simulate.generative import SamplerSpec, sample_sweep

SPEC = SamplerSpec(verifiers=(("llama-8b", 8.0), ("llama-70b", 70.0)),
                   prefill_tokens=(128.0, 512.0),
                   decode_tokens=(64.0,), alphas=(0.6, 0.9), ks=(2, 4), n_rates=4)
MOE_SPEC = SamplerSpec(prefill_tokens=(128.0,), decode_tokens=(64.0,), alphas=(0.7,),
                       ks=(2,), n_rates=4, moe=(8, 128, 0.6, 0.3))
NO_BASELINE = "llama-70b H100 p512 g64"
runner = CliRunner()


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    original = pm.sample
    pm.sample = mock_sample
    out = {}
    try:
        table = sample_sweep(SPEC, seed=3)[0]
        # a group measured with SD only: no baseline rows
        nobase = table[~((schema.group_labels(table) == NO_BASELINE) & (table["k"] == 0))]
        poisson = table.assign(strategy=table["strategy"].replace("constant", "poisson"))
        for name, variant, data in (("hierarchical", "hierarchical", table),
                                    ("dense", "dense", table),
                                    ("poisson", "dense", poisson),
                                    ("moe", "moe", sample_sweep(MOE_SPEC, seed=3)[0]),
                                    ("nobase", "hierarchical", nobase)):
            model = get(variant)(data)
            sampling.sample(model, draws=10, chains=2, sampler="pymc", progressbar=False)
            out[name] = model.save(tmp_path_factory.mktemp("fits") / f"{name}.nc")
    finally:
        pm.sample = original
    return out


def invoke(*args, allow=True):
    """``bayeslat decide ARGS``; mocked fits never converge, so allowed unless ``allow`` is
    false."""
    extra = ["--allow-unconverged"] if allow else []
    return runner.invoke(app, ["decide", *map(str, args), *extra])


def test_table_lists_every_setup(fits):
    result = invoke(fits["hierarchical"], "--alpha", "0.7", "--rps", "0,1", "--k", "0:4:5")
    assert result.exit_code == 0, result.output
    for verifier in ("llama-8b", "llama-70b"):
        for p in (128, 512):
            assert f"{verifier} H100 p{p} g64" in result.output
    assert "break-even per draft length" in result.output


def test_json_has_one_decision_per_setup_alpha_and_load(fits):
    result = invoke(fits["hierarchical"], "--alpha", "0.6,0.9", "--rps", "0:2:3", "--format",
                    "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["decisions"]) == 4 * 2 * 3  # setups x alphas x loads
    assert {"k_neutral", "k_risk", "speedup", "p_sd_hurts", "regret"} <= set(out["decisions"][0])
    assert all(row["k"] > 0 for row in out["break_even"])
    # without --k, the draft lengths the fit measured (SPEC's), not unmeasured ones
    assert sorted({row["k"] for row in out["break_even"]}) == list(SPEC.ks)


def test_outputs_say_how_the_sweep_sent_its_requests(fits):
    """A load is a rate of evenly spaced requests for a constant-rate sweep, of Poisson
    arrivals for a Poisson sweep: the table's footnote and the JSON say which."""
    args = ("--alpha", "0.6", "--rps", "1", "--setup", "llama-8b H100 p128")
    constant, poisson = (invoke(fits[name], *args) for name in ("dense", "poisson"))
    text = " ".join(constant.output.split())
    assert "loads are rates of evenly spaced requests" in text
    assert "sweep with GuideLLM's poisson profile" in text
    assert "loads are rates of Poisson arrivals" in " ".join(poisson.output.split())
    for name, kind in (("dense", "constant"), ("poisson", "poisson")):
        out = json.loads(invoke(fits[name], *args, "--format", "json").output)
        assert out["arrivals"] == kind


def test_unmeasured_length_predicted_by_hierarchical_not_dense(fits):
    args = ["--alpha", "0.7", "--rps", "0,1", "--setup", "llama-8b H100 p128", "--prefill", "2048",
            "--format", "json"]
    result = invoke(fits["hierarchical"], *args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["decisions"][0]["setup"].startswith("llama-8b H100 p2048")
    # a setup never measured is extrapolation at every load, and says so
    assert all(row["extrapolated"] for row in out["decisions"])
    assert out["setups"][0]["new_setup"] is True
    assert any("never measured" in line for line in out["warnings"])
    # a prompt longer than any measured, then a verifier larger than any too: the laws
    # extrapolate in each, and it says how far
    longer = " ".join(out["warnings"])
    assert "prompt length, 2048 tokens, lies outside those measured (128–512 tokens)" in longer
    assert "verifier size" not in longer
    bigger = json.loads(invoke(fits["hierarchical"], *args, "--verifier-params", "405").output)
    assert "verifier size, 405B parameters, lies outside those measured (8–70B parameters)" in (
        " ".join(bigger["warnings"]))
    result = invoke(fits["dense"], *args)
    assert result.exit_code == 2
    assert "hierarchical" in result.output


def test_moe_solves_the_fixed_point(fits):
    model = fitting.load(fits["moe"])
    ds = decide.from_model(model, decide.setups(model.table), [0.7], [0, 2], [0.0, 1.0])
    assert ds["speedup"].dims == ("setup", "alpha", "rps", "k", "stat")
    assert (ds["speedup"].sel(k=0, stat="q50") == 1.0).all()  # the baseline against itself
    assert ds["latency"].sel(stat="q50").notnull().any()


@pytest.mark.parametrize("args, field", [
    (["--alpha", "1.5"], "--alpha"),
    (["--alpha", "0.7", "--format", "xml"], "--format"),
    (["--alpha", "0.7", "--risk", "2"], "--risk"),
    (["--alpha", "0.7", "--setup", "no-such"], "--setup"),
    (["--alpha", "0.7", "--format", "vllm"], "--setup"),
])
def test_bad_options(fits, args, field):
    result = invoke(fits["hierarchical"], *args)
    assert result.exit_code == 2
    assert field in result.output and "Traceback" not in result.output


def test_missing_model_file(tmp_path):
    result = invoke(tmp_path / "nope.nc", "--alpha", "0.7")
    assert result.exit_code == 2
    assert "nope.nc" in result.output


def test_unconverged_fit_is_refused_unless_allowed(fits):
    args = [fits["hierarchical"], "--alpha", "0.9", "--rps", "0,0.1", "--setup",
            "llama-8b H100 p128"]
    refused = invoke(*args, allow=False)
    assert refused.exit_code == 2
    assert "did not converge" in refused.output and "--allow-unconverged" in refused.output
    assert "Traceback" not in refused.output and "break-even" not in refused.output
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    assert "warning:" in table.output and "did not converge" in table.output
    out = json.loads(invoke(*args, "--format", "json").output)
    assert out["converged"] is False
    assert any("did not converge" in line for line in out["warnings"])
    vllm = invoke(*args, "--format", "vllm", "--policy", "neutral")
    assert vllm.exit_code == 0, vllm.output
    assert "did not converge" in vllm.stderr
    assert "num_speculative_tokens" in json.loads(vllm.stdout)


def test_group_without_baseline_is_refused(fits):
    result = invoke(fits["nobase"], "--alpha", "0.7", "--rps", "0,1")
    assert result.exit_code == 2
    assert NO_BASELINE in result.output and "baseline" in result.output
    assert "without SD" in result.output and "Traceback" not in result.output
    assert "--setup" in result.output  # several setups: the others can still be chosen
    # the other groups of the same fit still get decisions
    ok = invoke(fits["nobase"], "--alpha", "0.7", "--rps", "0,1", "--setup", "llama-8b H100 p128",
                "--format", "json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["decisions"]


def test_default_grid_per_setup_ends_at_the_measured_ceiling(fits):
    model = fitting.load(fits["hierarchical"])
    table = model.table
    groups = schema.group_labels(table)
    highest = table["rps"].groupby(groups.to_numpy()).max()
    # a throughput benchmark of one group's baseline: its measured ceiling
    with_ceiling = "llama-8b H100 p128 g64"
    ceiling = 1.5 * highest[with_ceiling]
    row = table[(groups == with_ceiling).to_numpy() & (table["k"] == 0)].iloc[[0]]
    model.ceilings = row.assign(rps=ceiling, strategy="throughput")
    chosen = decide.setups(table)
    grids = decide.default_loads(model, chosen)
    for label, group in zip(chosen["setup"], schema.group_labels(chosen), strict=True):
        top = ceiling if group == with_ceiling else highest[group]
        assert len(grids[label]) == decide.GRID_POINTS
        assert grids[label][0] == 0.0 and grids[label][-1] == pytest.approx(top)
    label = chosen["setup"][(schema.group_labels(chosen) == with_ceiling).to_numpy()].iloc[0]
    one = chosen[chosen["setup"] == label]
    ds = decide.from_model(model, one, [0.7], [0, 2], grids[label])
    past = grids[label] > highest[with_ceiling]
    assert past.any() and not past.all()
    np.testing.assert_array_equal(ds["extrapolated"].sel(setup=label).values, past)
    assert bool(ds["ceiling_measured"].sel(setup=label))
    assert ds["rps_ceiling"].sel(setup=label) == pytest.approx(ceiling)
    table_rows = decide.decision_table(ds)
    assert table_rows["extrapolated"].tolist() == past.tolist()


def test_each_configuration_is_measured_as_far_as_its_nearest_measured_neighbours(fits):
    """A measured configuration's highest measured load is its own; an alpha or k between
    measured ones takes the least of its neighbours'; outside them, or for a setup never
    measured, none (NaN); the baseline's is its group's highest rate without SD."""
    model = fitting.load(fits["hierarchical"])
    table = model.table
    one = decide.setups(table).iloc[[0]]
    mine = table[(schema.group_labels(table) == schema.group_labels(one).iloc[0]).to_numpy()]
    top = mine.groupby(["alpha", "k"])["rps"].max()  # SPEC: alphas 0.6, 0.9; ks 2, 4
    got = decide.measured_configurations(model, one, [0.5, 0.6, 0.7, 0.9], [0, 1, 2, 3, 4, 5])
    got = got.isel(setup=0)
    assert (got.sel(k=0) == mine.loc[mine["k"] == 0, "rps"].max()).all()
    assert got.sel(alpha=0.6, k=2) == top[(0.6, 2)] and got.sel(alpha=0.9, k=4) == top[(0.9, 4)]
    assert got.sel(alpha=0.7, k=2) == min(top[(0.6, 2)], top[(0.9, 2)])
    assert got.sel(alpha=0.9, k=3) == min(top[(0.9, 2)], top[(0.9, 4)])
    assert got.sel(alpha=0.7, k=3) == top.min()
    assert np.isnan(got.sel(alpha=0.5, k=2)) and np.isnan(got.sel(k=[1, 5])).all()
    other = one.assign(prefill_tokens=2048.0)
    other["setup"] = schema.draft_labels(other)
    assert np.isnan(decide.measured_configurations(model, other, [0.6], [0, 2])).all()


def test_headline_summarises_at_most_max_draws(fits):
    """The headline's medians come from a subset of the draws (decide.HEADLINE_DRAWS on a real
    fit): all of them where there are no more, fewer otherwise, which moves the medians by
    Monte Carlo error only (inside the full posterior's 90% interval)."""
    model = fitting.load(fits["hierarchical"])
    total = model.posterior.sizes["chain"] * model.posterior.sizes["draw"]
    full = decide.headline(model, max_draws=None)
    pd.testing.assert_frame_equal(decide.headline(model, max_draws=total), full)
    few = decide.headline(model, max_draws=total // 4)
    assert not np.allclose(few["speedup0"], full["speedup0"])
    assert few["speedup0"].between(full["speedup0_lo"], full["speedup0_hi"]).all()


def test_evenly_spaced_requests_climb_prefill_stalls_poisson_ones_do_not(fits):
    """A fit of constant-rate benchmarks answers for evenly spaced requests: each latency draw
    is theory.evenly_spaced of the smooth curve's with its group's c2p (alone at zero load:
    C1 + c2p/2 for a configuration never measured, whose staircase is not shifted); a fit of
    Poisson benchmarks answers with the smooth curve."""
    model = fitting.load(fits["hierarchical"])
    one = decide.setups(model.table).iloc[[0]]
    loads = np.linspace(0.0, model.rows["rps"].max(), 6)
    stairs = decide.from_model(model, one, [0.7], [0, 2], loads)
    lone = decide.headline(model).set_index("config")["speedup0"]
    model.table = model.table.assign(strategy=model.table["strategy"].replace("constant",
                                                                               "poisson"))
    smooth = decide.from_model(model, one, [0.7], [0, 2], loads)
    # the zero-load speedup: of lone requests (C1 + c2p/2, shifted), else the C1 ratio
    assert not np.allclose(lone, decide.headline(model).set_index("config")["speedup0"])
    _, rows, pred = decide._predict(model, one, [0.7], [0, 2], None, 0)
    new = int(np.flatnonzero(rows["k"] == 2)[0])  # alpha 0.7: never measured
    c1 = pred["C1"].isel(obs=new)
    alone = (c1 + model.prefill_stall(rows).isel(obs=new) / 2).quantile([0.05, 0.5, 0.95])
    at_zero = {name: ds["latency"].isel(setup=0).sel(alpha=0.7, rps=0.0, k=2)
               for name, ds in (("stairs", stairs), ("smooth", smooth))}
    np.testing.assert_allclose(at_zero["stairs"].sel(stat=["q05", "q50", "q95"]), alone,
                               rtol=1e-9)
    assert float(at_zero["smooth"].sel(stat="q50")) == pytest.approx(float(c1.median()),
                                                                     rel=1e-9)
    assert not np.allclose(stairs["latency"], smooth["latency"], equal_nan=True)


def test_the_predictive_check_of_an_moe_fit_keeps_its_fixed_point(fits):
    """An MoE verifier's latency is the coverage fixed point: no staircase, its check runs."""
    from bayeslat import adequacy

    model = fitting.load(fits["moe"])
    assert model.prefill_stall(model.rows) is None
    assert adequacy.check(model).figures["points"] == len(model.rows)


@pytest.mark.parametrize("name", ["hierarchical", "moe"])
def test_each_setup_is_from_model_per_setup_with_one_prediction(fits, name, monkeypatch):
    """each_setup gives what one from_model call per setup on its own grid gives, with one
    model.predict for all of them (the MoE verifier: one per setup, its loads in the grid),
    and the same in forked processes."""
    model = fitting.load(fits[name])
    chosen = decide.setups(model.table)
    grids = decide.default_loads(model, chosen)
    expected = [decide.from_model(model, chosen.iloc[[i]], [0.6, 0.7], [0, 2], grids[label])
                for i, label in enumerate(chosen["setup"])]
    calls = []
    predict = type(model).predict
    monkeypatch.setattr(type(model), "predict",
                        lambda self, *a, **kw: calls.append(1) or predict(self, *a, **kw))
    got = decide.each_setup(model, chosen, [0.6, 0.7], [0, 2], grids)
    assert len(calls) == (len(chosen) if name == "moe" else 1)
    assert len(got) == len(expected) == len(chosen)
    for a, b in zip(got, expected, strict=True):  # the same arithmetic on other array shapes
        xr.testing.assert_allclose(a, b, rtol=1e-12)
    # analysed in two forked processes: the same Datasets
    forked = decide.each_setup(model, chosen, [0.6, 0.7], [0, 2], grids, jobs=2)
    for a, b in zip(forked, got, strict=True):
        xr.testing.assert_identical(a, b)


def test_default_grid_through_the_cli(fits, monkeypatch):
    # without --rps every setup has its own loads, up to its group's highest measured rate
    result = invoke(fits["hierarchical"], "--alpha", "0.7", "--k", "0,2", "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    table = fitting.load(fits["hierarchical"]).table
    base = table[table["k"] == 0]
    base_top = base["rps"].groupby(schema.group_labels(base).to_numpy()).max()
    tops = {}
    for row in out["decisions"]:
        tops[row["setup"]] = max(tops.get(row["setup"], 0.0), row["rps"])
        # past its group's measurements nowhere; past the chosen k's or no SD's in places
        group = row["setup"].rsplit(" ", 1)[0]
        reach = min(row["rps_measured_k"], base_top[group]) * (1 + 1e-9)  # JSON's rounding
        assert row["extrapolated"] == (row["rps"] > reach)
        assert set(row["unmeasured_ks"]) <= {0, 2} - {row["k_risk"]}
    assert len(out["decisions"]) == 4 * decide.GRID_POINTS
    measured = {s["setup"]: s["rps_measured"] for s in out["setups"]}
    assert tops == pytest.approx(measured) and len(set(tops.values())) == 4
    # a measured ceiling above the highest measured rate: the loads past it are extrapolated
    load = fitting.load

    def with_ceiling(path):
        model = load(path)
        base = model.table[model.table["k"] == 0]
        model.ceilings = base.assign(rps=base["rps"] * 2.0, strategy="throughput")
        return model

    monkeypatch.setattr(fitting, "load", with_ceiling)
    result = invoke(fits["hierarchical"], "--alpha", "0.7", "--k", "0,2", "--setup",
                    "llama-70b H100 p128")
    assert result.exit_code == 0, result.output
    assert "yes" in result.output and "throughput benchmark" in result.output
    assert "nan" not in result.output and "inf%" not in result.output
