package summary

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/indexer"
)

// The totals kept by events summarize as a walk of the same pods does,
// through a random run of creations, bindings, resizes, relabellings,
// finishes and deletions.
func TestTotalsFollowEvents(t *testing.T) {
	nodes := []*corev1.Node{
		makeNode("n1").capacity("cpu", "8", "memory", "32Gi", "pods", "110").obj(),
		makeNode("n2").capacity("cpu", "4", "memory", "16Gi", "pods", "110").obj(),
		makeNode("cordoned").capacity("cpu", "4", "pods", "110").cordoned().obj(),
	}
	totals := newPodTotals()
	totals.synced = func() bool { return true }
	changes := 0
	totals.onChange = func() { changes++ }
	h := totals.handler()
	rnd := rand.New(rand.NewPCG(1, 2))
	pods := map[types.UID]*corev1.Pod{}
	nodeNames := []string{"", "n1", "n2", "cordoned"}
	cpus := []string{"100m", "250m", "1", "1500m"}
	for step := range 2000 {
		uid := types.UID(fmt.Sprint(rnd.IntN(60)))
		old, had := pods[uid]
		switch {
		case had && rnd.IntN(5) == 0:
			delete(pods, uid)
			if rnd.IntN(2) == 0 {
				h.OnDelete(old)
			} else {
				h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: string(uid), Obj: old})
			}
		default:
			w := makePod(string(uid), nodeNames[rnd.IntN(len(nodeNames))]).container("cpu", cpus[rnd.IntN(len(cpus))], "memory", "64Mi")
			if rnd.IntN(3) == 0 {
				w = w.source([]string{"source-1", "source-2"}[rnd.IntN(2)])
			}
			if rnd.IntN(6) == 0 {
				w = w.phase(corev1.PodSucceeded)
			}
			p := w.obj()
			p.UID = uid
			pods[uid] = p
			if had {
				h.OnUpdate(old, p)
			} else {
				h.OnAdd(p, false)
			}
		}
		var all []*corev1.Pod
		for _, p := range pods {
			all = append(all, p)
		}
		kept, ok := totals.of(nodes)
		require.True(t, ok)
		want, got := Summarize(nodes, all), summarizeTotals(nodes, kept)
		require.Truef(t, equality.Semantic.DeepEqual(want, got), "step %d: kept %+v, walked %+v", step, got, want)
	}
	assert.Greater(t, changes, 100, "changes told")
}

// Once every pod is counted, a recompute of the summary reads the nodes and
// no pod. Before: it listed every schedulable node's pods, each time.
func TestSummaryReadsNoPodOnceCounted(t *testing.T) {
	nodes := []client.Object{
		makeNode("n1").capacity("cpu", "8", "pods", "110").obj(),
		makeNode("n2").capacity("cpu", "8", "pods", "110").obj(),
	}
	podLists := 0
	c := fake.NewClientBuilder().WithObjects(nodes...).
		WithIndex(indexer.ActivePodNodeName.Object, indexer.ActivePodNodeName.Field, indexer.ActivePodNodeName.Extract).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				podLists++
			}
			return cl.List(ctx, list, opts...)
		}}).Build()
	r := &ClusterSummaryReconciler{Client: c, totals: newPodTotals()}
	h := r.totals.handler()
	for i := range 50 {
		p := makePod(fmt.Sprint("p", i), []string{"n1", "n2"}[i%2]).container("cpu", "100m").obj()
		p.UID = types.UID(p.Name)
		h.OnAdd(p, false)
	}

	_, err := r.summarize(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, podLists, "pods listed node by node before the totals counted every pod")
	r.totals.synced = func() bool { return true }
	podLists = 0
	sum, err := r.summarize(context.Background())
	require.NoError(t, err)
	assert.Zero(t, podLists, "pod lists once the totals counted every pod")
	cpu := sum.Requested[corev1.ResourceCPU]
	assert.Equal(t, "5", cpu.String(), "requested cpu")
}
