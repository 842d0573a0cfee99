# memwarden — the same commands for people and CI.
#   make run    start the daemon with this checkout's memwarden.toml (state in ./.memwarden,
#               API on a free loopback port recorded in .memwarden/api.json)
#   make test   create/refresh .venv, install everything, run lint and the whole suite
#   make lint   ruff + mypy --strict
#   make bench  the benchmarks; writes .bench/results.json

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXAMPLE := examples/memwarden-sensor-example
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(EXAMPLE)/pyproject.toml scripts/system-deps.sh 2>/dev/null | sha1sum | cut -c1-12)
export MEMWARDEN_HOME ?= $(CURDIR)/.memwarden

.PHONY: run test lint format bench clean venv system-deps

venv: $(STAMP)

$(STAMP): pyproject.toml $(EXAMPLE)/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -m pip install --quiet -e '.[dev,semantic,postgres]' 2>&1 | grep -v "^WARNING: Location" || true
	@# The example third-party sensor: the suite proves the daemon discovers and runs it.
	@$(PY) -m pip install --quiet -e $(EXAMPLE) 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c "import memwarden, pytest, aiosqlite, memwarden_sensor_example" || { echo "install failed" >&2; exit 1; }
	@rm -f $(VENV)/.installed-*
	@touch $@

system-deps:
	@bash scripts/system-deps.sh

# `make run VENV=/other/venv SKIP_INSTALL=1` runs an existing installation as it is, without
# installing into it (the fresh-clone acceptance test does this with the suite's own venv).
run: $(if $(SKIP_INSTALL),,$(STAMP))
	$(VENV)/bin/memwarden run --config memwarden.toml

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks examples
	$(VENV)/bin/ruff check --fix src tests benchmarks examples

test: $(STAMP) system-deps lint
	PY=$(PY) bash scripts/test-streams.sh

bench: $(STAMP)
	$(PY) -m benchmarks $(BENCH)

clean:
	rm -rf $(VENV) .bench .coverage* coverage.xml .memwarden .mypy_cache .ruff_cache
