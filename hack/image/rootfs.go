package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// rootfsLayer is the image's one layer: what a distroless static image
// gives a static Go binary, and the binary.
func rootfsLayer(binary []byte, created time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	entries := []tarEntry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: caBundlePath[1:], mode: 0o644, data: caBundle()},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, uid: NonRoot},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: Entrypoint[1:], mode: 0o755, data: binary},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := e.write(tw, created); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

type tarEntry struct {
	name string
	mode int64
	dir  bool
	uid  int
	data []byte
}

func (e tarEntry) write(tw *tar.Writer, modTime time.Time) error {
	h := &tar.Header{
		Name:    e.name,
		Mode:    e.mode,
		Uid:     e.uid,
		Gid:     e.uid,
		ModTime: modTime,
		Format:  tar.FormatPAX,
	}
	if e.dir {
		h.Typeflag = tar.TypeDir
	} else {
		h.Typeflag = tar.TypeReg
		h.Size = int64(len(e.data))
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(e.data)
	return err
}

// caBundle is Mozilla's root certificates as golang.org/x/crypto/x509roots
// carries them (a version pinned in go.mod, so the bundle is the module's,
// not the build machine's), in PEM. Roots the bundle trusts only under a
// constraint (such as a distrust date) are left out: a PEM file cannot say
// it.
func caBundle() []byte {
	var out bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return out.Bytes()
}
