"""`bayeslat ingest`: real GuideLLM reports into one tidy table, and a corpus of broken inputs."""

import csv
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from bayeslat.cli import app
from bayeslat.data import guidellm, schema, vllm_metrics
from bayeslat.data.ingest import ingest, one_workload_per_length
from bayeslat.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "guidellm"
DEFECTS = Path(__file__).parent / "fixtures" / "guidellm-defects"
REPORTS = sorted(p for p in FIXTURES.rglob("*") if p.suffix in guidellm.FORMATS)
META = 'verifier = "mock"\nverifier_params_b = 0.0\nhardware = "cpu"\n'
runner = CliRunner()


def _ids(paths):
    return [str(p.relative_to(FIXTURES)) for p in paths]


@pytest.mark.parametrize("path", REPORTS, ids=_ids(REPORTS))
def test_every_fixture_ingests_with_the_reports_numbers(path):
    table = ingest([path])
    report = guidellm.read_report(path)
    assert len(table) == len(report.benchmarks)
    for row, b in zip(table.itertuples(), report.benchmarks, strict=True):
        assert row.source == f"{path}#{b.index}"
        for name in ("rps", "latency_mean", "latency_std", "latency_p50", "latency_p95",
                     "latency_p99", "n_successful", "n_errored", "n_incomplete", "duration_s"):
            assert getattr(row, name) == getattr(b, name), name
        assert row.rate_target == b.rate_target or (math.isnan(row.rate_target)
                                                    and math.isnan(b.rate_target))
    pd.testing.assert_frame_equal(table, schema.validate(table))


def test_token_lengths_default_to_the_measured_means():
    path = FIXTURES / "mock-gl08" / "sweep.json"
    table = ingest([path])
    doc = json.loads(path.read_text())
    n = [b["metrics"]["request_totals"]["successful"] for b in doc["benchmarks"]]
    prompt = [b["metrics"]["prompt_token_count"]["successful"]["mean"] for b in doc["benchmarks"]]
    # in whole tokens (one_workload_per_length)
    assert table["prefill_tokens"].iloc[0] == np.round(np.average(prompt, weights=n))
    assert (table["decode_tokens"] == 32.0).all()  # the mock server returns 32 tokens
    assert table["prefill_tokens"].nunique() == 1  # one group per report


def test_sd_run_gets_alpha_measured_from_the_metrics():
    folder = FIXTURES / "vllm-sd-gl08"
    table = ingest([folder / "sweep.json"])
    measured = vllm_metrics.read_acceptance(folder / "metrics-before.prom",
                                            folder / "metrics-after.prom")
    assert (table["alpha"] == measured.alpha).all()
    assert set(table["alpha_source"]) == {"measured"}
    assert set(table["k"]) == {2} and set(table["method"]) == {"draft_model"}
    base = ingest([FIXTURES / "vllm-base-gl08" / "sweep.json"])
    assert set(base["k"]) == {0} and base["alpha"].isna().all()
    # Baseline and SD share the verifier-side group.
    assert set(schema.group_labels(base)) == set(schema.group_labels(table))


def test_saturation_flags_keep_rows_and_say_why():
    table = ingest([FIXTURES / "mock-gl08-strategies" / "sweep.json"])
    throughput = table[table["strategy"] == "throughput"]
    assert len(throughput) == 1 and throughput["saturated"].all()
    assert "throughput" in throughput["saturation_reason"].iloc[0]
    sync = table[table["strategy"] == "synchronous"]
    assert sync["rate_target"].isna().all() and (sync["rps"] > 0).all()
    assert (table["saturated"] == (table["saturation_reason"] != "")).all()


def test_latency_growing_through_a_run_is_flagged(tmp_path):
    """Per-request records whose latency climbs with start time flag the benchmark."""
    def grow(doc):
        records = doc["benchmarks"][1]["requests"]["successful"]
        t0 = min(r["request_start_time"] for r in records)
        for r in records:
            r["request_latency"] = 0.2 + 0.5 * (r["request_start_time"] - t0)

    table = ingest([_edited(tmp_path, grow)])
    assert list(table["saturated"]) == [False, True]
    assert table["saturation_reason"].iloc[1] == "latency grows through the run"


