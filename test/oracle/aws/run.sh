#!/usr/bin/env bash
# The AWS part of make test-gardener-oracle (docs/compatibility/aws.md, "The differential run").
#
# Builds Gardener's AWS driver from snapshots of gardener/machine-controller-manager-provider-aws
# and gardener/machine-controller-manager (the Go module proxy refuses github.com/gardener/*:
# the provider's module is built with MCM's replaced by the snapshot, GOFLAGS=-mod=mod), with
# test/oracle/aws/gardener-driver.go.txt as its main, then runs test/oracle/aws: every scenario
# of providers/aws/oracle through Gardener's driver and machinist's, each against a fresh
# fakeaws, Gardener's checked against the recorded corpus, the two compared request by request.
#
# Snapshots: git repositories (bare or checked out), by default
#   $ORACLE_MIRROR/gardener+machine-controller-manager-provider-aws/repo and
#   $ORACLE_MIRROR/gardener+machine-controller-manager/repo, ORACLE_MIRROR defaulting to the
#   directory .mirror next to the repository; or ORACLE_AWS_PROVIDER and ORACLE_MCM.
# ORACLE_AWS_PROVIDER_REV and ORACLE_MCM_REV pick commits (default HEAD); ORACLE_UPDATE=1
# records Gardener's transcripts into the corpus instead of checking them; ORACLE_KEEP=1 keeps
# the work directory (both drivers' transcripts are under transcripts/).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
mirror=${ORACLE_MIRROR:-$(dirname "$root")/.mirror}
provider=${ORACLE_AWS_PROVIDER:-$mirror/gardener+machine-controller-manager-provider-aws/repo}
mcm=${ORACLE_MCM:-$mirror/gardener+machine-controller-manager/repo}
go=${GO:-go}

missing() {
	cat >&2 <<MSG
test-gardener-oracle (aws): no snapshot of $1 at $2.
Fetch it as a git repository, e.g.
  git clone --bare https://github.com/$1 $2
(or point ${3} at a clone), then run make test-gardener-oracle again.
MSG
	exit 2
}
git -C "$provider" rev-parse -q --verify "${ORACLE_AWS_PROVIDER_REV:-HEAD}^{commit}" >/dev/null 2>&1 ||
	missing gardener/machine-controller-manager-provider-aws "$provider" ORACLE_AWS_PROVIDER
git -C "$mcm" rev-parse -q --verify "${ORACLE_MCM_REV:-HEAD}^{commit}" >/dev/null 2>&1 ||
	missing gardener/machine-controller-manager "$mcm" ORACLE_MCM
provider_rev=$(git -C "$provider" rev-parse "${ORACLE_AWS_PROVIDER_REV:-HEAD}^{commit}")
mcm_rev=$(git -C "$mcm" rev-parse "${ORACLE_MCM_REV:-HEAD}^{commit}")

work=$(mktemp -d "${TMPDIR:-/tmp}/machinist-oracle-aws.XXXXXX")
if [[ "${ORACLE_KEEP:-}" != 1 ]]; then
	trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fi
mkdir -p "$work/provider" "$work/mcm" "$work/transcripts"
git -C "$provider" archive "$provider_rev" | tar -x -C "$work/provider"
git -C "$mcm" archive "$mcm_rev" | tar -x -C "$work/mcm"

echo "building Gardener's AWS driver: provider-aws $provider_rev, machine-controller-manager $mcm_rev"
mkdir -p "$work/provider/cmd/machinist-oracle"
cp "$root/test/oracle/aws/gardener-driver.go.txt" "$work/provider/cmd/machinist-oracle/main.go"
(
	cd "$work/provider"
	"$go" mod edit -replace "github.com/gardener/machine-controller-manager=$work/mcm"
	GOFLAGS="-mod=mod -buildvcs=false" "$go" build -o "$work/gardener-aws-driver" ./cmd/machinist-oracle
)

cd "$root"
args=(-gardener-driver "$work/gardener-aws-driver" -out "$work/transcripts")
[[ "${ORACLE_UPDATE:-}" == 1 ]] && args+=(-update)
set +e
"$go" run ./test/oracle/aws "${args[@]}"
status=$?
set -e
echo "provider-aws $provider_rev, machine-controller-manager $mcm_rev, $(date -u +%Y-%m-%d): $([[ $status == 0 ]] && echo passed || echo FAILED)"
[[ "${ORACLE_KEEP:-}" == 1 ]] && echo "transcripts of both drivers: $work/transcripts"
exit $status
