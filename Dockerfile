# syntax=docker/dockerfile:1
# fleetlet's image for those who build with Docker: the image `make image`
# assembles without a container engine (hack/image), built the same way.
# The binary is compiled as `make image` compiles it (static, -trimpath,
# stripped, stamped with the version and commit), hack/image lays out the
# same root file system (`image rootfs`: /fleetlet, passwd and group with
# nonroot 65532, /home/nonroot, /tmp, the CA bundle of the pinned
# golang.org/x/crypto/x509roots), and the last stage restates the same
# config. hack/image's TestDockerfileMatchesMakeImage fails when the two
# part ways.
#
#   read -r VERSION COMMIT < <(hack/version.sh)
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$VERSION --build-arg COMMIT=$COMMIT \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     -t ghcr.io/fleetlet/fleetlet:$VERSION .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=0.0.0-dev.unknown
ARG COMMIT=unknown
ARG SOURCE_DATE_EPOCH=0
# The Go of the image, never a downloaded toolchain (as the Makefile).
ENV GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY config/ config/
COPY pkg/ pkg/
COPY hack/image/ hack/image/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/fleetlet/fleetlet/pkg/version.version=$VERSION -X github.com/fleetlet/fleetlet/pkg/version.commit=$COMMIT" \
      -o /out/fleetlet ./cmd/fleetlet
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go run ./hack/image rootfs --binary /out/fleetlet --out /rootfs --created $SOURCE_DATE_EPOCH

# The image: hack/image's root file system on an empty base, its config.
FROM scratch AS fleetlet
ARG VERSION=0.0.0-dev.unknown
ARG COMMIT=unknown
ARG SOURCE=https://github.com/fleetlet/fleetlet
ARG CREATED=1970-01-01T00:00:00Z
COPY --from=build /rootfs/ /
ENV PATH=/ SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /
USER 65532:65532
ENTRYPOINT ["/fleetlet"]
LABEL org.opencontainers.image.title=fleetlet \
      org.opencontainers.image.source=$SOURCE \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$COMMIT \
      org.opencontainers.image.created=$CREATED
