# Learn torch.compile: build the site, test it.
#
#   make html                    build the whole site, executing every tutorial (GPU if present)
#   make test                    run the test suite
#   make test-all                the test suite and the tests marked slow (every notebook on a kernel)
#   make html-noplot             build without executing anything (fast; for prose and layout)
#   make html-one PATTERN=foreach  execute only the tutorials whose path matches PATTERN (one that
#                                matches none stops at once, naming the tutorials)
#   make html JOBS=2             execute two tutorials at a time (faster on a CPU, but their
#                                printed timings then share the machine; the tests use it)
#   make html SHARD=2/3          execute only shard 2 of 3 (python -m tools.shard -n 3 prints the plan)
#   make merge SHARDS="a b c"    one site in $(BUILDDIR)/html from the shard outputs a, b, c
#   make serve                   serve _build/html on http://127.0.0.1:$(PORT)
#   make wheelhouse              download the non-torch dependencies as wheels (offline builders)
#   make verify TORCH=2.9.1      run every tutorial as a reader's script on that PyTorch (its own
#                                venv in .verify/); the run records go to records/ (PATTERN=,
#                                FIND_LINKS=dir, INDEX_URL=url, TORCHVISION=version)
#   make records                 copy this build's run records ($(BUILDDIR)/html) into records/
#   make clean                   remove the built site (keeps the venv and the compile cache)
#
# PYTHON=/path/to/python uses an environment you already have instead of .venv.
# WHEELHOUSE=dir installs from that folder of wheels, offline.

SHELL := /bin/bash
VENV ?= .venv
BUILDDIR ?= _build
SPHINXOPTS ?= -W --keep-going
PORT ?= 8000
PATTERN ?=
JOBS ?= 1
export GALLERY_JOBS := $(JOBS)
SHARD ?=
SHARDS ?=
PYTEST_ARGS ?= tests
WHEELHOUSE ?=
WHEEL_PYTHON_VERSION ?= 3.12
WHEEL_PLATFORM ?= manylinux_2_28_x86_64

ifeq ($(strip $(WHEELHOUSE)),)
PIP_SOURCE :=
else
PIP_SOURCE := --no-index --find-links $(abspath $(WHEELHOUSE))
endif

ifeq ($(strip $(PYTHON)),)
PY := $(VENV)/bin/python
ENV_READY := $(VENV)/.requirements.txt
TEST_ENV_READY := $(VENV)/.requirements-test.txt
else
PY := $(PYTHON)
ENV_READY := $(if $(strip $(WHEELHOUSE)),install-into-python,)
TEST_ENV_READY :=
endif

# A project-local compile cache: a rebuild reuses the kernels of the last one.
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.cache/inductor
export TRITON_CACHE_DIR ?= $(CURDIR)/.cache/triton
export MPLBACKEND ?= Agg
# Each checkout's builds get their own temp folder. Inductor keeps files outside its cache
# folder in the system temp folder (precompiled headers under <temp>/torchinductor_<user>,
# whatever TORCHINDUCTOR_CACHE_DIR says), so two builds on one machine sharing /tmp broke
# each other. A TMPDIR from the environment is not used on purpose: it is usually shared by
# every process of the user too. BUILD_TMPDIR=... picks another folder.
BUILD_TMPDIR ?= $(CURDIR)/.tmp
export TMPDIR := $(abspath $(BUILD_TMPDIR))
$(shell mkdir -p "$(TMPDIR)")

SPHINX := $(PY) -m sphinx
AXE_JS := tests/node_modules/axe-core/axe.min.js

.PHONY: html html-noplot html-one serve test test-all axe clean wheelhouse venv install-into-python merge verify records

html: $(ENV_READY)
ifeq ($(strip $(SHARD)),)
	$(SPHINX) -b html $(SPHINXOPTS) . $(BUILDDIR)/html
	$(PY) -m tools.validate $(BUILDDIR)/html
	@echo "The site is in $(BUILDDIR)/html: open $(BUILDDIR)/html/index.html or run 'make serve'."
else
# One shard of a sharded build (from a clean checkout, as CI does: tutorials executed by an
# earlier build here would count as executed by this shard too). The planner's regex selects
# the shard's tutorials for sphinx-gallery and for the validator alike.
	pattern="$$($(PY) -m tools.shard --shard '$(SHARD)' --pattern)" || exit 1; \
	echo "Shard $(SHARD) executes the tutorials matching $$pattern"; \
	GALLERY_PATTERN="$$pattern" $(SPHINX) -b html $(SPHINXOPTS) . $(BUILDDIR)/html && \
	$(PY) -m tools.validate $(BUILDDIR)/html --pattern "$$pattern"
	$(PY) -m tools.merge --save $(BUILDDIR)/shard
	@echo "Built shard $(SHARD); its output is $(BUILDDIR)/shard (make merge SHARDS=\"...\" combines them)."
