package chart_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// defaultImageRepository is the chart's image.repository, where `make
// image` tags the image.
const defaultImageRepository = "ghcr.io/fleetlet/fleetlet"

// TestPackagedChart checks the chart `make chart` packaged into bin/, the
// one the sandbox (so the e2e suite) installs and a release publishes: its
// version and appVersion are the binaries' version, it holds exactly the
// chart's files, it lints clean, and its default image is the one `make
// image` tags.
func TestPackagedChart(t *testing.T) {
	bin := testenv.RequireBinaries(t, "helm", "fleetlet", "kubectl-fleetlet", "fleetlet-sandbox")
	pkg, err := sandbox.PackagedChart(bin)
	require.NoError(t, err)
	want := testenv.BinaryVersion(t, bin, "fleetlet")
	for _, name := range []string{"kubectl-fleetlet", "fleetlet-sandbox"} {
		got := testenv.BinaryVersion(t, bin, name)
		assert.Falsef(t, got.Version != want.Version || got.Commit != want.Commit, "%s is %s (%s), fleetlet is %s (%s)", name, got.Version, got.Commit, want.Version, want.Commit)
	}
	assert.Equal(t, "fleetlet-"+want.Version+".tgz", filepath.Base(pkg), "package file name")

	out, err := helm(t, "show", "chart", pkg)
	require.NoError(t, err)
	var meta struct {
		Name, Version, AppVersion string
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &meta))
	assert.Falsef(t, meta.Name != "fleetlet" || meta.Version != want.Version || meta.AppVersion != want.Version, "packaged chart %s %s (appVersion %s), want fleetlet %s for both", meta.Name, meta.Version, meta.AppVersion, want.Version)

	out, err = helm(t, "lint", "--strict", pkg, "--set", "clusterName="+clusterName)
	assert.NoError(t, err, "helm lint --strict %s:\n%s", pkg, out)
	checkPackagedFiles(t, pkg)

	out, err = helm(t, "template", releaseName, pkg, "--namespace", releaseNS, "--set", "clusterName="+clusterName)
	require.NoError(t, err)
	images := map[string]bool{}
	for _, obj := range decode(t, out) {
		var spec *corev1.PodSpec
		switch o := obj.(type) {
		case *appsv1.Deployment:
			spec = &o.Spec.Template.Spec
		case *batchv1.Job:
			spec = &o.Spec.Template.Spec
		default:
			continue
		}
		for _, c := range spec.Containers {
			images[c.Image] = true
		}
	}
	wantImage := defaultImageRepository + ":" + want.Version
	assert.Falsef(t, len(images) != 1 || !images[wantImage], "the packaged chart's workloads run %v, want only %s", images, wantImage)
}

// checkPackagedFiles: the package holds the chart folder's files, byte for
// byte (Chart.yaml but for the versions helm package sets, checked above),
// except the Go tests .helmignore leaves out.
func checkPackagedFiles(t *testing.T, pkg string) {
	t.Helper()
	packaged := packageFiles(t, pkg)
	dir := chartDir(t)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got, ok := packaged[rel]
		switch {
		case !ok:
			assert.Failf(t, "a chart file is not in the package", "%s is not in the package", rel)
		case got != string(data) && rel != "Chart.yaml":
			assert.Failf(t, "a packaged file differs", "the package's %s differs from the chart's", rel)
		}
		delete(packaged, rel)
		return nil
	})
	require.NoError(t, err)
	for rel := range packaged {
		assert.Failf(t, "a packaged file is not a chart file", "the package holds %s, which is not a chart file", rel)
	}
}

// packageFiles reads a chart package: path under fleetlet/ → content.
func packageFiles(t *testing.T, pkg string) map[string]string {
	t.Helper()
	f, err := os.Open(pkg)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		rel, ok := strings.CutPrefix(h.Name, "fleetlet/")
		if !assert.Truef(t, ok, "package entry %s is outside fleetlet/", h.Name) {
			continue
		}
		files[rel] = string(data)
	}
}
