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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	require.NoError(t, err)
	checkLayoutNames(t, dir, "ghcr.io/fleetlet/fleetlet:"+want.Version)

	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Equal(t, "linux/amd64 linux/arm64", platformsOf(m), "index platforms")
	for _, d := range m.Manifests {
		t.Run(d.Platform.String(), func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			require.NoError(t, err)
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
	require.NoError(t, err)
	assert.Falsef(t, cf.OS != p.OS || cf.Architecture != p.Architecture, "config platform %s/%s, index says %s", cf.OS, cf.Architecture, p)
	assert.Equal(t, "65532:65532", cf.Config.User, "user (nonroot)")
	assert.Falsef(t, strings.Join(cf.Config.Entrypoint, " ") != "/fleetlet" || len(cf.Config.Cmd) != 0, "entrypoint %q cmd %q, want [/fleetlet] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd)
	for k, v := range map[string]string{
		LabelVersion:  version,
		LabelRevision: commit,
		LabelSource:   "https://github.com/fleetlet/fleetlet",
	} {
		assert.Equal(t, v, cf.Config.Labels[k], "label %s", k)
	}
}

// layerFiles reads every regular file of the image's layers, by path.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if h.Typeflag == tar.TypeReg {
				assert.Falsef(t, h.Name == Entrypoint[1:] && h.Mode&0o111 != 0o111, "%s mode %o: not executable by everyone", h.Name, h.Mode)
				data, err := io.ReadAll(tr)
				require.NoError(t, err)
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
	assert.Containsf(t, string(files["etc/passwd"]), "nonroot:x:65532:65532:", "etc/passwd has no nonroot 65532: %q", files["etc/passwd"])
	n := 0
	for rest := files[caBundlePath[1:]]; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		_, err := x509.ParseCertificate(b.Bytes)
		require.NoError(t, err, "CA bundle")
		n++
	}
	assert.GreaterOrEqualf(t, n, 100, "CA bundle holds %d certificates, want Mozilla's (over 100)", n)
}

// checkBinary: the binary is for the platform; the one this machine can run
// says the version the labels say.
func checkBinary(t *testing.T, data []byte, p v1.Platform, version string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err, "/fleetlet")
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	assert.Equal(t, wantMachine, f.Machine, "/fleetlet is for %s, want %s", f.Machine, wantMachine)
	for _, prog := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, prog.Type, "/fleetlet is dynamically linked: the empty base has no loader")
	}
	if p.Architecture != "amd64" {
		return
	}
	path := filepath.Join(t.TempDir(), "fleetlet")
	require.NoError(t, os.WriteFile(path, data, 0o755))
	out, err := exec.Command(path, "--version").CombinedOutput()
	require.NoError(t, err, "/fleetlet --version: %s", out)
	assert.Truef(t, strings.HasPrefix(string(out), "fleetlet "+version+" "), "/fleetlet --version = %q, want fleetlet %s …", out, version)
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
	require.NoError(t, err)
	tag, err := name.NewTag(ref, name.Insecure)
	require.NoError(t, err)
	got, err := remote.Index(tag)
	require.NoError(t, err)
	gotDigest, _ := got.Digest()
	require.Equal(t, digest, gotDigest, "registry has %s, pushed %s", gotDigest, digest)
	m, _ := got.IndexManifest()
	require.Equal(t, "linux/amd64 linux/arm64", platformsOf(m), "pushed platforms")
}

// TestBuildIsReproducible builds an index twice from the same binaries and
// time: the digests match, and the config carries what the options say.
func TestBuildIsReproducible(t *testing.T) {
	dir := t.TempDir()
	bins := binaries{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		require.NoError(t, os.WriteFile(path, []byte("binary for "+p), 0o755))
		bins[p] = path
	}
	o := buildOptions{Binaries: bins, Version: "1.2.3", Commit: "abc", Source: "https://example.com/f", Ref: "example.com/f:1.2.3", Created: time.Unix(1700000000, 0).UTC()}
	var digests []v1.Hash
	for range 2 {
		idx, err := buildIndex(o)
		require.NoError(t, err)
		d, err := idx.Digest()
		require.NoError(t, err)
		digests = append(digests, d)
	}
	require.Equalf(t, digests[0], digests[1], "two builds of the same input differ: %v", digests)
	o.Created = o.Created.Add(time.Second)
	idx, err := buildIndex(o)
	require.NoError(t, err)
	d, _ := idx.Digest()
	require.NotEqual(t, digests[0], d, "a different created time gave the same digest: the time is not in the image")
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
	require.NoError(t, err)
	m, err := v1.ParseIndexManifest(bytes.NewReader(data))
	require.NoError(t, err)
	require.Falsef(t, len(m.Manifests) != 1 || m.Manifests[0].Annotations[annotationContainerdName] != ref, "index.json names %v, want one entry named %s", m.Manifests, ref)
}

// untar extracts an oci-archive into a temporary folder.
func untar(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		require.NoError(t, err)
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		require.Truef(t, strings.HasPrefix(dst, dir+string(filepath.Separator)), "archive entry %q leaves the folder", h.Name)
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(dst, 0o755))
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, data, 0o644))
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
