#!/usr/bin/env bash
# Builds a machinist container image with docker or podman, offline (`make image PROVIDER=x`,
# `make image`).
#
#   build/docker/image.sh [PROVIDER] [VERSION]
#
# PROVIDER names a directory under providers/ and builds the provider image
# <repo>-<provider>:VERSION: machinist built with -tags slim,machinecontroller,provider_<name> at
# /machine-controller, the entrypoint, as in MCM's provider images (MCM's provider half, which a
# Gardener seed runs as the sidecar's arguments), linked as /usr/local/bin/machinist (serve,
# connect, driver). Empty or "all" builds the all-in-one image <repo>:VERSION (every subcommand
# and provider) at /usr/local/bin/machinist, the entrypoint, linked as
# /machine-controller-manager (MCM's core half, which a Gardener seed runs as
# ./machine-controller-manager from the working directory /). VERSION defaults to dev.
# A program named after one of MCM's runs that half (cmd/machinist/halves.go).
#
# The binary is built here with the local Go toolchain: static (CGO_ENABLED=0), -trimpath,
# stripped (-s -w). It is copied with the host's CA certificates and an /etc/passwd and
# /etc/group naming the non-root user 65532 into an image FROM scratch (build/docker/Dockerfile),
# so nothing is pulled.
#
# Environment: IMAGE_REPO (default machinist), CONTAINER_ENGINE (default: the first of docker
# and podman whose `info` works), GO (default go), GO_TAGS (extra build tags, default: the
# Makefile's), CA_BUNDLE (default /etc/ssl/certs/ca-certificates.crt).
#
# Exit codes: 0 built, 2 a usage or environment problem (no engine, unknown provider, no CA
# certificates), anything else a failed build.
set -euo pipefail

provider="${1:-}"
version="${2:-}"
[[ -n "$version" ]] || version=dev
repo="${IMAGE_REPO:-machinist}"
go_cmd="${GO:-go}"
# Keep in step with BUILD_TAGS in the Makefile (build/docker/image_test.go checks).
go_tags="${GO_TAGS-grpcnotrace urfave_cli_no_docs}"
ca_bundle="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
source_url=https://github.com/machinist-io/machinist

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

# The engine is checked first, with bash builtins only, so a machine without one gets this
# error before anything is built.
engine="${CONTAINER_ENGINE:-}"
if [[ -n "$engine" ]]; then
	command -v "$engine" >/dev/null 2>&1 || fail "CONTAINER_ENGINE=$engine is not an executable in PATH: install it or unset CONTAINER_ENGINE"
	if ! info="$("$engine" info 2>&1 >/dev/null)"; then
		fail "$engine cannot build images: '$engine info' failed:" "${info%%$'\n'*}" \
			"Start it, or unset CONTAINER_ENGINE to use another engine."
	fi
else
	tried=()
	for candidate in docker podman; do
		command -v "$candidate" >/dev/null 2>&1 || continue
		# A docker CLI without a running daemon is common (e.g. in CI containers): try the next.
		if info="$("$candidate" info 2>&1 >/dev/null)"; then
			engine="$candidate"
			break
		fi
		tried+=("$candidate is installed but cannot build images: '$candidate info' failed: ${info%%$'\n'*}")
	done
	if [[ -z "$engine" && ${#tried[@]} -gt 0 ]]; then
		fail "no working container engine:" "${tried[@]}" \
			"Start one (e.g. sudo systemctl start docker), or install podman (`make deps` does, with apt-get)."
	fi
	if [[ -z "$engine" ]]; then
		fail "no container engine found: neither docker nor podman is in PATH." \
			"Install one and rerun:" \
			"  Podman: apt-get install podman runc (Debian/Ubuntu; `make deps` does it) or dnf install podman" \
			"  Docker: https://docs.docker.com/engine/install/ (the engine, not only the CLI)" \
			"or point CONTAINER_ENGINE at one. Without an engine, build the same static binary with:" \
			"  CGO_ENABLED=0 go build -trimpath -tags slim,machinecontroller,provider_<name> -ldflags '-s -w' ./cmd/machinist"
	fi
fi

providers=()
for f in providers/*/register.go; do
	[[ -f "$f" ]] || continue
	f="${f#providers/}"
	providers+=("${f%/register.go}")
done

if [[ -z "$provider" || "$provider" == all ]]; then
	image="$repo:$version"
	tags="$go_tags"
	title=machinist
	description="machinist: the controllers, the driver server, the Cluster Autoscaler server and every provider; MCM's core half as /machine-controller-manager"
	binary=usr/local/bin/machinist
	link=machine-controller-manager
	link_target=usr/local/bin/machinist
else
	found=
	for p in "${providers[@]}"; do [[ "$p" == "$provider" ]] && found=1; done
	[[ -n "$found" ]] || fail "unknown provider \"$provider\": choose one of: ${providers[*]} (or leave PROVIDER empty for the all-in-one image)"
	image="$repo-$provider:$version"
	tags="slim machinecontroller provider_$provider $go_tags"
	title="machinist-$provider"
	description="machinist with the $provider provider only: MCM's provider half as /machine-controller (the entrypoint); serve, connect and driver as /usr/local/bin/machinist"
	binary=machine-controller
	link=usr/local/bin/machinist
	link_target=../../../machine-controller
fi
[[ -f "$ca_bundle" ]] || fail "no CA certificates at $ca_bundle: install them (apt-get install ca-certificates) or set CA_BUNDLE"

revision="${REVISION:-$(git describe --always --dirty --abbrev=40 2>/dev/null || echo unknown)}"
ctx="$(mktemp -d "${TMPDIR:-/tmp}/machinist-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT

# The root file system of the image: the binary, CA certificates, the users, /tmp, and the home
# of the non-root user (copied with its owner set by the Dockerfile).
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/home"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0700 "$ctx/home"
printf '>> %s build -tags "%s" (static, stripped) -> %s\n' "$go_cmd" "${tags// /,}" "$image"
CGO_ENABLED=0 "$go_cmd" build -trimpath -tags "${tags// /,}" \
	-ldflags "-s -w -X github.com/machinist-io/machinist/internal/version.Version=$version -X github.com/machinist-io/machinist/internal/version.Revision=$revision" \
	-o "$ctx/rootfs/$binary" ./cmd/machinist
# The other name of the binary: a relative symbolic link, kept as such by COPY.
ln -s "$link_target" "$ctx/rootfs/$link"
cp "$ca_bundle" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
# The entrypoint is the binary's own path: /usr/local/bin/machinist, or /machine-controller.
sed "s|^ENTRYPOINT .*|ENTRYPOINT [\"/$binary\"]|" build/docker/Dockerfile >"$ctx/Dockerfile"

printf '>> %s build %s (FROM scratch, nothing pulled)\n' "$engine" "$image"
"$engine" build -f "$ctx/Dockerfile" \
	--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url" \
	--build-arg "TITLE=$title" --build-arg "DESCRIPTION=$description" \
	-t "$image" "$ctx"
printf '>> built %s\n' "$image"
