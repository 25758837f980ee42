package proxy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestTargetKey(t *testing.T) {
	target := proxy.TargetKey{Namespace: "team-x", Name: "west"}
	assert.Equal(t, "team-x/west", target.String())
	assert.Equal(t, "Target", target.Kind())

	cluster := proxy.TargetKey{Name: "cluster-2"}
	assert.Equal(t, "cluster-2", cluster.String())
	assert.Equal(t, "ClusterTarget", cluster.Kind())
}

// TestElectedTarget: the key a record names is the key the registry and the
// virtual nodes use, for a Target and a ClusterTarget alike.
func TestElectedTarget(t *testing.T) {
	p := &corev1.Pod{}
	_, _, ok := proxy.ElectedTarget(p)
	assert.False(t, ok, "no record")

	for _, r := range []proxy.Record{
		{TargetNamespace: "team-x", TargetName: "west", Chaperon: "db-0-0a1b2c3d"},
		{TargetName: "cluster-3", Chaperon: "web-1"},
	} {
		p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: r.Message()}}
		key, chaperon, ok := proxy.ElectedTarget(p)
		require.True(t, ok)
		assert.Equal(t, proxy.TargetKey{Namespace: r.TargetNamespace, Name: r.TargetName}, key)
		assert.Equal(t, r.Chaperon, chaperon)
		assert.Equal(t, key, r.Target())
	}
}
