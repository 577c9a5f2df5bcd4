# gpuctrl: `make run` runs the operator, `make test` runs every test. Both set up what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HELM_STAMP := $(VENV)/.installed-helm
# Debian packages `make run` needs: bubblewrap sandboxes the simulated kubelet's
# process-backed containers (the toolkit and validator agents run for real).
RUN_DEBIAN_PACKAGES := bubblewrap
# ... and those the tests also talk to for real (containerd's parser and daemon; dnf's and
# zypper's parsers of .repo files).
TEST_DEBIAN_PACKAGES := $(RUN_DEBIAN_PACKAGES) containerd dpkg-dev gnupg apt-utils python3-dnf zypper

.PHONY: run test lint unit integration e2e bench manifests envtest test-deps clean

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
envtest: $(STAMP)
	PYTHON=$(BIN)/python bash hack/envtest-assets.sh >/dev/null

test-deps: envtest
	bash hack/install-debian-packages.sh $(TEST_DEBIAN_PACKAGES)
	bash hack/kubectl.sh >/dev/null
	bash hack/containerd-versions.sh  # containerd 1.6, 1.7 and 2.1 unpacked for the toolkit's tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy gpuctrl api controllers webhooks

test: $(STAMP) $(HELM_STAMP) test-deps lint
	$(BIN)/python -m pytest -q -rfE --durations=20 test/unit test/integration test/e2e

unit: $(STAMP)
	$(BIN)/python -m pytest -q test/unit

integration: $(STAMP) test-deps
	$(BIN)/python -m pytest -q test/integration

e2e: $(STAMP) test-deps
	$(BIN)/python -m pytest -q test/e2e

bench: $(STAMP) test-deps
	for bench in test/bench/bench_*.py; do $(BIN)/python $$bench || exit 1; done

manifests: $(STAMP)
	$(BIN)/python -m api.crdgen config/crd
	$(BIN)/python -m api.chartgen config

# With KUBECONFIG set, run against that cluster: no local control plane to build.
run: $(STAMP)
	[ -n "$$KUBECONFIG" ] || bash hack/install-debian-packages.sh $(RUN_DEBIAN_PACKAGES)
	[ -n "$$KUBECONFIG" ] || PYTHON=$(BIN)/python bash hack/envtest-assets.sh >/dev/null
	$(BIN)/python hack/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
