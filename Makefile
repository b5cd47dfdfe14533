# gpusched: `make demo` runs the simulator on its built-in cluster, `make test` runs lint, types, layering, the
# test suite and the end-to-end suite on a real API server (tests/e2e/run.sh says why when it has to skip that).
# Both install into a local virtualenv (.venv) first; only python3 (>= 3.11) is needed, and Go for the e2e
# control plane the first time (docs/e2e.md). `make image` builds the operator's container image with docker.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

DOCKER ?= docker
IMAGE ?= gpusched:dev
# The Dockerfile's base image (both stages); pin it by digest for an image you ship, e.g.
# PYTHON_IMAGE=python:3.11-slim@sha256:<the digest `docker buildx imagetools inspect python:3.11-slim` prints>.
PYTHON_IMAGE ?=

.PHONY: install demo test lint unit e2e e2e-older conformance bench image clean

# pip is quiet (its output is long); these lines say what is happening. The first install downloads numba,
# llvmlite, numpy, matplotlib (the plots extra), the Kubernetes client, mypy and ruff: about 90 s on the project's machine.
$(STAMP): pyproject.toml
	@echo "install: creating the virtualenv $(VENV) with $$($(PYTHON) --version 2>&1)"
	@$(PYTHON) -m venv $(VENV)
	@echo "install: upgrading pip"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "install: installing gpusched and its dev tools into $(VENV) (about 90 s and 635 MB the first time;" \
	  "pip's own messages are off)"
	@$(BIN)/python -m pip install --quiet -e '.[dev,plots]'
	@touch $(STAMP)
	@echo "install: done, $(VENV) takes $$(du -sh $(VENV) | cut -f1)"

install: $(STAMP)

demo: install
	$(BIN)/gpusched simulate

lint: install
	$(BIN)/ruff check scheduler tests benchmarks
	$(BIN)/ruff format --check scheduler tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: install
	$(BIN)/python -m pytest -q --ignore=tests/e2e $(PYTEST_ARGS)

e2e: install
	PYTHON=$(BIN)/python tests/e2e/run.sh $(PYTEST_ARGS)

test: lint unit e2e

# tests/e2e/test_versions_e2e.py on an older Kubernetes minor too (1.33's kube-apiserver, pinned in
# tests/e2e/controlplane-older/): builds that binary first when it is not cached (docs/e2e.md, "An older Kubernetes
# minor", gives the build time), and fails rather than skips without it.
e2e-older: install
	bin="$$(tests/e2e/build-controlplane.sh older)" && GPUSCHED_E2E_OLDER_APISERVER="$$bin/kube-apiserver" \
	  GPUSCHED_E2E_OLDER=1 PYTHON=$(BIN)/python tests/e2e/run.sh tests/e2e/test_versions_e2e.py $(PYTEST_ARGS)

# Kubernetes' own [sig-scheduling] e2e tests against kube-scheduler and against gpusched on identical local clusters;
# builds e2e.test (tests/conformance/build-e2e.sh) and the control plane when they are not cached, and rewrites
# docs/conformance.md. make test runs a fast subset of it (tests/e2e/test_conformance_e2e.py).
conformance: install
	$(BIN)/python -m tests.conformance.run $(CONFORMANCE_ARGS)

bench: install
	$(BIN)/gpusched bench kernels

# The operator's image (Dockerfile): manifests/ run it as ghcr.io/gpusched/gpusched, which is not published; push
# it where your cluster pulls from and set it in an overlay with
# `kustomize edit set image ghcr.io/gpusched/gpusched=REGISTRY/gpusched:TAG` (examples/registry-overlay).
image:
	@command -v $(DOCKER) >/dev/null 2>&1 || { \
	  echo "make image: '$(DOCKER)' is not on the PATH: install Docker (or run with DOCKER=podman)" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { \
	  echo "make image: $(DOCKER) cannot reach its daemon ('$(DOCKER) info' fails): start Docker and try again" >&2; \
	  exit 1; }
	@echo "image: building $(IMAGE) from Dockerfile (it downloads $(or $(PYTHON_IMAGE),python:3.11-slim) and the" \
	  "wheels pinned in requirements.lock, then compiles the numba kernels into the image)"
	$(DOCKER) build $(if $(PYTHON_IMAGE),--build-arg PYTHON_IMAGE=$(PYTHON_IMAGE)) -t $(IMAGE) .
	@echo "image: built $(IMAGE). Next: $(DOCKER) tag $(IMAGE) REGISTRY/gpusched:TAG && $(DOCKER) push" \
	  "REGISTRY/gpusched:TAG (or: kind load docker-image $(IMAGE)), then in an overlay of manifests/:" \
	  "kustomize edit set image ghcr.io/gpusched/gpusched=REGISTRY/gpusched:TAG (examples/registry-overlay)"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
