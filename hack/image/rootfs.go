package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// rootfsEntries are the image's files: what a distroless static image
// gives a static Go binary, and the binary. The layer `image build` makes
// and the folder `image rootfs` writes for the Dockerfile hold exactly
// these.
func rootfsEntries(binary []byte) []tarEntry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	return []tarEntry{
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
}

// rootfsLayer is the image's one layer, every entry stamped with created.
func rootfsLayer(binary []byte, created time.Time) (v1.Layer, error) {
	entries := rootfsEntries(binary)
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

// writeRootfs lays the entries out under dir, with their modes, owners
// and times, as the layer holds them (owners need root, as in a Docker
// build stage; elsewhere they are left as they fall).
func writeRootfs(dir string, entries []tarEntry, modTime time.Time) error {
	for _, e := range entries {
		path := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(e.name, "/")))
		var err error
		if e.dir {
			err = os.MkdirAll(path, 0o755)
		} else {
			err = os.WriteFile(path, e.data, 0o644)
		}
		if err != nil {
			return err
		}
		// Chmod after creation: the umask must not narrow a mode
		// (tmp/ is 1777), and the sticky bit needs os.ModeSticky.
		mode := os.FileMode(e.mode & 0o777)
		if e.mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(path, e.uid, e.uid); err != nil {
				return err
			}
		}
	}
	// Times last, deepest first, so that writing a child does not move
	// its folder's.
	for i := len(entries) - 1; i >= 0; i-- {
		path := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(entries[i].name, "/")))
		if err := os.Chtimes(path, modTime, modTime); err != nil {
			return err
		}
	}
	return nil
}
