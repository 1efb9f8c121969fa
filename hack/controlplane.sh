#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from Go module sources.
#
# Prebuilt envtest downloads cannot be fetched here, so we compile the real
# servers through the Go module proxy. The binaries are cached under
#   bin/controlplane/<k8s>-<etcd>/
# and, so a fresh clone on the same machine does not pay the cold build again,
# mirrored to ${HYPERFLEET_CACHE:-~/.cache/hyperfleet}/controlplane/<k8s>-<etcd>/.
#
# Usage: hack/controlplane.sh [--print-dir]
#   --print-dir  print only the directory holding the binaries (for KUBEBUILDER_ASSETS)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.5.35}"
# The staging modules are published as v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
key="${K8S_VERSION}-etcd-${ETCD_VERSION}"
dest="${root}/bin/controlplane/${key}"
cache="${HYPERFLEET_CACHE:-${HOME}/.cache/hyperfleet}/controlplane/${key}"

print_dir=false
[ "${1:-}" = "--print-dir" ] && print_dir=true

log() { $print_dir || echo "controlplane: $*" >&2; }

have() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ]; }

# compile LABEL PKG OUT LDFLAGS (in the current module): go build with progress.
# `go build -v` names each package as it compiles; we count them against the
# package's dependency count and report every tenth, passing errors through.
compile() {
  local label="$1" pkg="$2" out="$3" ldflags="$4" total
  total="$(go list -deps "$pkg" 2>/dev/null | wc -l)"
  go build -v -trimpath -ldflags "$ldflags" -o "$out" "$pkg" 2>&1 | awk -v total="$total" -v what="$label" '
    /^go: downloading / { next }
    /^[A-Za-z0-9._~\/-]+$/ {
      n++
      pct = (total > 0) ? int(100 * n / total) : 0
      if (pct > 100) pct = 100
      if (pct >= next_pct) {
        printf("controlplane:   %s: compiled %d of up to %d packages (%d%%)\n", what, n, total, pct) > "/dev/stderr"
        fflush("/dev/stderr")
        next_pct = pct - pct % 10 + 10
      }
      next
    }
    { print > "/dev/stderr" }
  '
}

if have "$dest"; then
  $print_dir && echo "$dest"
  log "kube-apiserver ${K8S_VERSION} and etcd ${ETCD_VERSION} cached in ${dest}"
  exit 0
fi
mkdir -p "$dest"
if have "$cache"; then
  cp -p "$cache/kube-apiserver" "$cache/etcd" "$dest/"
  $print_dir && echo "$dest"
  log "copied cached binaries from ${cache}"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export CGO_ENABLED=0

build_apiserver() {
  local mod="$work/apiserver"
  mkdir -p "$mod"
  log "[1/2] resolving k8s.io/kubernetes ${K8S_VERSION} (its staging modules at ${STAGING_VERSION})"
  local gomod
  gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module hyperfleet.local/controlplane/apiserver"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    # k8s.io/kubernetes replaces every staging module with a local path; a
    # dependent module must pin each one to its published version instead.
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"${STAGING_VERSION}"'#p' "$gomod"
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  local pkg=k8s.io/component-base/version
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}/verflag.programName=kube-apiserver"
  log "[1/2] compiling kube-apiserver ${K8S_VERSION} (cold: about 10 minutes on 2 cores)"
  (cd "$mod" && compile kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$dest/kube-apiserver.tmp" "$ldflags")
  mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
}

build_etcd() {
  local mod="$work/etcd"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<GOMOD
module hyperfleet.local/controlplane/etcd

go 1.26

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
GOMOD
  # etcd's own main.go is exactly this: hand the arguments to etcdmain.
  cat >"$mod/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "[2/2] compiling etcd ${ETCD_VERSION}"
  (cd "$mod" && compile etcd . "$dest/etcd.tmp" "-s -w")
  mv "$dest/etcd.tmp" "$dest/etcd"
}

start=$(date +%s)
[ -x "$dest/kube-apiserver" ] || build_apiserver
[ -x "$dest/etcd" ] || build_etcd
log "built in $(( $(date +%s) - start ))s into ${dest}"
"$dest/kube-apiserver" --version >&2 || true

mkdir -p "$cache"
cp -p "$dest/kube-apiserver" "$dest/etcd" "$cache/" 2>/dev/null || log "could not mirror to ${cache} (continuing)"
$print_dir && echo "$dest"
exit 0
