package proxy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []proxy.Record{
		{TargetName: "cluster-2", Chaperon: "web-7f9c-4a1b2c3d"},
		{TargetNamespace: "team-x", TargetName: "west", Chaperon: "db-0-0a1b2c3d"},
	} {
		msg := r.Message()
		got, err := proxy.ParseRecord(msg)
		require.NoError(t, err, msg)
		assert.Equal(t, r, got)
	}
	assert.Equal(t, "target=team-x/west chaperon=c", proxy.Record{TargetNamespace: "team-x", TargetName: "west", Chaperon: "c"}.Message())
}

func TestParseRecordRefuses(t *testing.T) {
	for _, msg := range []string{
		"",
		"target=cluster-2",
		"target=cluster-2 chaperon=",
		"target= chaperon=c",
		"chaperon=c target=cluster-2",
		"target=cluster-2 chaperon=c extra=1",
		"target=cluster-2  chaperon=c",
		"target=a/b/c chaperon=c",
		"target=/b chaperon=c",
		"target=Cluster chaperon=c",
		"target=cluster-2 chaperon=C_d",
		"the candidate in cluster-2 was not bound in time",
	} {
		_, err := proxy.ParseRecord(msg)
		assert.Error(t, err, "%q was read as a record", msg)
	}
}

func TestElected(t *testing.T) {
	p := &corev1.Pod{}
	_, ok := proxy.Elected(p)
	assert.False(t, ok, "no condition")

	r := proxy.Record{TargetName: "cluster-3", Chaperon: "web-1"}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: v1alpha1.ConditionElected, Status: corev1.ConditionFalse, Message: r.Message()},
	}
	_, ok = proxy.Elected(p)
	assert.False(t, ok, "Elected=False stands for no election")

	p.Status.Conditions[1].Status = corev1.ConditionTrue
	got, ok := proxy.Elected(p)
	require.True(t, ok)
	assert.Equal(t, r, got)
	assert.Same(t, &p.Status.Conditions[1], proxy.ElectedCondition(p))
}

// FuzzParseRecord: whatever a condition's message holds, ParseRecord never
// panics, and what it accepts is a valid record that writes back to the same
// message.
func FuzzParseRecord(f *testing.F) {
	for _, seed := range []string{
		"target=cluster-2 chaperon=web-7f9c-4a1b2c3d",
		"target=team-x/west chaperon=db-0-0a1b2c3d",
		"target=a/b/c chaperon=c",
		"target= chaperon=",
		"target=x chaperon=y z",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		r, err := proxy.ParseRecord(msg)
		if err != nil {
			return
		}
		require.NoError(t, r.Validate())
		assert.Equal(t, msg, r.Message())
	})
}
