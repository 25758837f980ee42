package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// archiveName is the oci-archive `make image` writes into bin/.
const archiveName = "fleetlet-image.tar"

// TestImageArchive loads the archive `make image` built, checks each
// platform's config and root file system, and runs the linux/amd64 binary
// from its layer.
func TestImageArchive(t *testing.T) {
	bin := testenv.RequireBinaries(t, archiveName, "fleetlet")
	want := testenv.BinaryVersion(t, bin, "fleetlet")
	dir := untar(t, filepath.Join(bin, archiveName))
	idx, err := layoutIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkLayoutNames(t, dir, "ghcr.io/fleetlet/fleetlet:"+want.Version)

	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := platformsOf(m); got != "linux/amd64 linux/arm64" {
		t.Fatalf("index platforms = %q, want linux/amd64 linux/arm64", got)
	}
	for _, d := range m.Manifests {
		t.Run(d.Platform.String(), func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, img, *d.Platform, want.Version, want.Commit)
			files := layerFiles(t, img)
			checkRoot(t, files)
			checkBinary(t, files[Entrypoint[1:]], *d.Platform, want.Version)
		})
	}
}

func checkConfig(t *testing.T, img v1.Image, p v1.Platform, version, commit string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("config platform %s/%s, index says %s", cf.OS, cf.Architecture, p)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot)", cf.Config.User)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/fleetlet" || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/fleetlet] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	for k, v := range map[string]string{
		LabelVersion:  version,
		LabelRevision: commit,
		LabelSource:   "https://github.com/fleetlet/fleetlet",
	} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
}

// layerFiles reads every regular file of the image's layers, by path.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				if h.Name == Entrypoint[1:] && h.Mode&0o111 != 0o111 {
					t.Errorf("%s mode %o: not executable by everyone", h.Name, h.Mode)
				}
				data, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files[h.Name] = data
			}
		}
		rc.Close()
	}
	return files
}

// checkRoot: the user the image runs as exists, and TLS has roots.
func checkRoot(t *testing.T, files map[string][]byte) {
	t.Helper()
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd has no nonroot 65532: %q", files["etc/passwd"])
	}
	n := 0
	for rest := files[caBundlePath[1:]]; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("CA bundle: %v", err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle holds %d certificates, want Mozilla's (over 100)", n)
	}
}

// checkBinary: the binary is for the platform; the one this machine can run
// says the version the labels say.
func checkBinary(t *testing.T, data []byte, p v1.Platform, version string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("/fleetlet: %v", err)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != wantMachine {
		t.Errorf("/fleetlet is for %s, want %s", f.Machine, wantMachine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("/fleetlet is dynamically linked: the empty base has no loader")
		}
	}
	if p.Architecture != "amd64" {
		return
	}
	path := filepath.Join(t.TempDir(), "fleetlet")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("/fleetlet --version: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "fleetlet "+version+" ") {
		t.Errorf("/fleetlet --version = %q, want fleetlet %s …", out, version)
	}
}

// TestPushToRegistry pushes the archive's index to a registry on loopback
// (go-containerregistry's own, in process) and reads it back.
func TestPushToRegistry(t *testing.T) {
	bin := testenv.RequireBinaries(t, archiveName)
	dir := untar(t, filepath.Join(bin, archiveName))
	srv := httptest.NewServer(registry.New(registry.Logger(nopLogger())))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/fleetlet:test"

	digest, err := push(t.Context(), dir, ref, true)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	gotDigest, _ := got.Digest()
	if gotDigest != digest {
		t.Fatalf("registry has %s, pushed %s", gotDigest, digest)
	}
	m, _ := got.IndexManifest()
	if p := platformsOf(m); p != "linux/amd64 linux/arm64" {
		t.Fatalf("pushed platforms %q", p)
	}
}

// TestBuildIsReproducible builds an index twice from the same binaries and
// time: the digests match, and the config carries what the options say.
func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bins := binaries{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(path, []byte("binary for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = path
	}
	o := buildOptions{Binaries: bins, Version: "1.2.3", Commit: "abc", Source: "https://example.com/f", Ref: "example.com/f:1.2.3", Created: time.Unix(1700000000, 0).UTC()}
	var digests []v1.Hash
	for range 2 {
		idx, err := buildIndex(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the same input differ: %v", digests)
	}
	o.Created = o.Created.Add(time.Second)
	idx, err := buildIndex(o)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d == digests[0] {
		t.Fatal("a different created time gave the same digest: the time is not in the image")
	}
}

func platformsOf(m *v1.IndexManifest) string {
	var ps []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			ps = append(ps, "<none>")
			continue
		}
		ps = append(ps, d.Platform.String())
	}
	return strings.Join(ps, " ")
}

// checkLayoutNames: index.json names the image as the chart's default
// image reference (repository:appVersion).
func checkLayoutNames(t *testing.T, dir, ref string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[annotationContainerdName] != ref {
		t.Fatalf("index.json names %v, want one entry named %s", m.Manifests, ref)
	}
}

// untar extracts an oci-archive into a temporary folder.
func untar(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(dst, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the folder", h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