def _mixed_folder(tmp_path: Path) -> Path:
    """GuideLLM 0.5.2 and 0.8.1 reports as JSON, YAML and CSV, each with its metadata."""
    picks = [("mock-gl05", "sweep.yaml"), ("mock-gl05-strategies", None),
             ("mock-gl08", "sweep.csv"), ("mock-gl08-strategies", None),
             ("vllm-sd-gl08", "sweep.json"), ("vllm-base-gl08", None)]
    mixed = tmp_path / "mixed"
    for folder, name in picks:
        src = FIXTURES / folder
        dst = mixed / folder
        shutil.copytree(src, dst, ignore=None if name is None else shutil.ignore_patterns(
            *[p.name for p in src.glob("sweep.*") if p.name != name]))
    return mixed


def test_mixed_folder_gives_one_table(tmp_path):
    mixed = _mixed_folder(tmp_path)
    out = tmp_path / "data" / "mixed.parquet"
    result = runner.invoke(app, ["ingest", str(mixed), "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = schema.read_table(out)
    reports = [guidellm.read_report(p) for p in sorted(mixed.rglob("*"))
               if p.suffix in guidellm.FORMATS]
    assert {r.format for r in reports} == {"json", "yaml", "csv"}
    assert {r.schema for r in reports} == {1, 2}
    assert len(table) == sum(len(r.benchmarks) for r in reports)
    assert set(table["verifier"]) == {"guidellm-mock", "tiny-llama-4l"}
    assert f"wrote {len(table)} benchmarks" in result.output


def test_precedence_of_metadata_sources(tmp_path):
    shutil.copy(FIXTURES / "mock-gl08" / "sweep.json", tmp_path / "run.json")
    (tmp_path / "bayeslat.toml").write_text('verifier = "folder"\nverifier_params_b = 1.0\n'
                                            'hardware = "folder-hw"\n')
    (tmp_path / "run.toml").write_text('verifier = "sibling"\n')
    meta = tmp_path / "meta.toml"
    meta.write_text('hardware = "meta-hw"\n')
    table = ingest([tmp_path / "run.json"], meta, {"verifier_params_b": 8.0})
    assert set(table["verifier"]) == {"sibling"}
    assert set(table["hardware"]) == {"meta-hw"}
    assert set(table["verifier_params_b"]) == {8.0}


def test_cli_writes_and_never_clobbers(tmp_path):
    out = tmp_path / "t.parquet"
    args = ["ingest", str(FIXTURES / "mock-gl05" / "sweep.json"), "-o", str(out)]
    first = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert first.exit_code == 0, first.output
    assert "Ingested benchmarks" in first.output and "constant" in first.output
    before = out.read_bytes()
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert out.read_bytes() == before
    replaced = runner.invoke(app, [*args, "--overwrite", "--hardware", "other"])
    assert replaced.exit_code == 0, replaced.output
    assert set(schema.read_table(out)["hardware"]) == {"other"}



@pytest.mark.parametrize("spelling", [["--verifier-params", "8", "--prefill", "32"],
                                      ["--verifier-params-b", "8", "--prefill-tokens", "32"]])
def test_cli_spells_options_as_decide_does(tmp_path, spelling):
    """decide's --verifier-params and --prefill; the older -b and -tokens spellings too."""
    out = tmp_path / "t.parquet"
    result = runner.invoke(app, ["ingest", str(FIXTURES / "mock-gl05" / "sweep.json"), "-o",
                                 str(out), *spelling])
    assert result.exit_code == 0, result.output
    table = schema.read_table(out)
    assert set(table["verifier_params_b"]) == {8.0} and set(table["prefill_tokens"]) == {32.0}


def test_runs_of_one_workload_are_one_group(tmp_path):
    """Measured means a token apart (the baseline and the SD run of one workload) make one
    group; a workload 20% longer stays its own; a stated length is kept."""
    table = pd.DataFrame({"prefill_tokens": [263.4, 264.6, 262.0, 320.0, 300.0],
                          "decode_tokens": [127.0, 128.2, 128.0, 128.0, 90.0],
                          "_measured_prefill_tokens": [True, True, True, True, False],
                          "_measured_decode_tokens": [True, True, True, True, False]})
    out = one_workload_per_length(table)
    assert out["prefill_tokens"].tolist() == [263.0, 263.0, 263.0, 320.0, 300.0]
    assert out["decode_tokens"].tolist() == [128.0, 128.0, 128.0, 128.0, 90.0]
    assert not any(c.startswith("_measured") for c in out)


def test_the_verifier_is_the_model_the_report_names(tmp_path):
    shutil.copy(FIXTURES / "vllm-base-gl08" / "sweep.json", tmp_path / "run.json")
    (tmp_path / "bayeslat.toml").write_text('verifier_params_b = 0.001\nhardware = "cpu"\n')
    table = ingest([tmp_path / "run.json"], None, {})
    assert set(table["verifier"]) == {"tiny-llama"}  # config.backend.model of GuideLLM 0.8
    # metadata still wins over the report
    table = ingest([tmp_path / "run.json"], None, {"verifier": "mine"})
    assert set(table["verifier"]) == {"mine"}


def test_every_missing_key_in_one_message(tmp_path):
    shutil.copy(FIXTURES / "mock-gl05" / "sweep.json", tmp_path / "run.json")  # names no model
    with pytest.raises(InputError) as info:
        ingest([tmp_path / "run.json"], None, {"k": 2})
    message = str(info.value)
    assert info.value.field == "verifier, method, drafter, alpha"
    for line in ('verifier = "llama-8b"', 'method = "eagle3"', 'drafter = "eagle3-llama-8b"',
                 "alpha = 0.7"):
        assert line in message, message
    # the snippet, one key per line, is a metadata file that ingests
    snippet = message.split("e.g. ")[1].split(" (or in")[0].replace("; ", "\n")
    (tmp_path / "bayeslat.toml").write_text(snippet + "\nk = 2\n")
    assert set(ingest([tmp_path / "run.json"], None, {})["alpha"]) == {0.7}


def test_a_baseline_sweep_of_a_named_model_needs_no_metadata(tmp_path):
    shutil.copy(FIXTURES / "vllm-base-gl08" / "sweep.json", tmp_path / "run.json")
    table = ingest([tmp_path], None, {})
    assert set(table["verifier"]) == {"tiny-llama"} and set(table["hardware"]) == {"unknown"}
    assert table["verifier_params_b"].isna().all()  # the name states no size
    assert (table["k"] == 0).all() and (table["method"] == "none").all()
    result = runner.invoke(app, ["ingest", str(tmp_path), "-o", str(tmp_path / "t.parquet")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "tiny-llama (size unknown) on unknown hardware, no SD" in said
    assert "size unknown for tiny-llama" in said and "hardware unknown" in said
    # a size in the name is the size; metadata still wins
    named = ingest([tmp_path], None, {"verifier": "meta-llama/Llama-3.1-8B-Instruct"})
    assert set(named["verifier_params_b"]) == {8.0}
    given = ingest([tmp_path], None, {"verifier": "llama-8b", "verifier_params_b": 7.5})
    assert set(given["verifier_params_b"]) == {7.5}


@pytest.mark.parametrize("name, size", [
    ("meta-llama/Llama-3.1-8B-Instruct", 8.0), ("Qwen/Qwen3-0.6B", 0.6),
    ("HuggingFaceTB/SmolLM-135M", 0.135), ("Qwen/Qwen3-30B-A3B", 30.0), ("gpt-oss-20b", 20.0),
    ("llama3.1:8b", 8.0), ("mistralai/Mixtral-8x7B-v0.1", math.nan), ("opt125m", math.nan),
    ("tiny-llama", math.nan), ("llama-7b-to-70b", math.nan)])
def test_the_size_a_model_name_states(name, size):
    from bayeslat.data.metadata import params_from_name

    assert params_from_name(name) == pytest.approx(size, nan_ok=True)


# --- the bad-input corpus -------------------------------------------------------------------
#
# Each builder writes a broken input under tmp and returns (ingest arguments, the file the error
# must name, the field it must name or None for whole-file problems, a phrase of the message).


def _doc(src="mock-gl08/sweep.json"):
    path = FIXTURES / src
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=yaml.CSafeLoader)


def _write_json(tmp, doc, name="bad.json", meta=META):
    (tmp / "bayeslat.toml").write_text(meta)
    path = tmp / name
    path.write_text(json.dumps(doc))
    return path


def _with(doc, edit):
    edit(doc)
    return doc


def _edited(tmp, edit, src="mock-gl08/sweep.json"):
    return _write_json(tmp, _with(_doc(src), edit))


def _metrics(doc, i=0):
    return doc["benchmarks"][i]["metrics"]


def _raw_file(tmp, name, content: bytes):
    (tmp / "bayeslat.toml").write_text(META)
    path = tmp / name
    path.write_bytes(content)
    return path


def _csv(tmp, edit):
    lines = (FIXTURES / "mock-gl08" / "sweep.csv").read_text().splitlines(keepends=True)
    return _raw_file(tmp, "bad.csv", "".join(edit(lines)).encode())


def _csv_cell(tmp, key, value):
    """mock-gl08's CSV with the first benchmark's cell under header ``key`` replaced."""
    rows = list(csv.reader((FIXTURES / "mock-gl08" / "sweep.csv").open(newline="")))
    rows[3][list(zip(*rows[:3], strict=True)).index(key)] = value
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return _raw_file(tmp, "bad.csv", text.getvalue().encode())


def _sd_folder(tmp, meta_extra, base="vllm-sd-gl08"):
    folder = tmp / "run"
    shutil.copytree(FIXTURES / base, folder)
    toml = folder / "bayeslat.toml"
    replaced = {line.split("=")[0].strip() for line in meta_extra.splitlines()}
    kept = [line for line in toml.read_text().splitlines(keepends=True)
            if line.split("=")[0].strip() not in replaced]
    toml.write_text("".join(kept) + meta_extra)
    return folder


def _set(d, key, value):
    d[key] = value


BAD = {
    "empty file": lambda t: ([_raw_file(t, "empty.json", b"")], "empty.json", None, "empty"),
    "truncated JSON": lambda t: (
        [_raw_file(t, "cut.json", (FIXTURES / "mock-gl08/sweep.json").read_bytes()[:5000])],
        "cut.json", None, "not valid JSON at line"),
    "truncated YAML": lambda t: (
        [_raw_file(t, "cut.yaml", (FIXTURES / "mock-gl08/sweep.yaml").read_bytes()[:3001]
                   + b"\n  - [unclosed")],
        "cut.yaml", None, "not valid YAML"),
    "binary file": lambda t: ([_raw_file(t, "blob.json", bytes(range(256)) * 4)], "blob.json",
                              None, "binary data"),
    "folder with no reports": lambda t: (
        [(t / "nothing").mkdir() or _raw_file(t / "nothing", "notes.txt", b"hi").parent],
        "nothing", None, "no GuideLLM reports"),
    "unknown suffix": lambda t: ([_raw_file(t, "run.txt", b"{}")], "run.txt", None,
                                 "unknown report type"),
    "missing path": lambda t: ([t / "absent.json"], "absent.json", None, "no such file"),
    "schema version 3": lambda t: ([_edited(t, lambda d: _set(d["metadata"], "version", 3))],
                                   "bad.json", "metadata.version", "schema version 3"),
    "no metadata (pre-0.5 report)": lambda t: (
        [_edited(t, lambda d: d.pop("metadata"))], "bad.json", "metadata.version", "missing"),
    "top level is a list": lambda t: ([_write_json(t, [1, 2])], "bad.json", "metadata",
                                      "top level"),
    "no benchmarks": lambda t: ([_edited(t, lambda d: _set(d, "benchmarks", []))], "bad.json",
                                "benchmarks", "no benchmarks"),
    "zero successful requests": lambda t: (
        [_edited(t, lambda d: _set(_metrics(d)["request_totals"], "successful", 0))], "bad.json",
        "benchmarks[0].metrics.request_totals.successful", "no successful requests"),
    "missing request_latency": lambda t: (
        [_edited(t, lambda d: _metrics(d, 1).pop("request_latency"))], "bad.json",
        "benchmarks[1].metrics.request_latency", "missing"),
    "NaN latency": lambda t: (
        [_edited(t, lambda d: _set(_metrics(d)["request_latency"]["successful"], "mean",
                                   float("nan")))],
        "bad.json", "benchmarks[0].metrics.request_latency.successful.mean", "finite"),
    "negative latency": lambda t: (
        [_edited(t, lambda d: _set(_metrics(d)["request_latency"]["successful"], "mean", -0.2))],
        "bad.json", "benchmarks[0].metrics.request_latency.successful.mean", "positive"),
    "NaN latency in YAML": lambda t: (
        [_raw_file(t, "nan.yaml", yaml.dump(_with(
            _doc("mock-gl05/sweep.yaml"), lambda d: _set(
                _metrics(d, 1)["request_latency"]["successful"], "mean", float("nan")))).encode())],
        "nan.yaml", "benchmarks[1].metrics.request_latency.successful.mean", "finite"),
    "negative target rate": lambda t: (
        [_edited(t, lambda d: _set(d["benchmarks"][0]["config"]["strategy"], "rate", -2.0))],
        "bad.json", "benchmarks[0].config.strategy.rate", "positive"),
    "negative achieved rate": lambda t: (
        [_edited(t, lambda d: _set(_metrics(d)["requests_per_second"]["successful"], "mean",
                                   -1.0))],
        "bad.json", "benchmarks[0].metrics.requests_per_second.successful.mean", "negative"),
    "negative errored count": lambda t: (
        [_edited(t, lambda d: _set(_metrics(d)["request_totals"], "errored", -3))], "bad.json",
        "benchmarks[0].metrics.request_totals.errored", "negative"),
    "unknown strategy": lambda t: (
        [_edited(t, lambda d: _set(d["benchmarks"][0]["config"]["strategy"], "type_", "warp"))],
        "bad.json", "benchmarks[0].config.strategy.type_", "unknown strategy"),
    "CSV missing a header row": lambda t: ([_csv(t, lambda lines: lines[1:])], "bad.csv",
                                           "header rows", "three header rows"),
    "CSV row cut short": lambda t: ([_csv(t, lambda lines: lines[:3] + [lines[3][:400] + "\n"])],
                                    "bad.csv", "row 4", "truncated"),
    "GuideLLM 0.5.x CSV with misaligned rows": lambda t: (
        [_raw_file(t, "misaligned.csv", (DEFECTS / "gl05-misaligned.csv").read_bytes())],
        "misaligned.csv", "row 5", "JSON or YAML output instead"),
    "CSV latency not a number": lambda t: (
        [_csv_cell(t, ("Request Latency", "Successful Sec", "Mean"), "fast")],
        "bad.csv", "row 4: Request Latency / Successful Sec / Mean", "cannot read"),
    "duplicate benchmarks": lambda t: (
        [_raw_file(t, "a.json", (FIXTURES / "mock-gl08/sweep.json").read_bytes()),
         _raw_file(t, "a.yaml", (FIXTURES / "mock-gl08/sweep.yaml").read_bytes())],
        "a.yaml", "benchmarks[0].config.id_", "duplicate benchmark"),
    "metadata missing verifier": lambda t: (
        [_write_json(t, _doc("mock-gl05/sweep.json"), meta='hardware = "x"\n')], "bad.json",
        "verifier", "missing"),
    "metadata not TOML": lambda t: (
        [_write_json(t, _doc(), meta="verifier = [unclosed\n")], "bayeslat.toml", None,
        "not valid TOML"),
    "metadata value of the wrong type": lambda t: (
        [_write_json(t, _doc(), meta=META + 'k = "two"\n')], "bayeslat.toml", "k",
        "must be a whole number"),
    "metadata unknown key": lambda t: (
        [_write_json(t, _doc(), meta=META + "drafts = 3\n")], "bayeslat.toml", "drafts",
        "unknown key"),
    "k for a run without SD": lambda t: (
        [_sd_folder(t, 'k = 2\nmethod = "draft_model"\ndrafter = "d"\n'
                       'metrics_before = "metrics-before.prom"\n'
                       'metrics_after = "metrics-after.prom"\n', base="vllm-base-gl08")],
        "bayeslat.toml", "k", "ran without speculative decoding"),
    "k contradicts the drafted positions": lambda t: (
        [_sd_folder(t, "k = 3\n")], "bayeslat.toml", "k", "count 2 draft positions"),
    "alpha and metrics both given": lambda t: (
        [_sd_folder(t, "alpha = 0.5\n")], "bayeslat.toml", "alpha", "not both"),
    "alpha for a run without SD": lambda t: (
        [_write_json(t, _doc(), meta=META + "alpha = 0.7\n")], "bayeslat.toml", "alpha",
        "without speculative decoding"),
    "prefill contradicts the report": lambda t: (
        [_write_json(t, _doc(), meta=META + "prefill_tokens = 4096\n")], "bayeslat.toml",
        "prefill_tokens", "contradicts the report"),
    "metrics files swapped": lambda t: (
        [_sd_folder(t, 'metrics_before = "metrics-after.prom"\n'
                       'metrics_after = "metrics-before.prom"\n')],
        "metrics-before.prom", "vllm:spec_decode_num_drafts_total", "went down"),
}


def _check_one_line(output: str, where: str, field: str | None, needle: str):
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in output
    assert where in line, line
    if field is not None:
        assert "field '" in line and field in line, line
    assert needle in line, line


def test_the_corpus_is_big_enough():
    assert len(BAD) >= 20


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    args, where, field, needle = BAD[case](tmp_path)
    out = tmp_path / "out" / "t.parquet"
    result = runner.invoke(app, ["ingest", *map(str, args), "-o", str(out)])
    assert result.exit_code == 2, result.output
    _check_one_line(result.output, where, field, needle)
    assert not out.exists()
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


@pytest.mark.parametrize("case", ["truncated JSON", "schema version 3", "CSV missing a header row",
                                  "k for a run without SD", "duplicate benchmarks"])
def test_bad_input_through_the_real_command_leaves_the_output_alone(tmp_path, case):
    args, where, field, needle = BAD[case](tmp_path)
    out = tmp_path / "keep.parquet"
    shutil.copy(_good_table(tmp_path), out)
    before = out.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "bayeslat", "ingest", *map(str, args), "-o", str(out),
         "--overwrite"], capture_output=True, text=True, check=False,
        env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    _check_one_line(proc.stderr, where, field, needle)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.glob(".keep.parquet.*")] == []


def _good_table(tmp_path: Path) -> Path:
    path = tmp_path / "good" / "t.parquet"
    schema.write_table(ingest([FIXTURES / "mock-gl05" / "sweep.csv"]), path)
    return path


def test_library_errors_are_input_errors():
    with pytest.raises(InputError) as info:
        ingest([FIXTURES / "mock-gl08" / "sweep.json", FIXTURES / "mock-gl08" / "sweep.csv"])
    assert info.value.field == "row 4: Benchmark / ID"


def test_report_numbers_survive_the_parquet_round_trip(tmp_path):
    table = ingest([FIXTURES / "vllm-sd-gl08" / "sweep.yaml"])
    back = schema.read_table(schema.write_table(table, tmp_path / "t.parquet"))
    pd.testing.assert_frame_equal(back, table)
    doc = yaml.load((FIXTURES / "vllm-sd-gl08" / "sweep.yaml").read_text(), Loader=yaml.CSafeLoader)
    assert list(back["latency_mean"]) == [
        b["metrics"]["request_latency"]["successful"]["mean"] for b in doc["benchmarks"]]
    assert list(back["n_successful"]) == [
        b["metrics"]["request_totals"]["successful"] for b in doc["benchmarks"]]


def test_folder_with_one_run_in_three_formats_reads_it_once(tmp_path):
    for suffix in ("json", "yaml", "csv"):
        shutil.copy(FIXTURES / "mock-gl08" / f"sweep.{suffix}", tmp_path / f"sweep.{suffix}")
    shutil.copy(FIXTURES / "mock-gl08" / "bayeslat.toml", tmp_path / "bayeslat.toml")
    skipped = []
    table = ingest([tmp_path], skipped=skipped)
    assert sorted(p.name for p in skipped) == ["sweep.csv", "sweep.yaml"]
    assert table["source"].str.endswith(("sweep.json#0", "sweep.json#1")).all()
    assert len(table) == len(ingest([FIXTURES / "mock-gl08" / "sweep.json"]))


# --- tidy tables as input, and the shipped real llm-d sweep ---------------------------------

ROOT = Path(__file__).resolve().parents[1]
LLMD = ROOT / "data" / "llmd" / "sweep.csv"
LLMD_EXTERNAL = ROOT.parent / "shared" / "data" / "external" / "llmd-pd-sweep.csv"


def test_shipped_llmd_sweep_reads_and_validates():
    table = schema.read_table(LLMD)
    pd.testing.assert_frame_equal(table, schema.validate(table))
    assert len(table) == 10
    assert list(table["source"]) == [f"llmd-pd-sweep.csv:sweep[{i}]" for i in range(10)]
    flagged = table[table["saturated"]]
    assert len(flagged) == 1
    assert flagged["strategy"].item() == "throughput"
    assert flagged["rps"].item() == pytest.approx(17.98)
    assert flagged["saturation_reason"].item() == "throughput strategy (measures the ceiling)"
    assert (table["k"] == 0).all() and table["alpha"].isna().all()
    assert table["verifier_params_b"].isna().all()  # unknown, see data/llmd/README.md
    assert table.groupby(list(schema.GROUP_COLUMNS)).ngroups == 1
    assert list(table["strategy"]) == ["synchronous", "throughput"] + ["constant"] * 8


def test_shipped_llmd_sweep_is_what_make_sweep_writes(tmp_path):
    if not LLMD_EXTERNAL.is_file():
        pytest.skip(f"{LLMD_EXTERNAL} (outside the repository) is absent, so "
                    "data/llmd/make_sweep.py cannot be rerun here")
    out = tmp_path / "sweep.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "data" / "llmd" / "make_sweep.py"),
                           "--output", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == LLMD.read_bytes()


def test_cli_ingests_a_tidy_csv_table_keeping_its_flags(tmp_path):
    out = tmp_path / "llmd.parquet"
    result = runner.invoke(app, ["ingest", str(LLMD), "-o", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Ingested benchmarks" in result.output
    assert f"report 1: {LLMD} (tidy table)" in result.output
    assert "1#9" in result.output and "wrote 10 benchmarks" in result.output
    assert "(1 flagged saturated" in result.output  # its own flags, not re-derived
    pd.testing.assert_frame_equal(schema.read_table(out), schema.read_table(LLMD),
                                  check_exact=True)


def test_tidy_tables_and_reports_together(tmp_path):
    parquet = schema.write_table(schema.read_table(LLMD), tmp_path / "llmd.parquet")
    report = FIXTURES / "mock-gl05" / "sweep.json"
    origins = []
    table = ingest([report, parquet], origins=origins)
    n_report = len(ingest([report]))
    assert origins == [(report, n_report), (parquet, 10)]
    assert len(table) == n_report + 10
    pd.testing.assert_frame_equal(table.iloc[n_report:].reset_index(drop=True),
                                  schema.read_table(LLMD))
    pd.testing.assert_frame_equal(table.iloc[:n_report], ingest([report]))


def test_folder_with_a_tidy_csv_and_a_guidellm_run(tmp_path):
    shutil.copy(FIXTURES / "mock-gl08" / "sweep.csv", tmp_path / "sweep.csv")
    shutil.copy(FIXTURES / "mock-gl08" / "sweep.json", tmp_path / "sweep.json")
    shutil.copy(FIXTURES / "mock-gl08" / "bayeslat.toml", tmp_path / "bayeslat.toml")
    (tmp_path / "other").mkdir()
    shutil.copy(LLMD, tmp_path / "other" / "sweep.csv")  # a tidy table, not a GuideLLM CSV
    skipped = []
    table = ingest([tmp_path], skipped=skipped)
    assert [p.name for p in skipped] == ["sweep.csv"] and skipped[0].parent == tmp_path
    assert table["source"].str.startswith("llmd-pd-sweep.csv:").sum() == 10
    assert len(table) == 10 + len(ingest([FIXTURES / "mock-gl08" / "sweep.json"]))


def test_tidy_table_refuses_metadata_and_duplicates(tmp_path):
    with pytest.raises(InputError) as info:
        ingest([LLMD], overrides={"verifier": "x"})
    assert info.value.field == "verifier" and "GuideLLM reports only" in str(info.value)
    parquet = schema.write_table(schema.read_table(LLMD), tmp_path / "llmd.parquet")
    with pytest.raises(InputError) as info:
        ingest([LLMD, parquet])
    assert info.value.path == str(parquet) and info.value.field == "source"
    assert "duplicate benchmark 'llmd-pd-sweep.csv:sweep[0]'" in str(info.value)


def test_cli_bad_tidy_csv_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    text = LLMD.read_text().replace(",17.98,", ",fast,")
    bad.write_text(text)
    out = tmp_path / "out.parquet"
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out)])
    assert result.exit_code == 2, result.output
    _check_one_line(result.output, str(bad), "rps", "'fast' on line 3 is not a number")
    assert not out.exists()
