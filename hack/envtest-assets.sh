#!/usr/bin/env bash
# Build (once) the control plane binaries gpuctrl.testing.ControlPlane runs: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of one Kubernetes release,
# from Go modules, into ~/.cache/gpuctrl/envtest/<release>/ (see gpuctrl/testing/envtest.py).
# GPUCTRL_K8S_VERSION picks the release; prints the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m gpuctrl.testing.envtest "$@"
