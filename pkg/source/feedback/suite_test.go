package feedback_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/source/feedback"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/fleet/fleettest"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where proxies, Targets and virtual
// nodes live, and a target, where chaperons and delegates live. Neither runs
// a kubelet, a scheduler or kube-controller-manager: the tests write the
// nodes, bindings and pod statuses themselves, and a chaperon deleted with
// Foreground propagation stays, marked deleted, with the foregroundDeletion
// finalizer, until a test removes it (the garbage collector's part).
var sourceEnv, targetEnv *testenv.Env

// sourceName is the source cluster's name in the target.
const sourceName = "src"

func TestMain(m *testing.M) {
	// Loggers of the manager are per test (testenv.Logger); anything logged through
	// the global one goes nowhere.
	ctrl.SetLogger(logr.Discard())
	os.Exit(func() int {
		return testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv)
	}())
}

// harness is the source side of a manager, wired as cmd/fleetlet wires it
// (target registry, proxy reconciler, feedback), and admin clients of both
// control planes.
type harness struct {
	source, target client.Client
	// cached reads the source through the manager's cache, as the
	// reconcilers do.
	cached   client.Client
	registry *fleet.Registry
	proxies  *elector.Reconciler
	feedback *feedback.Reconciler
}

// start runs a manager against the source until the test ends.
func start(t *testing.T) *harness { t.Helper(); return startWith(t, nil) }

// startWith is start with the feedback reconciler's settings changed by
// configure.
func startWith(t *testing.T, configure func(*feedback.Reconciler)) *harness {
	t.Helper()
	testenv.Need(t, sourceEnv)
	scheme := testenv.Scheme()
	mgr := testenv.NewManager(t, sourceEnv.Config, testenv.ManagerOptions{Verbosity: 1, UncachedSecrets: true})
	ctx := mgr.Context()
	require.NoError(t, indexer.Register(ctx, mgr.GetFieldIndexer(), indexer.All...))
	reg, err := fleet.New(fleettest.Options(sourceName), fleettest.NoNodes{})
	require.NoError(t, err)
	require.NoError(t, reg.SetupWithManager(ctx, mgr))
	proxies, err := elector.New(elector.Options{
		SourceName: sourceName,
		Spec:       func(p *corev1.Pod) (*corev1.PodSpec, error) { return p.Spec.DeepCopy(), nil },
		Registry:   reg,
	})
	require.NoError(t, err)
	require.NoError(t, proxies.SetupWithManager(ctx, mgr))
	fb := feedback.New(reg)
	if configure != nil {
		configure(fb)
	}
	require.NoError(t, fb.SetupWithManager(mgr))
	mgr.Run()
	src, err := client.New(sourceEnv.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	tgt, err := client.New(targetEnv.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	ensureSummary(t, tgt)
	mgr.WaitForCacheSync()
	return &harness{source: src, target: tgt, cached: mgr.GetClient(), registry: reg, proxies: proxies, feedback: fb}
}

// ensureSummary creates the target's ClusterSummary, as fleetlet there
// would: the registry's probe reads it to call the target Ready.
func ensureSummary(t *testing.T, c client.Client) {
	t.Helper()
	cs := &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}
	if err := c.Create(context.Background(), cs); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// namespace creates a namespace in the source and the same one in the
// target. When the test ends every pod left in the source namespace loses
// its finalizers, so that no later manager finds a proxy to finalize.
func (h *harness) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	require.NoError(t, h.source.Create(ctx, ns))
	require.NoError(t, h.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}))
	t.Cleanup(func() {
		var pods corev1.PodList
		if err := h.source.List(context.Background(), &pods, client.InNamespace(ns.Name)); err != nil {
			assert.NoError(t, err)
			return
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if len(p.Finalizers) == 0 {
				continue
			}
			patch := client.MergeFrom(p.DeepCopy())
			p.Finalizers = nil
			assert.NoError(t, client.IgnoreNotFound(h.source.Patch(context.Background(), p, patch)))
		}
	})
	return ns.Name
}

// unreachable is a server no one listens on.
const unreachable = "https://127.0.0.1:1"

// putSecret creates or replaces the kubeconfig Secret of a Target.
func (h *harness) putSecret(t *testing.T, ns, name string, kubeconfig []byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"config": kubeconfig}}
	err := h.source.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		err = h.source.Update(ctx, s)
	}
	require.NoError(t, err)
}

// connect creates a namespaced Target named name in ns, whose kubeconfig
// points at server (the target control plane when empty), and waits for
// its Ready condition to say status/reason. The Target is deleted when the
// test ends.
func (h *harness) connect(t *testing.T, ns, name, server string, status metav1.ConditionStatus, reason string) proxy.TargetKey {
	t.Helper()
	return h.connectTo(t, ns, name, testenv.Kubeconfig(t, targetEnv.Config, ns, server), status, reason)
}

// connectTo is connect with a kubeconfig of the test's choice: another
// identity, another control plane.
func (h *harness) connectTo(t *testing.T, ns, name string, kubeconfig []byte, status metav1.ConditionStatus, reason string) proxy.TargetKey {
	t.Helper()
	h.putSecret(t, ns, name+"-kubeconfig", kubeconfig)
	tg := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: name + "-kubeconfig"}},
	}
	require.NoError(t, h.source.Create(context.Background(), tg))
	t.Cleanup(func() {
		assert.NoError(t, client.IgnoreNotFound(h.source.Delete(context.Background(), tg)))
	})
	h.waitTarget(t, ns, name, status, reason)
	return proxy.TargetKey{Namespace: ns, Name: name}
}

// waitTarget waits for a Target's Ready condition.
func (h *harness) waitTarget(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	var last *metav1.Condition
	testenv.EventuallyTrue(t, waitTimeout, fmt.Sprintf("Target %s/%s Ready=%s (%s)", ns, name, status, reason), func(ctx context.Context) bool {
		var tg v1alpha1.Target
		if err := h.source.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tg); err != nil {
			return false
		}
		last = meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
		return last != nil && last.Status == status && last.Reason == reason
	}, func() string { return fmt.Sprintf("last Ready condition: %+v", last) })
}

// waitTimeout only ends a test that would hang: what a test waits for is
// its condition.
const waitTimeout = 60 * time.Second
