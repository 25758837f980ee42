package candidate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// loadDefault returns the default configuration as kube-scheduler reads it.
func loadDefault(t *testing.T, mutate func(*ConfigOptions)) *config.KubeSchedulerConfiguration {
	t.Helper()
	o := DefaultConfigOptions("fleetlet-system")
	o.Kubeconfig = "/etc/fleetlet/kubeconfig"
	if mutate != nil {
		mutate(&o)
	}
	v1cfg, err := Configuration(o)
	require.NoError(t, err)
	data, err := EncodeConfiguration(v1cfg)
	require.NoError(t, err)
	cfg, err := LoadConfiguration(data)
	require.NoErrorf(t, err, "loading\n%s", data)
	return cfg
}

func pluginNames(ps []config.Plugin) []string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return names
}

func TestDefaultConfiguration(t *testing.T) {
	cfg := loadDefault(t, func(o *ConfigOptions) { o.PermitTimeout = 2 * time.Minute })
	require.NoError(t, CheckConfiguration(cfg), "CheckConfiguration(default)")
	require.Falsef(t, len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "fleetlet-candidate", "profiles = %+v, want fleetlet-candidate only", cfg.Profiles)
	multiPoint := pluginNames(cfg.Profiles[0].Plugins.MultiPoint.Enabled)
	// Every default plugin, then the candidate plugin.
	for _, want := range []string{"NodeResourcesFit", "NodeAffinity", "TaintToleration", "PodTopologySpread", "DefaultPreemption", "DefaultBinder", Name} {
		assert.Truef(t, slices.Contains(multiPoint, want), "multiPoint lacks %s: %v", want, multiPoint)
	}
	args, err := DecodeArgs(pluginArgs(&cfg.Profiles[0]))
	require.NoError(t, err)
	assert.Equalf(t, 2*time.Minute, args.PermitTimeout.Duration, "permitTimeout = %s, want 2m", args.PermitTimeout.Duration)
	le := cfg.LeaderElection
	got, want := []any{le.LeaderElect, le.ResourceLock, le.ResourceName, le.ResourceNamespace}, []any{true, "leases", "fleetlet-candidate-scheduler", "fleetlet-system"}
	assert.Truef(t, cmp.Equal(got, want), "leader election = %v, want %v", got, want)
	assert.Falsef(t, cfg.ClientConnection.Kubeconfig != "/etc/fleetlet/kubeconfig" || cfg.ClientConnection.QPS != 50 || cfg.ClientConnection.Burst != 100, "client connection = %+v", cfg.ClientConnection)
}

func TestCheckConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{{
		name: "extra profiles beside fleetlet-candidate",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: batch
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled:
      - name: candidate
  pluginConfig:
  - name: candidate
    args:
      permitTimeout: 1m
`,
	}, {
		name: "enabled at reserve and permit only",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
  plugins:
    reserve:
      enabled: [{name: candidate}]
    permit:
      enabled: [{name: candidate}]
`,
	}, {
		name: "no fleetlet-candidate profile",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: candidate}]
`,
		wantErr: `no profile with schedulerName "fleetlet-candidate"`,
	}, {
		name: "the plugin not enabled",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
`,
		wantErr: "the candidate plugin is not enabled at reserve",
	}, {
		name: "the plugin disabled at permit",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled: [{name: candidate}]
    permit:
      disabled: [{name: "*"}]
`,
		wantErr: "not enabled at permit",
	}, {
		name: "bad args",
		yaml: `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled: [{name: candidate}]
  pluginConfig:
  - name: candidate
    args:
      permitTimeout: 20m
`,
		wantErr: "longer than 15m0s",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfiguration([]byte(tc.yaml))
			require.NoError(t, err)
			err = CheckConfiguration(cfg)
			require.Falsef(t, tc.wantErr == "" && err != nil, "CheckConfiguration() = %v", err)
			require.Falsef(t, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)), "CheckConfiguration() = %v, want an error containing %q", err, tc.wantErr)
		})
	}
}

func TestSetPermitTimeout(t *testing.T) {
	cfg, err := LoadConfiguration([]byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled: [{name: candidate}]
  pluginConfig:
  - name: candidate
    args:
      permitTimeout: 1m
      reservationWorkers: 7
`))
	require.NoError(t, err)
	require.NoError(t, SetPermitTimeout(cfg, 3*time.Minute))
	args, err := DecodeArgs(pluginArgs(&cfg.Profiles[0]))
	require.NoError(t, err)
	assert.Falsef(t, args.PermitTimeout.Duration != 3*time.Minute || *args.ReservationWorkers != 7, "args = permitTimeout %s, reservationWorkers %d; want 3m and 7 kept", args.PermitTimeout.Duration, *args.ReservationWorkers)

	// Without a pluginConfig entry, one is added.
	cfg = loadDefault(t, nil)
	cfg.Profiles[0].PluginConfig = nil
	require.NoError(t, SetPermitTimeout(cfg, time.Minute))
	args, err = DecodeArgs(pluginArgs(&cfg.Profiles[0]))
	assert.Falsef(t, err != nil || args.PermitTimeout.Duration != time.Minute, "args = %+v, %v; want permitTimeout 1m", args, err)
}
