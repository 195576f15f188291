"""Measured acceptance from two snapshots of vLLM's ``/metrics`` (Prometheus text).

vLLM counts speculative decoding in four counters (summed here over their label sets, e.g. one per
engine):

- ``vllm:spec_decode_num_drafts_total``: verify cycles that carried a draft, ``D``;
- ``vllm:spec_decode_num_draft_tokens_total``: drafted tokens, ``T`` (``k`` per draft);
- ``vllm:spec_decode_num_accepted_tokens_total``: drafted tokens the verifier accepted, ``A``;
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: accepted at position i,
  ``A_i``.

Save the text before and after a benchmark (``curl -s http://HOST:PORT/metrics > before.prom``);
the differences ``ΔD, ΔT, ΔA, ΔA_i`` over the window give

- acceptance rate ``alpha = ΔA / ΔT`` (per drafted token, what the latency model calls alpha);
- mean acceptance length ``1 + ΔA / ΔD`` (tokens per verify cycle including the verifier's own
  token, comparable to ``E`` of the model);
- per-position acceptance ``ΔA_i / ΔD`` (non-increasing in i for a real drafter; the model's i.i.d.
  assumption makes it ``alpha^(i+1)``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bayeslat.errors import InputError

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The speculative-decoding counters of one ``/metrics`` snapshot (summed over label sets).

    ``per_position[i]`` is the accepted-token count at draft position ``i``. ``present`` is False
    when the server exposed no ``spec_decode`` counter at all (it runs without SD).
    """

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float, ...]
    present: bool


@dataclass(frozen=True)
class Acceptance:
    """Acceptance measured over a window between two snapshots.

    Attributes
    ----------
    alpha
        Accepted over drafted tokens, in [0, 1].
    mean_acceptance_length
        ``1 + accepted / drafts``: tokens produced per verify cycle.
    per_position
        Acceptance at each draft position ``0..k-1``: accepted at that position over drafts.
    drafts, draft_tokens, accepted
        The counter differences over the window.
    """

    alpha: float
    mean_acceptance_length: float
    per_position: np.ndarray
    drafts: float
    draft_tokens: float
    accepted: float

    @property
    def k(self) -> int:
        """Draft length the server ran with, from the number of positions counted."""
        return len(self.per_position)


def parse_counters(text: str, path: str | os.PathLike | None = None) -> SpecDecodeCounters:
    """Read the ``spec_decode`` counters from Prometheus exposition text.

    Raises :class:`~bayeslat.errors.InputError` naming ``path`` if the text is not Prometheus text.
    """
    from prometheus_client.parser import text_string_to_metric_families

    totals = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    positions: dict[int, float] = {}
    present = False
    try:
        samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise InputError(f"not Prometheus text ({exc}); save it with "
                         "'curl -s http://HOST:PORT/metrics'", path) from None
    for sample in samples:
        if not sample.name.startswith("vllm:spec_decode_"):
            continue
        present = True
        if not math.isfinite(sample.value) or sample.value < 0:
            raise InputError(f"counter value {sample.value} is not a count", path, sample.name)
        if sample.name in totals:
            totals[sample.name] += sample.value
        elif sample.name == PER_POSITION:
            try:
                pos = int(sample.labels["position"])
            except (KeyError, ValueError):
                raise InputError("needs an integer 'position' label", path, PER_POSITION) from None
            positions[pos] = positions.get(pos, 0.0) + sample.value
    if positions and sorted(positions) != list(range(len(positions))):
        raise InputError(f"positions {sorted(positions)} are not 0..k-1", path, PER_POSITION)
    return SpecDecodeCounters(
        drafts=totals[DRAFTS], draft_tokens=totals[DRAFT_TOKENS], accepted=totals[ACCEPTED],
        per_position=tuple(positions[i] for i in range(len(positions))), present=present,
    )


def read_counters(path: str | os.PathLike) -> SpecDecodeCounters:
    """Read one ``/metrics`` snapshot file."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file; save vLLM's /metrics text before and after the run", path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError("not a text file; save vLLM's /metrics text", path) from None
    return parse_counters(text, path)


def acceptance(before: SpecDecodeCounters, after: SpecDecodeCounters,
               path: str | os.PathLike | None = None) -> Acceptance:
    """Acceptance over the window between two snapshots.

    Parameters
    ----------
    before, after
        Counters read before and after the benchmark.
    path
        The ``after`` file, for error messages.
    """
    if not after.present:
        raise InputError("no vllm:spec_decode_* counters: the server ran without speculative "
                         "decoding (--speculative-config)", path, DRAFTS)
    drafts = after.drafts - before.drafts
    tokens = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    if len(before.per_position) not in (0, len(after.per_position)):
        raise InputError("the two snapshots count different draft positions; were they taken "
                         "from the same server?", path, PER_POSITION)
    per_pos = np.subtract(after.per_position, before.per_position or 0.0)
    if min(drafts, tokens, accepted, *per_pos, 0.0) < 0:
        raise InputError("a counter went down between the snapshots: the server restarted, or "
                         "the files are swapped (give before, then after)", path, DRAFTS)
    if drafts <= 0 or tokens <= 0:
        raise InputError("no drafts between the snapshots; take them before and after a run "
                         "that sent requests", path, DRAFTS)
    if accepted > tokens:
        raise InputError(f"{accepted:g} accepted of {tokens:g} drafted tokens", path, ACCEPTED)
    return Acceptance(
        alpha=accepted / tokens, mean_acceptance_length=1.0 + accepted / drafts,
        per_position=per_pos / drafts, drafts=drafts, draft_tokens=tokens, accepted=accepted,
    )


def read_acceptance(before: str | os.PathLike, after: str | os.PathLike) -> Acceptance:
    """Acceptance measured between two ``/metrics`` snapshot files."""
    return acceptance(read_counters(before), read_counters(after), after)
