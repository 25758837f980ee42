package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func runPush(ctx context.Context, args []string) error {
	f := flag.NewFlagSet("push", flag.ContinueOnError)
	layoutDir := f.String("layout", "", "the OCI image layout `image build` wrote")
	ref := f.String("ref", "", "where to push the index: registry/repository:tag")
	insecure := f.Bool("insecure", false, "allow a registry over plain HTTP (a local registry)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *layoutDir == "" || *ref == "" {
		return errors.New("push needs --layout and --ref")
	}
	digest, err := push(ctx, *layoutDir, *ref, *insecure)
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", *ref, digest)
	return nil
}

// push sends the layout's one image index, with every platform's image, to
// ref, with the credentials of the Docker config (~/.docker/config.json,
// $DOCKER_CONFIG) as docker, crane and ko use them.
func push(ctx context.Context, layoutDir, ref string, insecure bool) (v1.Hash, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return v1.Hash{}, err
	}
	idx, err := layoutIndex(layoutDir)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", tag, err)
	}
	return idx.Digest()
}

// layoutIndex is the one image index a layout from `image build` holds.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d entries, want the one image index `image build` writes", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}
