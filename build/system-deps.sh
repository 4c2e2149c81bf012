#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need, when they are missing: git
# (check-generated, version stamps), make, gcc + libc6-dev (cgo, which `go test -race` needs),
# ca-certificates (module downloads, and copied into the images) and podman + runc (`make image`
# and the image test in build/docker build and run images with them; podman's default runtime,
# crun, fails on setrlimit on our machines). `make test`, `make run` and .ci/run call it; it does
# nothing on a machine that has them.
set -euo pipefail

need=()
command -v git >/dev/null 2>&1 || need+=(git)
command -v make >/dev/null 2>&1 || need+=(make)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
command -v podman >/dev/null 2>&1 || need+=(podman)
{ command -v runc || [ -x /usr/sbin/runc ]; } >/dev/null 2>&1 || need+=(runc)
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
