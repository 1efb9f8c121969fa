#!/usr/bin/env bash
# Builds a real SPIRE server and agent (github.com/spiffe/spire) from Go module
# sources, for the tests of providers/spire: no prebuilt SPIRE release can be
# fetched here, so we compile the commands through the Go module proxy in a
# throwaway wrapper module. The binaries are cached under
#   bin/spire/<version>/   spire-server, spire-agent
# and, so a fresh clone on the same machine does not pay the cold build again,
# mirrored to ${HYPERFLEET_CACHE:-~/.cache/hyperfleet}/spire/<version>/.
#
# Usage: hack/spire.sh [--print-dir]
#   --print-dir  print only the directory holding the binaries (for HYPERFLEET_SPIRE_DIR)
set -euo pipefail

SPIRE_VERSION="${SPIRE_VERSION:-v1.14.5}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${root}/bin/spire/${SPIRE_VERSION}"
cache="${HYPERFLEET_CACHE:-${HOME}/.cache/hyperfleet}/spire/${SPIRE_VERSION}"
bins=(spire-server spire-agent)

print_dir=false
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=true ;;
    *) echo "spire: unknown argument $arg (want --print-dir)" >&2; exit 2 ;;
  esac
done

log() { $print_dir || echo "spire: $*" >&2; }

finish() {
  $print_dir && echo "$dest"
  exit 0
}

have_all() {
  local name
  for name in "${bins[@]}"; do [ -x "$dest/$name" ] || return 1; done
}

for name in "${bins[@]}"; do
  if [ ! -x "$dest/$name" ] && [ -x "$cache/$name" ]; then
    mkdir -p "$dest"
    cp -p "$cache/$name" "$dest/"
    log "copied cached $name from ${cache}"
  fi
done
if have_all; then
  log "spire-server and spire-agent ${SPIRE_VERSION} cached in ${dest}"
  finish
fi

# The datastore is sqlite through github.com/mattn/go-sqlite3, which needs cgo
# and so a C compiler. Install one the Debian way when it is missing.
if ! command -v gcc >/dev/null 2>&1; then
  log "gcc is missing (cgo builds sqlite); installing it with apt-get"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev >&2
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export CGO_ENABLED=1

log "resolving github.com/spiffe/spire ${SPIRE_VERSION}"
src="$(cd "$work" && go mod download -json "github.com/spiffe/spire@${SPIRE_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
# The wrapper requires spire and, so the build sees exactly the dependency
# versions SPIRE was released with, every requirement of spire's own go.mod
# (its spire-api-sdk is a pseudo-version; the SDK's tags are not served).
# spire's go.sum comes along, so tidy needs no lookups of its own for them.
{
  echo "module hyperfleet.local/spire"
  echo
  echo "go 1.26"
  echo
  echo "require github.com/spiffe/spire ${SPIRE_VERSION}"
  echo
  sed -n '/^require (/,/^)/p' "$src/go.mod"
  grep '^replace ' "$src/go.mod" || true
} >"$work/go.mod"
cp "$src/go.sum" "$work/go.sum"
chmod u+w "$work/go.sum"
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "github.com/spiffe/spire/cmd/spire-agent"
	_ "github.com/spiffe/spire/cmd/spire-server"
)
GO
(cd "$work" && go mod tidy >&2)

start=$(date +%s)
i=0
for name in "${bins[@]}"; do
  i=$((i + 1))
  [ -x "$dest/$name" ] && continue
  log "[${i}/${#bins[@]}] compiling ${name} ${SPIRE_VERSION} (cold: spire-server about 5 minutes on 2 cores, then spire-agent under a minute)"
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$dest/${name}.tmp" "github.com/spiffe/spire/cmd/${name}")
  mv "$dest/${name}.tmp" "$dest/${name}"
  log "  ${name} done after $(( $(date +%s) - start ))s"
done
"$dest/spire-server" --version >&2 || true

mkdir -p "$cache"
for name in "${bins[@]}"; do
  cp -p "$dest/$name" "$cache/" 2>/dev/null || log "could not mirror $name to ${cache} (continuing)"
done
finish
