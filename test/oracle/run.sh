#!/usr/bin/env bash
# make test-gardener-oracle: the differential run against Gardener's own providers, one part per
# cloud (each directory test/oracle/<cloud>/, a Go command). A part runs every scenario of
# providers/<cloud>/oracle through Gardener's driver and machinist's, each against a fresh fake,
# checks Gardener's transcripts against the recorded corpus and compares the two drivers request
# by request. docs/compatibility/<cloud>.md ("The differential run") records the last run of each.
#
# Gardener's driver is an executable the operator supplies in ORACLE_<CLOUD>_DRIVER (AWS:
# ORACLE_AWS_DRIVER): Gardener's provider behind the oracle's JSON-lines protocol (the cloud's
# page, "The oracle's driver process"). The repository carries none of Gardener's code and nothing
# that builds it, so CI cannot run this. ORACLE_<CLOUD>_VERSION names what the executable was
# built from (printed with the result); ORACLE_UPDATE=1 records Gardener's transcripts into the
# corpus instead of checking them; ORACLE_OUT=DIR keeps both drivers' transcripts there (one
# subdirectory per cloud). ORACLE_CLOUDS="aws" runs only the parts named.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
go=${GO:-go}
cd "$root"

clouds=${ORACLE_CLOUDS:-$(for d in test/oracle/*/; do basename "$d"; done)}
status=0 ran=0
for cloud in $clouds; do
	upper=$(tr '[:lower:]' '[:upper:]' <<<"$cloud")
	driver_var=ORACLE_${upper}_DRIVER version_var=ORACLE_${upper}_VERSION
	driver=${!driver_var:-}
	echo "== $cloud"
	ran=$((ran + 1))
	if [[ -z "$driver" || ! -x "$driver" ]]; then
		cat >&2 <<MSG
test-gardener-oracle ($cloud): set $driver_var to an executable that serves Gardener's
provider-$cloud driver over the oracle's JSON-lines protocol (docs/compatibility/$cloud.md, "The
oracle's driver process"); ${driver:+$driver is not executable; }then run make test-gardener-oracle again.
MSG
		status=1
		continue
	fi
	args=(-gardener-driver "$driver")
	[[ -n "${ORACLE_OUT:-}" ]] && args+=(-out "$ORACLE_OUT/$cloud")
	[[ "${ORACLE_UPDATE:-}" == 1 ]] && args+=(-update)
	"$go" run "./test/oracle/$cloud" "${args[@]}"
	part=$?
	[[ $part == 0 ]] || status=1
	echo "$cloud oracle ${!version_var:-(version not given)}, $(date -u +%Y-%m-%d): $([[ $part == 0 ]] && echo passed || echo FAILED)"
done
if [[ $ran -eq 0 ]]; then
	echo "test-gardener-oracle: no part under test/oracle" >&2
	exit 1
fi
exit $status
