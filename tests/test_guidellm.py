"""The GuideLLM report reader on real reports written by GuideLLM 0.5.2 and 0.8.1."""

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from bayeslat.data import guidellm

FIXTURES = Path(__file__).parent / "fixtures" / "guidellm"
REPORTS = sorted(p for p in FIXTURES.rglob("*") if p.suffix in guidellm.FORMATS)
DOCUMENTS = [p for p in REPORTS if p.suffix != ".csv"]
CSVS = [p for p in REPORTS if p.suffix == ".csv"]


def _ids(paths):
    return [str(p.relative_to(FIXTURES)) for p in paths]


def _raw(path: Path):
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=yaml.CSafeLoader)


def test_fixtures_cover_both_schemas_every_format_and_strategy():
    reports = [guidellm.read_report(p) for p in REPORTS]
    assert {r.schema for r in reports} == {1, 2}
    assert {r.guidellm_version for r in reports} == {"0.5.2", "0.8.1"}
    assert {r.format for r in reports} == {"json", "yaml", "csv"}
    strategies = {b.strategy for r in reports for b in r.benchmarks}
    assert strategies == {"synchronous", "constant", "poisson", "throughput", "concurrent"}


@pytest.mark.parametrize("path", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_document_numbers_are_the_reports_own(path):
    doc = _raw(path)
    report = guidellm.read_report(path)
    assert report.schema == doc["metadata"]["version"]
    assert len(report.benchmarks) == len(doc["benchmarks"])
    for b, raw in zip(report.benchmarks, doc["benchmarks"], strict=True):
        m = raw["metrics"]
        lat = m["request_latency"]["successful"]
        assert b.strategy == raw["config"]["strategy"]["type_"]
        if b.strategy in ("constant", "poisson"):
            assert b.rate_target == raw["config"]["strategy"]["rate"]
        else:
            assert math.isnan(b.rate_target)
        assert b.rps == m["requests_per_second"]["successful"]["mean"]
        assert (b.latency_mean, b.latency_std, b.latency_p50) == (
            lat["mean"], lat["std_dev"], lat["median"])
        assert (b.latency_p95, b.latency_p99) == (lat["percentiles"]["p95"],
                                                  lat["percentiles"]["p99"])
        assert b.ttft_mean == m["time_to_first_token_ms"]["successful"]["mean"] / 1000
        assert b.itl_mean == m["inter_token_latency_ms"]["successful"]["mean"] / 1000
        totals = m["request_totals"]
        assert (b.n_successful, b.n_errored, b.n_incomplete) == (
            totals["successful"], totals["errored"], totals["incomplete"])
        assert b.duration_s == raw["duration"]
        assert b.benchmark_id == raw["config"]["id_"]


def _csv_rows(path: Path):
    rows = list(csv.reader(path.open(newline="")))
    keys = list(zip(rows[0], rows[1], rows[2], strict=True))
    return [dict(zip(keys, r, strict=True)) for r in rows[3:]]


@pytest.mark.parametrize("path", CSVS, ids=_ids(CSVS))
def test_csv_numbers_are_the_reports_own(path):
    report = guidellm.read_report(path)
    rows = _csv_rows(path)
    assert len(report.benchmarks) == len(rows)
    for b, row in zip(report.benchmarks, rows, strict=True):
        lat = ("Request Latency", "Successful Sec")
        assert b.latency_mean == float(row[(*lat, "Mean")])
        assert b.latency_std == float(row[(*lat, "Std Dev")])
        assert b.latency_p50 == float(row[(*lat, "Median")])
        assert b.rps == float(row[("Server Throughput", "Successful Requests/Sec", "Mean")])
        for status in ("Successful", "Errored", "Incomplete"):
            assert getattr(b, f"n_{status.lower()}") == int(row[("Request Counts", status, "")])
        assert b.benchmark_id == row[("Benchmark", "ID", "")]
        assert b.growing is None  # CSV has no per-request records


@pytest.mark.parametrize("folder", sorted({p.parent for p in CSVS}), ids=lambda p: p.name)
def test_json_yaml_and_csv_of_one_run_agree_exactly(folder):
    """GuideLLM's three outputs of one run give the same benchmarks, number for number."""
    fields = ("benchmark_id", "strategy", "rps", "latency_mean", "latency_std", "latency_p50",
              "latency_p95", "latency_p99", "ttft_mean", "itl_mean", "n_successful",
              "n_errored", "n_incomplete", "duration_s", "prompt_tokens_mean",
              "output_tokens_mean")

    def numbers(path):
        return [tuple(getattr(b, f) for f in fields) + (b.rate_target,)
                for b in guidellm.read_report(path).benchmarks]

    formats = sorted(folder.glob("sweep.*"))
    assert {p.suffix for p in formats} >= {".json", ".csv"}
    first = numbers(formats[0])
    for other in formats[1:]:
        assert numbers(other) == first, other.name


def test_schema_1_and_2_are_told_apart():
    assert guidellm.read_report(FIXTURES / "mock-gl05" / "sweep.json").schema == 1
    assert guidellm.read_report(FIXTURES / "mock-gl05" / "sweep.csv").schema == 1
    assert guidellm.read_report(FIXTURES / "mock-gl08" / "sweep.yaml").schema == 2
    assert guidellm.read_report(FIXTURES / "mock-gl08" / "sweep.csv").schema == 2


def test_per_request_records_feed_the_growth_check():
    report = guidellm.read_report(FIXTURES / "mock-gl08" / "sweep.json")
    # The mock server answers in constant time: no run grows.
    assert [b.growing for b in report.benchmarks] == [False] * len(report.benchmarks)


def test_the_served_model_is_read_where_the_report_names_it():
    for fmt in ("json", "yaml"):
        assert guidellm.read_report(FIXTURES / "vllm-sd-gl08" / f"sweep.{fmt}").model == \
            "tiny-llama"
    assert guidellm.read_report(FIXTURES / "vllm-sd-gl08" / "sweep.csv").model is None
    # GuideLLM 0.5 run against a server without --model: the report names none
    assert guidellm.read_report(FIXTURES / "mock-gl05" / "sweep.json").model is None
