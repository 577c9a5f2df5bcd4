#!/usr/bin/env bash
# Install gpuctrl with its Helm chart into a kind cluster, as a user with Docker would, and wait
# for the ClusterPolicy to be ready. Needs docker, kind, kubectl and helm on PATH; not run by
# `make test` (no container engine there).
#
# Without GPUs: the driver, toolkit and device plugin are disabled, and no node carries NFD's
# NVIDIA PCI label, so the validator (whose checks need a GPU and cannot be skipped yet) runs
# nowhere and the policy is ready with reason NoGPUNodes. What this proves: the image builds
# and starts, the chart installs on a current Kubernetes, both components run under their own
# accounts, the webhook's certificates work through a real Service, and the uninstall is clean.
#
#   hack/kind-e2e.sh            # KEEP_CLUSTER=1 keeps the cluster afterwards
set -euo pipefail
cd "$(dirname "$0")/.."
cluster="${KIND_CLUSTER:-gpuctrl-e2e}"
version="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')"
image="ghcr.io/gpuctrl/gpuctrl:${version}"
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is not installed" >&2; exit 2; }
done

docker build -t "$image" .
kind create cluster --name "$cluster" --wait 120s
[ "${KEEP_CLUSTER:-}" = 1 ] || trap 'kind delete cluster --name "$cluster"' EXIT
kind load docker-image "$image" --name "$cluster"
context="kind-$cluster"

helm install gpuctrl config/helm/gpuctrl --kube-context "$context" -n gpuctrl --create-namespace \
  --set driver.enabled=false --set toolkit.enabled=false --set devicePlugin.enabled=false \
  --wait --timeout 5m
kubectl --context "$context" -n gpuctrl rollout status deployment/gpuctrl-manager --timeout=180s
kubectl --context "$context" -n gpuctrl rollout status deployment/gpuctrl-webhook --timeout=180s
kubectl --context "$context" wait clusterpolicy/gpu-cluster-policy \
  --for=condition=Ready --timeout=300s
kubectl --context "$context" get clusterpolicies

# Uninstall: the policy first, then the release; only the CRDs (Helm keeps them) remain.
kubectl --context "$context" delete clusterpolicy gpu-cluster-policy --wait
helm uninstall gpuctrl --kube-context "$context" -n gpuctrl --wait
left="$(kubectl --context "$context" get all,roles,rolebindings,clusterroles,clusterrolebindings,mutatingwebhookconfigurations \
  -A -l app.kubernetes.io/part-of=gpuctrl -o name)"
[ -z "$left" ] || { echo "kind-e2e: left behind:" >&2; echo "$left" >&2; exit 1; }
echo "kind-e2e: passed"
