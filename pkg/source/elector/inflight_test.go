package elector

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// TestInflightReadsOnlyTheTargetsElections: what is in flight to a target
// is the requests of the gated proxies elected there, and reading it lists
// those, not every gated proxy. Before: each ranking listed every gated
// proxy of the source (a burst's every pod, on every pass that had an
// offer), 11 % of the source manager's CPU in a 1,000-pod burst.
func TestInflightReadsOnlyTheTargetsElections(t *testing.T) {
	gated := func(name, cpu string, rec *proxy.Record) *corev1.Pod {
		p := usagePod(name, "", cpu, corev1.PodPending)
		p.Namespace, p.Name = "team", name
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		if rec != nil {
			p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: rec.Message()}}
		}
		return p
	}
	objs := []client.Object{
		gated("a", "1", &proxy.Record{TargetName: "c2", Chaperon: "a-1"}),
		gated("b", "500m", &proxy.Record{TargetName: "c2", Chaperon: "b-1"}),
		gated("c", "2", &proxy.Record{TargetNamespace: "team", TargetName: "c2", Chaperon: "c-1"}),
	}
	// Elected and ungated: its delegate is bound, the summary counts it.
	ungated := gated("d", "4", &proxy.Record{TargetName: "c2", Chaperon: "d-1"})
	ungated.Spec.SchedulingGates = nil
	objs = append(objs, ungated)
	// Still electing: in flight nowhere.
	for i := range 300 {
		objs = append(objs, gated(fmt.Sprintf("electing-%d", i), "1", nil))
	}
	listed := 0
	b := fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if pods, ok := list.(*corev1.PodList); ok {
				listed += len(pods.Items)
			}
			return err
		},
	})
	for _, i := range []indexer.Index{indexer.GatedProxy, indexer.ElectedProxy} {
		b = b.WithIndex(i.Object, i.Field, i.Extract)
	}
	r := &Reconciler{client: b.Build()}
	ctx := context.Background()

	cpu := func(l corev1.ResourceList) string { q := l[corev1.ResourceCPU]; return q.String() }
	got := r.inflight(ctx, "c2")
	assert.Equal(t, "1500m", cpu(got), "in flight to c2")
	assert.Equal(t, 2, listed, "proxies read to sum what is in flight to c2 (2 elected there)")
	assert.Equal(t, "2", cpu(r.inflight(ctx, "team/c2")), "in flight to team/c2")
	assert.Nil(t, r.inflight(ctx, "c3"), "in flight to a target no proxy is elected to")
	require.Equal(t, 3, listed, "proxies read in all")
}
