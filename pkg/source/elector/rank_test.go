package elector

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func summaryOf(alloc, req corev1.ResourceList) *v1alpha1.ClusterSummaryStatus {
	return &v1alpha1.ClusterSummaryStatus{Allocatable: alloc, Requested: req}
}

func TestFreeShareAfter(t *testing.T) {
	pod := rl("cpu", "1", "memory", "1Gi")
	tests := []struct {
		name    string
		summary *v1alpha1.ClusterSummaryStatus
		want    float64
	}{
		{"no summary", nil, -1},
		{"empty cluster of 10 cpu", summaryOf(rl("cpu", "10", "memory", "10Gi"), nil), 0.9},
		{"the scarcer resource counts", summaryOf(rl("cpu", "10", "memory", "10Gi"), rl("cpu", "1", "memory", "7Gi")), 0.2},
		{"too full: negative", summaryOf(rl("cpu", "2", "memory", "10Gi"), rl("cpu", "2")), -0.5},
		{"no memory at all", summaryOf(rl("cpu", "10"), nil), -1},
	}
	for _, tc := range tests {
		got := FreeShareAfter(tc.summary, pod)
		assert.Falsef(t, fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", tc.want), "%s: FreeShareAfter = %v, want %v", tc.name, got, tc.want)
	}
}

func TestRankPrefersFreeShareThenSpreadsTies(t *testing.T) {
	got := Rank("uid", []Offer{{Target: "small-full", FreeShare: 0.1}, {Target: "big-empty", FreeShare: 0.9}, {Target: "mid", FreeShare: 0.5}})
	assert.Falsef(t, got[0].Target != "big-empty" || got[1].Target != "mid" || got[2].Target != "small-full", "Rank = %v", got)
	// Equal offers: the winner depends on the pod, and over many pods each
	// target wins some.
	wins := map[string]int{}
	for i := range 300 {
		r := Rank(types.UID(fmt.Sprintf("pod-%d", i)), []Offer{{Target: "a", FreeShare: 0.5}, {Target: "b", FreeShare: 0.5}, {Target: "c", FreeShare: 0.5}})
		wins[r[0].Target]++
	}
	for _, tgt := range []string{"a", "b", "c"} {
		assert.Falsef(t, wins[tgt] < 60, "target %s won %d of 300 equal elections: ties do not spread (%v)", tgt, wins[tgt], wins)
	}
	// Deterministic for one pod.
	a := Rank("same", []Offer{{Target: "a", FreeShare: 0.5}, {Target: "b", FreeShare: 0.5}})
	b := Rank("same", []Offer{{Target: "b", FreeShare: 0.5}, {Target: "a", FreeShare: 0.5}})
	assert.Falsef(t, a[0] != b[0], "Rank depends on input order: %v vs %v", a, b)
}

// A preferred cluster (a higher score) wins over more free room; among
// equal scores free share decides.
func TestRankPrefersScoreThenFreeShare(t *testing.T) {
	got := Rank("uid", []Offer{
		{Target: "cloud", Score: 0, FreeShare: 0.9},
		{Target: "on-prem", Score: 80, FreeShare: 0.1},
		{Target: "edge", Score: 80, FreeShare: 0.3},
	})
	assert.Falsef(t, got[0].Target != "edge" || got[1].Target != "on-prem" || got[2].Target != "cloud", "Rank = %v, want edge, on-prem, cloud", got)
}

// A target short of the devices the pod asks for ranks after every other,
// whatever its score or room: ranking-first does not send a GPU pod where
// every device is taken.
func TestRankPutsTargetsShortOfDevicesLast(t *testing.T) {
	got := Rank("uid", []Offer{
		{Target: "full-gpus", Score: 80, FreeShare: 0.9, Short: true},
		{Target: "free-gpus", Score: 0, FreeShare: 0.1},
		{Target: "also-full", Score: 100, FreeShare: 0.5, Short: true},
	})
	assert.Falsef(t, got[0].Target != "free-gpus" || got[1].Target != "also-full" || got[2].Target != "full-gpus", "Rank = %v, want free-gpus, also-full, full-gpus", got)
}

// A target's priority comes before the pod's preferences and room: the
// pod goes to the highest-priority target that reserved, spilling over in
// a fixed order.
func TestRankPutsPriorityBeforePreferences(t *testing.T) {
	got := Rank("uid", []Offer{
		{Target: "cloud", Priority: 0, Score: 100, FreeShare: 0.9},
		{Target: "on-prem-b", Priority: 10, Score: 0, FreeShare: 0.2},
		{Target: "on-prem-a", Priority: 20, Score: 0, FreeShare: 0.1},
		{Target: "last-resort", Priority: -5, Score: 100, FreeShare: 1},
	})
	var order []string
	for _, o := range got {
		order = append(order, o.Target)
	}
	assert.Empty(t, cmp.Diff([]string{"on-prem-a", "on-prem-b", "cloud", "last-resort"}, order), "Rank (-want,+got)")
	assert.False(t, !ranksAbove(Offer{Priority: 1}, Offer{Score: 100}) || ranksAbove(Offer{Score: 5}, Offer{Score: 5}), "ranksAbove does not put priority first, or ranks a target above its equal")
}

// The requests of elections still in flight count against their target:
// a burst ranked on one summary spreads. The summary itself is not
// changed.
func TestWithRequestedCountsInflight(t *testing.T) {
	s := &v1alpha1.ClusterSummaryStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10"), corev1.ResourceMemory: resource.MustParse("100Gi")},
		Requested:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
	}
	pod := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	extra := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	if got, want := FreeShareAfter(withRequested(s, extra), pod), 0.4; math.Abs(got-want) > 1e-9 {
		assert.Failf(t, "with 3 CPUs in flight: free share", "with 3 CPUs in flight: free share %v, want %v", got, want)
	}
	if got, want := FreeShareAfter(withRequested(s, nil), pod), 0.7; math.Abs(got-want) > 1e-9 {
		assert.Failf(t, "with nothing in flight: free share", "with nothing in flight: free share %v, want %v", got, want)
	}
	q := s.Requested[corev1.ResourceCPU]
	assert.Falsef(t, q.String() != "2", "the summary was changed: requested %s", q.String())
	assert.False(t, withRequested(nil, extra) != nil, "no summary became one")
}

// A target whose free capacity is spread over nodes too small for the pod
// is short: the most free on one node (largestFree) decides, not the total.
func TestNoNodeFits(t *testing.T) {
	pod := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	largest := func(pairs ...string) *v1alpha1.ClusterSummaryStatus {
		s := summaryOf(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}, nil)
		s.LargestFree = corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			s.LargestFree[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		summary *v1alpha1.ClusterSummaryStatus
		want    bool
	}{
		{name: "no summary", summary: nil},
		{name: "an older fleetlet: no largestFree", summary: summaryOf(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}, nil)},
		{name: "a node with room", summary: largest("cpu", "2", "memory", "4Gi", "pods", "10")},
		{name: "fragmented cpu: 100 free in total, 1500m at most on one node", summary: largest("cpu", "1500m", "memory", "4Gi", "pods", "10"), want: true},
		{name: "memory too small on every node", summary: largest("cpu", "8", "memory", "512Mi", "pods", "10"), want: true},
		{name: "every node full of pods", summary: largest("cpu", "8", "memory", "4Gi", "pods", "0"), want: true},
		{name: "a resource no node lists is the scheduler's to judge", summary: largest("cpu", "8", "pods", "10")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, noNodeFits(tc.summary, pod))
		})
	}
}
