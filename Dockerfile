# syntax=docker/dockerfile:1
# The operator image: a static binary on distroless, as a non-root user, that
# needs nothing writable (run it with readOnlyRootFilesystem: true).

# The build stage runs on the builder's own platform and cross-compiles
# (GOARCH from buildx's TARGETARCH), so an arm64 image builds at native
# speed on an amd64 runner instead of under QEMU.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so code changes reuse the module layer.
COPY go.mod go.sum ./
RUN go mod download
COPY apis/ apis/
COPY cmd/ cmd/
COPY internal/ internal/
COPY kustomize/ kustomize/
COPY providers/ providers/
COPY reconcilers/ reconcilers/
COPY samples/ samples/
ARG VERSION=dev
# TAGS=hourglass builds the Hourglass reconcilers alone (docs/install.md):
# a smaller binary, and a smaller resident set, for an installation that
# runs only Performers.
ARG TAGS=""
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags "${TAGS}" \
      -ldflags "-s -w -X github.com/hyperfleet/hyperfleet/internal/version.Version=${VERSION}" \
      -o /out/hyperfleet ./cmd/hyperfleet

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/hyperfleet /usr/local/bin/hyperfleet
# 65532 is distroless's "nonroot"; numeric so runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hyperfleet"]
CMD ["run"]
