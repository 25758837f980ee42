package vnode

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

func TestTargetLabels(t *testing.T) {
	longName := strings.Repeat("k", 64)
	cases := []struct {
		name     string
		shared   map[string]string
		excluded string
		want     map[string]string
		wantErr  bool
	}{
		{
			name:   "none",
			shared: nil,
			want:   map[string]string{},
		},
		{
			name: "prefixed, slash replaced",
			shared: map[string]string{
				"topology.kubernetes.io/region": "cluster-2",
				"kubernetes.io/arch":            "amd64",
				"tier":                          "gold",
			},
			want: map[string]string{
				"target.multicluster.fleetlet.io/topology.kubernetes.io.region": "cluster-2",
				"target.multicluster.fleetlet.io/kubernetes.io.arch":            "amd64",
				"target.multicluster.fleetlet.io/tier":                          "gold",
			},
		},
		{
			name: "excluded keys dropped, matched on the target's key",
			shared: map[string]string{
				"topology.kubernetes.io/region": "eu",
				"topology.kubernetes.io/zone":   "eu-1",
				"node.kubernetes.io/instance":   "m5",
			},
			excluded: `^topology\.kubernetes\.io/zone$|^node\.kubernetes\.io/`,
			want: map[string]string{
				"target.multicluster.fleetlet.io/topology.kubernetes.io.region": "eu",
			},
		},
		{
			name: "keys that are not valid once prefixed are skipped",
			shared: map[string]string{
				"example.com/" + longName[:50]: "fits",
				"example.com/" + longName:      "too long",
				"ok":                           "yes",
			},
			want: map[string]string{
				"target.multicluster.fleetlet.io/example.com." + longName[:50]: "fits",
				"target.multicluster.fleetlet.io/ok":                           "yes",
			},
		},
		{
			name:     "invalid regexp keeps no target label",
			shared:   map[string]string{"tier": "gold"},
			excluded: "(",
			want:     map[string]string{},
			wantErr:  true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TargetLabels(tc.shared, tc.excluded)
			require.Equal(t, tc.wantErr, err != nil, "error = %v, want error", err)
			assert.Empty(t, cmp.Diff(tc.want, got), "TargetLabels (-want,+got)")
		})
	}
}

func TestNodeLabels(t *testing.T) {
	conventions := func(node, cluster string) map[string]string {
		l := map[string]string{
			"type":                   "virtual-kubelet",
			"kubernetes.io/role":     "cluster",
			"kubernetes.io/hostname": node,
			"kubernetes.io/os":       "linux",
		}
		if cluster != "" {
			l["multicluster.fleetlet.io/cluster"] = cluster
		}
		return l
	}
	longName := strings.Repeat("t", 70)
	cases := []struct {
		name     string
		key      proxy.TargetKey
		shared   map[string]string
		excluded string
		want     map[string]string
		wantErr  bool
	}{
		{
			name:   "conventions and target labels",
			key:    proxy.TargetKey{Name: "cluster-2"},
			shared: map[string]string{"topology.kubernetes.io/region": "cluster-2"},
			want: merge(conventions("fleetlet-cluster-2", "cluster-2"), map[string]string{
				"target.multicluster.fleetlet.io/topology.kubernetes.io.region": "cluster-2",
			}),
		},
		{
			name:   "a target cannot override a convention",
			key:    proxy.TargetKey{Namespace: "team", Name: "c"},
			shared: map[string]string{"kubernetes.io/hostname": "real-node", "type": "real"},
			want: merge(conventions("fleetlet-team-c", "c"), map[string]string{
				"target.multicluster.fleetlet.io/kubernetes.io.hostname": "real-node",
				"target.multicluster.fleetlet.io/type":                   "real",
			}),
		},
		{
			name: "a target name too long for a label value has no cluster label",
			key:  proxy.TargetKey{Name: longName},
			want: conventions(proxy.NodeName(proxy.TargetKey{Name: longName}), ""),
		},
		{
			name:     "invalid regexp: conventions only, and the error",
			key:      proxy.TargetKey{Name: "c"},
			shared:   map[string]string{"tier": "gold"},
			excluded: "[",
			want:     conventions("fleetlet-c", "c"),
			wantErr:  true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeLabels(proxy.NodeName(tc.key), tc.key, tc.shared, tc.excluded)
			require.Equal(t, tc.wantErr, err != nil, "error = %v, want error", err)
			assert.Empty(t, cmp.Diff(tc.want, got), "NodeLabels (-want,+got)")
		})
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
