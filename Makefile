# Tide: the commands a developer and CI run. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: help venv run test coverage test-fast lint typecheck layers bench soak demo clean

help:
	@echo "make run    - create .venv, install, start the service with the dashboard (embedded defaults)"
	@echo "make test   - create .venv if needed, install test extras, lint, typecheck, run the whole suite"
	@echo "make coverage - the whole suite with a line coverage report (slower)"
	@echo "make lint   - ruff check + format check, mypy strict, import-linter, the client's copies of the API's answers"
	@echo "make bench  - benchmarks that print tables (bench/pollux.py: Pollux's workloads, Tide vs Tiresias)"
	@echo "make soak   - an hour of churn and faults on each executor, then an audit that nothing was lost"
	@echo "make demo   - the seed scenario with real torchrun training on 4 virtual GPUs; prints a timeline, draws a chart"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/tide serve --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check scheduler api tests bench
	$(VENV)/bin/ruff format --check scheduler api tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m api.server.mirrors

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

coverage: $(STAMP)
	$(PY) -m pytest --cov --cov-report=term-missing:skip-covered $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -x -q -m "not slow" $(PYTEST_ARGS)

soak: $(STAMP)
	$(PY) bench/soak.py --minutes 60

demo: $(STAMP)
	$(PY) deploy/examples/demo.py

bench: $(STAMP)
	$(PY) bench/cycle.py
	$(PY) bench/resize.py
	$(PY) bench/api_load.py
	$(PY) bench/cli_start.py
	$(PY) bench/live_scale.py
	$(PY) bench/live_cycle.py
	$(PY) bench/pollux.py
	$(PY) bench/churn.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .coverage
