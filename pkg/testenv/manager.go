package testenv

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ControllerOptions are the controller-runtime options every test manager
// shares: Scheme's kinds, no metrics or health-probe server (tests run
// side by side on one machine), and controller names not checked for
// uniqueness (a test process starts the same controllers in one manager
// after another). No Logger: the manager logs through ctrl.Log unless the
// caller sets one (NewManager does).
func ControllerOptions() ctrl.Options {
	return ctrl.Options{
		Scheme:                 Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// ManagerOptions configure NewManager.
type ManagerOptions struct {
	// Verbosity is how much of the manager's log reaches the test's
	// (Logger's v).
	Verbosity int
	// UncachedSecrets makes the manager's client read Secrets from the
	// API server, as fleetlet's manager does: its cache holds none.
	UncachedSecrets bool
	// Configure, when set, changes the options last.
	Configure func(*ctrl.Options)
}

// Manager is a controller-runtime manager that runs for one test.
type Manager struct {
	ctrl.Manager
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc
	quiet  func()
}

// NewManager is a manager against cfg with ControllerOptions, logging to
// t (Logger) until the test ends. Set its runnables up with its Context,
// then Run it.
func NewManager(t testing.TB, cfg *rest.Config, opts ManagerOptions) *Manager {
	t.Helper()
	o := ControllerOptions()
	logger, quiet := Logger(t, opts.Verbosity)
	o.Logger = logger
	if opts.UncachedSecrets {
		o.Client = client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	}
	if opts.Configure != nil {
		opts.Configure(&o)
	}
	mgr, err := ctrl.NewManager(cfg, o)
	require.NoError(t, err, "creating a manager")
	ctx, cancel := context.WithCancel(context.Background())
	// A test that fails before Run leaves no context behind.
	t.Cleanup(cancel)
	return &Manager{Manager: mgr, t: t, ctx: ctx, cancel: cancel, quiet: quiet}
}

// Context is the context the manager runs in: it ends when the test does,
// and the manager stops then. Give it to what is set up with the manager
// (field indexes, SetupWithManager).
func (m *Manager) Context() context.Context { return m.ctx }

// Run runs the manager until the test ends, failing the test (without
// stopping it) when the manager's Start returns an error. When the test
// ends the manager's log goes quiet first (it may still log from its
// stop procedure's goroutines after Start returned, and logging to a
// finished test panics), then its context ends and the test waits for it
// to stop.
func (m *Manager) Run() {
	t := m.t
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		assert.NoError(t, m.Start(m.ctx), "manager")
	}()
	t.Cleanup(func() {
		m.cancel()
		<-stopped
	})
	t.Cleanup(m.quiet) // runs first: cleanups run last-in first-out
}

// WaitForCacheSync stops the test unless the manager's cache syncs
// (before the test ends).
func (m *Manager) WaitForCacheSync() {
	m.t.Helper()
	require.True(m.t, m.GetCache().WaitForCacheSync(m.ctx), "the manager's cache did not sync")
}

// RunManagers is for TestMain, which has no test to fail: it starts every
// manager in ctx and returns a function that waits for them all to stop
// (end ctx first) and joins their errors.
func RunManagers(ctx context.Context, mgrs ...ctrl.Manager) (wait func() error) {
	errs := make(chan error, len(mgrs))
	for _, mgr := range mgrs {
		go func() { errs <- mgr.Start(ctx) }()
	}
	return func() error {
		all := make([]error, 0, len(mgrs))
		for range mgrs {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}
