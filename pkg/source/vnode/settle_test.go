package vnode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestCovers(t *testing.T) {
	alloc := rl("cpu", "1", "pods", "3")
	for _, c := range []struct {
		name    string
		proxies corev1.ResourceList
		want    bool
	}{
		{"none", nil, true},
		{"within", rl("cpu", "1", "pods", "3"), true},
		{"more cpu", rl("cpu", "1001m", "pods", "1"), false},
		{"more pods", rl("cpu", "1", "pods", "4"), false},
		{"a resource the node does not show", rl("nvidia.com/gpu", "1"), false},
		{"zero of one it does not show", rl("nvidia.com/gpu", "0"), true},
	} {
		assert.Equal(t, c.want, covers(alloc, c.proxies), c.name)
	}
}

// Only a change of resources waits, and only while the written node covers
// the proxies and is younger than the interval.
func TestHoldsBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := &Controller{cfg: Config{Clock: clk, ResourceInterval: 5 * time.Second}}
	written := &corev1.Node{Status: corev1.NodeStatus{
		Allocatable: rl("cpu", "2", "pods", "10"),
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}}
	written.Labels = map[string]string{"a": "1"}
	vn := &virtualNode{built: written, builtAt: clk.Now()}
	resources := written.DeepCopy()
	resources.Status.Allocatable = rl("cpu", "3", "pods", "11")
	proxies := rl("cpu", "1", "pods", "1")

	assert.True(t, c.holdsBack(vn, resources, proxies), "resources alone, the written node covers the proxies")
	assert.False(t, c.holdsBack(vn, resources, rl("cpu", "2500m", "pods", "1")), "the proxies need more than the written node has")

	labels := resources.DeepCopy()
	labels.Labels["a"] = "2"
	assert.False(t, c.holdsBack(vn, labels, proxies), "a label changed")
	ready := resources.DeepCopy()
	ready.Status.Conditions[0].Status = corev1.ConditionFalse
	assert.False(t, c.holdsBack(vn, ready, proxies), "a condition changed")

	clk.Step(5 * time.Second)
	assert.False(t, c.holdsBack(vn, resources, proxies), "the written node is as old as the interval")
	c.cfg.ResourceInterval = -1
	vn.builtAt = clk.Now()
	assert.False(t, c.holdsBack(vn, resources, proxies), "no interval")
}
