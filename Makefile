# Two commands on a fresh machine with python3, pip and make:
#   make demo   — three throw-away clusters on loopback federate real jobs, then shut down
#   make test   — lint, format, type and import-layer checks, then the whole test suite
#   make test-fast — the checks and the unit tests only (no controller processes): the inner loop
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
export UV_PYTHON := $(shell command -v $(PYTHON))

.PHONY: demo test test-fast lint bench env bytecode proto clean

$(VENV)/.synced: pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || [ -x "$(UV)" ] || $(PYTHON) -m pip install --quiet --user uv || $(PYTHON) -m pip install --quiet uv
	@UV=$$(command -v uv || echo $(HOME)/.local/bin/uv); $$UV sync --frozen --quiet --compile-bytecode
	@touch $@

env: $(VENV)/.synced

# Where PYTHONDONTWRITEBYTECODE is set, no process caches what it compiles: every controller, worker
# and CLI process a test or the demo starts would compile Iris from source again (about 2 s a start
# on a slow 2-core host). Compiled once here, the cache is read by all of them, and a module changed
# since is compiled afresh in memory as usual.
bytecode: env
	@$(VENV)/bin/python -m compileall -q -j 0 src tests bench >/dev/null

demo: bytecode
	$(VENV)/bin/iris demo

# Each check names the rule a change breaks: ruff its lint code, mypy its error code, lint-imports
# the contract (the layers of DESIGN §2, and the kernels' ban on I/O modules) in pyproject.toml.
lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo

UNIT_TESTS := tests/scheduler tests/federation tests/core tests/auth tests/backends/test_staging.py

# Three workers on two cores: a test spends much of its time waiting on the processes it started
# (a controller's start, a tick, a task's exit), so two workers leave the cores partly idle.
# Set TEST_WORKERS to change it.
TEST_WORKERS ?= 3

test: lint bytecode
	@start=$$(date +%s); $(VENV)/bin/pytest -n $(TEST_WORKERS) -q --durations=15; rc=$$?; \
	echo "make test: the suite took $$(( $$(date +%s) - start ))s"; exit $$rc

test-fast: lint bytecode
	@start=$$(date +%s); $(VENV)/bin/pytest -q $(UNIT_TESTS); rc=$$?; \
	echo "make test-fast: the unit tests took $$(( $$(date +%s) - start ))s"; exit $$rc

bench: env
	$(VENV)/bin/python bench/submit.py
	$(VENV)/bin/python bench/scheduler.py
	$(VENV)/bin/python bench/federation_placement.py
	$(VENV)/bin/python bench/dashboard.py
	$(VENV)/bin/python bench/gpus.py

proto: env
	$(VENV)/bin/python scripts/gen_proto.py

clean:
	rm -rf $(VENV)
