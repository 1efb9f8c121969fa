#!/usr/bin/env bash
# Makes sure promtool (from Debian's prometheus package) is installed and
# prints its version. The alert tests (alerts/alerts_test.go) run it.
#
#   hack/promtool.sh          install when missing, print the version
#   hack/promtool.sh --path   the same, then print promtool's path on stdout
#
# Debian pins the version (bookworm: 2.42); the rules and their tests use
# nothing newer than that.
set -euo pipefail

if ! command -v promtool >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "promtool: not installed, and installing Debian's prometheus package needs root or sudo" >&2
      exit 1
    fi
    sudo="sudo"
  fi
  echo "promtool: installing Debian's prometheus package" >&2
  $sudo apt-get update -qq >&2
  # The package's service is not wanted: only its promtool binary is used.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi

echo "promtool: $(promtool --version 2>&1 | head -n1)" >&2
if [ "${1:-}" = "--path" ]; then
  command -v promtool
fi
