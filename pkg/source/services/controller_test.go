package services_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/fleet/fleettest"
	"github.com/fleetlet/fleetlet/pkg/source/services"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// startServices runs a manager on the source with the target registry and
// the Service controller, as cmd/fleetlet wires them, until the test ends.
func (f *fixture) startServices(t *testing.T) {
	t.Helper()
	mgr := testenv.NewManager(t, sourceEnv.Config, testenv.ManagerOptions{Verbosity: 1, UncachedSecrets: true})
	reg, err := fleet.New(fleettest.Options(sourceName), fleettest.NoNodes{})
	require.NoError(t, err)
	require.NoError(t, reg.SetupWithManager(mgr.Context(), mgr))
	svc := &services.Controller{Follower: f.follower(t), Registry: reg}
	require.NoError(t, svc.SetupWithManager(mgr))
	mgr.Run()
}

// serviceReconciles is how many passes the Service controllers of this
// test binary have made.
func serviceReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	n := 0.0
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "follow-Service" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// connectTarget creates a Target in the fixture's namespace for the
// target control plane (the registry calls it Ready once it reads its
// ClusterSummary).
func (f *fixture) connectTarget(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	cs := &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}
	if err := f.target.Create(ctx, cs); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name + "-kubeconfig"},
		Data:       map[string][]byte{"config": testenv.Kubeconfig(t, targetEnv.Config, f.ns, "")},
	}
	f.create(t, f.source, secret)
	f.create(t, f.source, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: secret.Name}},
	})
}

// TestServiceCopiedWhenItsTargetConnects: a Service looked at before the
// target running its delegates is connected (a manager's start: its
// controllers start while the registry still connects the targets) is
// looked at again once that target is Ready, and copied there; nothing
// else about the Service or its proxies changes in between.
func TestServiceCopiedWhenItsTargetConnects(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	f.startServices(t)
	before := serviceReconciles(t)
	p := f.proxy(t, "web-0")
	p.Labels = map[string]string{"app": "web"}
	require.NoError(t, f.source.Update(ctx, p))
	p.Status.Conditions = []corev1.PodCondition{{
		Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue,
		Message: proxy.Record{TargetNamespace: f.ns, TargetName: "east", Chaperon: "web-0"}.Message(),
	}}
	require.NoError(t, f.source.Status().Update(ctx, p))
	f.create(t, f.source, webService(corev1.ServiceTypeClusterIP))
	testenv.EventuallyTrue(t, 30*time.Second, "a pass of the Service controller", func(context.Context) bool {
		return serviceReconciles(t) > before
	})
	var cp corev1.Service
	require.False(t, f.get(t, f.target, "web", &cp), "a copy before the target was connected")

	f.connectTarget(t, "east")
	testenv.EventuallyTrue(t, 30*time.Second, "the copy of Service web in the target once it is connected", func(context.Context) bool {
		return f.get(t, f.target, "web", &cp)
	})
	assert.Equal(t, sourceName, cp.Labels[v1alpha1.LabelParentCluster], "the copy's labels %v do not name the source", cp.Labels)
}
