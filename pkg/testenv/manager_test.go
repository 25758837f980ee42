package testenv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestControllerOptions(t *testing.T) {
	o := ControllerOptions()
	assert.Equal(t, "0", o.Metrics.BindAddress, "metrics server")
	assert.Equal(t, "0", o.HealthProbeBindAddress, "health-probe server")
	require.NotNil(t, o.Controller.SkipNameValidation, "SkipNameValidation")
	assert.True(t, *o.Controller.SkipNameValidation, "SkipNameValidation")
	for _, obj := range []client.Object{&corev1.Pod{}, &v1alpha1.Target{}} {
		_, _, err := o.Scheme.ObjectKinds(obj)
		assert.NoError(t, err, "the scheme knows %T", obj)
	}
	assert.Nil(t, o.Logger.GetSink(), "no logger")
}

// A test's manager runs until the test ends, then stops: its context is
// done once the test's cleanups ran.
func TestManagerRunsForTheTest(t *testing.T) {
	Need(t, env)
	var mgr *Manager
	t.Run("sub", func(t *testing.T) {
		configured := false
		mgr = NewManager(t, env.Config, ManagerOptions{Verbosity: 1, UncachedSecrets: true, Configure: func(o *ctrl.Options) {
			configured = true
			assert.NotNil(t, o.Logger.GetSink(), "the test's logger is set before Configure")
			if assert.NotNil(t, o.Client.Cache, "uncached Secrets") {
				assert.Equal(t, []client.Object{&corev1.Secret{}}, o.Client.Cache.DisableFor, "uncached Secrets")
			}
		}})
		assert.True(t, configured, "Configure called")
		mgr.Run()
		mgr.WaitForCacheSync()
		var ns corev1.Namespace
		require.NoError(t, mgr.GetClient().Get(mgr.Context(), client.ObjectKey{Name: metav1.NamespaceDefault}, &ns), "reading through the cache")
		assert.NoError(t, mgr.Context().Err(), "the manager's context while the test runs")
	})
	require.NotNil(t, mgr)
	assert.ErrorIs(t, mgr.Context().Err(), context.Canceled, "the manager's context after the test")
}

func TestRunManagers(t *testing.T) {
	Need(t, env)
	var mgrs []ctrl.Manager
	for range 2 {
		mgr, err := ctrl.NewManager(env.Config, ControllerOptions())
		require.NoError(t, err)
		mgrs = append(mgrs, mgr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait := RunManagers(ctx, mgrs...)
	for _, mgr := range mgrs {
		assert.True(t, mgr.GetCache().WaitForCacheSync(ctx), "a manager's cache synced")
	}
	cancel()
	assert.NoError(t, wait(), "the managers stopped")
}
