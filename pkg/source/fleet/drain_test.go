package fleet_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// drainFixture is a connected Target with a proxy bound to its virtual node
// (held by a PodDisruptionBudget that allows no disruption: no disruption
// controller runs here) and the proxy's chaperon in the target.
type drainFixture struct {
	*fixture
	key   proxypod.TargetKey
	proxy *corev1.Pod
	pdb   *policyv1.PodDisruptionBudget
	pc    *v1alpha1.PodChaperon
}

func startDrain(t *testing.T) *drainFixture {
	t.Helper()
	f := start(t)
	ensureSummary(t, f.target)
	ctx := context.Background()
	require.NoError(t, f.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	f.putSecret(t, "s", testenv.Kubeconfig(t, targetEnv.Config, f.ns, ""))
	f.createTarget(t, "leaving", "s")
	f.waitReady(t, "leaving", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	d := &drainFixture{fixture: f, key: proxypod.TargetKey{Namespace: f.ns, Name: "leaving"}}
	testenv.EventuallyTrue(t, waitTimeout, "the drain finalizer on the Target", func(ctx context.Context) bool {
		tg := d.get(t)
		return tg != nil && slices.Contains(tg.Finalizers, v1alpha1.FinalizerDrain)
	})

	node := proxypod.NodeName(proxypod.TargetKey{Namespace: f.ns, Name: "leaving"})
	d.proxy = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	mustCreate(t, f.source, d.proxy)
	// Running and Ready, as feedback mirrors its delegate: a Pending pod
	// is evicted whatever its budget says.
	d.proxy.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, f.source.Status().Update(ctx, d.proxy))
	d.pdb = &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	mustCreate(t, f.source, d.pdb)
	d.pc = &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db-0-x", Labels: map[string]string{
			v1alpha1.LabelParentCluster: "src", v1alpha1.LabelParentUID: string(d.proxy.UID)}},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	mustCreate(t, f.target, d.pc)
	return d
}

func (d *drainFixture) get(t *testing.T) *v1alpha1.Target {
	t.Helper()
	var tg v1alpha1.Target
	if err := d.source.Get(context.Background(), client.ObjectKey{Namespace: d.key.Namespace, Name: d.key.Name}, &tg); err != nil {
		return nil
	}
	return &tg
}

// waitDraining waits for the Draining condition with a reason, and returns
// its message.
func (d *drainFixture) waitDraining(t *testing.T, reason, mentions string) {
	t.Helper()
	var last *metav1.Condition
	testenv.EventuallyTrue(t, waitTimeout, "Draining="+reason+" naming "+mentions, func(context.Context) bool {
		tg := d.get(t)
		if tg == nil {
			return false
		}
		last = meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionDraining)
		return last != nil && last.Reason == reason && strings.Contains(last.Message, mentions)
	})
}

func (d *drainFixture) waitGone(t *testing.T) {
	t.Helper()
	testenv.EventuallyTrue(t, waitTimeout, "the Target gone", func(context.Context) bool { return d.get(t) == nil })
	// The finalizer goes first, then the connection and the node (drain):
	// the Target may be gone a moment before them.
	testenv.EventuallyTrue(t, waitTimeout, "the drained target's connection closed and its virtual node removed", func(context.Context) bool {
		if _, ok := d.registry.Get(d.key); ok {
			return false
		}
		d.nodes.mu.Lock()
		defer d.nodes.mu.Unlock()
		return d.nodes.removed[d.key] > 0
	})
}

