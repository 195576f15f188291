r"""GPUs and models as the engine simulator costs them: bytes to read and FLOPs to do.

An iteration (one forward pass over a batch) costs

.. math:: t = t_0 + \max(t_m, t_c) + (1 - o)\,\min(t_m, t_c), \qquad
          t_m = \frac{W + b_{kv}\,N_{ctx}}{\beta}, \quad t_c = \frac{2\,P_a\,T}{F},

with ``t0`` the model's fixed per-pass overhead (launches, scheduling), ``W`` the weight bytes read,
``b_kv`` the KV-cache bytes per token of context, ``N_ctx`` the context tokens attended to,
``beta`` the achieved memory bandwidth, ``P_a`` the active parameters per token, ``T`` the tokens in
the pass and ``F`` the achieved compute rate. An MoE model reads its dense part plus only the
experts its ``T`` tokens route to.

``o`` is the overlap of memory traffic and compute. ``o = 1`` is the ideal roofline
``max(t_m, t_c)``; the default ``o = 0`` (no overlap, the two add) is closer to what serving
engines measure at moderate batch, where step time grows steadily with the tokens in the batch
long before the compute roof is reached. With ``o = 1`` latency stays flat until the batch crosses
the ridge point and then rises steeply (see ``tests/test_simulate_theory.py`` for what each does
to the fit of the latency formula).

Peak figures are the vendors' dense BF16 numbers; ``efficiency`` scales them to what a serving
engine achieves (about 80% of bandwidth, 60% of compute).
"""

from __future__ import annotations

from dataclasses import dataclass

from bayeslat.errors import InputError

GB = 1e9


@dataclass(frozen=True)
class GPU:
    """One accelerator.

    Parameters
    ----------
    name
        As written in the table's ``hardware`` column.
    bandwidth_tbs
        Peak HBM bandwidth, TB/s.
    compute_tflops
        Peak dense BF16 compute, TFLOP/s.
    memory_gb
        HBM capacity, GB.
    bandwidth_efficiency, compute_efficiency
        Share of the peaks a serving engine achieves.
    overlap
        How far memory traffic and compute overlap within a pass, 0 (they add) to 1 (roofline).
    """

    name: str
    bandwidth_tbs: float
    compute_tflops: float
    memory_gb: float
    bandwidth_efficiency: float = 0.8
    compute_efficiency: float = 0.6
    overlap: float = 0.0

    @property
    def bytes_per_s(self) -> float:
        """Achieved memory bandwidth, bytes per second."""
        return self.bandwidth_tbs * 1e12 * self.bandwidth_efficiency

    @property
    def flops(self) -> float:
        """Achieved compute rate, FLOP per second."""
        return self.compute_tflops * 1e12 * self.compute_efficiency


GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("A100", bandwidth_tbs=2.039, compute_tflops=312.0, memory_gb=80.0),
        GPU("H100", bandwidth_tbs=3.35, compute_tflops=989.0, memory_gb=80.0),
        GPU("H200", bandwidth_tbs=4.8, compute_tflops=989.0, memory_gb=141.0),
    )
}


@dataclass(frozen=True)
class Model:
    """A transformer as the roofline sees it.

    Parameters
    ----------
    name
        As written in the table's ``verifier`` or ``drafter`` column.
    params_b
        Total parameters, billions.
    active_params_b
        Parameters used per token, billions (equal to ``params_b`` for a dense model).
    layers, kv_heads, head_dim
        Shape of the KV cache: ``2·layers·kv_heads·head_dim`` values per token.
    bytes_per_param
        Weight storage: 2 for BF16, 1 for FP8.
    experts_active, experts_total
        Routed experts per token and experts per MoE layer; 0 for a dense model.

    An EAGLE-style head is a one-layer model: its KV cache and its prompt pass are one layer's.
    """

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    active_params_b: float | None = None
    bytes_per_param: float = 2.0
    experts_active: int = 0
    experts_total: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts_total > 0

    @property
    def active_b(self) -> float:
        return self.params_b if self.active_params_b is None else self.active_params_b

    @property
    def weight_bytes(self) -> float:
        return self.params_b * GB * self.bytes_per_param

    @property
    def expert_bytes(self) -> float:
        """Bytes of all routed experts together (0 for a dense model).

        Solves ``dense + expert·m/M = active`` for the expert part of ``params_b``.
        """
        if not self.is_moe:
            return 0.0
        share = self.experts_active / self.experts_total
        expert_b = (self.params_b - self.active_b) / (1.0 - share)
        return expert_b * GB * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of context (keys and values, BF16)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * 2.0

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.active_b * GB

    @property
    def overhead_s(self) -> float:
        """Fixed time per forward pass: a scheduler step plus per-layer launches."""
        return 4e-4 + 1.5e-5 * self.layers


def kv_capacity_tokens(hw: GPU, models: tuple[Model, ...], memory_utilization: float = 0.9
                       ) -> int:
    """Tokens of KV cache that fit once the weights of ``models`` are loaded.

    ``models`` are the verifier and its drafter; the capacity counts tokens of the verifier's
    cache plus the drafter's (both hold every token of a running request).

    Raises
    ------
    InputError
        When the weights alone do not fit in ``memory_utilization`` of the GPU's memory.
    """
    free = hw.memory_gb * GB * memory_utilization - sum(m.weight_bytes for m in models)
    per_token = sum(m.kv_bytes_per_token for m in models)
    if free <= per_token * 4096:
        names = " + ".join(m.name for m in models)
        raise InputError(f"{names} does not fit on one {hw.name} with room for a KV cache; "
                         "choose a larger GPU or a smaller model", field="hardware")
    return int(free / per_token)
