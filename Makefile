# Everyday verbs. `make run` and `make test` work on a fresh machine with only Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck migrations-check clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# make runs this recipe without a shell, and on SIGINT waits for it without forwarding the signal:
# run_platform watches for that (demo/supervisor.py ParentWatch) and stops everything. RUN_ARGS:
# e.g. `make run RUN_ARGS="--no-demo --port 8080"`.
RUN_ARGS ?=
run: $(STAMP)
	$(PY) manage.py run_platform $(RUN_ARGS)

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=platform $(VENV)/bin/lint-imports --no-cache   # contracts in .importlinter

migrations-check: $(STAMP)
	$(PY) manage.py makemigrations --check --dry-run

typecheck: $(STAMP)
	$(VENV)/bin/mypy platform workers
	cd clients/python && $(abspath $(VENV))/bin/mypy src   # the client's own strict config (Python 3.10)

clean:
	rm -rf var
