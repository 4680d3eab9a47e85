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

.PHONY: run test lint bench system-deps install

run: install
	$(PY) manage.py runplatform

test: install
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-logo
	$(PY) -m pytest

install: system-deps $(STAMP) $(SCAN_STAMP)

system-deps:
	@./scripts/install-system-deps.sh

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | { grep -v "is ignored" || true; }
	$(PY) -m pip install -q -e '.[test]' 2>&1 | { grep -v "is ignored" || true; }
	touch $(STAMP)

$(SCAN_STAMP): pyproject.toml
	test -x $(SCAN_VENV)/bin/python || $(PYTHON) -m venv $(SCAN_VENV)
	$(PYTHON) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["scan"]))' > $(SCAN_VENV)/requirements.txt
	$(SCAN_VENV)/bin/python -m pip install -q -r $(SCAN_VENV)/requirements.txt 2>&1 | { grep -v "is ignored" || true; }
	touch $(SCAN_STAMP)

lint: install
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-logo
	$(PY) -m ruff format --check .

bench: install
	$(PY) -m bench.compare
