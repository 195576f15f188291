"""Write data/llmd/sweep.csv, the tidy table of the real llm-d sweep, from the external summary.

Input: ``../shared/data/external/llmd-pd-sweep.csv`` relative to the project root (outside the
repository). It is ``reports/all-benchmarks.csv`` of the public repository
nirjhar17/guidellm-pd-disaggregation at commit 2ff15754: a summary, one line per benchmark, that
the repository's ``reports/parse_benchmarks.py`` derived from GuideLLM 0.5.0 JSON reports of vLLM
behind llm-d with prefill/decode disaggregation on a real GPU, no speculative decoding.

Only the ten rows ``sweep[0]`` .. ``sweep[9]`` are kept: they are one GuideLLM sweep
(synchronous, throughput, then 8 constant rates). The other rows are separate runs with other
settings (the separate ``throughput`` run had a concurrency limit of 64), not points of this
curve. See data/llmd/README.md for what each column choice means.

Run from the project root (``--input``/``--output`` to read or write elsewhere)::

    .venv/bin/python data/llmd/make_sweep.py
"""

from __future__ import annotations

import argparse
import csv
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from bayeslat.data import schema

ROOT = Path(__file__).resolve().parents[2]
INPUT = ROOT.parent / "shared" / "data" / "external" / "llmd-pd-sweep.csv"
OUTPUT = ROOT / "data" / "llmd" / "sweep.csv"

# What the summary does not say, the same for every row.
DEPLOYMENT = {
    "verifier": "llmd-dense",  # the model is not named in the summary
    "verifier_params_b": np.nan,  # unknown; the dense model does not use it
    "drafter": "none", "drafter_params_b": 0.0, "method": "none",  # no speculative decoding
    "hardware": "gpu",  # "a real GPU"; the summary does not say which
    "moe_experts_active": 0, "moe_experts_total": 0,
    # One workload for all rows (one group): the measured means of the unloaded rows, rounded.
    "prefill_tokens": 264.0, "decode_tokens": 128.0,
    "k": 0, "alpha": np.nan, "alpha_source": "none",
}
SWEEP_ROW = re.compile(r"sweep\[(\d+)\]")
THROUGHPUT_REASON = "throughput strategy (measures the ceiling)"  # bayeslat.data.saturation's


def _number(cell: str) -> float:
    """A summary cell as a float; ``-`` (not in the report) is NaN."""
    return np.nan if cell.strip() == "-" else float(cell)


def _ms_to_s(cell: str) -> float:
    """Milliseconds as printed (one decimal) to seconds, without binary rounding noise."""
    return np.nan if cell.strip() == "-" else float(Decimal(cell).scaleb(-3))


def tidy_rows(summary: Path) -> pd.DataFrame:
    """The tidy rows of the sweep's benchmarks, in sweep order."""
    with summary.open(newline="") as fh:
        lines = [line for line in csv.DictReader(fh) if SWEEP_ROW.fullmatch(line["source_file"])]
    lines.sort(key=lambda line: int(SWEEP_ROW.fullmatch(line["source_file"])[1]))
    rows = []
    for line in lines:
        errored = int(line["error_requests"])
        throughput = line["profile"] == "throughput"
        rows.append({
            **DEPLOYMENT,
            "strategy": line["profile"],
            "rate_target": _number(line["rate"]),
            "rps": _number(line["rps_mean"]),
            "latency_mean": _number(line["req_latency_mean_s"]),
            "latency_std": np.nan,  # not in the summary
            "latency_p50": _number(line["req_latency_median_s"]),
            "latency_p95": np.nan,  # not in the summary
            "latency_p99": _number(line["req_latency_p99_s"]),  # "-" in every row
            "ttft_mean": _ms_to_s(line["ttft_mean_ms"]),
            "itl_mean": _ms_to_s(line["itl_mean_ms"]),
            # parse_benchmarks.py at 2ff15754 counts total_requests = len(requests.successful)
            # and error_requests = len(requests.errored): successful ones only, so no subtraction
            "n_successful": int(line["total_requests"]),
            "n_errored": errored,
            "n_incomplete": 0,  # not in the summary
            "duration_s": _number(line["duration_s"]),
            "saturated": throughput,
            "saturation_reason": THROUGHPUT_REASON if throughput else "",
            "source": f"{summary.name}:{line['source_file']}",
        })
    if len(rows) != 10:
        raise SystemExit(f"{summary}: expected the 10 rows sweep[0]..sweep[9], found {len(rows)}")
    return schema.validate(pd.DataFrame(rows), summary)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=INPUT, help=f"default: {INPUT}")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"default: {OUTPUT}")
    args = parser.parse_args(argv)
    if not args.input.is_file():
        raise SystemExit(f"{args.input}: no such file; it lives outside the repository, in the "
                         "project's shared folder (see data/llmd/README.md)")
    path = schema.write_table(tidy_rows(args.input), args.output)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