// Deleting a Target drains it: the finalizer holds it while a proxy is
// bound to its virtual node — evicted once its PodDisruptionBudget allows
// — and while this source's chaperons are in the target, which are then
// deleted there; the Draining condition says what it waits for. Before:
// the Target, its connection and its node went at once, and its delegates
// ran on in the target for good.
func TestDeletedTargetDrains(t *testing.T) {
	d := startDrain(t)
	ctx := context.Background()
	// A DaemonSet's pod on the virtual node (its DaemonSet tolerates every
	// taint) is left alone, as kubectl drain --ignore-daemonsets does: its
	// DaemonSet would make it again at once, and it goes with the node.
	// Before: it was evicted and waited for, and the drain never ended.
	daemon := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "kube-proxy-x", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "kube-proxy", UID: "ds-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: d.proxy.Spec.NodeName, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	mustCreate(t, d.source, daemon)
	require.NoError(t, d.source.Delete(ctx, d.get(t)))
	d.waitDraining(t, "Blocked", "PodDisruptionBudget")
	_, ok := d.registry.Get(d.key)
	require.True(t, ok, "the connection went before the drain ended")
	require.NoError(t, d.source.Delete(ctx, d.pdb))
	testenv.EventuallyTrue(t, waitTimeout, "the proxy evicted", func(ctx context.Context) bool {
		var p corev1.Pod
		return d.source.Get(ctx, client.ObjectKeyFromObject(d.proxy), &p) == nil && p.DeletionTimestamp != nil
	})
	d.waitDraining(t, "Waiting", "db-0")
	// The proxy goes (its delegate's kubelet, then fleetlet's finalize).
	require.NoError(t, client.IgnoreNotFound(d.source.Delete(ctx, d.proxy, client.GracePeriodSeconds(0))))
	d.waitDraining(t, "Waiting", "PodChaperons")
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon deleted there", func(ctx context.Context) bool {
		var pc v1alpha1.PodChaperon
		err := d.target.Get(ctx, client.ObjectKeyFromObject(d.pc), &pc)
		if err == nil && pc.DeletionTimestamp != nil {
			_ = d.target.Patch(ctx, &pc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		}
		return apierrors.IsNotFound(err)
	})
	d.waitGone(t)
	require.NoError(t, d.source.Get(ctx, client.ObjectKeyFromObject(daemon), daemon))
	require.Nil(t, daemon.DeletionTimestamp, "the drain evicted a DaemonSet's pod")
}

// The force-disconnect annotation ends a drain that cannot progress: the
// Target goes at once, and what is left in the target stays there.
func TestForcedDisconnectEndsTheDrain(t *testing.T) {
	d := startDrain(t)
	ctx := context.Background()
	require.NoError(t, d.source.Delete(ctx, d.get(t)))
	d.waitDraining(t, "Blocked", "db-0")
	tg := d.get(t)
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationForceDisconnect + `":"true"}}}`)
	require.NoError(t, d.source.Patch(ctx, tg, client.RawPatch("application/merge-patch+json", patch)))
	d.waitGone(t)
	var pc v1alpha1.PodChaperon
	err := d.target.Get(ctx, client.ObjectKeyFromObject(d.pc), &pc)
	assert.Falsef(t, err != nil || pc.DeletionTimestamp != nil, "the chaperon left behind: %v, deleting %v", err, pc.DeletionTimestamp)
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	require.NoError(t, c.Create(context.Background(), obj))
}

// The drain ends only once nothing of this source is left in the target: a
// pod whose chaperon is already gone (the target's chaperon controller
// made it from a stale cache after the chaperon went; the garbage
// collector takes it there) keeps the Target, named in Draining. Before:
// the drain ended with the chaperons, and a 30-replica disconnect left
// such pods behind in 3 runs of 4.
func TestDrainWaitsForOrphanPods(t *testing.T) {
	d := startDrain(t)
	ctx := context.Background()
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: "web-1-y", Labels: map[string]string{
			v1alpha1.LabelParentCluster: "src", v1alpha1.LabelParentUID: "gone"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	mustCreate(t, d.target, orphan)
	for _, o := range []client.Object{d.pdb, d.proxy} {
		require.NoError(t, d.source.Delete(ctx, o, client.GracePeriodSeconds(0)))
	}
	require.NoError(t, d.target.Delete(ctx, d.pc))
	require.NoError(t, d.source.Delete(ctx, d.get(t)))
	d.waitDraining(t, "Waiting", "web-1-y")
	_, ok := d.registry.Get(d.key)
	require.True(t, ok, "the connection went while a pod of this source is left there")
	require.NoError(t, d.target.Delete(ctx, orphan, client.GracePeriodSeconds(0)))
	d.waitGone(t)
}
