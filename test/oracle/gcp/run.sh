#!/usr/bin/env bash
# The GCP half of the differential run against Gardener's providers (make test-gardener-oracle):
# builds Gardener's GCP driver from a snapshot of gardener/machine-controller-manager-provider-gcp
# (its go.mod, go.sum, cmd/ and pkg/ at GARDENER_GCP_COMMIT, with test/oracle/gcp/gardener-driver.go.txt
# as cmd/machinist-oracle/main.go), then runs test/oracle/gcp, which drives it and machinist's
# driver through providers/gcp/oracle's scenarios against fakegcp and compares them.
#
#   test/oracle/gcp/run.sh [-update] [-run REGEXP] [-out DIR]
#
# GARDENER_GCP_SRC  the provider's repository: a clone, or a bare/mirror git directory; without
#                   it the repository is cloned from GitHub into $ORACLE_DIR/src (needs network).
# GARDENER_GCP_COMMIT  the commit to build (default: the one the corpus was recorded with).
# GARDENER_MCM_SRC  optional: a repository of gardener/machine-controller-manager whose
#                   GARDENER_MCM_COMMIT (default HEAD) replaces the MCM module the provider pins.
# ORACLE_DIR        where sources, the driver and the transcripts go (default .cache/oracle/gcp).
#
# The provider's other modules come from the Go module proxy (GOFLAGS=-mod=mod). Nothing built
# here is committed; -update rewrites providers/gcp/oracle/testdata/gardener, the corpus the
# replay tests of `make test` read.
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
commit=${GARDENER_GCP_COMMIT:-f192d12161a1e7c8c147ae471758b97358c381c1}
dir=${ORACLE_DIR:-$root/.cache/oracle/gcp}
mkdir -p "$dir"

# gitdir prints the git directory of a clone or a bare repository.
gitdir() {
	if [ -d "$1/.git" ]; then echo "$1/.git"; elif [ -f "$1/HEAD" ] && [ -d "$1/objects" ]; then echo "$1"; else
		echo "run.sh: $1 is neither a git clone nor a git directory" >&2
		exit 2
	fi
}

src=${GARDENER_GCP_SRC:-}
if [ -z "$src" ]; then
	src=$dir/src
	if [ ! -d "$src" ]; then
		git clone --quiet --filter=blob:none --no-checkout https://github.com/gardener/machine-controller-manager-provider-gcp "$src"
	fi
fi
git_dir=$(gitdir "$src")
if ! git --git-dir="$git_dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
	echo "run.sh: $src does not have commit $commit (fetch it, or set GARDENER_GCP_COMMIT)" >&2
	exit 2
fi

build=$dir/build
rm -rf "$build"
mkdir -p "$build/provider"
# Only what the driver is built from: a snapshot may lack the repository's large files.
git --git-dir="$git_dir" archive "$commit" go.mod go.sum cmd pkg | tar -x -C "$build/provider"
mkdir -p "$build/provider/cmd/machinist-oracle"
cp test/oracle/gcp/gardener-driver.go.txt "$build/provider/cmd/machinist-oracle/main.go"

mcm_note="MCM as the provider pins it (module proxy)"
if [ -n "${GARDENER_MCM_SRC:-}" ]; then
	mcm_dir=$(gitdir "$GARDENER_MCM_SRC")
	mcm_commit=$(git --git-dir="$mcm_dir" rev-parse "${GARDENER_MCM_COMMIT:-HEAD}")
	mkdir -p "$build/mcm"
	git --git-dir="$mcm_dir" archive "$mcm_commit" go.mod go.sum pkg | tar -x -C "$build/mcm"
	(cd "$build/provider" && go mod edit -replace "github.com/gardener/machine-controller-manager=$build/mcm")
	mcm_note="MCM replaced by its snapshot at $mcm_commit"
fi

echo "run.sh: building Gardener's GCP driver at $commit ($mcm_note)"
(cd "$build/provider" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go build -o "$dir/gardener-gcp-driver" ./cmd/machinist-oracle)

out=$dir/out
mkdir -p "$out"
go run ./test/oracle/gcp -gardener-driver "$dir/gardener-gcp-driver" -out "$out" "$@"
