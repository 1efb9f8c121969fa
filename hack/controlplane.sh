#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from Go module sources,
# and with --cluster also kube-scheduler, kube-controller-manager (same
# Kubernetes version) and KWOK's controller, which simulates nodes and kubelets.
#
# Prebuilt envtest downloads cannot be fetched here, so we compile the real
# servers through the Go module proxy. The binaries are cached under
#   bin/controlplane/<k8s>-etcd-<etcd>/   kube-apiserver, etcd, kube-scheduler, kube-controller-manager
#   bin/controlplane/kwok-<kwok>/         kwok
# (one directory per version, so a new KWOK does not rebuild the API server)
# and, so a fresh clone on the same machine does not pay the cold build again,
# mirrored to ${HYPERFLEET_CACHE:-~/.cache/hyperfleet}/controlplane/ the same way.
#
# Usage: hack/controlplane.sh [--cluster] [--print-dir]
#   --cluster    also build the scheduler, the controller-manager and kwok
#                (internal/testcluster, `hyperfleet-dev`); the plain suites need
#                only the API server and etcd
#   --print-dir  print only the directory holding the binaries (for KUBEBUILDER_ASSETS);
#                with --cluster a second line names kwok's directory
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.5.35}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
# The staging modules are published as v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
key="${K8S_VERSION}-etcd-${ETCD_VERSION}"
dest="${root}/bin/controlplane/${key}"
cache_root="${HYPERFLEET_CACHE:-${HOME}/.cache/hyperfleet}/controlplane"
cache="${cache_root}/${key}"
kwok_dest="${root}/bin/controlplane/kwok-${KWOK_VERSION}"
kwok_cache="${cache_root}/kwok-${KWOK_VERSION}"

print_dir=false
cluster=false
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=true ;;
    --cluster) cluster=true ;;
    *) echo "controlplane: unknown argument $arg (want --cluster, --print-dir)" >&2; exit 2 ;;
  esac
done

log() { $print_dir || echo "controlplane: $*" >&2; }

# The binaries each directory must hold for the request.
core_bins=(kube-apiserver etcd)
cluster_bins=(kube-scheduler kube-controller-manager)
wanted=("${core_bins[@]}")
$cluster && wanted+=("${cluster_bins[@]}")

# have DIR NAME...: every named binary is in DIR.
have() {
  local dir="$1" name; shift
  for name in "$@"; do [ -x "$dir/$name" ] || return 1; done
}

# restore DIR CACHE NAME...: copy from the mirror whatever DIR lacks and the mirror has.
restore() {
  local dir="$1" from="$2" name; shift 2
  for name in "$@"; do
    if [ ! -x "$dir/$name" ] && [ -x "$from/$name" ]; then
      mkdir -p "$dir"
      cp -p "$from/$name" "$dir/"
      log "copied cached $name from ${from}"
    fi
  done
}

# done: print the directories (with --print-dir) and exit.
finish() {
  if $print_dir; then
    echo "$dest"
    $cluster && echo "$kwok_dest"
  fi
  exit 0
}

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

restore "$dest" "$cache" "${wanted[@]}"
$cluster && restore "$kwok_dest" "$kwok_cache" kwok
if have "$dest" "${wanted[@]}" && { ! $cluster || have "$kwok_dest" kwok; }; then
  log "${wanted[*]} (Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}) cached in ${dest}"
  $cluster && log "kwok ${KWOK_VERSION} cached in ${kwok_dest}"
  finish
fi
mkdir -p "$dest"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export CGO_ENABLED=0

# k8s_module: the wrapper module that builds k8s.io/kubernetes commands, made once.
k8s_module() {
  local mod="$work/kubernetes"
  [ -f "$mod/go.mod" ] && return 0
  mkdir -p "$mod"
  log "resolving k8s.io/kubernetes ${K8S_VERSION} (its staging modules at ${STAGING_VERSION})"
  local gomod
  gomod="$(cd "$work" && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module hyperfleet.local/controlplane/kubernetes"
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

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
}

# build_k8s NAME STEP COST: compile k8s.io/kubernetes/cmd/NAME into $dest.
build_k8s() {
  local name="$1" step="$2" cost="$3"
  k8s_module
  local pkg=k8s.io/component-base/version
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean -X ${pkg}/verflag.programName=${name}"
  log "[${step}] compiling ${name} ${K8S_VERSION} (cold: ${cost} on 2 cores)"
  (cd "$work/kubernetes" && compile "$name" "k8s.io/kubernetes/cmd/${name}" "$dest/${name}.tmp" "$ldflags")
  mv "$dest/${name}.tmp" "$dest/${name}"
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
  log "[$1] compiling etcd ${ETCD_VERSION}"
  (cd "$mod" && compile etcd . "$dest/etcd.tmp" "-s -w")
  mv "$dest/etcd.tmp" "$dest/etcd"
}

# build_kwok: compile KWOK's controller. It pins its own (older) Kubernetes
# libraries, so it gets its own wrapper module, resolved from kwok's go.mod alone.
build_kwok() {
  local mod="$work/kwok"
  mkdir -p "$mod" "$kwok_dest"
  cat >"$mod/go.mod" <<GOMOD
module hyperfleet.local/controlplane/kwok

go 1.26

require sigs.k8s.io/kwok ${KWOK_VERSION}
GOMOD
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
GO
  log "[$1] compiling kwok ${KWOK_VERSION} (cold: about 4 minutes on 2 cores)"
  (cd "$mod" && compile kwok sigs.k8s.io/kwok/cmd/kwok "$kwok_dest/kwok.tmp" "-s -w")
  mv "$kwok_dest/kwok.tmp" "$kwok_dest/kwok"
}

# The steps this run has to take, numbered for the progress lines.
steps=()
for name in "${wanted[@]}"; do [ -x "$dest/$name" ] || steps+=("$name"); done
$cluster && { [ -x "$kwok_dest/kwok" ] || steps+=(kwok); }

start=$(date +%s)
i=0
for name in "${steps[@]}"; do
  i=$((i + 1))
  step="${i}/${#steps[@]}"
  case "$name" in
    kube-apiserver) build_k8s kube-apiserver "$step" "about 10 minutes" ;;
    kube-scheduler) build_k8s kube-scheduler "$step" "about 3 minutes after kube-apiserver" ;;
    kube-controller-manager) build_k8s kube-controller-manager "$step" "about 5 minutes after kube-apiserver" ;;
    etcd) build_etcd "$step" ;;
    kwok) build_kwok "$step" ;;
  esac
  log "  ${name} done after $(( $(date +%s) - start ))s"
done
log "built ${steps[*]} in $(( $(date +%s) - start ))s"
"$dest/kube-apiserver" --version >&2 || true

mkdir -p "$cache"
for name in "${wanted[@]}"; do
  cp -p "$dest/$name" "$cache/" 2>/dev/null || log "could not mirror $name to ${cache} (continuing)"
done
if $cluster; then
  mkdir -p "$kwok_cache"
  cp -p "$kwok_dest/kwok" "$kwok_cache/" 2>/dev/null || log "could not mirror kwok to ${kwok_cache} (continuing)"
fi
finish
