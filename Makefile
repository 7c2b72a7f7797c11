# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo lint test unit cluster bench chaos clean slurm chromium native

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,estimator,ray,lint,ui]'
	touch $(STAMP)

demo: $(STAMP) native
	$(BIN)/tfdist demo

# tfdist's native kernels (strategies/_native), compiled against the venv's TensorFlow into ~/.cache/tfdist/native
# (about 10 s, once per TensorFlow version). Needs a C++ compiler: g++ is installed as root when missing; without
# one, TensorFlow's own kernels run and the native kernels' tests skip, saying why.
native: $(STAMP)
	@if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null && [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null; fi
	$(BIN)/python -m strategies._native

# Lint and types first (rules and packages in pyproject.toml), so a CI run fails in seconds on them.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two pytest workers: cluster tests spend much of their time waiting on their processes, so two of
# them overlap well even on two cores. Tests sharing a module fixture are grouped (xdist_group).
test: lint slurm chromium native
	$(BIN)/python -m pytest tests -n 2 --dist loadgroup --durations=25

# Debian's Slurm (slurmctld, slurmd, the clients) for the Slurm cluster tests, which start a real
# cluster in a fixture. Installed only as root and only when missing; elsewhere those tests skip and say why.
slurm:
	@if command -v slurmctld >/dev/null && command -v sbatch >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null; \
	else echo "slurm: not root or no apt-get; the Slurm cluster tests will be skipped"; fi

# Debian's headless Chromium and its WebDriver for the dashboard's browser test (tests/unit/test_ui_browser.py).
# Installed only as root and only when missing; elsewhere that test skips and says why.
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "chromium: not root or no apt-get; the dashboard's browser test will be skipped"; fi

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
