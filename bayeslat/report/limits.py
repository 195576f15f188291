"""Section: what the model cannot see (DESIGN.md §2), stated plainly."""

from __future__ import annotations

from bayeslat.report import page

LIMITS = (
    "Mean latency only. The model predicts the mean request latency; tail latencies (p95, p99), "
    "time to first token and inter-token latency are outside it. A speedup of the mean can "
    "hide a worse tail.",
    "Unsaturated regime only. L = C1/(1 − rps·C2) holds while rps·C2 < 1. Points at or past "
    "saturation (throughput runs, preempted requests, achieved rate below target) are "
    "excluded and listed in the data section; near saturation the bands widen fast and "
    "beyond it the model says nothing.",
    "Independent (i.i.d.) acceptance. Each drafted token is accepted with the same probability "
    "alpha, independently. Real acceptance decays with position in the draft, so long drafts "
    "(large k) are predicted too optimistically when alpha was measured on short ones.",
    "Single-GPU bias. The coefficients are per deployment: a sweep on one GPU says nothing "
    "certain about tensor- or pipeline-parallel serving, other hardware, or other vLLM "
    "versions and scheduler settings.",
    "Predictions away from the data (other lengths, model sizes, acceptance rates or draft "
    "lengths than measured) rest on the linear scaling priors and carry the wider "
    "uncertainty of a new group; they are extrapolations, not measurements.",
)


def section(inputs) -> page.Section:
    out = page.Section("limits", "What this model cannot tell you")
    out.add(page.text("Read every number above with these limits in mind:"), page.items(LIMITS))
    out.add(page.text("Real data do not sit exactly on the curve. The residual panel and the "
                      "coverage table of the collapse section show where this fit misses the "
                      "measurements; do not trust a decision in a region the checks flag.",
                      "note"))
    return out
