package summary

import (
	"context"
	"fmt"
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
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// The totals kept by events count each active pod on its node and under
// its source, and summarize as a walk of the same pods does; a pod
// finished or deleted (a tombstone too) counts no more. (podsums' own
// tests follow a random run against a walk.)
func TestTotalsFollowEvents(t *testing.T) {
	nodes := []*corev1.Node{
		makeNode("n1").capacity("cpu", "8", "memory", "32Gi", "pods", "110").obj(),
		makeNode("n2").capacity("cpu", "4", "memory", "16Gi", "pods", "110").obj(),
	}
	totals := podsums.New[nodeSource]()
	h := &testenv.PodEvents{Synced: true}
	require.NoError(t, totals.Watch(h, countActive, nil))
	pods := map[string]*corev1.Pod{}
	set := func(w *podWrapper) {
		p := w.obj()
		p.UID = types.UID(p.Name)
		if old, had := pods[p.Name]; had {
			h.OnUpdate(old, p)
		} else {
			h.OnAdd(p, false)
		}
		pods[p.Name] = p
	}
	expect := func(step string, want map[string]map[string]string) {
		t.Helper()
		kept, ok := totalsFor(totals, nodes)
		require.True(t, ok)
		got := map[string]map[string]string{}
		for node, sources := range kept {
			got[node] = map[string]string{}
			for source, list := range sources {
				cpu, n := list[corev1.ResourceCPU], list[corev1.ResourcePods]
				got[node][source] = cpu.String() + "/" + n.String()
			}
		}
		require.Equal(t, want, got, step)
		var all []*corev1.Pod
		for _, p := range pods {
			all = append(all, p)
		}
		require.Truef(t, equality.Semantic.DeepEqual(Summarize(nodes, all), summarizeTotals(nodes, kept)), "%s: kept totals summarize as a walk", step)
	}
	set(makePod("own", "n1").container("cpu", "200m"))
	set(makePod("a", "n1").container("cpu", "300m").source("source-1"))
	set(makePod("b", "n2").container("cpu", "1").source("source-1"))
	set(makePod("c", "n2").container("cpu", "100m").source("source-1"))
	set(makePod("unbound", "").container("cpu", "5"))
	set(makePod("done", "n1").container("cpu", "5").phase(corev1.PodSucceeded))
	expect("start", map[string]map[string]string{"n1": {"": "200m/1", "source-1": "300m/1"}, "n2": {"source-1": "1100m/2"}})
	set(makePod("a", "n1").container("cpu", "300m").source("source-1").phase(corev1.PodFailed))
	set(makePod("b", "n2").container("cpu", "1500m").source("source-2"))
	expect("a finished, b resized and from source-2", map[string]map[string]string{"n1": {"": "200m/1"}, "n2": {"source-1": "100m/1", "source-2": "1500m/1"}})
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "own", Obj: pods["own"]})
	delete(pods, "own")
	h.OnDelete(pods["c"])
	delete(pods, "c")
	expect("own and c deleted", map[string]map[string]string{"n2": {"source-2": "1500m/1"}})
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
	r := &ClusterSummaryReconciler{Client: c, totals: podsums.New[nodeSource]()}
	h := &testenv.PodEvents{}
	require.NoError(t, r.totals.Watch(h, countActive, nil))
	for i := range 50 {
		p := makePod(fmt.Sprint("p", i), []string{"n1", "n2"}[i%2]).container("cpu", "100m").obj()
		p.UID = types.UID(p.Name)
		h.OnAdd(p, false)
	}

	_, err := r.summarize(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, podLists, "pods listed node by node before the totals counted every pod")
	h.Synced = true
	podLists = 0
	sum, err := r.summarize(context.Background())
	require.NoError(t, err)
	assert.Zero(t, podLists, "pod lists once the totals counted every pod")
	cpu := sum.Requested[corev1.ResourceCPU]
	assert.Equal(t, "5", cpu.String(), "requested cpu")
}
