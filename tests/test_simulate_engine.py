"""The engine simulator: service time, Little's law, acceptance, KV preemption, MoE, seeds."""

from dataclasses import replace

import numpy as np
import pytest

from bayeslat.errors import InputError
from bayeslat.simulate.engine import (
    Deployment,
    Workload,
    acceptance_by_position,
    lone_request_latency,
    simulate_run,
)
from bayeslat.simulate.hardware import GPU, GPUS, kv_capacity_tokens
from bayeslat.simulate.presets import MODELS, deployment, eagle
from bayeslat.simulate.protocol import mean_concurrency

EAGLE_8B = eagle("llama-8b", "H100")


def test_gpu_figures_order():
    a, h, h2 = GPUS["A100"], GPUS["H100"], GPUS["H200"]
    assert a.bytes_per_s < h.bytes_per_s < h2.bytes_per_s
    assert a.flops < h.flops == h2.flops
    assert h2.memory_gb > h.memory_gb


def test_model_that_does_not_fit_is_refused():
    with pytest.raises(InputError, match="does not fit"):
        kv_capacity_tokens(GPUS["H100"], (replace(MODELS["llama-70b-fp8"], bytes_per_param=2.0),))


def test_moe_reads_fewer_bytes_than_its_total_but_more_than_active():
    moe = MODELS["qwen3-30b-a3b"]
    dense_part = moe.weight_bytes - moe.expert_bytes
    active = dense_part + moe.expert_bytes * moe.experts_active / moe.experts_total
    assert active == pytest.approx(moe.active_b * 1e9 * moe.bytes_per_param)
    assert dense_part < active < moe.weight_bytes


@pytest.mark.parametrize("acceptance", [(), (1.0,) * 3])
def test_synchronous_latency_is_the_engines_service_time(acceptance):
    wl = Workload(300, 65, acceptance)
    rec = simulate_run(EAGLE_8B, wl, np.zeros(5), concurrency=1, seed=3)
    assert np.allclose(rec.latency, lone_request_latency(EAGLE_8B, wl), rtol=1e-12)
    # One request in flight at a time: each is sent when the one before finishes.
    assert np.allclose(rec.arrival[1:], rec.finish[:-1])


def test_low_load_latency_matches_service_time_with_random_acceptance():
    wl = Workload(512, 256, acceptance_by_position(0.7, 4))
    service = lone_request_latency(EAGLE_8B, wl)
    sends = np.arange(400) * 3.0 * service  # far apart: requests never overlap
    rec = simulate_run(EAGLE_8B, wl, sends, seed=5)
    assert rec.latency.mean() == pytest.approx(service, rel=0.01)


@pytest.mark.parametrize("prompt", [16, 4096])
def test_a_pass_costs_its_gemms_then_its_attention_each_at_its_roofline(prompt):
    # A lone prompt with one output token is one prefill pass (the prompt fits the budget).
    dep = deployment("llama-8b", "H100")
    m, gpu = dep.verifier, dep.gpu
    gemm = max(m.weight_bytes / gpu.bytes_per_s, m.flops_per_token * prompt / gpu.flops)
    pairs = prompt * (prompt + 1) / 2  # causal: token i attends to i tokens
    attention = max(m.kv_bytes_per_token * prompt / gpu.bytes_per_s,
                    m.attention_flops_per_pair * pairs / gpu.flops)
    assert lone_request_latency(dep, Workload(prompt, 1)) == pytest.approx(
        m.overhead_s + gemm + attention, rel=1e-12)
    # 16 tokens: both kernels memory-bound; 4096: both compute-bound.
    assert (gemm == m.weight_bytes / gpu.bytes_per_s) == (prompt == 16)
    assert (attention == m.kv_bytes_per_token * prompt / gpu.bytes_per_s) == (prompt == 16)


def test_service_time_grows_with_prompt_and_output():
    base = lone_request_latency(EAGLE_8B, Workload(256, 128))
    assert lone_request_latency(EAGLE_8B, Workload(1024, 128)) > base
    assert lone_request_latency(EAGLE_8B, Workload(256, 512)) > base


