// Command image builds fleetlet's container image without a container
// engine, and pushes it: the one way the project makes its image (the
// Makefile's `make image` and `make image-push` call it).
//
//	image build --binary linux/amd64=bin/image/linux-amd64/fleetlet \
//	            --binary linux/arm64=bin/image/linux-arm64/fleetlet \
//	            --version V --commit C --ref ghcr.io/fleetlet/fleetlet:V \
//	            --layout bin/image/oci --archive bin/fleetlet-image.tar
//	image push  --layout bin/image/oci --ref REGISTRY/fleetlet:V
//	image rootfs --binary /out/fleetlet --out /rootfs
//
// Each platform's image is one layer on an empty base, what a distroless
// static image holds for a static binary: /fleetlet, /etc/passwd and
// /etc/group naming root and nonroot (65532), /home/nonroot, /tmp and a CA
// bundle (Mozilla's roots from golang.org/x/crypto/x509roots). It runs as
// 65532:65532 with /fleetlet as its entrypoint and carries the OCI labels
// source, version, revision and created. The platforms make one image
// index, written as an OCI image layout (a folder) and the same layout as
// one tar file (an oci-archive: `skopeo copy oci-archive:…`, `podman load`,
// `docker load` on Docker 25 and later). Every timestamp is the commit's
// (--created), so that one commit always gives the same digests.
//
// `image rootfs` writes the same files as a folder: the Dockerfile's build
// stage runs it and copies the folder onto scratch, with the config below
// restated, so that `docker build` makes the image `make image` makes
// (TestDockerfileMatchesMakeImage holds the two together).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: image build|push|rootfs [flags] (see hack/image/main.go)")
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:])
	case "push":
		return runPush(ctx, args[1:])
	case "rootfs":
		return runRootfs(args[1:])
	default:
		return fmt.Errorf("unknown command %q: want build, push or rootfs", args[0])
	}
}
