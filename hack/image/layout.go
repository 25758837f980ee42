package main

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of the index in the layout's index.json: the tag (OCI's
// ref.name) and the whole reference (what containerd and Docker import the
// image as).
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// writeLayout replaces dir with an OCI image layout holding idx, named ref.
func writeLayout(dir string, idx v1.ImageIndex, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationRefName:        tag.TagStr(),
		annotationContainerdName: tag.Name(),
	}))
}

// tarFolder writes dir's files to out as a tar, paths relative to dir, in
// lexical order, every time modTime.
func tarFolder(dir, out string, modTime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, dir+string(filepath.Separator)))
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: modTime})
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: info.Size(), ModTime: modTime}); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if walkErr != nil {
		f.Close()
		return walkErr
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
