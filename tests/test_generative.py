"""The model sampler: valid, reproducible tables drawn from the generative model."""

import numpy as np
import pandas as pd
import pytest

from bayeslat import scaling, theory
from bayeslat.data import schema
from bayeslat.simulate.generative import SamplerSpec, sample_sweep, write_sweep

SMALL = SamplerSpec(prefill_tokens=(128.0, 1024.0), decode_tokens=(64.0,), alphas=(0.6, 0.9),
                    ks=(2, 4))


def test_table_is_valid_and_reproducible_to_the_bit():
    a, _ = sample_sweep(SMALL, seed=3)
    b, _ = sample_sweep(SMALL, seed=3)
    c, _ = sample_sweep(SMALL, seed=4)
    schema.validate(a)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["latency_mean"], c["latency_mean"])


def test_nine_rates_per_configuration_below_saturation():
    table, truth = sample_sweep(SMALL, seed=1)
    per_config = table.groupby(schema.config_labels(table)).size()
    assert (per_config == 9).all()
    assert len(per_config) == len(truth.configs) == 2 * (1 + 2 * 2)
    merged = table.merge(truth.configs[["verifier", "prefill_tokens", "decode_tokens", "method",
                                        "alpha", "k", "C1", "C2"]],
                         on=["verifier", "prefill_tokens", "decode_tokens", "method", "alpha",
                             "k"])
    assert len(merged) == len(table)
    load = merged["rps"] * merged["C2"]
    assert load.max() < 0.95 and merged["rps"].min() > 1.0 / merged["C1"].max()


def test_truth_is_scaling_law_times_deviation_and_latency_follows_the_formula():
    spec = SamplerSpec(prefill_tokens=(512.0,), decode_tokens=(128.0,), sigma=1e-9,
                       latency_cv=1e-9, alphas=(0.8,), ks=(3,))
    table, truth = sample_sweep(spec, seed=0)
    pop = scaling.population_coefficient(truth.groups, spec.betas["c2v"])
    dev = np.log(truth.groups["c2v"] / pop)
    assert np.all(np.abs(dev) < 5 * spec.tau["c2v"]) and np.all(dev != 0)
    cfg = truth.configs.iloc[-1]
    rows = table[table["k"] == 3]
    np.testing.assert_allclose(rows["latency_mean"],
                               theory.latency(rows["rps"], cfg["C1"], cfg["C2"]), rtol=1e-6)


def test_moe_tables_solve_the_coverage_fixed_point():
    spec = SamplerSpec(prefill_tokens=(512.0,), decode_tokens=(128.0,), sigma=1e-9,
                       latency_cv=1e-9, moe=(8, 128, 0.6, 0.3))
    table, truth = sample_sweep(spec, seed=0)
    assert (table["moe_experts_total"] == 128).all()
    base = table[table["k"] == 0]
    cfg = truth.configs.iloc[0]
    dense = theory.latency(base["rps"], cfg["C1"], cfg["C2"])
    assert (base["latency_mean"] < dense).all()  # partial coverage is cheaper than full


def test_write_sweep_writes_a_readable_table_and_refuses_to_overwrite(tmp_path):
    from bayeslat.errors import InputError

    path = tmp_path / "s.parquet"
    write_sweep(path, SMALL, seed=2)
    assert len(schema.read_table(path)) == 2 * 5 * 9
    with pytest.raises(InputError):
        write_sweep(path, SMALL, seed=2)
