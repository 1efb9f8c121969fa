#!/usr/bin/env bash
# Runs golangci-lint at the version pinned in hack/tools/go.mod, building it
# into bin/ on first use (about 3 minutes cold on 2 cores).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(cd "$root/hack/tools" && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)"
bin="$root/bin/golangci-lint-${version}"
if [ ! -x "$bin" ]; then
  echo "lint: building golangci-lint ${version} into bin/" >&2
  (cd "$root/hack/tools" && go build -o "$bin" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
fi
cd "$root"
"$bin" run "$@" ./...
# The Hourglass build's own files (//go:build hourglass) and what they
# leave unused: its packages, with the tag.
exec "$bin" run --build-tags hourglass "$@" ./cmd/hyperfleet/... ./internal/manager/... ./internal/scheme/...
