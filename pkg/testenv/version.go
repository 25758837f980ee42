package testenv

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fleetlet/fleetlet/pkg/version"
)

// BinaryVersion is what bin/<name> says it is (`<name> version -o json`),
// failing the test when it cannot say, or says it was built without the
// Makefile's stamp.
func BinaryVersion(t testing.TB, binDir, name string) version.Info {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, name), "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v", name, err)
	}
	var info version.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("%s version -o json printed %q: %v", name, out, err)
	}
	if info.Version == "" || info.Version == version.Unversioned {
		t.Fatalf("%s is not stamped with a version (%q): build it with make", name, info.Version)
	}
	return info
}
