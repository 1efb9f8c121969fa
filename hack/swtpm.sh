#!/usr/bin/env bash
# Installs Debian's software TPM (swtpm, swtpm_setup, swtpm_localca) and
# tpm2-tools, for TPM attestation's tests and the sandbox
# (internal/sim/swtpmlocal): the virtual TPM a hypervisor host gives
# a machine, manufactured with an EK certificate as Proxmox VE's is. Debian
# packages, not Go modules: swtpm is C on libtpms, and nothing on the module
# proxy serves a TPM a spire-agent can open. Pinned to bookworm's versions.
#
# Usage: hack/swtpm.sh   (idempotent: does nothing when they are installed)
set -euo pipefail

SWTPM_VERSION="${SWTPM_VERSION:-0.7.1-1.3}"
TPM2_TOOLS_VERSION="${TPM2_TOOLS_VERSION:-5.4-1}"

installed() {
  [ "$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true)" = "$2" ]
}

if installed swtpm "$SWTPM_VERSION" && installed swtpm-tools "$SWTPM_VERSION" && installed tpm2-tools "$TPM2_TOOLS_VERSION"; then
  echo "swtpm: swtpm ${SWTPM_VERSION} and tpm2-tools ${TPM2_TOOLS_VERSION} installed" >&2
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "swtpm: apt-get is missing; install swtpm ${SWTPM_VERSION}, swtpm-tools and tpm2-tools ${TPM2_TOOLS_VERSION} by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
start=$(date +%s)
echo "swtpm: installing swtpm ${SWTPM_VERSION} and tpm2-tools ${TPM2_TOOLS_VERSION} with apt-get" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "swtpm=${SWTPM_VERSION}" "swtpm-tools=${SWTPM_VERSION}" "tpm2-tools=${TPM2_TOOLS_VERSION}" >&2
echo "swtpm: installed in $(( $(date +%s) - start )) s" >&2
