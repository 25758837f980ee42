package chart_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	chart "github.com/fleetlet/fleetlet/charts/fleetlet"
)

// TestEmbeddedChart checks that the embedded chart is the chart on disk:
// every file helm would package (not the tests), byte for byte, and that
// WriteTo gives a folder helm renders.
func TestEmbeddedChart(t *testing.T) {
	onDisk := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".go") {
			return nil
		}
		onDisk[filepath.ToSlash(path)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string]bool{}
	err = fs.WalkDir(chart.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		embedded[path] = true
		want, err := os.ReadFile(filepath.FromSlash(path))
		if err != nil {
			t.Errorf("%s is embedded but not on disk: %v", path, err)
			return nil
		}
		got, err := fs.ReadFile(chart.FS(), path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("embedded %s differs from the file on disk", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range onDisk {
		if !embedded[p] {
			t.Errorf("%s is part of the chart but not embedded (charts/fleetlet/embed.go)", p)
		}
	}
	for _, p := range []string{"Chart.yaml", "values.yaml", "values.schema.json", "templates/_helpers.tpl", "files/crds/multicluster.fleetlet.io_podchaperons.yaml"} {
		if !embedded[p] {
			t.Errorf("%s is not embedded", p)
		}
	}

	dir, err := chart.WriteTo(filepath.Join(t.TempDir(), "chart"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helm(t, "lint", "--strict", dir, "--set", "clusterName="+clusterName); err != nil {
		t.Errorf("helm lint of the written chart: %v", err)
	}
}
