#!/usr/bin/env bash
# Print the path of kubectl 1.20 (built-in kustomize v2.0.3) from Debian's kubernetes-client
# package, unpacked into ~/.cache/gpuctrl/kubernetes-client on first use. Unpacked, not
# installed: a machine may already have another package's /usr/bin/kubectl, and the tests want
# this one version, the oldest kustomize config/default must build with.
set -euo pipefail
dir="${GPUCTRL_CACHE:-$HOME/.cache/gpuctrl}/kubernetes-client"
kubectl="$dir/usr/bin/kubectl"
if [ ! -x "$kubectl" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  if ! apt-get download kubernetes-client >/dev/null 2>&1; then
    $sudo apt-get update -qq
    apt-get download kubernetes-client >/dev/null 2>&1
  fi
  mkdir -p "$(dirname "$dir")"
  dpkg-deb -x kubernetes-client_*.deb unpacked
  # Two runs at once: the first rename wins, the other finds the folder in place.
  mv -T unpacked "$dir" 2>/dev/null || [ -x "$kubectl" ]
fi
echo "$kubectl"
