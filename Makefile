# The two commands of the README: `make run` and `make test`. Both install what is missing.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# checkov (the `scan` extra) lives apart: its pinned dependencies clash with the platform's.
SCAN_VENV := .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed

.PHONY: run test lint bench system-deps install install-scan

# Ports and settings come from the environment, or `make run VAR=value` (docs/guides/operating.md):
# WEB_PORT, MQTT_PORT, MQTT_WS_PORT, MQTT_TLS_PORT, MQTT_WSS_PORT, METRICS_PORT,
# RULES_METRICS_PORT, BIND_HOST, LOG_LEVEL, LOG_FORMAT.
# `exec`: the shell gives way to the supervisor, so that make's child is the supervisor itself
# (what make signals on SIGTERM). A SIGINT or SIGTERM sent to make alone (not through the
# terminal) stops everything as Ctrl-C does: runplatform watches make (its parent) and stops
# when make starts dying or is gone (control_plane/management/commands/runplatform.py).
run: install
	@exec $(PY) manage.py runplatform

# The suite runs on TEST_WORKERS processes (pytest-xdist, each with its own Spark session);
# TEST_WORKERS=0 runs it in this process. Three on a 2-core machine: most tests wait (on a
# broker, a subprocess, a Spark job) more than they compute; with two the cores idled 2/3 of the
# run (user+sys 24 of 69 core-minutes), with three the parallel part took 22 min instead of 25.5. Tests marked `serial` (they stop the shared Postgres,
# or measure latency) run afterwards, alone. `--dist worksteal`: a worker that runs out takes
# tests queued at the other (with `load` one could idle while the other still had a queue of
# slow ones). Not `--dist loadgroup`/`loadscope`: they schedule by node id, and schemathesis'
# operations share one, so all but one of them silently never ran. The end-to-end suite
# (tests/e2e, marked `e2e`: the platform as `make run` starts it, once) runs last, in a run of
# its own: its platform lives for the whole pytest session, and must not load the machine while
# the `serial` tests measure latency.
# The import contracts and the type checker run inside the suite (tests/test_boundaries.py,
# tests/test_types.py), beside the other tests, not before them. Bytecode is written (whatever
# PYTHONDONTWRITEBYTECODE the shell has): the suite starts hundreds of Python processes (brokers,
# `manage.py`, Spark's Python workers, pytest's own), each would compile the project again.
TEST_WORKERS ?= 3
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

test: install install-scan
	$(PY) -m ruff check .
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal -m "not serial and not e2e" --durations=30
	$(PYTEST) -m serial --durations=10
	$(PYTEST) tests/e2e -m e2e --durations=10

# What `make run` needs. The scanners' virtualenv (checkov) only `make test` uses.
install: system-deps $(STAMP)

install-scan: system-deps $(SCAN_STAMP)

system-deps:
	@./scripts/install-system-deps.sh

# Progress is shown; pip's full output goes to $(VENV)/pip-install.log.
# setup.py builds the C recorder (data_plane/storage/_recorder.c): a change there reinstalls.
$(STAMP): pyproject.toml setup.py data_plane/storage/_recorder.c
	@PYTHON=$(PYTHON) ./scripts/install-python-deps.sh $(VENV) -e '.[test]'
	@touch $(STAMP)

$(SCAN_STAMP): pyproject.toml
	@test -x $(SCAN_VENV)/bin/python || $(PYTHON) -m venv $(SCAN_VENV)
	@$(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["scan"]))' > $(SCAN_VENV)/requirements.txt
	@PYTHON=$(PYTHON) ./scripts/install-python-deps.sh $(SCAN_VENV) -r $(SCAN_VENV)/requirements.txt
	@touch $(SCAN_STAMP)

lint: install
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy
	$(PY) -m ruff format --check .

bench: install
	$(PY) -m bench.compare
