package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/connect"
)

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://127.0.0.1:6443"}
- name: b
  cluster: {server: "https://127.0.0.2:6443"}
users:
- name: admin
  user: {token: secret}
contexts:
- name: cluster-1
  context: {cluster: a, user: admin}
- name: cluster-2
  context: {cluster: b, user: admin}
- name: admin@weird
  context: {cluster: b, user: admin}
current-context: cluster-1
`

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfigYAML), 0o600))
	return path
}

func TestConnectFlagsToOptions(t *testing.T) {
	kubeconfig := writeKubeconfig(t)
	tests := []struct {
		name    string
		flags   connectFlags
		want    connect.Options
		wantErr string
	}{
		{
			name:  "names default to the contexts",
			flags: connectFlags{sourceContext: "cluster-1", targetContext: "cluster-2", fleetletNamespace: "fleetlet-system", timeout: time.Minute},
			want: connect.Options{SourceName: "cluster-1", TargetName: "cluster-2", FleetletNamespace: "fleetlet-system", Timeout: time.Minute,
				SourceContext: "cluster-1", TargetContext: "cluster-2"},
		},
		{
			name:  "explicit names and namespace",
			flags: connectFlags{sourceContext: "cluster-1", targetContext: "cluster-2", sourceName: "east", targetName: "west", namespace: "team-a"},
			want:  connect.Options{SourceName: "east", TargetName: "west", Namespace: "team-a", SourceContext: "cluster-1", TargetContext: "cluster-2"},
		},
		{
			name:  "self names the target and its Source after the source context",
			flags: connectFlags{sourceContext: "cluster-1", self: true},
			want:  connect.Options{SourceName: "cluster-1", TargetName: "cluster-1", Self: true, SourceContext: "cluster-1"},
		},
		{name: "source context required", flags: connectFlags{targetContext: "cluster-2"}, wantErr: "--source-context is required"},
		{name: "target context required", flags: connectFlags{sourceContext: "cluster-1"}, wantErr: "--target-context is required"},
		{name: "self excludes target", flags: connectFlags{sourceContext: "cluster-1", targetContext: "cluster-2", self: true}, wantErr: "exclude each other"},
		{name: "unknown context", flags: connectFlags{sourceContext: "cluster-1", targetContext: "nope"}, wantErr: `"nope"`},
		{name: "context name unfit for a source name", flags: connectFlags{sourceContext: "admin@weird", targetContext: "cluster-2"}, wantErr: "pass --source-name"},
		{name: "context name unfit for a target name", flags: connectFlags{sourceContext: "cluster-1", targetContext: "admin@weird"}, wantErr: "pass --target-name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.flags.options(kubeconfig)
			if tt.wantErr != "" {
				require.ErrorContainsf(t, err, tt.wantErr, "error = %v, want one mentioning %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Falsef(t, got.Source == nil || got.Source.Host != "https://127.0.0.1:6443", "source config = %+v", got.Source)
			if tt.flags.self {
				assert.Nilf(t, got.Target, "target config with --self: %+v", got.Target)
			} else {
				assert.Falsef(t, got.Target == nil || got.Target.Host != "https://127.0.0.2:6443", "target config = %+v", got.Target)
			}
			assert.Empty(t, cmp.Diff(tt.want, got, cmpopts.IgnoreTypes(&rest.Config{})), "options (-want,+got)")
		})
	}
}

func TestKubeconfigList(t *testing.T) {
	one := writeKubeconfig(t)
	other := filepath.Join(t.TempDir(), "other")
	otherYAML := `apiVersion: v1
kind: Config
clusters:
- name: z
  cluster: {server: "https://127.0.0.9:6443"}
users:
- name: admin
  user: {token: secret}
contexts:
- name: cluster-9
  context: {cluster: z, user: admin}
`
	require.NoError(t, os.WriteFile(other, []byte(otherYAML), 0o600))
	cfg, err := restConfig(one+string(filepath.ListSeparator)+other, "cluster-9")
	require.NoError(t, err)
	assert.Equalf(t, "https://127.0.0.9:6443", cfg.Host, "host = %s", cfg.Host)
	_, err = restConfig(filepath.Join(t.TempDir(), "missing"), "cluster-1")
	assert.Error(t, err, "a missing --kubeconfig file was accepted")
}

func TestCommandsAreAKubectlPlugin(t *testing.T) {
	var out bytes.Buffer
	run := func(args ...string) error {
		// A fresh command each time: cobra keeps flag values.
		root := newRootCommand(&out, &out)
		root.SetArgs(args)
		return root.Execute()
	}
	require.NoError(t, run("connect", "--help"))
	for _, want := range []string{"kubectl fleetlet connect", "--source-context", "--target-context", "--namespace", "--source-name", "--target-name", "--fleetlet-namespace", "--timeout", "--self", "--kubeconfig"} {
		assert.Containsf(t, out.String(), want, "connect --help lacks %q", want)
	}
	for _, sub := range []string{"disconnect", "status"} {
		out.Reset()
		require.NoError(t, run(sub, "--help"), "%s --help", sub)
	}
	assert.Containsf(t, out.String(), "--context", "status --help lacks --context:\n%s", out.String())

	out.Reset()
	if err := run("connect", "--target-context", "x"); err == nil || !strings.Contains(out.String(), "--source-context is required") {
		assert.Failf(t, "connect without --source-context", "err %v, output %q", err, out.String())
	}
}
