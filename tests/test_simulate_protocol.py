"""The sweep protocol, the presets and the tidy table they produce."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from bayeslat.data.schema import validate
from bayeslat.errors import InputError
from bayeslat.simulate import presets
from bayeslat.simulate.engine import Deployment
from bayeslat.simulate.hardware import GPU
from bayeslat.simulate.protocol import PREEMPTED, Configuration, Protocol, sweep

EAGLE_1B = presets.eagle("llama-1b", "H100")
BASE_1B = replace(EAGLE_1B, drafter=None, method="none")
QUICK = Protocol(requests=50, measure=8.0)
CONFIGS = [Configuration(BASE_1B, 256, 64), Configuration(EAGLE_1B, 256, 64, 3, 0.7)]


@pytest.fixture(scope="module")
def table():
    return sweep(CONFIGS, QUICK, seed=7)


def test_one_row_per_benchmark_in_protocol_order(table):
    assert len(table) == 2 * (2 + 9)
    for _, rows in table.groupby("k"):
        assert list(rows["strategy"]) == ["synchronous", "throughput"] + ["constant"] * 9
        sync, ceiling = rows["rps"].iloc[0], rows["rps"].iloc[1]
        rates = rows["rate_target"].iloc[2:].to_numpy()
        assert np.allclose(rates, np.linspace(sync, ceiling, 11)[1:-1])
        assert rows["rate_target"].iloc[:2].isna().all()


def test_table_satisfies_the_schema(table):
    out = validate(table)
    base = out[out["k"] == 0]
    assert base["alpha"].isna().all() and (base["method"] == "none").all()
    assert (base["alpha_source"] == "none").all() and (base["drafter"] == "none").all()
    sd = out[out["k"] > 0]
    assert (sd["alpha"] == 0.7).all() and (sd["alpha_source"] == "forced").all()
    assert (sd["method"] == "eagle3").all()
    assert out["source"].is_unique


def test_throughput_row_is_flagged_and_low_rates_are_not(table):
    assert table.loc[table["strategy"] == "throughput", "saturated"].all()
    low = table[(table["strategy"] == "constant")].groupby("k").head(5)
    assert not low["saturated"].any()
    ok = table[~table["saturated"]]
    # An unsaturated constant-rate benchmark achieves the rate it was sent at.
    const = ok[ok["strategy"] == "constant"]
    assert np.allclose(const["rps"], const["rate_target"], rtol=0.05)


def test_latency_rises_with_load_and_se_is_two_percent(table):
    for _, rows in table[~table["saturated"]].groupby("k"):
        lat = rows.sort_values("rps")["latency_mean"].to_numpy()
        assert lat[-1] > lat[0]
    ok = table[~table["saturated"]]
    rel_se = ok["latency_std"] / np.sqrt(ok["n_successful"]) / ok["latency_mean"]
    assert (rel_se <= 0.02).all()


def test_same_seed_same_table_whatever_the_workers(table):
    again = sweep(CONFIGS, QUICK, seed=7, workers=2)
    pd.testing.assert_frame_equal(table, again, check_exact=True)
    other = sweep(CONFIGS[1:], QUICK, seed=8)
    assert not np.array_equal(other["latency_mean"], table.loc[table["k"] > 0, "latency_mean"])


def test_decaying_acceptance_records_the_measured_rate():
    config = Configuration(EAGLE_1B, 128, 64, 4, 0.8, decay=0.8)
    rows = sweep([config], QUICK, seed=1)
    expected = np.cumprod(0.8 * 0.8 ** np.arange(4)).sum() / 4
    assert (rows["alpha_source"] == "measured").all()
    assert rows["alpha"].nunique() == 1
    assert rows["alpha"].iloc[0] == pytest.approx(expected, rel=0.03)


def test_preempted_benchmarks_are_flagged():
    small = Deployment(presets.MODELS["llama-1b"], GPU("small", 3.35, 989.0, memory_gb=3.0))
    rows = sweep([Configuration(small, 1024, 256)], QUICK, seed=0)
    flagged = rows["saturation_reason"].str.contains(PREEMPTED, regex=False)
    assert flagged.any()
    assert rows.loc[flagged, "saturated"].all()


def test_poisson_arrivals_are_labelled_poisson():
    rows = sweep(CONFIGS[:1], replace(QUICK, arrivals="poisson"), seed=3)
    assert (rows["strategy"].iloc[2:] == "poisson").all()


def test_protocol_refuses_unknown_arrivals():
    with pytest.raises(InputError, match="arrivals"):
        Protocol(arrivals="bursty")


def test_presets_cover_sizes_drafters_moe_and_gpus():
    verifiers = {c.deployment.verifier.name for p in presets.PRESETS.values()
                 for c in p.configurations()}
    assert {"llama-1b", "llama-8b", "llama-70b-fp8", "qwen3-30b-a3b"} <= verifiers
    methods = {d.method for p in presets.PRESETS.values() for d in p.deployments}
    assert {"eagle3", "draft_model"} <= methods
    assert {d.gpu.name for p in presets.PRESETS.values() for d in p.deployments} == {
        "A100", "H100", "H200"}
    for p in presets.PRESETS.values():
        for d in p.deployments:
            assert d.kv_capacity > 0  # every preset fits on its GPU


def test_paper_grid_has_the_papers_size():
    grid = presets.preset("paper-grid-8b-h100").configurations()
    assert len(grid) == 16 * (11 * 10 + 1)
    assert sum(c.k == 0 for c in grid) == 16
    assert not any(math.isnan(c.alpha) for c in grid if c.k > 0)


def test_unknown_preset_names_the_choices():
    with pytest.raises(InputError, match="example"):
        presets.preset("nope")
