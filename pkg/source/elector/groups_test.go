package elector

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestParseGroup(t *testing.T) {
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Labels: labels, Annotations: annotations}}
	}
	_, ok, err := parseGroup(pod(nil, nil))
	require.NoError(t, err)
	assert.False(t, ok, "a pod without a group")

	g, ok, err := parseGroup(pod(map[string]string{v1alpha1.LabelGroup: "train"}, map[string]string{v1alpha1.AnnotationGroupMinMembers: "4"}))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, group{key: "ns/train", name: "train", min: 4}, g)

	g, ok, err = parseGroup(pod(map[string]string{kueuePodGroupName: "job"}, map[string]string{kueuePodGroupTotal: "3"}))
	require.NoError(t, err)
	assert.True(t, ok, "Kueue's pod group")
	assert.Equal(t, group{key: "ns/job", name: "job", min: 3}, g)

	for _, bad := range []string{"", "0", "-2", "four"} {
		_, ok, err := parseGroup(pod(map[string]string{v1alpha1.LabelGroup: "train"}, map[string]string{v1alpha1.AnnotationGroupMinMembers: bad}))
		assert.True(t, ok)
		assert.ErrorContains(t, err, "must be a positive number of members", bad)
	}
}

func TestKeepWithGroup(t *testing.T) {
	states := []*targetState{{eligible: true}, {eligible: true}}
	states[0].key.Name, states[1].key.Name = "a", "b"
	keepWithGroup(group{name: "train"}, "b", states)
	assert.False(t, states[0].eligible)
	assert.Equal(t, "its group train runs in target b", states[0].reason)
	assert.True(t, states[1].eligible)
}

// A group's wait times out only if members kept waiting; one nobody kept
// up (the group went, a new one took its name) starts again.
func TestGroupWaits(t *testing.T) {
	var l groupLedger
	l.init()
	t0 := time.Unix(1000, 0)
	timeout, backoff := 10*time.Second, time.Minute
	for s := 0; s <= 10; s++ {
		assert.False(t, l.waited("ns/g", t0.Add(time.Duration(s)*time.Second), timeout, backoff), "second %d", s)
	}
	assert.True(t, l.waited("ns/g", t0.Add(11*time.Second), timeout, backoff), "past the timeout")
	assert.Equal(t, t0.Add(11*time.Second+backoff), l.backoff["ns/g"])

	assert.False(t, l.waited("ns/h", t0, timeout, backoff))
	assert.False(t, l.waited("ns/h", t0.Add(time.Hour), timeout, backoff), "a stale wait starts again")
}
