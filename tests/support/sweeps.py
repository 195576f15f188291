"""Small model-sampler sweeps shared by the structural model tests."""

from __future__ import annotations

from bayeslat.simulate.generative import SamplerSpec, sample_sweep

# Two verifiers at two prefill lengths, two alphas and two ks, four rates: four groups.
SPEC = SamplerSpec(verifiers=(("llama-8b", 8.0), ("llama-70b", 70.0)),
                   prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,), alphas=(0.6, 0.9),
                   ks=(2, 4), n_rates=4)
# The same design for an MoE verifier.
MOE_SPEC = SamplerSpec(prefill_tokens=(128.0, 512.0), decode_tokens=(64.0,), alphas=(0.6, 0.9),
                       ks=(2, 4), n_rates=4, moe=(8, 128, 0.6, 0.3))


def table(variant: str):
    """The sweep for ``variant`` (seed 5), its fourth row a throughput benchmark flagged
    saturated: a measured ceiling for the capacity variants."""
    df, _ = sample_sweep(MOE_SPEC if variant == "moe" else SPEC, seed=5)
    df.loc[3, ["saturated", "saturation_reason", "strategy"]] = [
        True, "throughput strategy (measures the ceiling)", "throughput"]
    return df
