#!/usr/bin/env bash
# make test-gardener-oracle: runs each cloud's part of the differential run against Gardener's
# own providers (test/oracle/<cloud>/run.sh, those that exist) and fails when one fails. The
# parts need snapshots of Gardener's repositories fetched beforehand (each part says which and
# how); CI cannot fetch them, so this runs by hand. docs/compatibility/<cloud>.md records the
# last run of each.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
status=0 ran=0
for part in "$here"/*/run.sh; do
	[[ -x "$part" ]] || continue
	cloud=$(basename "$(dirname "$part")")
	echo "== $cloud"
	ran=$((ran + 1))
	"$part" || status=1
done
if [[ $ran -eq 0 ]]; then
	echo "test-gardener-oracle: no part under $here" >&2
	exit 1
fi
exit $status
