#!/usr/bin/env bash
# The AWS part of make test-gardener-oracle (docs/compatibility/aws.md, "The differential run").
#
# Runs every scenario of providers/aws/oracle through Gardener's AWS driver and machinist's, each
# against a fresh fakeaws, checks Gardener's transcripts against the recorded corpus and compares
# the two drivers request by request (test/oracle/aws).
#
# Gardener's driver is an executable the operator supplies in ORACLE_AWS_DRIVER: Gardener's
# provider-aws driver behind the oracle's JSON-lines protocol (docs/compatibility/aws.md, "The
# oracle's driver process"). This repository carries no code of Gardener's and no recipe that
# builds it: the Go module proxy refuses github.com/gardener/*, so CI cannot run this part.
# ORACLE_AWS_VERSION names what the executable was built from (recorded in the run's last line);
# ORACLE_UPDATE=1 records Gardener's transcripts into the corpus instead of checking them;
# ORACLE_OUT=DIR keeps both drivers' transcripts and Gardener's logs there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
go=${GO:-go}
driver=${ORACLE_AWS_DRIVER:-}
if [[ -z "$driver" || ! -x "$driver" ]]; then
	cat >&2 <<MSG
test-gardener-oracle (aws): set ORACLE_AWS_DRIVER to an executable that serves Gardener's
provider-aws driver over the oracle's JSON-lines protocol (docs/compatibility/aws.md, "The
oracle's driver process"); ${driver:+$driver is not executable; }then run make test-gardener-oracle again.
MSG
	exit 2
fi

cd "$root"
args=(-gardener-driver "$driver")
[[ -n "${ORACLE_OUT:-}" ]] && args+=(-out "$ORACLE_OUT")
[[ "${ORACLE_UPDATE:-}" == 1 ]] && args+=(-update)
set +e
"$go" run ./test/oracle/aws "${args[@]}"
status=$?
set -e
echo "aws oracle ${ORACLE_AWS_VERSION:-(version not given)}, $(date -u +%Y-%m-%d): $([[ $status == 0 ]] && echo passed || echo FAILED)"
exit $status
