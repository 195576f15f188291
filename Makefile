# The two commands of the README. Each creates its own virtual environment (.venv) if missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: example test lint install-dev

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Install bayeslat and run the main job on the shipped example.
example: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[nutpie]'
	$(BIN)/bayeslat theory

install-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,nutpie]'

# Install bayeslat with its test extras and run every test, slow ones included.
test: install-dev
	$(BIN)/python -m pytest

lint: install-dev
	$(BIN)/ruff check .
