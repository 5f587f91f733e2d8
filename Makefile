# Two commands on a fresh machine with python3, pip and make:
#   make demo   — three throw-away clusters on loopback federate real jobs, then shut down
#   make test   — the whole test suite
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
export UV_PYTHON := $(shell command -v $(PYTHON))

.PHONY: demo test lint bench env proto clean

$(VENV)/.synced: pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || [ -x "$(UV)" ] || $(PYTHON) -m pip install --quiet --user uv || $(PYTHON) -m pip install --quiet uv
	@UV=$$(command -v uv || echo $(HOME)/.local/bin/uv); $$UV sync --frozen --quiet
	@touch $@

env: $(VENV)/.synced

demo: env
	$(VENV)/bin/iris demo

lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(VENV)/bin/pytest -n 2 -q

bench: env
	$(VENV)/bin/python bench/submit.py
	$(VENV)/bin/python bench/scheduler.py
	$(VENV)/bin/python bench/federation_placement.py
	$(VENV)/bin/python bench/dashboard.py

proto: env
	$(VENV)/bin/python scripts/gen_proto.py

clean:
	rm -rf $(VENV)
