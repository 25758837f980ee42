package vnode

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// rl builds a ResourceList from name, quantity pairs.
func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// quantityEqual compares quantities by value.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// summary builds a ClusterSummaryStatus.
type summary struct{ v1alpha1.ClusterSummaryStatus }

func newSummary() *summary { return &summary{} }

func (s *summary) capacity(l corev1.ResourceList) *summary    { s.Capacity = l; return s }
func (s *summary) allocatable(l corev1.ResourceList) *summary { s.Allocatable = l; return s }
func (s *summary) requested(l corev1.ResourceList) *summary   { s.Requested = l; return s }
func (s *summary) bySource(name string, l corev1.ResourceList) *summary {
	if s.RequestedBySource == nil {
		s.RequestedBySource = map[string]corev1.ResourceList{}
	}
	s.RequestedBySource[name] = l
	return s
}
func (s *summary) obj() *v1alpha1.ClusterSummaryStatus { return &s.ClusterSummaryStatus }

func TestAllocatable(t *testing.T) {
	cases := []struct {
		name    string
		summary *v1alpha1.ClusterSummaryStatus
		proxies corev1.ResourceList
		want    corev1.ResourceList
	}{
		{
			name: "no summary yet: nothing",
			want: rl("cpu", "0", "memory", "0", "pods", "0"),
		},
		{
			name:    "no summary yet: the proxies still fit",
			proxies: rl("cpu", "500m", "memory", "1Gi", "pods", "2"),
			want:    rl("cpu", "500m", "memory", "1Gi", "pods", "2"),
		},
		{
			name: "what the target can still run",
			summary: newSummary().
				allocatable(rl("cpu", "10", "memory", "32Gi", "pods", "330")).
				requested(rl("cpu", "2500m", "memory", "8Gi", "pods", "30")).obj(),
			want: rl("cpu", "7500m", "memory", "24Gi", "pods", "300"),
		},
		{
			// Own delegates count as load; their bound proxies give the room
			// back, so the scheduler sees exactly what the target has free.
			name: "own delegates are load, their proxies give it back",
			summary: newSummary().
				allocatable(rl("cpu", "10", "memory", "32Gi", "pods", "110")).
				requested(rl("cpu", "6", "memory", "12Gi", "pods", "10")).
				bySource("source-1", rl("cpu", "4", "memory", "4Gi", "pods", "4")).
				bySource("source-2", rl("cpu", "1", "memory", "1Gi", "pods", "1")).obj(),
			proxies: rl("cpu", "4", "memory", "4Gi", "pods", "4"),
			want:    rl("cpu", "8", "memory", "24Gi", "pods", "104"),
		},
		{
			name: "a summary that does not show a new delegate yet over-reports by it, never under",
			summary: newSummary().
				allocatable(rl("cpu", "4", "pods", "10")).
				requested(rl("cpu", "1", "pods", "1")).obj(),
			proxies: rl("cpu", "2", "pods", "1"),
			want:    rl("cpu", "5", "memory", "0", "pods", "10"),
		},
		{
			name: "overcommitted target clamped to zero",
			summary: newSummary().
				allocatable(rl("cpu", "4", "memory", "8Gi", "pods", "10")).
				requested(rl("cpu", "6", "memory", "9Gi", "pods", "12")).obj(),
			want: rl("cpu", "0", "memory", "0", "pods", "0"),
		},
		{
			name: "bound and pinned proxies are added, after the clamp",
			summary: newSummary().
				allocatable(rl("cpu", "4", "memory", "8Gi", "pods", "10")).
				requested(rl("cpu", "6", "memory", "2Gi", "pods", "3")).obj(),
			proxies: rl("cpu", "1500m", "memory", "1Gi", "pods", "2"),
			want:    rl("cpu", "1500m", "memory", "7Gi", "pods", "9"),
		},
		{
			name: "ephemeral-storage and extended resources when present",
			summary: newSummary().
				allocatable(rl("cpu", "4", "memory", "8Gi", "pods", "10", "ephemeral-storage", "100Gi", "nvidia.com/gpu", "2")).
				requested(rl("cpu", "1", "ephemeral-storage", "10Gi", "nvidia.com/gpu", "1")).obj(),
			want: rl("cpu", "3", "memory", "8Gi", "pods", "10", "ephemeral-storage", "90Gi", "nvidia.com/gpu", "1"),
		},
		{
			name: "a resource only proxies request is offered, so they fit",
			summary: newSummary().
				allocatable(rl("cpu", "4", "memory", "8Gi", "pods", "10")).obj(),
			proxies: rl("cpu", "1", "pods", "1", "example.com/dongle", "1"),
			want:    rl("cpu", "5", "memory", "8Gi", "pods", "11", "example.com/dongle", "1"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Allocatable(tc.summary, tc.proxies)
			assert.Empty(t, cmp.Diff(tc.want, got, quantityEqual), "Allocatable (-want,+got)")
		})
	}
}

