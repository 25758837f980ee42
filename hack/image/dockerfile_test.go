package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"
)

// TestDockerfileMatchesMakeImage holds the repository's Dockerfile to the
// image `make image` builds: the binary compiled with the Makefile's image
// flags, the root file system hack/image lays out, and the same config
// (user, entrypoint, working folder, environment, labels).
func TestDockerfileMatchesMakeImage(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	require.GreaterOrEqual(t, len(stages), 2, "a build stage and the image")
	build, final := stages[0], stages[len(stages)-1]

	t.Run("binary", func(t *testing.T) {
		cmd := build.one(t, "RUN", "go build")
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-o /out/fleetlet ./cmd/fleetlet"} {
			require.Contains(t, cmd, want)
		}
		require.Contains(t, cmd, `-ldflags "-s -w `+makefileLDFlags(t)+`"`,
			"the Dockerfile stamps the binary as the Makefile's image target does")
	})

	t.Run("root file system", func(t *testing.T) {
		require.Contains(t, build.one(t, "RUN", "hack/image rootfs"), "--binary /out/fleetlet --out /rootfs")
		require.Equal(t, "scratch AS fleetlet", final.from)
		require.Equal(t, "--from=build /rootfs/ /", final.one(t, "COPY", ""))
		require.Len(t, final.all("COPY"), 1, "nothing but hack/image's files")
	})

	t.Run("config", func(t *testing.T) {
		args := map[string]string{"VERSION": "1.2.3", "COMMIT": "abc", "SOURCE": "https://example.com/f", "CREATED": "2023-11-14T22:13:20Z"}
		o := buildOptions{Version: "1.2.3", Commit: "abc", Source: "https://example.com/f", Created: time.Unix(1700000000, 0).UTC()}
		bin := filepath.Join(t.TempDir(), "fleetlet")
		require.NoError(t, os.WriteFile(bin, []byte("binary"), 0o755))
		img, err := buildImage(o, v1.Platform{OS: "linux", Architecture: "amd64"}, bin)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)

		var entrypoint []string
		require.NoError(t, json.Unmarshal([]byte(final.one(t, "ENTRYPOINT", "")), &entrypoint))
		got := v1.Config{
			User:       final.one(t, "USER", ""),
			Entrypoint: entrypoint,
			WorkingDir: final.one(t, "WORKDIR", ""),
			Env:        pairs(final.one(t, "ENV", ""), nil),
			Labels:     map[string]string{},
		}
		for _, kv := range pairs(final.one(t, "LABEL", ""), args) {
			k, v, _ := strings.Cut(kv, "=")
			got.Labels[k] = v
		}
		sort.Strings(got.Env)
		want := cf.Config
		sort.Strings(want.Env)
		require.Empty(t, cmp.Diff(want, got), "the Dockerfile's config differs from make image's (-make image, +Dockerfile)")
	})
}

// TestRootfsIsTheLayer: `image rootfs` writes exactly the files, modes and
// times of the layer `image build` makes.
func TestRootfsIsTheLayer(t *testing.T) {
	created := time.Unix(1700000000, 0).UTC()
	binary := []byte("a static binary")
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleetlet")
	require.NoError(t, os.WriteFile(bin, binary, 0o755))
	out := filepath.Join(dir, "rootfs")
	require.NoError(t, runRootfs([]string{"--binary", bin, "--out", out, "--created", "1700000000"}))

	layer, err := rootfsLayer(binary, created)
	require.NoError(t, err)
	rc, err := layer.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	want := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		want[strings.TrimSuffix(h.Name, "/")] = describe(fs.FileMode(h.Mode), h.FileInfo().IsDir(), h.ModTime, data)
	}

	got := map[string]string{}
	require.NoError(t, filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == out {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var data []byte
		if !d.IsDir() {
			if data, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		mode := info.Mode().Perm()
		if info.Mode()&fs.ModeSticky != 0 {
			mode |= 0o1000
		}
		rel, _ := filepath.Rel(out, path)
		got[filepath.ToSlash(rel)] = describe(mode, d.IsDir(), info.ModTime(), data)
		return nil
	}))
	require.Empty(t, cmp.Diff(want, got), "rootfs differs from the layer (-layer, +rootfs)")
}

func describe(mode fs.FileMode, dir bool, mod time.Time, data []byte) string {
	kind := "file"
	if dir {
		kind = "dir"
	}
	return kind + " " + strings.TrimLeft((mode&0o7777).String(), "-") + " " + mod.UTC().Format(time.RFC3339) + " " + string(data)
}

// makefileLDFlags is the Makefile's LDFLAGS with make's $(VERSION) and
// $(COMMIT) written as the Dockerfile's build arguments.
func makefileLDFlags(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^LDFLAGS := (.*)$`).FindSubmatch(data)
	require.NotNil(t, m, "the Makefile sets LDFLAGS")
	image := regexp.MustCompile(`(?m)^\s+\$\(FLEETLET_BUILD\) -ldflags "-s -w \$\(LDFLAGS\)"`)
	require.True(t, image.Match(data), "make image compiles with -ldflags \"-s -w $(LDFLAGS)\"")
	require.Regexp(t, `(?m)^FLEETLET_BUILD := env CGO_ENABLED=0 go build -trimpath$`, string(data))
	return strings.NewReplacer("$(VERSION)", "$VERSION", "$(COMMIT)", "$COMMIT").Replace(string(m[1]))
}

// stage is one FROM of a Dockerfile and its instructions, continuation
// lines joined.
type stage struct {
	from  string
	instr [][2]string // keyword, arguments
}

func (s stage) all(keyword string) []string {
	var out []string
	for _, in := range s.instr {
		if in[0] == keyword {
			out = append(out, in[1])
		}
	}
	return out
}

// one is the single instruction of that keyword whose arguments contain
// substr.
func (s stage) one(t *testing.T, keyword, substr string) string {
	t.Helper()
	var found []string
	for _, a := range s.all(keyword) {
		if strings.Contains(a, substr) {
			found = append(found, a)
		}
	}
	require.Len(t, found, 1, "%s %q in the stage FROM %s", keyword, substr, s.from)
	return found[0]
}

func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var stages []stage
	var line string
	for raw := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(raw)
		if line == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, "\\"); ok {
			line += rest + " "
			continue
		}
		line += trimmed
		keyword, args, _ := strings.Cut(line, " ")
		args = strings.Join(strings.Fields(args), " ")
		line = ""
		if strings.ToUpper(keyword) == "FROM" {
			args = strings.TrimSpace(regexp.MustCompile(`--platform=\S+`).ReplaceAllString(args, ""))
			stages = append(stages, stage{from: args})
			continue
		}
		require.NotEmpty(t, stages, "%s before any FROM", keyword)
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, [2]string{strings.ToUpper(keyword), args})
	}
	return stages
}

// pairs splits ENV's or LABEL's k=v words, expanding $NAME from args.
func pairs(s string, args map[string]string) []string {
	var out []string
	for _, kv := range strings.Fields(s) {
		out = append(out, os.Expand(kv, func(name string) string { return args[name] }))
	}
	return out
}
