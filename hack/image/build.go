package main

import (
	"fmt"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user, entrypoint and OCI labels: what the chart and the
// tests rely on.
const (
	// NonRoot is the user and group the image runs as (distroless's
	// nonroot), matching the chart's runAsUser and runAsGroup.
	NonRoot    = 65532
	Entrypoint = "/fleetlet"

	LabelSource   = "org.opencontainers.image.source"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelTitle    = "org.opencontainers.image.title"
)

type buildOptions struct {
	Binaries binaries // os/arch → path
	Version  string
	Commit   string
	Source   string
	Ref      string
	Created  time.Time
}

func (o buildOptions) labels() map[string]string {
	return map[string]string{
		LabelTitle:    "fleetlet",
		LabelSource:   o.Source,
		LabelVersion:  o.Version,
		LabelRevision: o.Commit,
		LabelCreated:  o.Created.Format(time.RFC3339),
	}
}

// buildIndex makes one image per platform and the OCI image index of them,
// in platform order.
func buildIndex(o buildOptions) (v1.ImageIndex, error) {
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, err
		}
		img, err := buildImage(o, *platform, o.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	return mutate.Annotations(idx, o.labels()).(v1.ImageIndex), nil
}

// buildImage is one platform's image: the root file system layer on an
// empty base, and the config that runs it.
func buildImage(o buildOptions, platform v1.Platform, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := rootfsLayer(bin, o.Created)
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "hack/image: fleetlet " + o.Version, Comment: "fleetlet and a distroless-like root (passwd, group, CA bundle)"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Author = "fleetlet"
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/",
		Env:        []string{"PATH=/", "SSL_CERT_FILE=" + caBundlePath},
		Labels:     o.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: o.Created})
}
