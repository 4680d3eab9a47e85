# The two commands of the README: `make run` and `make test`. Both install what is missing.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench system-deps install

run: install
	$(PY) manage.py runplatform

test: install
	$(PY) -m ruff check .
	$(PY) -m pytest

install: system-deps $(STAMP)

system-deps:
	@./scripts/install-system-deps.sh

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | { grep -v "is ignored" || true; }
	$(PY) -m pip install -q -e '.[test]' 2>&1 | { grep -v "is ignored" || true; }
	touch $(STAMP)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: install
	$(PY) -m bench.compare
