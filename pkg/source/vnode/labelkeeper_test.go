package vnode

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLabelPatch(t *testing.T) {
	cases := []struct {
		name             string
		current, desired map[string]string
		// want is the labels of the patch; nil values delete; nil: no patch.
		want map[string]*string
	}{
		{
			name:    "in line",
			current: map[string]string{"type": "virtual-kubelet", "team": "blue"},
			desired: map[string]string{"type": "virtual-kubelet"},
		},
		{
			name:    "sets what is missing or changed, keeps others' labels",
			current: map[string]string{"type": "real", "team": "blue"},
			desired: map[string]string{"type": "virtual-kubelet", "target.multicluster.fleetlet.io/tier": "gold"},
			want:    map[string]*string{"type": ptr("virtual-kubelet"), "target.multicluster.fleetlet.io/tier": ptr("gold")},
		},
		{
			name: "removes owned labels no longer desired",
			current: map[string]string{
				"target.multicluster.fleetlet.io/tier": "gold",
				"multicluster.fleetlet.io/cluster":     "c",
				"multicluster.fleetlet.io/other":       "someone else's",
				"team":                                 "blue",
			},
			desired: map[string]string{},
			want: map[string]*string{
				"target.multicluster.fleetlet.io/tier": nil,
				"multicluster.fleetlet.io/cluster":     nil,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			patch := labelPatch(tc.current, tc.desired)
			if tc.want == nil {
				require.Falsef(t, patch != nil, "patch = %s, want none", patch)
				return
			}
			var got struct {
				Metadata struct {
					Labels map[string]*string `json:"labels"`
				} `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal(patch, &got))
			assert.Empty(t, cmp.Diff(tc.want, got.Metadata.Labels), "patch labels (-want,+got)")
		})
	}
}

func ptr(s string) *string { return &s }
