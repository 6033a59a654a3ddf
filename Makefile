# Two entry points that work on a fresh machine (each creates .venv if missing).
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $(STAMP)

.PHONY: setup test lint ablation
setup: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests validation benchmarks
	$(VENV)/bin/ruff format --check src tests validation benchmarks

test: $(STAMP) lint
	$(VENV)/bin/python -m pytest -q

ablation: $(STAMP)
	$(VENV)/bin/python validation/tools/pim/ablation/run_ablation.py --jobs 2
