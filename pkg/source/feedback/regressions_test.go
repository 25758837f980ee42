package feedback_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/feedback"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// sourceIdentity is a user of the target control plane with what a
// source's ServiceAccount has there: the ClusterSummary and namespaces
// cluster-wide, and everything it needs inside ns through a RoleBinding
// named "source" (which a deletion of the namespace takes with it).
func (h *harness) sourceIdentity(t *testing.T, ns string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	user, err := targetEnv.ControlPlane.AddUser(envtest.User{Name: "source-of-" + ns}, nil)
	require.NoError(t, err)
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	cluster := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "source-of-" + ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clustersummaries"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		},
	}
	inside := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"podchaperons"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: all},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: all},
		},
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "source-of-" + ns}}
	objs := []client.Object{
		cluster,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster.Name}},
		inside,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: inside.Name}},
	}
	for _, o := range objs {
		require.NoError(t, h.target.Create(ctx, o))
	}
	t.Cleanup(func() {
		for _, o := range objs[:2] {
			assert.NoError(t, client.IgnoreNotFound(h.target.Delete(context.Background(), o)))
		}
	})
	return user.Config()
}

// A namespace deleted in a target often takes the source's RoleBinding
// there before it takes the delegate: from then on, reading the delegate's
// chaperon is Forbidden, never NotFound. Its proxy must still be deleted
// (its controller makes a new one), and finalized only once the namespace
// is gone. Before: the feedback reconciler retried the Forbidden read
// forever and the proxy kept running on a delegate that no longer existed
// (seen as TestTargetNamespaceDeleted timing out on a loaded machine).
func TestTargetNamespaceDeletedBeforeTheDelegateIsSeenGone(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	ns := h.namespace(t, "ns-gone-")
	key := h.connectTo(t, ns, "t", testenv.Kubeconfig(t, h.sourceIdentity(t, ns), ns, ""), metav1.ConditionTrue, v1alpha1.ReasonConnected)
	h.virtualNode(t, key)
	p, pc, d := h.runningProxy(t, ns, "web-1", key, corev1.RestartPolicyAlways)

	// The target's namespace controller, in the order that hides the
	// delegate's end from the source: its rights first, then the
	// chaperon and the pod (no cache event shows the pod Terminating).
	// The pod stays, Terminating (a kubelet stopping it): a source's
	// cache that saw the pod go would rightly take its word for it, and
	// whether a watch opened before the rights went still delivers is
	// the API server's timing.
	const stopping = "test.fleetlet.io/stopping"
	require.NoError(t, h.target.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+stopping+`"]}}`))))
	t.Cleanup(func() {
		_ = h.target.Patch(context.Background(), d, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	require.NoError(t, h.target.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source"}}))
	require.NoError(t, h.target.Delete(ctx, pc))
	require.NoError(t, h.target.Delete(ctx, d, client.GracePeriodSeconds(0)))
	targetNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	require.NoError(t, h.target.Delete(ctx, targetNS))

	h.waitProxy(t, p, "deleted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	h.waitEvent(t, p, feedback.EventDelegateDeleted)

	// No namespace controller runs here: the namespace stays Terminating,
	// and so does the proxy, since nothing confirms its delegate gone.
	assert.Never(t, func() bool { return !get(t, h.source, p.DeepCopy()) }, 2*time.Second, 100*time.Millisecond,
		"the proxy was finalized while its target namespace still existed")

	// The namespace ends: the proxy goes.
	require.NoError(t, h.target.Get(ctx, client.ObjectKeyFromObject(targetNS), targetNS))
	targetNS.Spec.Finalizers = nil
	require.NoError(t, h.target.SubResource("finalize").Update(ctx, targetNS))
	testenv.EventuallyTrue(t, waitTimeout, "the proxy to be finalized", func(context.Context) bool { return !get(t, h.source, p.DeepCopy()) })
}

// A losing candidate that the manager sees only once its proxy is bound (a
// target's cache behind under load, or a candidate created across a
// manager restart) is still deleted, and the elected one is left alone.
// Before: losers were looked for only while the proxy was gated, and such
// a loser stayed for good (seen as TestCrashesMidElectionNeverDoubleDelegates
// timing out on a loaded machine, waiting for the losing candidates to go).
func TestLoserSeenAfterTheBindIsDeleted(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	ns := h.namespace(t, "late-loser-")
	key := h.connect(t, ns, "t", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	// A second target: the source control plane itself.
	ensureSummary(t, h.source)
	other := h.connectTo(t, ns, "other", testenv.Kubeconfig(t, sourceEnv.Config, ns, ""), metav1.ConditionTrue, v1alpha1.ReasonConnected)
	require.NotEqual(t, key, other)
	h.virtualNode(t, key)
	p, pc, _ := h.runningProxy(t, ns, "web-1", key, corev1.RestartPolicyAlways)

	loser := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        naming.RemoteName(p.Name, p.UID),
			Labels:      map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: sourceName},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: *p.Spec.DeepCopy()}},
	}
	require.NoError(t, h.source.Create(ctx, loser))
	t.Cleanup(func() {
		// No garbage collector here finishes its Foreground deletion.
		var pc v1alpha1.PodChaperon
		if err := h.source.Get(context.Background(), client.ObjectKeyFromObject(loser), &pc); err == nil {
			pc.Finalizers = nil
			assert.NoError(t, client.IgnoreNotFound(h.source.Update(context.Background(), &pc)))
		}
	})

	testenv.EventuallyTrue(t, waitTimeout, "the late loser to be deleted", func(ctx context.Context) bool {
		var got v1alpha1.PodChaperon
		err := h.source.Get(ctx, client.ObjectKeyFromObject(loser), &got)
		return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil)
	})
	var elected v1alpha1.PodChaperon
	require.NoError(t, h.target.Get(ctx, client.ObjectKeyFromObject(pc), &elected))
	assert.Nil(t, elected.DeletionTimestamp, "the elected chaperon was deleted")
	var proxy corev1.Pod
	require.NoError(t, h.source.Get(ctx, client.ObjectKeyFromObject(p), &proxy))
	assert.Nil(t, proxy.DeletionTimestamp, "the proxy was deleted")
}