endif

html-noplot: $(ENV_READY)
	$(SPHINX) -b html $(SPHINXOPTS) -D plot_gallery=0 . $(BUILDDIR)/html
	@echo "Built without executing the tutorials: $(BUILDDIR)/html/index.html"

# The pattern reaches the shell through the environment (no quoting of its characters), and
# is checked before Sphinx starts: one that is not a regex or matches no tutorial stops here
# with one line naming the tutorials (python -m tools.shard --match).
html-one: export GALLERY_PATTERN = $(PATTERN)
html-one: $(ENV_READY)
	@test -n "$$GALLERY_PATTERN" || { echo "usage: make html-one PATTERN=<part of a tutorial's file name>"; exit 2; }
	@$(PY) -m tools.shard --match "$$GALLERY_PATTERN"
	$(SPHINX) -b html $(SPHINXOPTS) . $(BUILDDIR)/html
	$(PY) -m tools.validate $(BUILDDIR)/html --pattern "$$GALLERY_PATTERN"
	@echo "Built; executed the tutorials matching '$$GALLERY_PATTERN': $(BUILDDIR)/html/index.html"

merge: $(ENV_READY)
	@test -n "$(SHARDS)" || { echo "usage: make merge SHARDS=\"<shard output> ...\" (each written by make html SHARD=i/N)"; exit 2; }
	$(PY) -m tools.merge $(SHARDS) --out $(BUILDDIR)/html --sphinxopts "$(SPHINXOPTS)"
	@echo "The merged site is in $(BUILDDIR)/html."

serve:
	@test -f $(BUILDDIR)/html/index.html || { echo "Nothing built yet: run 'make html' first."; exit 2; }
	@echo "Serving http://127.0.0.1:$(PORT)/ (Ctrl-C stops)"
	python3 -m http.server --bind 127.0.0.1 --directory $(BUILDDIR)/html $(PORT)

test: $(ENV_READY) $(TEST_ENV_READY) axe
	$(PY) -m pytest $(PYTEST_ARGS)

# The tests marked slow too (every notebook on a kernel, not one per gallery): GitHub's test
# workflow runs this; .ci/run runs `make test`.
test-all: $(ENV_READY) $(TEST_ENV_READY) axe
	$(PY) -m pytest $(PYTEST_ARGS) -m "slow or not slow"

venv: $(ENV_READY)

# axe-core for the accessibility tests, at the version tests/package-lock.json pins (into
# tests/node_modules/, git-ignored). Without npm they are skipped here, and fail under
# .ci/run (which installs npm) and on GitHub.
axe: $(AXE_JS)
$(AXE_JS): tests/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tests --no-audit --no-fund; \
	else echo "npm not found: the accessibility tests will skip (fail under .ci/run); install npm to run them"; fi

# The venv is rebuilt when requirements.txt changes: the stamp is a copy of it.
# requirements-docs.txt, included by it, applies constraints-docs.txt's pinned versions.
$(VENV)/.requirements.txt: requirements.txt requirements-docs.txt constraints-docs.txt
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(PIP_SOURCE) -r requirements.txt
	cp requirements.txt $@

$(VENV)/.requirements-test.txt: requirements-test.txt $(VENV)/.requirements.txt
	$(VENV)/bin/python -m pip install $(PIP_SOURCE) -r requirements-test.txt
	cp requirements-test.txt $@

# PYTHON=... with WHEELHOUSE=...: complete that environment from the wheels (offline).
install-into-python:
	$(PY) -m pip install $(PIP_SOURCE) -r requirements.txt

# tools.verify needs only the standard library; it makes its own venvs from this Python.
VERIFY_PY := $(or $(strip $(PYTHON)),python3)
TORCH ?=
TORCHVISION ?=
FIND_LINKS ?=
INDEX_URL ?=

verify:
	@test -n "$(TORCH)" || { echo "usage: make verify TORCH=2.9.1 (or nightly) [PATTERN=regex] [FIND_LINKS=dir] [INDEX_URL=url]"; exit 2; }
	$(VERIFY_PY) -m tools.verify --torch '$(TORCH)' $(if $(PATTERN),--pattern '$(PATTERN)') \
	  $(if $(TORCHVISION),--torchvision '$(TORCHVISION)') $(if $(FIND_LINKS),--find-links '$(FIND_LINKS)') \
	  $(if $(INDEX_URL),--index-url '$(INDEX_URL)')

records:
	$(VERIFY_PY) -m tools.verify --from-build $(BUILDDIR)/html

wheelhouse:
	$(PY) -m tools.wheelhouse --dest wheelhouse --python-version $(WHEEL_PYTHON_VERSION) --platform $(WHEEL_PLATFORM)

clean:
	rm -rf $(BUILDDIR) recipes intermediate sg_execution_times.rst
