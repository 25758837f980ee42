// Package chart embeds the fleetlet Helm chart, so that programs such as the
// sandbox install exactly the chart this version was built with, wherever
// they run from.
package chart

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// files are the chart's files as `helm package` would take them
// (.helmignore leaves out the tests); "all:" keeps templates/_helpers.tpl.
//
//go:embed Chart.yaml values.yaml values.schema.json README.md .helmignore all:templates files
var files embed.FS

// FS returns the chart's files, rooted at the chart's folder.
func FS() fs.FS { return files }

// WriteTo writes the chart into dir (created if missing), replacing what a
// previous WriteTo left there, and returns dir for `helm install`.
func WriteTo(dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("writing the fleetlet chart to %s: %w", dir, err)
	}
	return dir, nil
}
