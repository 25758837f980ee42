package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNames(t *testing.T) {
	long := strings.Repeat("n", 63)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "default service account", got: DefaultServiceAccountName("cluster-1"), want: "fleetlet-source-cluster-1"},
		{name: "spec service account wins", got: ServiceAccountNameFor("cluster-1", "mine"), want: "mine"},
		{name: "empty spec service account", got: ServiceAccountNameFor("cluster-1", ""), want: "fleetlet-source-cluster-1"},
		{name: "source role binding", got: SourceRoleBindingName("cluster-1"), want: "fleetlet-source-cluster-1"},
		{name: "cluster source role binding", got: ClusterSourceRoleBindingName("cluster-1"), want: "fleetlet-clustersource-cluster-1"},
		{name: "cluster source cluster role binding", got: ClusterSourceClusterRoleBindingName("cluster-1"), want: "fleetlet-clustersource-cluster-1"},
		{name: "heartbeat role", got: HeartbeatRoleName("cluster-1"), want: "fleetlet-heartbeat-cluster-1"},
		{name: "heartbeat lease", got: HeartbeatLeaseName("cluster-1"), want: "fleetlet-source-cluster-1"},
		{name: "default namespace label", got: DefaultNamespaceLabel("cluster-1"), want: "source.multicluster.fleetlet.io/cluster-1"},
		{name: "source cluster role binding", got: SourceClusterRoleBindingName("team-a", "cluster-1"), want: "fleetlet-source-team-a-cluster-1-" + hash8("team-a/cluster-1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.got)
		})
	}

	t.Run("source cluster role binding is unambiguous", func(t *testing.T) {
		a, b := SourceClusterRoleBindingName("a-b", "c"), SourceClusterRoleBindingName("a", "b-c")
		assert.NotEqualf(t, a, b, "(a-b, c) and (a, b-c) share the name %q", a)
	})
	t.Run("source cluster role binding is shortened to a valid name", func(t *testing.T) {
		seen := map[string]bool{}
		for _, ns := range []string{long, long[:62] + "m", "x"} {
			n := SourceClusterRoleBindingName(ns, long)
			assert.Falsef(t, len(n) > 63, "%q is %d characters, want at most 63", n, len(n))
			errs := validation.IsDNS1123Label(n)
			assert.Emptyf(t, errs, "%q: %v", n, errs)
			assert.Falsef(t, seen[n], "%q given twice", n)
			seen[n] = true
		}
	})
	t.Run("default namespace label is a valid label key for the longest name", func(t *testing.T) {
		assert.Empty(t, validation.IsQualifiedName(DefaultNamespaceLabel(long)))
	})
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}
