# syntax=docker/dockerfile:1
# fleetlet's image: one static `fleetlet` binary (manager, scheduler, cleanup)
# on distroless, non-root. `kubectl-fleetlet`, for users' machines, is built
# in the same stage and exported by the `kubectl-fleetlet` target:
#   docker build -t fleetlet .
#   docker build --target kubectl-fleetlet --output type=local,dest=bin .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# The Go of the image, never a downloaded toolchain (as the Makefile).
ENV GOTOOLCHAIN=local CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY config/ config/
COPY pkg/ pkg/
# The Makefile's `go build -o $(BIN)/ ./cmd/...`, for the two shipped commands.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -o /out/ ./cmd/fleetlet ./cmd/kubectl-fleetlet

# kubectl-fleetlet alone, for `--output`: put it on the PATH as a kubectl plugin.
FROM scratch AS kubectl-fleetlet
COPY --from=build /out/kubectl-fleetlet /kubectl-fleetlet

# The default target: fleetlet on distroless static, as nonroot (65532).
FROM gcr.io/distroless/static-debian12:nonroot AS fleetlet
COPY --from=build /out/fleetlet /fleetlet
USER 65532:65532
ENTRYPOINT ["/fleetlet"]
