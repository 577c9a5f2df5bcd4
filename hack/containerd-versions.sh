#!/usr/bin/env bash
# Unpack the containerd of each Debian suite named (default: bookworm trixie forky, i.e.
# containerd 1.6, 1.7 and 2.1) into $GPUCTRL_CONTAINERD_CACHE/<suite>/ (default
# ~/.cache/gpuctrl/containerd), without installing it and without touching the machine's apt
# configuration: a private sources file and private package lists under the cache, apt's own
# `download`, then `dpkg-deb -x`. A suite already unpacked is skipped. The toolkit's
# integration tests run containerd's parser (`containerd config dump`) of each one found there.
set -euo pipefail
cache="${GPUCTRL_CONTAINERD_CACHE:-$HOME/.cache/gpuctrl/containerd}"
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie forky)

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || {
  echo "containerd-versions: needs apt-get and dpkg-deb (a Debian machine)" >&2
  exit 1
}
# The archive the machine already uses (deb822 or one-line sources), else Debian's own.
uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*debian\)[[:space:]]*$/\1/p' \
  /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 || true)
[ -n "$uri" ] || uri=$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*debian\)[[:space:]].*/\1/p' \
  /etc/apt/sources.list 2>/dev/null | head -n1 || true)
[ -n "$uri" ] || uri="http://deb.debian.org/debian"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

for suite in "${suites[@]}"; do
  out="$cache/$suite"
  [ -x "$out/usr/bin/containerd" ] && continue
  work="$cache/.apt-$suite"
  rm -rf "$work" "$out.partial"
  mkdir -p "$work/sources" "$work/lists/partial" "$work/archives/partial" "$out.partial"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
    "$uri" "$suite" "$keyring" >"$work/sources/$suite.sources"
  apt=(apt-get -q -o "Dir::Etc::SourceParts=$work/sources" -o Dir::Etc::SourceList=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o Dir::Cache::pkgcache=
    -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
  echo "containerd-versions: $suite from $uri"
  "${apt[@]}" update >/dev/null
  (cd "$work/archives" && "${apt[@]}" download containerd >/dev/null)
  deb=$(ls "$work"/archives/containerd_*.deb)
  dpkg-deb -x "$deb" "$out.partial"
  "$out.partial/usr/bin/containerd" --version
  mv "$out.partial" "$out"
  rm -rf "$work"
done
