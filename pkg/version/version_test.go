package version

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnstampedBuild(t *testing.T) {
	if version != "" {
		t.Skip("this test binary was stamped")
	}
	info := Get()
	require.Falsef(t, info.Version != Unversioned || info.Commit == "" || info.GoVersion == "" || !strings.Contains(info.Platform, "/"),
		"unstamped build = %+v", info)
}

// TestCommandAnswersVersion: --version and `version [-o json]` print the
// build, also when a global --version flag of another type exists, as
// component-base's verflag registers in every binary that links it.
func TestCommandAnswersVersion(t *testing.T) {
	old := pflag.CommandLine
	t.Cleanup(func() { pflag.CommandLine = old })
	pflag.CommandLine = pflag.NewFlagSet("global", pflag.ContinueOnError)
	pflag.CommandLine.String("version", "", "component-base's --version, not a boolean")

	version, commit = "1.2.3-test", "abc123"
	t.Cleanup(func() { version, commit = "", "" })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--version"}, "app 1.2.3-test (commit abc123, "},
		{[]string{"version"}, "app 1.2.3-test (commit abc123, "},
	} {
		root := &cobra.Command{Use: "app", RunE: func(*cobra.Command, []string) error { return nil }}
		AddTo(root)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(tc.args)
		require.NoError(t, root.Execute(), "%v", tc.args)
		assert.Truef(t, strings.HasPrefix(out.String(), tc.want), "%v printed %q, want %q…", tc.args, out.String(), tc.want)
	}

	root := &cobra.Command{Use: "app"}
	AddTo(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version", "-o", "json"})
	require.NoError(t, root.Execute())
	var info Info
	err := json.Unmarshal(out.Bytes(), &info)
	require.Falsef(t, err != nil || info.Version != "1.2.3-test" || info.Commit != "abc123",
		"version -o json = %q (%v)", out.String(), err)
}
