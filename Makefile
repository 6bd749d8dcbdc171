# Switchboard: `make run` starts the daemon, `make test` runs the tests. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config.toml

.PHONY: run chat init test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files so the install reruns when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/switchboard run --config $(CONFIG)

chat: $(VENV)/.installed
	$(BIN)/switchboard chat --config $(CONFIG)

init: $(VENV)/.installed
	$(BIN)/switchboard init --config $(CONFIG)

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot channels tests bench
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/context_build.py
	$(BIN)/python bench/router_throughput.py
	$(BIN)/python bench/daemon_rss.py
	$(BIN)/python bench/telegram_throughput.py
	$(BIN)/python bench/discord_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
