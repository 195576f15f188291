r"""GPUs and models as the engine simulator costs them: bytes to read and FLOPs to do.

A forward pass over a batch runs its weight GEMMs, then its attention, each kernel at its own
roofline (the time of the slower of its memory traffic and its arithmetic):

.. math:: t = t_0 + \max\Big(\frac{W}{\beta}, \frac{2\,P_a\,T}{F}\Big)
              + \max\Big(\frac{b_{kv}\,N_{ctx}}{\beta}, \frac{a\,Q}{F}\Big),

with ``t0`` the model's fixed per-pass overhead (launches, scheduling), ``W`` the weight bytes
read (an MoE model reads its dense part plus only the experts its ``T`` tokens route to), ``P_a``
the active parameters per token, ``T`` the tokens in the pass, ``b_kv`` the KV-cache bytes per
token of context, ``N_ctx`` the context tokens whose keys and values are read, ``beta`` the
achieved memory bandwidth and ``F`` the achieved compute rate.

Attention FLOPs: a query token attending to one context token costs, in every layer and query
head, a ``head_dim`` dot product for its score (``q·k``) and a ``head_dim`` multiply-add into its
output (``p·v``), so ``a = 4·layers·heads·head_dim`` FLOPs per (query, context) pair — for
models whose ``heads·head_dim`` is the model width, the familiar ``4·n_layers·d_model``. ``Q`` is
the number of such pairs in the pass, ``Σ_requests Σ_query-tokens context length`` (causal: the
``i``-th of ``q`` new tokens on top of ``c`` cached ones sees ``c + i``, so a request
contributes ``q·c + q(q+1)/2``). The score's softmax and the projections are left out: the
former is a few FLOPs per pair, the latter are counted in ``P_a``. Grouped-query attention shows
in the two terms differently: the keys and values read scale with ``kv_heads``, the FLOPs with
the query ``heads``.

Small batches are memory-bound in both kernels; the weight GEMMs become compute-bound once ``T``
passes the ridge point (about 220 tokens for BF16 on an H100), and attention only in long prefill
chunks (over a long context its intensity is ``a·q / b_kv = q·heads/kv_heads`` FLOPs per byte for
``q`` query tokens per request: 2 to 8 per decode token of the presets' models). Latency therefore
stays nearly flat while a step is bound by reading the weights and then climbs faster once the
batch crosses the ridge: the engine is not tuned towards the latency formula (see
``tests/test_simulate_theory.py`` for how well the formula follows it).

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
    """

    name: str
    bandwidth_tbs: float
    compute_tflops: float
    memory_gb: float
    bandwidth_efficiency: float = 0.8
    compute_efficiency: float = 0.6

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
    layers, heads, kv_heads, head_dim
        Attention shape: ``heads`` query heads and ``kv_heads`` key/value heads of ``head_dim``
        each, in every one of ``layers`` layers. The KV cache holds
        ``2·layers·kv_heads·head_dim`` values per token.
    bytes_per_param
        Weight storage: 2 for BF16, 1 for FP8.
    experts_active, experts_total
        Routed experts per token and experts per MoE layer; 0 for a dense model.

    An EAGLE-style head is a one-layer model: its KV cache and its prompt pass are one layer's.
    """

    name: str
    params_b: float
    layers: int
    heads: int
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
        """FLOPs of the weight GEMMs per token: a multiply-add per active parameter."""
        return 2.0 * self.active_b * GB

    @property
    def attention_flops_per_pair(self) -> float:
        """Attention FLOPs per (query token, context token) pair: ``4·layers·heads·head_dim``."""
        return 4.0 * self.layers * self.heads * self.head_dim

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