// Whatever the summary says, allocatable minus the bound proxies leaves room
// for every pinned one: the source scheduler never refuses a pinned proxy.
func TestAllocatableAlwaysFitsPinnedProxies(t *testing.T) {
	bound := rl("cpu", "3", "memory", "6Gi", "pods", "3")
	pinned := rl("cpu", "1", "memory", "2Gi", "pods", "1")
	summaries := []*v1alpha1.ClusterSummaryStatus{
		nil,
		newSummary().obj(),
		newSummary().allocatable(rl("cpu", "1", "memory", "1Gi", "pods", "1")).requested(rl("cpu", "50", "memory", "50Gi", "pods", "50")).obj(),
		newSummary().allocatable(rl("cpu", "100", "memory", "100Gi", "pods", "100")).obj(),
	}
	for i, s := range summaries {
		alloc := Allocatable(s, AddResources(bound, pinned))
		for name, need := range pinned {
			free := alloc[name].DeepCopy()
			free.Sub(bound[name])
			assert.Falsef(t, free.Cmp(need) < 0, "summary %d: %s free for the scheduler %s < pinned %s", i, name, free.String(), need.String())
		}
	}
}

func TestCapacity(t *testing.T) {
	cases := []struct {
		name        string
		summary     *v1alpha1.ClusterSummaryStatus
		allocatable corev1.ResourceList
		want        corev1.ResourceList
	}{
		{
			name:        "no summary: allocatable",
			allocatable: rl("cpu", "1", "pods", "1"),
			want:        rl("cpu", "1", "pods", "1"),
		},
		{
			name:        "the target's capacity when larger",
			summary:     newSummary().capacity(rl("cpu", "16", "memory", "64Gi", "pods", "330", "hugepages-2Mi", "1Gi")).obj(),
			allocatable: rl("cpu", "7", "memory", "70Gi", "pods", "300"),
			want:        rl("cpu", "16", "memory", "70Gi", "pods", "330"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Capacity(tc.summary, tc.allocatable)
			assert.Empty(t, cmp.Diff(tc.want, got, quantityEqual), "Capacity (-want,+got)")
		})
	}
}

// A target that reports a fraction of a resource counted in whole units
// (pods, GPUs) gets whole units on its virtual node, rounded down, and
// nothing negative: the API server refuses a node status with 1.5 GPUs,
// and the virtual node's status would stop following its target. Before:
// the fractions were copied.
func TestWholeUnitsOnly(t *testing.T) {
	s := newSummary().
		capacity(rl("cpu", "16", "pods", "110500m", "example.com/gpu", "8500m")).
		allocatable(rl("cpu", "15500m", "pods", "100500m", "example.com/gpu", "7500m", "memory", "-1Gi")).
		requested(rl("cpu", "1", "pods", "10", "example.com/gpu", "1")).obj()
	alloc := Allocatable(s, rl("pods", "2"))
	want := rl("cpu", "14500m", "memory", "0", "pods", "92", "example.com/gpu", "6")
	assert.Empty(t, cmp.Diff(want, alloc, quantityEqual), "Allocatable (-want,+got)")
	wantCap := rl("cpu", "16", "memory", "0", "pods", "110", "example.com/gpu", "8")
	assert.Empty(t, cmp.Diff(wantCap, Capacity(s, alloc), quantityEqual), "Capacity (-want,+got)")
}