def test_littles_law_holds():
    wl = Workload(512, 256, acceptance_by_position(0.8, 3))
    rate = 25.0
    sends = np.arange(3000) / rate
    rec = simulate_run(EAGLE_8B, wl, sends, seed=11)
    measured = slice(1000, 2500)
    start, stop = sends[measured][0], sends[measured][-1]
    window = (rec.arrival >= start) & (rec.arrival <= stop)
    concurrency = mean_concurrency(rec, start, stop)
    achieved = window.sum() / (stop - start)
    assert concurrency > 5  # a real batch, not a trivially empty server
    assert concurrency == pytest.approx(achieved * rec.latency[window].mean(), rel=0.03)


def test_iid_acceptance_is_what_was_asked():
    wl = Workload(128, 512, acceptance_by_position(0.6, 5))
    rec = simulate_run(EAGLE_8B, wl, np.arange(200) * 0.05, seed=2)
    assert rec.accepted / rec.drafted == pytest.approx(
        np.cumprod([0.6] * 5).sum() / 5, rel=0.03)


def test_decaying_acceptance_accepts_less():
    flat = simulate_run(EAGLE_8B, Workload(128, 256, acceptance_by_position(0.8, 4)),
                        np.arange(100) * 0.1, seed=1)
    decay = simulate_run(EAGLE_8B, Workload(128, 256, acceptance_by_position(0.8, 4, 0.8)),
                         np.arange(100) * 0.1, seed=1)
    assert decay.accepted / decay.drafted < flat.accepted / flat.drafted
    assert decay.latency.mean() > flat.latency.mean()


def test_full_kv_cache_preempts_and_every_request_still_finishes():
    small = Deployment(MODELS["llama-8b"], GPU("small", 3.35, 989.0, memory_gb=19.0))
    wl = Workload(1024, 256)
    assert small.kv_capacity < 40 * (1024 + 256)  # fewer than 40 requests fit
    rec = simulate_run(small, wl, np.arange(400) / 40.0, seed=0)
    assert rec.preemptions > 0
    assert np.isfinite(rec.finish).all() and (rec.latency > 0).all()
    roomy = simulate_run(Deployment(MODELS["llama-8b"], GPUS["H100"]), wl,
                         np.arange(400) / 40.0, seed=0)
    assert roomy.preemptions == 0
    assert rec.latency.mean() > roomy.latency.mean()


def test_moe_verifier_step_costs_grow_with_experts_touched():
    moe = deployment("qwen3-30b-a3b", "H100")
    one = lone_request_latency(moe, Workload(1, 2))
    dense = replace(moe, verifier=replace(moe.verifier, experts_active=0, experts_total=0,
                                          active_params_b=None))
    # A lone decode token touches 8 of 128 experts: far fewer bytes than the whole model.
    assert one < lone_request_latency(dense, Workload(1, 2))
    rec = simulate_run(moe, Workload(256, 64), np.arange(300) / 20.0, seed=4)
    assert np.isfinite(rec.latency).all()


def test_same_seed_same_record_to_the_bit():
    wl = Workload(256, 128, acceptance_by_position(0.7, 4))
    sends = np.arange(500) / 30.0
    a = simulate_run(EAGLE_8B, wl, sends, seed=42)
    b = simulate_run(EAGLE_8B, wl, sends, seed=42)
    c = simulate_run(EAGLE_8B, wl, sends, seed=43)
    assert np.array_equal(a.finish, b.finish) and a.accepted == b.accepted
    assert not np.array_equal(a.finish, c.finish)


def test_bad_inputs_are_refused():
    with pytest.raises(InputError, match="drafter"):
        simulate_run(deployment("llama-8b", "H100"), Workload(10, 10, (0.5,)), np.zeros(1))
    with pytest.raises(InputError, match="non-decreasing"):
        simulate_run(EAGLE_8B, Workload(10, 10), np.array([1.0, 0.0]))
    with pytest.raises(InputError, match="KV tokens"):
        simulate_run(deployment("llama-8b", "H100"), Workload(10_000_000, 10), np.zeros(1))
