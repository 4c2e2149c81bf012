# syntax=docker/dockerfile:1
#
# Slim image of one provider: machinist built with -tags provider_${PROVIDER}, so the binary
# links in that provider and its SDK only. A static binary (CGO_ENABLED=0) on a distroless base,
# running as a non-root user. Build from the repository root:
#
#   docker build -f build/docker/provider.Dockerfile --target slim \
#     --build-arg PROVIDER=openstack -t machinist-openstack .
#
# or `make image PROVIDER=openstack`, which picks docker or podman.

ARG GO_VERSION=1.26.8
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

# The build stage runs on the build machine's platform and cross-compiles for the target.
FROM --platform=${BUILDPLATFORM} golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY core/ core/
COPY grpcbridge/ grpcbridge/
COPY internal/ internal/
COPY providers/ providers/
ARG PROVIDER
RUN if [ -z "${PROVIDER}" ]; then \
      echo "no provider chosen: pass --build-arg PROVIDER=<name> (a directory under providers/)" >&2; exit 1; fi; \
    if [ ! -f "providers/${PROVIDER}/register.go" ]; then \
      echo "providers/${PROVIDER} is not a provider: choose a directory under providers/ that holds a register.go" >&2; exit 1; fi
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -tags "provider_${PROVIDER}" \
      -ldflags "-s -w -X github.com/machinist-io/machinist/internal/version.Version=${VERSION}" \
      -o /out/machinist ./cmd/machinist

FROM ${BASE_IMAGE} AS slim
ARG PROVIDER
ARG VERSION=dev
LABEL org.opencontainers.image.title="machinist-${PROVIDER}" \
      org.opencontainers.image.description="machinist with the ${PROVIDER} provider only" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/machinist-io/machinist"
COPY --from=build /out/machinist /usr/local/bin/machinist
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/machinist"]
