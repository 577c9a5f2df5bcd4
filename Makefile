# gpuctrl: `make run` runs the operator, `make test` runs every test. Both set up what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HELM_STAMP := $(VENV)/.installed-helm
RUN_SESSION := .run/make-session
# Debian packages `make run` needs: bubblewrap sandboxes the simulated kubelet's
# process-backed containers (the toolkit and validator agents run for real).
RUN_DEBIAN_PACKAGES := bubblewrap
# ... and those the tests also talk to for real (containerd's parser and daemon; dnf's and
# zypper's parsers of .repo files).
TEST_DEBIAN_PACKAGES := $(RUN_DEBIAN_PACKAGES) containerd dpkg-dev gnupg apt-utils python3-dnf zypper
# `make test` runs the tests in two processes (pytest-xdist), each test module in one of them
# (module-scoped clusters stay whole); TEST_WORKERS= runs them in one.
TEST_WORKERS ?= -n 2 --dist loadscope
# When make started (read once, as it reads this file): make test prints its wall time.
MAKE_STARTED := $(shell date +%s)

.PHONY: help run test lint unit integration e2e bench manifests envtest test-deps clean

# The first target: `make` alone prints the targets, each with its `##` line.
help:
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## /  \1\t/' | expand -t 14

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || bash hack/install-debian-packages.sh python3 python3-venv
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The Helm engine for the chart tests (helm-python-sdk, large): installed by `make test` only.
$(HELM_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,helm]'
	touch $(HELM_STAMP)

# The control plane (Kubernetes from Go modules; GPUCTRL_K8S_VERSION picks the release).
envtest: $(STAMP) ## build the local control plane (Kubernetes from Go modules, cached)
	PYTHON=$(BIN)/python bash hack/envtest-assets.sh >/dev/null

test-deps: envtest ## install what the tests talk to (Debian packages, kubectl, containerd)
	bash hack/install-debian-packages.sh $(TEST_DEBIAN_PACKAGES)
	bash hack/kubectl.sh >/dev/null
	bash hack/containerd-versions.sh  # containerd 1.6, 1.7 and 2.1 unpacked for the toolkit's tests

lint: $(STAMP) ## ruff, import contracts and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy gpuctrl api controllers webhooks

test: $(STAMP) $(HELM_STAMP) test-deps lint ## lint, then every test (what CI runs)
	$(BIN)/python -m pytest -q -rfE --durations=20 $(TEST_WORKERS) test/unit test/integration test/e2e; \
	status=$$?; echo "make test: $$(( $$(date +%s) - $(MAKE_STARTED) )) s wall time (set-up and lint included)"; \
	exit $$status

unit: $(STAMP) ## the unit tests only (no control plane)
	$(BIN)/python -m pytest -q test/unit

integration: $(STAMP) test-deps ## the integration tests (a real apiserver)
	$(BIN)/python -m pytest -q test/integration

e2e: $(STAMP) test-deps ## the whole-stack stories
	$(BIN)/python -m pytest -q test/e2e

bench: $(STAMP) test-deps ## the benchmarks (figures in docs/benchmarks.md)
	for bench in test/bench/bench_*.py; do $(BIN)/python $$bench || exit 1; done

manifests: $(STAMP) ## regenerate the CRDs and the chart's generated files from the API models
	$(BIN)/python -m api.crdgen config/crd
	$(BIN)/python -m api.chartgen config

run: $(RUN_SESSION) ## the operator and webhook on a local control plane with simulated GPU nodes

# With KUBECONFIG set, run against that cluster: no local control plane to build. The target
# is a file hack/run.py writes as it starts and watches: make forwards SIGTERM to its child
# but only waits on SIGINT, deleting the target file of the recipe it runs ("Deleting file"),
# which hack/run.py takes as its stop. So a SIGINT to make itself stops everything too.
$(RUN_SESSION): $(STAMP) FORCE
	[ -n "$$KUBECONFIG" ] || bash hack/install-debian-packages.sh $(RUN_DEBIAN_PACKAGES)
	[ -n "$$KUBECONFIG" ] || PYTHON=$(BIN)/python bash hack/envtest-assets.sh >/dev/null
	GPUCTRL_MAKE_SESSION=$@ $(BIN)/python hack/run.py

# Always out of date (no file of that name): make runs the recipe of what depends on it.
FORCE:

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
