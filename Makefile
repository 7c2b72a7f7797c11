# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo lint test unit cluster bench chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,estimator,ray,lint]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfdist demo

# Lint and types first (rules and packages in pyproject.toml), so a CI run fails in seconds on them.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two pytest workers: cluster tests spend much of their time waiting on their processes, so two of
# them overlap well even on two cores. Tests sharing a module fixture are grouped (xdist_group).
test: lint
	$(BIN)/python -m pytest tests -n 2 --dist loadgroup --durations=25

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

cluster: $(STAMP)
	$(BIN)/python -m pytest tests -m cluster

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# Fault injection: kills tasks of a running job (CHAOS_ARGS="--runs 10 --seed 1" to change it).
chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