// pod builds a pod for request tests.
type pod struct{ corev1.Pod }

func newPod(name string) *pod {
	p := &pod{}
	p.Name, p.Namespace, p.UID = name, "ns", types.UID("uid-"+name)
	return p
}

func (p *pod) container(name string, req corev1.ResourceList) *pod {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req}})
	return p
}

func (p *pod) initContainer(name string, req corev1.ResourceList, sidecar bool) *pod {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req}}
	if sidecar {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	return p
}

func (p *pod) overhead(l corev1.ResourceList) *pod { p.Spec.Overhead = l; return p }

func (p *pod) allocated(container string, l corev1.ResourceList) *pod {
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: container, AllocatedResources: l})
	return p
}

func (p *pod) pinnedTo(node string) *pod {
	p.Finalizers = append(p.Finalizers, v1alpha1.FinalizerDelegate)
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[v1alpha1.LabelHostname] = node
	return p
}

func (p *pod) boundTo(node string) *pod { p.Spec.NodeName = node; return p }

func (p *pod) obj() *corev1.Pod { return &p.Pod }

func TestProxyRequests(t *testing.T) {
	cases := []struct {
		name  string
		pods  []*corev1.Pod
		bound bool
		want  corev1.ResourceList
	}{
		{
			name: "no pods",
			want: rl("pods", "0"),
		},
		{
			name: "containers summed, pods counted",
			pods: []*corev1.Pod{
				newPod("a").container("c1", rl("cpu", "100m", "memory", "128Mi")).container("c2", rl("cpu", "200m")).obj(),
				newPod("b").container("c", rl("cpu", "1", "ephemeral-storage", "1Gi")).obj(),
				newPod("no-requests").container("c", nil).obj(),
			},
			want: rl("cpu", "1300m", "memory", "128Mi", "ephemeral-storage", "1Gi", "pods", "3"),
		},
		{
			name: "init containers, sidecars and overhead as the scheduler counts them",
			pods: []*corev1.Pod{
				newPod("a").
					initContainer("init", rl("cpu", "2"), false).
					initContainer("sidecar", rl("cpu", "100m"), true).
					container("c", rl("cpu", "500m")).
					overhead(rl("cpu", "50m")).obj(),
			},
			// max(init 2 + sidecar before it 0, sidecar 100m + container 500m) + overhead
			want: rl("cpu", "2050m", "pods", "1"),
		},
		{
			name:  "a bound pod's allocated resize counts when larger",
			pods:  []*corev1.Pod{newPod("a").container("c", rl("cpu", "1")).allocated("c", rl("cpu", "2")).obj()},
			bound: true,
			want:  rl("cpu", "2", "pods", "1"),
		},
		{
			name: "an unbound pod counts its spec only",
			pods: []*corev1.Pod{newPod("a").container("c", rl("cpu", "1")).allocated("c", rl("cpu", "2")).obj()},
			want: rl("cpu", "1", "pods", "1"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ProxyRequests(tc.pods, tc.bound)
			assert.Empty(t, cmp.Diff(tc.want, got, quantityEqual), "ProxyRequests (-want,+got)")
		})
	}
}

// Once every proxy is bound and the summary is current, the scheduler's view
// of the node (allocatable minus the bound proxies) is exactly what the
// target can still run: this source's own delegates are never counted as
// free room.
func TestAllocatableMinusBoundProxiesIsTheTruth(t *testing.T) {
	delegates := rl("cpu", "4", "memory", "4Gi", "pods", "2")
	s := newSummary().
		allocatable(rl("cpu", "10", "memory", "16Gi", "pods", "20")).
		requested(rl("cpu", "5", "memory", "6Gi", "pods", "3")). // 4 cpu of it are our delegates
		bySource("source-1", delegates).obj()
	alloc := Allocatable(s, delegates)
	for name, want := range map[corev1.ResourceName]string{"cpu": "5", "memory": "10Gi", "pods": "17"} {
		free := alloc[name].DeepCopy()
		free.Sub(delegates[name])
		assert.Zerof(t, free.Cmp(resource.MustParse(want)), "%s the scheduler sees free = %s, the target has %s free", name, free.String(), want)
	}
}
