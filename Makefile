# Navi — two commands: `make run` (install + migrate + owner + serve) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-postgres install install-test migrate serve bench clean vendor lint run-cluster bytecode pgvector

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt | $(VENV)/bin/activate
	@echo "==> installing Python requirements into $(VENV)"
	$(PY) -m pip install --quiet -r requirements.txt
	@touch $@

$(VENV)/.installed-test: requirements-test.txt $(VENV)/.installed
	@echo "==> installing test requirements"
	$(PY) -m pip install --quiet -r requirements-test.txt
	@touch $@

install: $(VENV)/.installed

# The chat page's browser libraries (marked, DOMPurify, highlight.js) from npm, copied into
# static/vendor/ by package.json's postinstall: served by Django, so the page needs no internet.
static/vendor/.installed: package.json package-lock.json vendor.mjs
	@echo "==> installing the chat page's JS libraries (npm ci)"
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

vendor: static/vendor/.installed

install-test: $(VENV)/.installed-test

migrate: install
	$(PY) manage.py migrate --noinput

# Navi's own modules compiled ahead (up-to-date ones are skipped): a server that cannot write
# __pycache__ (PYTHONDONTWRITEBYTECODE, a read-only checkout) otherwise compiles ~100 modules
# from source at every start, ~0.2 s of its boot (bench/README "boot").
bytecode: install
	@$(PY) -m compileall -q -j 0 agent jobs_app knowledge_app memory_app messaging_app navi_project notify_app routines_app sessions_app tools_app manage.py

# The web server and, beside it, one job worker (NAVI_JOB_WORKERS; navi_project/job_workers.py):
# one process tree, one Ctrl-C.
run: migrate vendor bytecode
	$(PY) manage.py ensure_owner
	@echo "==> Navi on http://$(HOST):$(PORT)/  (admin: http://$(HOST):$(PORT)/admin/, Ctrl-C to stop)"
	$(PY) -m navi_project.serve -b $(HOST) -p $(PORT) navi_project.asgi:application

# Several workers on this machine: Redis, WORKERS daphne processes on PORT+1.., JOB_WORKERS job
# workers (manage.py db_worker), nginx on PORT (navi_project/cluster.py; README "Running several
# workers"). Needs redis-server and nginx.
WORKERS ?= 2
JOB_WORKERS ?= 1
run-cluster: migrate vendor bytecode
	$(PY) manage.py ensure_owner
	$(PY) -m navi_project.cluster --workers $(WORKERS) --job-workers $(JOB_WORKERS) --bind $(HOST) --port $(PORT)

test: install-test vendor bytecode
	$(PY) -m pytest

# The whole suite again on PostgreSQL: against DATABASE_URL when it is set (its user needs
# CREATEDB), else against a throwaway cluster started from this machine's PostgreSQL binaries.
# The browser suite is left out: it drives the page, and the REST, WebSocket and live-server tests
# below it already run every query the page causes on PostgreSQL (CI's time: README "Tests").
test-postgres: install-test vendor
	@if [ -z "$$DATABASE_URL" ]; then $(MAKE) --no-print-directory pgvector || echo "==> pgvector not built: the cluster may have none (knowledge search by meaning untested)"; fi
	$(PY) -m tests.postgres_cluster --ignore=tests/browser

# pgvector for this machine's PostgreSQL, built to run on any x86-64 (deploy/build-pgvector.sh:
# Debian's package when there is one, else Debian's source built without -march=native). Root.
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
pgvector:
	$(SUDO) sh deploy/build-pgvector.sh

lint: install-test
	$(VENV)/bin/ruff check .

# Benchmarks that need a real model (an Ollama or OpenAI-compatible server) are run by hand.
MODEL_BENCHES := bench/agent_eval.py bench/capture_outputs.py bench/real_model_chat.py bench/knowledge.py

bench: install-test vendor
	for b in $(filter-out $(MODEL_BENCHES),$(wildcard bench/[!_]*.py)); do echo "==> $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) staticfiles tests/artifacts node_modules static/vendor
