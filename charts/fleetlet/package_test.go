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
	if err != nil {
		t.Fatal(err)
	}
	want := testenv.BinaryVersion(t, bin, "fleetlet")
	for _, name := range []string{"kubectl-fleetlet", "fleetlet-sandbox"} {
		if got := testenv.BinaryVersion(t, bin, name); got.Version != want.Version || got.Commit != want.Commit {
			t.Errorf("%s is %s (%s), fleetlet is %s (%s)", name, got.Version, got.Commit, want.Version, want.Commit)
		}
	}
	if filepath.Base(pkg) != "fleetlet-"+want.Version+".tgz" {
		t.Errorf("package %s, want fleetlet-%s.tgz", filepath.Base(pkg), want.Version)
	}

	out, err := helm(t, "show", "chart", pkg)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Name, Version, AppVersion string
	}
	if err := yaml.Unmarshal([]byte(out), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "fleetlet" || meta.Version != want.Version || meta.AppVersion != want.Version {
		t.Errorf("packaged chart %s %s (appVersion %s), want fleetlet %s for both", meta.Name, meta.Version, meta.AppVersion, want.Version)
	}

	if out, err := helm(t, "lint", "--strict", pkg, "--set", "clusterName="+clusterName); err != nil {
		t.Errorf("helm lint --strict %s: %v\n%s", pkg, err, out)
	}
	checkPackagedFiles(t, pkg)

	out, err = helm(t, "template", releaseName, pkg, "--namespace", releaseNS, "--set", "clusterName="+clusterName)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(images) != 1 || !images[wantImage] {
		t.Errorf("the packaged chart's workloads run %v, want only %s", images, wantImage)
	}
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
			t.Errorf("%s is not in the package", rel)
		case got != string(data) && rel != "Chart.yaml":
			t.Errorf("the package's %s differs from the chart's", rel)
		}
		delete(packaged, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range packaged {
		t.Errorf("the package holds %s, which is not a chart file", rel)
	}
}

// packageFiles reads a chart package: path under fleetlet/ → content.
func packageFiles(t *testing.T, pkg string) map[string]string {
	t.Helper()
	f, err := os.Open(pkg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(h.Name, "fleetlet/")
		if !ok {
			t.Errorf("package entry %s is outside fleetlet/", h.Name)
			continue
		}
		files[rel] = string(data)
	}
}
