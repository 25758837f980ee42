package elector

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
)

// TestVirtualNodeOpeningRequeuesOnlyWaitingProxies: a virtual node that
// opens (made, uncordoned, a NoSchedule or NoExecute taint removed or
// changed) brings back the proxies that wait for a cluster, not those
// whose election is in flight or decided; a node that closes (cordoned,
// tainted), a PreferNoSchedule taint or a label change brings back none,
// and neither does a node that is not virtual. Before: every change of
// taints or cordon, either way, enqueued every gated proxy.
func TestVirtualNodeOpeningRequeuesOnlyWaitingProxies(t *testing.T) {
	gated := func(name string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Finalizers: []string{v1alpha1.FinalizerDelegate}}}
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		return p
	}
	waiting := gated("waiting")
	waiting.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Reason: reasonNoClusters}}
	inFlight := gated("in-flight")
	decided := gated("decided")
	decided.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Reason: reasonElected}}
	c := fake.NewClientBuilder().WithObjects(waiting, inFlight, decided).
		WithIndex(&corev1.Pod{}, indexer.GatedProxy.Field, indexer.GatedProxy.Extract).Build()
	r := &Reconciler{client: c}
	h := r.virtualNodeOpened()

	node := func(unschedulable bool, taints ...corev1.Taint) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-t", Labels: map[string]string{v1alpha1.LabelCluster: "t"}}}
		n.Spec.Unschedulable, n.Spec.Taints = unschedulable, taints
		return n
	}
	taint := func(key, value string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Value: value, Effect: effect}
	}
	notReady := taint(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoSchedule)
	unreachable := taint(corev1.TaintNodeUnreachable, "", corev1.TaintEffectNoExecute)
	prefer := taint("example.com/busy", "", corev1.TaintEffectPreferNoSchedule)
	enqueued := func(send func(workqueue.TypedRateLimitingInterface[reconcile.Request])) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		send(q)
		var out []string
		for q.Len() > 0 {
			req, _ := q.Get()
			out = append(out, req.Name)
			q.Done(req)
		}
		sort.Strings(out)
		return out
	}
	update := func(o, n *corev1.Node) []string {
		return enqueued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: o, ObjectNew: n}, q)
		})
	}
	only := []string{"waiting"}
	for _, tc := range []struct {
		name string
		o, n *corev1.Node
		want []string
	}{
		{"uncordoned", node(true), node(false), only},
		{"a NoSchedule taint removed", node(false, notReady), node(false), only},
		{"a NoExecute taint removed, another kept", node(false, notReady, unreachable), node(false, notReady), only},
		{"a taint's value changed", node(false, taint("example.com/pool", "a", corev1.TaintEffectNoSchedule)), node(false, taint("example.com/pool", "b", corev1.TaintEffectNoSchedule)), only},
		{"cordoned", node(false), node(true), nil},
		{"tainted", node(false), node(false, notReady), nil},
		{"a PreferNoSchedule taint removed", node(false, prefer), node(false), nil},
		{"nothing of scheduling changed", node(false, notReady), node(false, notReady), nil},
	} {
		assert.Equalf(t, tc.want, update(tc.o, tc.n), "virtual node %s", tc.name)
	}
	cordoned, uncordoned := node(true), node(false)
	cordoned.Labels, uncordoned.Labels = nil, nil
	assert.Empty(t, update(cordoned, uncordoned), "a node that is not virtual, uncordoned")
	made := enqueued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Create(context.Background(), event.CreateEvent{Object: node(false)}, q)
	})
	assert.Equal(t, only, made, "a virtual node made")
}
