// Package testenv starts real control planes for integration tests, from the
// binaries `make build` puts in bin/ (built from Go modules, since these
// machines can download no release binaries).
//
// Start one kube-apiserver and etcd per test package in TestMain (StartMain),
// and give each test its own namespace. Binaries are never built here: a
// test run builds them once, before `go test`.
package testenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BinDirEnv overrides where the binaries are looked up.
const BinDirEnv = "FLEETLET_BIN_DIR"

// BinDir returns the folder that holds the control-plane binaries:
// $FLEETLET_BIN_DIR, else bin/ in the module root above the working folder.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// ModuleRoot walks up from the working folder to the folder with go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working folder")
		}
		dir = parent
	}
}

// FindBinaries returns the bin folder if it holds every named binary.
func FindBinaries(names ...string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	var missing []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%v not found in %s: run `make build` first (or set %s)", missing, dir, BinDirEnv)
	}
	return dir, nil
}

// RequireBinaries returns the bin folder, failing the test when a binary is
// missing. In -short mode the test is skipped instead: `go test -short`
// runs unit tests only.
func RequireBinaries(t testing.TB, names ...string) string {
	t.Helper()
	dir, err := FindBinaries(names...)
	if err != nil {
		if testing.Short() {
			t.Skipf("integration test skipped in -short mode: %v", err)
		}
		t.Fatal(err)
	}
	return dir
}

// Env is a running kube-apiserver with its etcd.
type Env struct {
	*envtest.Environment
	// Config is an administrator's client configuration.
	Config *rest.Config
}

// Options configure Start.
type Options struct {
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
}

// Start starts etcd and kube-apiserver from the bin folder.
func Start(opts Options) (*Env, error) {
	dir, err := FindBinaries("etcd", "kube-apiserver", "kubectl")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing: len(opts.CRDDirectoryPaths) > 0,
	}
	// On 127.0.0.1 the endpoint reconciler refuses the advertise address and
	// a v1.37 apiserver exits; tests need no kubernetes Endpoints.
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		// envtest may have started the control plane before it failed
		// (installing the CRDs, say): stop what runs.
		return nil, errors.Join(fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err), env.Stop())
	}
	return &Env{Environment: env, Config: cfg}, nil
}

// StartMain is for TestMain: it starts one Env per pointer given (one per
// simulated cluster), runs the package's tests and stops them. Without
// binaries it fails, or in -short mode runs the tests with the Envs nil
// (tests that need one call Need and are skipped).
func StartMain(m *testing.M, opts Options, envs ...**Env) int {
	flag.Parse()
	if _, err := FindBinaries("etcd", "kube-apiserver", "kubectl"); err != nil && testing.Short() {
		return m.Run()
	}
	var started []*Env
	stopAll := func() error {
		var errs []error
		for _, e := range started {
			errs = append(errs, e.Stop())
		}
		return errors.Join(errs...)
	}
	for _, env := range envs {
		e, err := Start(opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = stopAll()
			return 1
		}
		started = append(started, e)
		*env = e
	}
	code := m.Run()
	if err := stopAll(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test control planes:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Need fails the test when env did not start; in -short mode, where
// StartMain runs without binaries, it skips it.
func Need(t testing.TB, env *Env) {
	t.Helper()
	if env != nil {
		return
	}
	if testing.Short() {
		t.Skip("integration test skipped in -short mode: no control-plane binaries")
	}
	t.Fatal("the test control plane did not start")
}

// StartMainWithCRDs is StartMain with fleetlet's own CRDs
// (config/crd/bases) installed in every control plane.
func StartMainWithCRDs(m *testing.M, envs ...**Env) int {
	root, err := ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return StartMain(m, Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}}, envs...)
}
