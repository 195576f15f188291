"""Plausible deployments to simulate, by name: models, drafters, GPUs and sweep grids.

Model shapes follow public model cards (Llama 3.2 1B, Llama 3.1 8B, Llama 3.1 70B in FP8,
Qwen3-30B-A3B); drafters are EAGLE-3-style one-layer heads (``eagle3``) or small draft models
(``draft_model``). The figures are illustrative, not measurements: they make the simulator's costs
land where a real deployment's do, within a factor of about two.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bayeslat.errors import InputError
from bayeslat.simulate.engine import Deployment
from bayeslat.simulate.hardware import GPUS, Model
from bayeslat.simulate.protocol import Configuration, Protocol

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("llama-1b", 1.24, layers=16, heads=32, kv_heads=8, head_dim=64),
        Model("llama-8b", 8.03, layers=32, heads=32, kv_heads=8, head_dim=128),
        Model("llama-70b-fp8", 70.6, layers=80, heads=64, kv_heads=8, head_dim=128,
              bytes_per_param=1.0),
        Model("qwen3-30b-a3b", 30.5, layers=48, heads=32, kv_heads=4, head_dim=128,
              active_params_b=3.3, experts_active=8, experts_total=128),
        Model("eagle3-llama-1b", 0.1, layers=1, heads=32, kv_heads=8, head_dim=64),
        Model("eagle3-llama-8b", 0.4, layers=1, heads=32, kv_heads=8, head_dim=128),
        Model("eagle3-llama-70b", 1.0, layers=1, heads=64, kv_heads=8, head_dim=128),
        Model("eagle3-qwen3-30b-a3b", 0.3, layers=1, heads=32, kv_heads=4, head_dim=128),
        Model("qwen3-0.6b", 0.6, layers=28, heads=16, kv_heads=8, head_dim=128),
    )
}

# The paper's workload grid: prompt and output lengths in tokens.
PAIRS_4 = ((256, 128), (256, 512), (1024, 128), (1024, 512))
PAIRS_16 = tuple((p, g) for p in (128, 256, 512, 1024) for g in (64, 128, 256, 512))


def deployment(verifier: str, gpu: str, drafter: str | None = None,
               method: str = "none") -> Deployment:
    """A deployment from the names in :data:`MODELS` and :data:`~hardware.GPUS`."""
    return Deployment(MODELS[verifier], GPUS[gpu], None if drafter is None else MODELS[drafter],
                      method)


def eagle(verifier: str, gpu: str) -> Deployment:
    """``verifier`` with its EAGLE-3-style head on ``gpu``."""
    return deployment(verifier, gpu, f"eagle3-{verifier.removesuffix('-fp8')}", "eagle3")


@dataclass(frozen=True)
class Preset:
    """A named sweep: SD deployments, workloads, alphas and draft lengths.

    Every deployment's verifier at every ``(prefill, decode)`` pair is swept once without SD
    (``k = 0``) and at every ``alpha`` × ``k`` with each of its drafters.
    """

    name: str
    description: str
    deployments: tuple[Deployment, ...]
    pairs: tuple[tuple[int, int], ...] = PAIRS_4
    alphas: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9, 0.95)
    ks: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    decay: float = 1.0
    protocol: Protocol = field(default_factory=Protocol)

    def configurations(self) -> list[Configuration]:
        """Every configuration, baselines first within each group; the order seeds the runs."""
        out, seen = [], set()
        for dep in self.deployments:
            for p, g in self.pairs:
                key = (dep.verifier.name, dep.gpu.name, p, g)
                if key not in seen:
                    seen.add(key)
                    out.append(Configuration(replace(dep, drafter=None, method="none"), p, g))
                out += [Configuration(dep, p, g, k, a, self.decay)
                        for a in self.alphas for k in self.ks]
        return out


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("example", "the shipped example: 1B and 8B on H100 and 70B (FP8) on H200 with "
               "EAGLE-3 heads, four prompt/output pairs, alpha 0.6-0.9, k 0-6",
               (eagle("llama-1b", "H100"), eagle("llama-8b", "H100"),
                eagle("llama-70b-fp8", "H200")),
               alphas=(0.6, 0.75, 0.9), ks=(1, 2, 4, 6), ),
        Preset("dense-1b-a100", "Llama-1B-class on A100 with an EAGLE-3 head",
               (eagle("llama-1b", "A100"),)),
        Preset("dense-8b-h100", "Llama-8B-class on H100, EAGLE-3 head and a 1B draft model",
               (eagle("llama-8b", "H100"),
                deployment("llama-8b", "H100", "llama-1b", "draft_model"))),
        Preset("dense-70b-h200", "Llama-70B-class (FP8) on H200, EAGLE-3 head and a 1B draft "
               "model", (eagle("llama-70b-fp8", "H200"),
                         deployment("llama-70b-fp8", "H200", "llama-1b", "draft_model"))),
        Preset("moe-30b-a3b-h100", "Qwen3-30B-A3B-class MoE on H100, EAGLE-3 head and a 0.6B "
               "draft model", (eagle("qwen3-30b-a3b", "H100"),
                               deployment("qwen3-30b-a3b", "H100", "qwen3-0.6b", "draft_model"))),
        Preset("dense-8b-h100-decay", "Llama-8B-class on H100 with an EAGLE-3 head whose "
               "acceptance falls by 10% per draft position", (eagle("llama-8b", "H100"),),
               decay=0.9),
        Preset("paper-grid-8b-h100", "one verifier's paper-scale grid: Llama-8B-class on H100 "
               "with an EAGLE-3 head, 16 prompt/output pairs, alpha 0-1 by 0.1, k 0-10",
               (eagle("llama-8b", "H100"),), pairs=PAIRS_16,
               alphas=tuple(a / 10 for a in range(11)), ks=tuple(range(1, 11))),
    )
}


def preset(name: str) -> Preset:
    """The preset called ``name``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InputError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}",
                         field="preset") from None

