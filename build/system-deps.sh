#!/usr/bin/env bash
# Installs the Debian packages of the named groups that are missing, with apt-get, and does
# nothing on a machine that has them. Usage: build/system-deps.sh [GROUP...] (default: all)
#
#   build  git (version stamps, check-generated; go build stamps VCS data), make, and
#          ca-certificates (module downloads, copied into the images): `make build`, `make run`
#   test   gcc + libc6-dev: cgo, which `go test -race` needs
#   image  podman + runc: `make image` and the image test (build/docker) build and run images with
#          them; podman's default runtime, crun, fails on setrlimit on our machines
#
# `make deps` installs every group (`make test` runs it first, so a fresh Debian machine runs the
# whole suite, the image test included); `make run` installs only build; .ci/run installs every
# group before it calls make.
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build test image)

need=()
for g in "${groups[@]}"; do
	case "$g" in
	build)
		command -v git >/dev/null 2>&1 || need+=(git)
		command -v make >/dev/null 2>&1 || need+=(make)
		[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
		;;
	test)
		command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
		;;
	image)
		command -v podman >/dev/null 2>&1 || need+=(podman)
		{ command -v runc || [ -x /usr/sbin/runc ]; } >/dev/null 2>&1 || need+=(runc)
		;;
	*)
		echo "system-deps: unknown group '$g': use build, test or image (none for all)" >&2
		exit 2
		;;
	esac
done
[ ${#need[@]} -gt 0 ] || exit 0

echo ">> installing ${need[*]} with apt-get"
if ! command -v apt-get >/dev/null 2>&1; then
	echo "missing ${need[*]} and no apt-get to install them: install them with your package manager" >&2
	exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "need root or sudo to install ${need[*]}" >&2; exit 1; }
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
