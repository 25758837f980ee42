package elector

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestGroupOf(t *testing.T) {
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Labels: labels, Annotations: annotations}}
	}
	_, ok, err := groupOf(pod(nil, nil))
	require.NoError(t, err)
	assert.False(t, ok, "a pod without a group")

	g, ok, err := groupOf(pod(map[string]string{v1alpha1.LabelGroup: "train"}, map[string]string{v1alpha1.AnnotationGroupMinMembers: "4"}))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, group{key: "ns/train", name: "train", min: 4}, g)

	g, ok, err = groupOf(pod(map[string]string{kueuePodGroupName: "job"}, map[string]string{kueuePodGroupTotal: "3"}))
	require.NoError(t, err)
	assert.True(t, ok, "Kueue's pod group")
	assert.Equal(t, group{key: "ns/job", name: "job", min: 3}, g)

	for _, bad := range []string{"", "0", "-2", "four"} {
		_, ok, err := groupOf(pod(map[string]string{v1alpha1.LabelGroup: "train"}, map[string]string{v1alpha1.AnnotationGroupMinMembers: bad}))
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
