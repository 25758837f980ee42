package proxy_test

import (
	"strings"
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
		"target=cluster-2 chaperon=c extra",
		"target=cluster-2 chaperon=c =1",
		"target=cluster-2 chaperon=c Extra=1",
		"target=cluster-2 chaperon=c chaperon=d",
		"target=cluster-2 chaperon=c ",
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

// A record a later version wrote with more fields is read by this one:
// after a rollback, a proxy's standing election is still one.
func TestParseRecordReadsALaterVersionsRecord(t *testing.T) {
	got, err := proxy.ParseRecord("target=team-x/west chaperon=db-0-0a1b2c3d elected-at=2026-12-04T10:00:00Z generation=3")
	require.NoError(t, err)
	assert.Equal(t, proxy.Record{TargetNamespace: "team-x", TargetName: "west", Chaperon: "db-0-0a1b2c3d"}, got)
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
// panics, and what it accepts is a valid record that writes back to the
// message, or to its beginning when a later version appended fields.
func FuzzParseRecord(f *testing.F) {
	for _, seed := range []string{
		"target=cluster-2 chaperon=web-7f9c-4a1b2c3d",
		"target=team-x/west chaperon=db-0-0a1b2c3d",
		"target=team-x/west chaperon=db-0-0a1b2c3d generation=3",
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
		if msg != r.Message() {
			assert.True(t, strings.HasPrefix(msg, r.Message()+" "), "%q read as %q", msg, r.Message())
		}
	})
}
