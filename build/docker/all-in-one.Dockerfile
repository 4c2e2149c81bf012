# syntax=docker/dockerfile:1
#
# All-in-one image: machinist with every provider compiled in (no provider_<name> tag), the
# controllers, the driver server and the Cluster Autoscaler server. A static binary
# (CGO_ENABLED=0) on a distroless base, running as a non-root user. Build from the repository
# root:
#
#   docker build -f build/docker/all-in-one.Dockerfile --target all-in-one -t machinist .
#
# or `make image`, which picks docker or podman.

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
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w -X github.com/machinist-io/machinist/internal/version.Version=${VERSION}" \
      -o /out/machinist ./cmd/machinist

FROM ${BASE_IMAGE} AS all-in-one
ARG VERSION=dev
LABEL org.opencontainers.image.title="machinist" \
      org.opencontainers.image.description="machinist with every provider" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/machinist-io/machinist"
COPY --from=build /out/machinist /usr/local/bin/machinist
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/machinist"]
