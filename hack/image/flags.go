package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// binaries is --binary os/arch=path, repeated: one image per platform.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(s string) error {
	platform, path, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return fmt.Errorf("%q: want os/arch=path", s)
	}
	if _, err := v1.ParsePlatform(platform); err != nil {
		return err
	}
	b[platform] = path
	return nil
}

func runBuild(args []string) error {
	o := buildOptions{Binaries: binaries{}}
	f := flag.NewFlagSet("build", flag.ContinueOnError)
	f.Var(o.Binaries, "binary", "os/arch=path of a static fleetlet binary for that platform (repeat for each)")
	f.StringVar(&o.Version, "version", "", "the version (label org.opencontainers.image.version)")
	f.StringVar(&o.Commit, "commit", "", "the commit (label org.opencontainers.image.revision)")
	f.StringVar(&o.Source, "source", "https://github.com/fleetlet/fleetlet", "the source repository (label org.opencontainers.image.source)")
	f.StringVar(&o.Ref, "ref", "", "the image reference the layout names (repository:tag)")
	created := f.String("created", "", "the time every file and the config carry, as Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	layoutDir := f.String("layout", "", "folder to write the OCI image layout to (replaced)")
	archive := f.String("archive", "", "file to write the same layout to as a tar")
	if err := f.Parse(args); err != nil {
		return err
	}
	if len(o.Binaries) == 0 || o.Version == "" || o.Ref == "" || *layoutDir == "" {
		return errors.New("build needs --binary, --version, --ref and --layout")
	}
	t, err := createdTime(*created)
	if err != nil {
		return err
	}
	o.Created = t
	idx, err := buildIndex(o)
	if err != nil {
		return err
	}
	if err := writeLayout(*layoutDir, idx, o.Ref); err != nil {
		return err
	}
	if *archive != "" {
		if err := tarFolder(*layoutDir, *archive, o.Created); err != nil {
			return err
		}
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s: %d platforms, layout %s\n", o.Ref, digest, len(o.Binaries), *layoutDir)
	return nil
}

// createdTime is --created, else $SOURCE_DATE_EPOCH, else the Unix epoch.
func createdTime(flagValue string) (time.Time, error) {
	s := flagValue
	if s == "" {
		s = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("created time %q: want Unix seconds", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// runRootfs writes the image's root file system for one binary into a
// folder: what the Dockerfile copies onto scratch.
func runRootfs(args []string) error {
	f := flag.NewFlagSet("rootfs", flag.ContinueOnError)
	binary := f.String("binary", "", "path of the static fleetlet binary")
	out := f.String("out", "", "folder to write the root file system into")
	created := f.String("created", "", "the time every file carries, as Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *out == "" {
		return errors.New("rootfs needs --binary and --out")
	}
	t, err := createdTime(*created)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	return writeRootfs(*out, rootfsEntries(data), t)
}
