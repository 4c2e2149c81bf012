#!/usr/bin/env bash
# Builds a machinist container image with docker or podman (`make image PROVIDER=x`).
#
#   build/docker/image.sh [PROVIDER] [VERSION]
#
# PROVIDER names a directory under providers/ and builds the slim image <repo>-<provider>;
# empty or "all" builds the all-in-one image <repo>. IMAGE_REPO sets <repo> (default machinist),
# CONTAINER_ENGINE picks the engine (default: docker, else podman).
#
# Only bash builtins besides the engine, so it reports a missing engine even on a bare PATH.
set -euo pipefail

provider="${1:-}"
version="${2:-dev}"
repo="${IMAGE_REPO:-machinist}"

here="${BASH_SOURCE[0]%/*}"
[[ "$here" == "${BASH_SOURCE[0]}" ]] && here=.
cd "$here/../.."

# fail prints its first argument as the error and the others as indented lines under it.
fail() {
	printf 'make image: %s\n' "$1" >&2
	shift
	(($# == 0)) || printf '  %s\n' "$@" >&2
	exit 2
}

providers=()
for f in providers/*/register.go; do
	[[ -f "$f" ]] || continue
	f="${f#providers/}"
	providers+=("${f%/register.go}")
done

if [[ -z "$provider" || "$provider" == all ]]; then
	dockerfile=build/docker/all-in-one.Dockerfile
	target=all-in-one
	image="$repo:$version"
	args=()
else
	found=
	for p in "${providers[@]}"; do [[ "$p" == "$provider" ]] && found=1; done
	[[ -n "$found" ]] || fail "unknown provider \"$provider\": choose one of: ${providers[*]} (or leave PROVIDER empty for the all-in-one image)"
	dockerfile=build/docker/provider.Dockerfile
	target=slim
	image="$repo-$provider:$version"
	args=(--build-arg "PROVIDER=$provider")
fi

engine="${CONTAINER_ENGINE:-}"
if [[ -z "$engine" ]]; then
	for candidate in docker podman; do
		if command -v "$candidate" >/dev/null 2>&1; then
			engine="$candidate"
			break
		fi
	done
fi
if [[ -z "$engine" ]]; then
	fail "no container engine found: neither docker nor podman is in PATH." \
		"Install one and rerun:" \
		"  Docker: https://docs.docker.com/engine/install/ (the engine, not only the CLI)" \
		"  Podman: apt-get install podman (Debian/Ubuntu) or dnf install podman (Fedora/RHEL)" \
		"or point CONTAINER_ENGINE at one. Without an engine, build the same static binary with:" \
		"  CGO_ENABLED=0 go build -tags provider_<name> ./cmd/machinist"
fi
command -v "$engine" >/dev/null 2>&1 || fail "CONTAINER_ENGINE=$engine is not an executable in PATH: install it or unset CONTAINER_ENGINE"

# A docker CLI without a running daemon is common (e.g. in CI containers): say so before building.
if ! info="$("$engine" info 2>&1 >/dev/null)"; then
	reason="${info%%$'\n'*}"
	fail "$engine is installed but cannot build images: '$engine info' failed:" \
		"${reason:-(no output)}" \
		"Start the engine (e.g. sudo systemctl start docker, or podman machine start), or use another one with CONTAINER_ENGINE=podman."
fi

printf '>> %s build %s -> %s\n' "$engine" "$dockerfile" "$image"
exec "$engine" build -f "$dockerfile" --target "$target" "${args[@]}" --build-arg "VERSION=$version" -t "$image" .
