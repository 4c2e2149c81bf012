#!/usr/bin/env bash
# The GCP part of make test-gardener-oracle (docs/compatibility/gcp.md, "The differential run").
#
# Runs every scenario of providers/gcp/oracle through Gardener's GCP driver and machinist's, each
# against a fresh fakegcp, checks Gardener's transcripts against the recorded corpus and compares
# the two drivers request by request (test/oracle/gcp).
#
# Gardener's driver is an executable the operator supplies in ORACLE_GCP_DRIVER: Gardener's
# provider-gcp driver behind the oracle's JSON-lines protocol (docs/compatibility/gcp.md, "The
# oracle's driver process"). This repository carries no code of Gardener's and no recipe that
# builds it, so CI cannot run this part. ORACLE_GCP_VERSION names what the executable was built
# from (printed with the result); ORACLE_UPDATE=1 records Gardener's transcripts into the corpus
# instead of checking them; ORACLE_OUT=DIR keeps both drivers' transcripts there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
go=${GO:-go}
driver=${ORACLE_GCP_DRIVER:-}
if [[ -z "$driver" || ! -x "$driver" ]]; then
	cat >&2 <<MSG
test-gardener-oracle (gcp): set ORACLE_GCP_DRIVER to an executable that serves Gardener's
provider-gcp driver over the oracle's JSON-lines protocol (docs/compatibility/gcp.md, "The
oracle's driver process"); ${driver:+$driver is not executable; }then run make test-gardener-oracle again.
MSG
	exit 2
fi

cd "$root"
args=(-gardener-driver "$driver")
[[ -n "${ORACLE_OUT:-}" ]] && args+=(-out "$ORACLE_OUT")
[[ "${ORACLE_UPDATE:-}" == 1 ]] && args+=(-update)
set +e
"$go" run ./test/oracle/gcp "${args[@]}"
status=$?
set -e
echo "gcp oracle ${ORACLE_GCP_VERSION:-(version not given)}, $(date -u +%Y-%m-%d): $([[ $status == 0 ]] && echo passed || echo FAILED)"
exit $status
