package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --follow-allowed-kinds is validated before the manager touches a cluster.
func TestFollowAllowedKindsFlag(t *testing.T) {
	tests := []struct {
		name    string
		value   *string // nil: flag not given
		wantErr string  // "" : valid
	}{
		{name: "default"},
		{name: "given", value: strPtr("ConfigMap,PersistentVolumeClaim")},
		{name: "none", value: strPtr("")},
		{name: "empty name", value: strPtr("ConfigMap,,Secret"), wantErr: `"" is not a Kind name`},
		{name: "lower case", value: strPtr("configmap"), wantErr: `"configmap" is not a Kind name`},
		{name: "resource, not kind", value: strPtr("config-maps"), wantErr: "not a Kind name"},
		{name: "group given", value: strPtr("Role.rbac.authorization.k8s.io"), wantErr: "not a Kind name"},
		{name: "twice", value: strPtr("Secret,Secret"), wantErr: "Secret is given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--cluster-name=cluster-1", "--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}
			if tc.value != nil {
				args = append(args, "--follow-allowed-kinds="+*tc.value)
			}
			cmd := newManagerCommand()
			cmd.SetArgs(args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			require.Error(t, err, "the manager ran without a cluster")
			if tc.wantErr == "" {
				// Valid: it gets as far as loading the missing kubeconfig.
				require.Falsef(t, strings.Contains(err.Error(), "follow-allowed-kinds") || !strings.Contains(err.Error(), "loading the cluster configuration"), "Execute() = %v, want only the missing kubeconfig to fail", err)
				return
			}
			require.Falsef(t, !strings.Contains(err.Error(), "--follow-allowed-kinds") || !strings.Contains(err.Error(), tc.wantErr), "Execute() = %v, want an error about --follow-allowed-kinds with %q", err, tc.wantErr)
		})
	}
	f := newManagerCommand().Flags().Lookup("follow-allowed-kinds")
	assert.Falsef(t, f == nil || f.DefValue != "[ConfigMap,Secret,ServiceAccount]", "--follow-allowed-kinds = %v, want the default [ConfigMap,Secret,ServiceAccount]", f)
}

func strPtr(s string) *string { return &s }
