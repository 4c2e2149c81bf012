#!/usr/bin/env bash
# Installs the Debian packages of the named groups that are missing, with apt-get, and does
# nothing on a machine that has them.
# Usage: build/system-deps.sh [GROUP...] [--optional GROUP...] (default: every group, required)
#
#   build  git (version stamps, check-generated; go build stamps VCS data), make, and CA
#          certificates (module downloads, copied into the images): `make build`, `make run`
#   test   gcc + libc6-dev: cgo, which `go test -race` needs
#   image  podman + runc: `make image` and the image test (build/docker) build and run images with
#          them; podman's default runtime, crun, fails on setrlimit on our machines
#
# Where apt-get cannot install (another distribution, or neither root nor sudo), a required group
# that misses something is an error naming the packages; an optional group's missing packages are
# reported with what skips without them, and the script succeeds. `make deps` (which `make test`
# runs first) needs build and test and takes image as optional: the image test skips without
# podman and runc. .ci/run requires every group.
set -euo pipefail

required=()
optional=()
into=
for arg in "$@"; do
	case "$arg" in
	--optional) into=optional ;;
	build | test | image)
		if [ "$into" = optional ]; then optional+=("$arg"); else required+=("$arg"); fi
		;;
	*)
		echo "system-deps: unknown group '$arg': use build, test or image (none for all), optional ones after --optional" >&2
		exit 2
		;;
	esac
done
[ $# -gt 0 ] || required=(build test image)

# missing GROUP: the Debian packages of GROUP that this machine lacks, one a line.
missing() {
	case "$1" in
	build)
		command -v git >/dev/null 2>&1 || echo git
		command -v make >/dev/null 2>&1 || echo make
		# Debian's bundle, or where other distributions keep theirs (the files crypto/x509 reads).
		local f found=
		for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem \
			/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem /etc/ssl/cert.pem; do
			[ -e "$f" ] && found=1
		done
		[ -n "$found" ] || echo ca-certificates
		;;
	test)
		command -v gcc >/dev/null 2>&1 || printf '%s\n' gcc libc6-dev
		;;
	image)
		command -v podman >/dev/null 2>&1 || echo podman
		{ command -v runc || [ -x /usr/sbin/runc ]; } >/dev/null 2>&1 || echo runc
		;;
	esac
}

# without GROUP: what does not run without GROUP's packages.
without() {
	case "$1" in
	build) echo "make build and make run need them" ;;
	test) echo "go test -race needs them (a C compiler and the C library's headers, for cgo)" ;;
	image) echo "the image test (build/docker) skips without them (make image also builds with docker)" ;;
	esac
}

need=()
need_optional=()
for g in "${required[@]}"; do
	mapfile -t -O "${#need[@]}" need < <(missing "$g")
done
for g in "${optional[@]}"; do
	mapfile -t -O "${#need_optional[@]}" need_optional < <(missing "$g")
done
[ $((${#need[@]} + ${#need_optional[@]})) -gt 0 ] || exit 0

# Why apt-get cannot install here, or nothing when it can.
sudo=()
cannot=
if ! command -v apt-get >/dev/null 2>&1; then
	cannot="there is no apt-get here"
elif [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo=(sudo)
	else
		cannot="installing needs root or sudo"
	fi
fi

if [ -n "$cannot" ]; then
	for g in "${required[@]}"; do
		pkgs=$(missing "$g" | paste -sd ' ')
		[ -z "$pkgs" ] || echo "system-deps: missing $pkgs (Debian's names) and $cannot: $(without "$g");" \
			"install them with your package manager" >&2
	done
	[ ${#need[@]} -eq 0 ] || exit 1
	for g in "${optional[@]}"; do
		pkgs=$(missing "$g" | paste -sd ' ')
		[ -z "$pkgs" ] || echo ">> system-deps: $pkgs not installed and $cannot: $(without "$g");" \
			"install them with your package manager to have it"
	done
	exit 0
fi

all=("${need[@]}" "${need_optional[@]}")
echo ">> installing ${all[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${all[@]}"
