package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestManagerOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*managerOptions)
		wantErr string
	}{
		{name: "defaults with a cluster name", mutate: func(*managerOptions) {}},
		{name: "no cluster name", mutate: func(o *managerOptions) { o.clusterName = "" }, wantErr: "--cluster-name is required"},
		{name: "no namespace", mutate: func(o *managerOptions) { o.namespace = "" }, wantErr: "--namespace"},
		{name: "renew deadline not below lease", mutate: func(o *managerOptions) { o.leaderElectionRenewDeadline = o.leaderElectionLeaseDuration }, wantErr: "renew-deadline"},
		{name: "bad kubelet ports", mutate: func(o *managerOptions) { o.kubeletAPI.ports = "10250-70000" }, wantErr: "--kubelet-ports"},
		{name: "kubelet cert files without key", mutate: func(o *managerOptions) { o.kubeletAPI.serving, o.kubeletAPI.certFile = "files", "tls.crt" }, wantErr: "--kubelet-tls-private-key-file"},
		{name: "kubelet cert file with csr", mutate: func(o *managerOptions) { o.kubeletAPI.certFile = "tls.crt" }, wantErr: "--kubelet-serving-certificate=files"},
		{name: "a Secret namespace that is no namespace name", mutate: func(o *managerOptions) { o.secretNamespaces = []string{"team-a", "Team_B"} }, wantErr: "--secret-namespaces"},
		{name: "kubelet serving source", mutate: func(o *managerOptions) { o.kubeletAPI.serving = "acme" }, wantErr: "--kubelet-serving-certificate"},
		{name: "no bound on elections in flight", mutate: func(o *managerOptions) { o.electionsInFlight = 0 }},
		{name: "a negative bound on elections in flight", mutate: func(o *managerOptions) { o.electionsInFlight = -1 }, wantErr: "--elections-in-flight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultManagerOptions()
			o.clusterName = "cluster-1"
			tc.mutate(&o)
			err := o.validate()
			if tc.wantErr == "" {
				require.NoError(t, err, "validate()")
				return
			}
			require.ErrorContainsf(t, err, tc.wantErr, "validate() = %v, want an error with %q", err, tc.wantErr)
		})
	}
}

// --elections-in-flight=0 is no bound, which the elector reads below 0 (its
// own 0 is its default).
func TestElectionsInFlightFlag(t *testing.T) {
	assert.Equal(t, -1, electionsInFlight(0))
	assert.Equal(t, 25, electionsInFlight(25))
}

// Every timeout is a flag a user can read in --help.
func TestManagerFlagsExposeTimeouts(t *testing.T) {
	cmd := newManagerCommand()
	for _, name := range []string{
		"leader-election-lease-duration", "leader-election-renew-deadline", "leader-election-retry-period",
		"target-probe-interval", "target-probe-timeout", "target-probe-backoff", "source-heartbeat-duration",
		"node-lease-duration", "node-status-interval", "graceful-shutdown-timeout",
	} {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			assert.Fail(t, "flag missing", "flag --%s missing", name)
			continue
		}
		_, err := time.ParseDuration(f.DefValue)
		assert.NoError(t, err, "flag --%s default %q is not a duration", name, f.DefValue)
	}
	require.NoError(t, cmd.Flags().Parse([]string{"--cluster-name=a", "--target-probe-interval=3s"}))
}

// --secret-namespaces: the manager's cache watches Secrets there and in its
// own namespace only; without it, everywhere.
func TestSecretNamespacesRestrictTheCache(t *testing.T) {
	o := defaultManagerOptions()
	o.namespace = "fleetlet-system"
	assert.Nil(t, o.secretNamespacesWithOwn(), "secret namespaces by default, want none (every namespace)")
	for obj := range o.cacheByObject() {
		_, ok := obj.(*corev1.Secret)
		assert.False(t, ok, "the cache restricts Secrets by default")
	}
	o.secretNamespaces = []string{"team-b", "fleetlet-system", "team-a"}
	assert.Equal(t, "fleetlet-system,team-a,team-b", strings.Join(o.secretNamespacesWithOwn(), ","), "secret namespaces")
	found := false
	for obj, by := range o.cacheByObject() {
		if _, ok := obj.(*corev1.Secret); ok {
			found = true
			assert.Falsef(t, len(by.Namespaces) != 3 || by.Namespaces["team-a"].LabelSelector != nil, "Secrets cached in %v, want the three namespaces", by.Namespaces)
		}
	}
	assert.True(t, found, "the cache does not restrict Secrets")
}

// The manager's cache drops managed fields from every object it keeps.
// Before: each cached pod kept them.
func TestCacheDropsManagedFields(t *testing.T) {
	o := defaultManagerOptions()
	opts := o.cacheOptions()
	require.NotNil(t, opts.DefaultTransform, "the manager's cache has no default transform")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	out, err := opts.DefaultTransform(pod)
	require.NoError(t, err)
	got, ok := out.(*corev1.Pod)
	require.True(t, ok, "the transform returned a %T", out)
	assert.Empty(t, got.ManagedFields, "managed fields kept in the cache")
	assert.Equal(t, "p", got.Name, "the transform lost the pod")
	for obj, by := range opts.ByObject {
		assert.Nilf(t, by.Transform, "%T has its own transform, which replaces the default", obj)
	}
}