// The node lifecycle controller marks a briefly NotReady virtual node's
// proxies Ready=False; the target stayed Ready in the registry and the
// delegate runs on. Feedback puts the delegate's Ready back. (Written
// after e2e TestSourceOutageTargetRecreatesDelegates waited on 3 of 4
// proxies Ready; it passes on the old code too, where a summary change
// brought the proxy back: the feedback predicate now also passes another
// writer's Ready change, so recovery does not depend on that.)
func TestProxyMarkedNotReadyByAnotherWriterIsCorrected(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	ns := h.namespace(t, "marked-")
	key := h.connect(t, ns, "t", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	h.virtualNode(t, key)
	p, _, _ := h.runningProxy(t, ns, "web-1", key, corev1.RestartPolicyAlways)
	ready := func(p *corev1.Pod) bool {
		c := condition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionTrue
	}
	h.waitProxy(t, p, "Ready", ready)

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Pod
		if err := h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.PodReady {
				cur.Status.Conditions[i].Status = corev1.ConditionFalse
				cur.Status.Conditions[i].Reason = "NodeNotReady"
			}
		}
		return h.source.Status().Update(ctx, &cur)
	}))
	h.waitProxy(t, p, "Ready again", ready)
}

// A target whose pod network overlaps the source's (--hide-pod-ips): its
// delegates' proxies run and are Ready without their pod IPs, so that
// nothing in the source routes to an address that is another pod's here.
func TestHiddenPodIPsAreNotPublished(t *testing.T) {
	h := startWith(t, func(fb *feedback.Reconciler) {
		fb.HidePodIPs = func(k proxypod.TargetKey) bool { return k.Name == "overlapping" }
	})
	ns := h.namespace(t, "hidden-")
	key := h.connect(t, ns, "overlapping", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	h.virtualNode(t, key)
	p, _, _ := h.runningProxy(t, ns, "web-1", key, corev1.RestartPolicyAlways)
	h.waitProxy(t, p, "Ready", func(p *corev1.Pod) bool {
		c := condition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	require.NoError(t, h.source.Get(context.Background(), client.ObjectKeyFromObject(p), p))
	assert.Empty(t, p.Status.PodIP, "the delegate's pod IP %s was published", delegateIP)
	assert.Empty(t, p.Status.PodIPs)
	assert.Equal(t, corev1.PodRunning, p.Status.Phase)
}
