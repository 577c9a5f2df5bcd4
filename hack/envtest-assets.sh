#!/usr/bin/env bash
# Provide the control plane binaries that gpuctrl.testing.ControlPlane runs:
# etcd (Debian's etcd-server) and kube-apiserver, kube-controller-manager and
# kube-scheduler built from Debian's `kubernetes` source package with Debian's
# golang-go. Binaries already present in the cache are reused.
#
# Cache folder: $GPUCTRL_ENVTEST_ASSETS, default ~/.cache/gpuctrl/envtest/1.20.2
# The machine's apt configuration is never changed: sources are fetched with a
# private deb-src list under the cache folder.
set -euo pipefail

K8S_VERSION=1.20.2
ASSETS="${GPUCTRL_ENVTEST_ASSETS:-$HOME/.cache/gpuctrl/envtest/$K8S_VERSION}"
WORK="$ASSETS/.build"
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler)

step=""
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "envtest-assets: FAILED at step: $step (exit $rc)" >&2; fi' EXIT

say() { step="$1"; echo "envtest-assets: $1"; }

install_packages() {
  "$(dirname "$0")/install-debian-packages.sh" "$@"
}

have_all_binaries() {
  local bin
  for bin in etcd "${KUBE_BINS[@]}"; do
    [ -x "$ASSETS/$bin" ] || return 1
  done
}

mkdir -p "$ASSETS"
if have_all_binaries; then
  echo "envtest-assets: binaries present in $ASSETS"
  exit 0
fi

say "etcd from Debian's etcd-server"
install_packages etcd-server
install -m 0755 /usr/bin/etcd "$ASSETS/etcd"

kube_built=true
for bin in "${KUBE_BINS[@]}"; do [ -x "$ASSETS/$bin" ] || kube_built=false; done
if $kube_built; then
  echo "envtest-assets: Kubernetes binaries present in $ASSETS"
  exit 0
fi

say "build tools (golang-go, rsync, jq, reflect2 sources, dpkg-dev)"
install_packages golang-go rsync jq golang-github-modern-go-reflect2-dev dpkg-dev ca-certificates \
  debian-archive-keyring

tree="$WORK/kubernetes"
built="$tree/_output/local/bin/linux/$(go env GOARCH)"
if [ -x "$built/kube-apiserver" ] && [ -x "$built/kube-controller-manager" ] && [ -x "$built/kube-scheduler" ]; then
  echo "envtest-assets: reusing the binaries an interrupted run built in $built"
else
  say "fetching Debian's kubernetes source package with a private deb-src list"
  mkdir -p "$WORK/apt/parts" "$WORK/apt/lists/partial" "$WORK/src"
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri="http://deb.debian.org/debian"
  printf '%s\n' "Types: deb-src" "URIs: $uri" "Suites: bookworm" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
    >"$WORK/apt/parts/gpuctrl-src.sources"
  APT_OPTS=(-o "Dir::Etc::SourceParts=$WORK/apt/parts" -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::State::Lists=$WORK/apt/lists" -o "Debug::NoLocking=1")
  apt-get "${APT_OPTS[@]}" update -qq
  orig=$(ls "$WORK/src"/kubernetes_*.orig.tar.gz 2>/dev/null | head -n 1 || true)
  if [ -z "$orig" ]; then
    (cd "$WORK/src" && apt-get "${APT_OPTS[@]}" source --download-only kubernetes)
    orig=$(ls "$WORK/src"/kubernetes_*.orig.tar.gz | head -n 1)
  fi

  say "unpacking $(basename "$orig")"
  rm -rf "$tree"
  mkdir -p "$tree"
  tar -xzf "$orig" -C "$tree" --strip-components=1

  say "replacing vendored modern-go/reflect2 v1.0.1 with v1.0.2 (fixes SIGSEGV on webhook calls)"
  vendored="$tree/vendor/github.com/modern-go/reflect2"
  fixed=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -d "$vendored" ] || { echo "vendored reflect2 not found at $vendored" >&2; exit 1; }
  find "$vendored" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) -delete
  cp "$fixed"/*.go "$fixed"/*.s "$vendored"/
  rm -f "$vendored"/*_test.go

  say "building ${KUBE_BINS[*]} (several minutes)"
  mkdir -p "$WORK/home"
  (cd "$tree" && HOME="$WORK/home" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler")
fi

say "installing binaries into $ASSETS"
for bin in "${KUBE_BINS[@]}"; do
  install -m 0755 "$built/$bin" "$ASSETS/$bin"
done
rm -rf "$tree" "$WORK/home"
echo "envtest-assets: ready in $ASSETS"
