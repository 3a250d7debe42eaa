# Twinkle developer commands. `make demo` and `make test` each set up .venv on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CACHE := $(CURDIR)/.cache
STAMP := $(VENV)/.twinkle-installed
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
CONSTRAINTS := requirements/constraints.txt
PLUGINS := twinkle-vision[yolo] twinkle-timeseries[data] twinkle-audio[quality] twinkle-edge twinkle-llm[qlora,gguf]

# Every library's caches and config stay inside the repository, and nothing reaches the network.
export XDG_CACHE_HOME := $(CACHE)/xdg
export MPLCONFIGDIR := $(CACHE)/matplotlib
export TORCH_HOME := $(CACHE)/torch
export TORCH_EXTENSIONS_DIR := $(CACHE)/torch_extensions
export HF_HOME := $(CACHE)/huggingface
export HF_HUB_OFFLINE := 1
export YOLO_CONFIG_DIR := $(CACHE)/ultralytics
export YOLO_OFFLINE := 1
export YOLO_AUTOINSTALL := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

UV := $(BIN)/uv
export UV_CACHE_DIR := $(CACHE)/uv
# uv installs (one unpacked copy of torch in .cache/uv, linked into every venv; bytecode compiled at install, as
# pip does: with PYTHONDONTWRITEBYTECODE set, as in CI, every process would compile torch again); pip's config
# says where from
UV_INSTALL = $(UV) pip install -q --python $(BIN)/python --link-mode hardlink --compile-bytecode $$($(PYTHON) tools/uv_sources.py)

.PHONY: setup install system demo test docs dist journeys bench lock clean

install: $(STAMP)

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml) $(CONSTRAINTS) requirements/tinker-cookbook.txt \
  tools/platform_wheels.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c $(CONSTRAINTS) uv
	$(UV_INSTALL) -c $(CONSTRAINTS) $(TORCH_PINS) -e '.[test,docs,release,tinker,bench,trackers]' $(foreach p,$(PLUGINS),-e 'plugins/$(p)')
	$(BIN)/python tools/platform_wheels.py --python $(BIN)/python --uv $(UV)  # a wheel that bundles its library (soundfile's libsndfile) over a pure one
	$(UV) pip check --python $(BIN)/python
	$(BIN)/python tools/offline_setup.py
	$(BIN)/twinkle edge setup --installer uv  # rknn-toolkit2's converter venv, inside .venv (about 630 MB; found when activated)
	$(UV) pip install -q --python $(BIN)/python --no-deps --target $(VENV)/share/twinkle/tinker-cookbook \
	  $$($(PYTHON) tools/uv_sources.py) -r requirements/tinker-cookbook.txt  # the Tinker test's client (see the file)
	touch $@

# One set-up for both commands: the venv and Debian's packages side by side (each mostly waits on the network and
# the disk). `make demo` and `make test` both run it, so everything the documentation uses works after either.
setup:
	@$(MAKE) --no-print-directory -j2 --output-sync=target install system

demo: setup
	TWINKLE_HOME=$${TWINKLE_HOME:-$(CACHE)/twinkle-home} OMP_NUM_THREADS=1 $(BIN)/python examples/demo.py

# Debian's packages: espeak-ng (MelOTTS's phonemes for words the CMU dictionary lacks, and the guides' generated
# speech) and chromium (the dashboard's browser test, through Playwright). As root, or through sudo.
DEBIAN_PACKAGES := espeak-ng chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
system:
	@command -v chromium >/dev/null && command -v espeak-ng >/dev/null || { \
	  if [ -n "$(SUDO)" ] && ! command -v sudo >/dev/null; then \
	    echo "make needs Debian's $(DEBIAN_PACKAGES): run 'apt-get install $(DEBIAN_PACKAGES)' as root" >&2; exit 1; fi; \
	  echo "Installing Debian's $(DEBIAN_PACKAGES)"; $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEBIAN_PACKAGES) >/dev/null; }

# The set-up (`make setup`, as for the demo), then the whole suite on both cores (tools/suite.py): core's suite against the editable install, the documentation
# site, each plugin's suite against its wheel (make journeys); it ends with one line of counts and times and writes
# artifacts/test-times.json (the suite's budget: 25 minutes on 2 cores from a fresh clone).
test:
	@started=$$(date +%s.%N); $(MAKE) --no-print-directory setup && \
	  $(BIN)/python tools/suite.py --started $$started --set-up-done $$(date +%s.%N)

# The documentation site, built strictly (a broken link or reference fails); the CLI reference is generated.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir $(CACHE)/site

# Wheels and sdists of the five distributions in dist/, checked by twine.
dist: $(STAMP)
	rm -rf dist && mkdir -p dist
	for project in . $(foreach p,$(PLUGINS),plugins/$(firstword $(subst [, ,$(p)))); do \
	  $(UV) build -q $$($(PYTHON) tools/uv_sources.py) --out-dir dist $$project || exit 1; done
	$(BIN)/twine check --strict dist/*

# Every plugin (and a 'twinkle plugins new' project) in a fresh venv from dist/: its journey, then its tests.
journeys: dist system
	$(BIN)/python tools/wheel_journeys.py

bench: $(STAMP)
	$(BIN)/python bench/cli_startup.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/overhead.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/tune_vs_random.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/data_throughput.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/resnet_digits.py
	OMP_NUM_THREADS=1 $(BIN)/python bench/rl_grpo.py

# Re-pin every third-party version after changing a dependency (then commit the constraints file).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^twinkle' > $(CONSTRAINTS)

clean:
	rm -rf $(VENV) $(CACHE) dist
