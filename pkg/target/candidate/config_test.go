package candidate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	if err != nil {
		t.Fatal(err)
	}
	data, err := EncodeConfiguration(v1cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfiguration(data)
	if err != nil {
		t.Fatalf("loading\n%s: %v", data, err)
	}
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
	if err := CheckConfiguration(cfg); err != nil {
		t.Fatalf("CheckConfiguration(default) = %v", err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "fleetlet-candidate" {
		t.Fatalf("profiles = %+v, want fleetlet-candidate only", cfg.Profiles)
	}
	multiPoint := pluginNames(cfg.Profiles[0].Plugins.MultiPoint.Enabled)
	// Every default plugin, then the candidate plugin.
	for _, want := range []string{"NodeResourcesFit", "NodeAffinity", "TaintToleration", "PodTopologySpread", "DefaultPreemption", "DefaultBinder", Name} {
		if !slices.Contains(multiPoint, want) {
			t.Errorf("multiPoint lacks %s: %v", want, multiPoint)
		}
	}
	args, err := DecodeArgs(pluginArgs(&cfg.Profiles[0]))
	if err != nil {
		t.Fatal(err)
	}
	if args.PermitTimeout.Duration != 2*time.Minute {
		t.Errorf("permitTimeout = %s, want 2m", args.PermitTimeout.Duration)
	}
	le := cfg.LeaderElection
	if got, want := []any{le.LeaderElect, le.ResourceLock, le.ResourceName, le.ResourceNamespace}, []any{true, "leases", "fleetlet-candidate-scheduler", "fleetlet-system"}; !cmp.Equal(got, want) {
		t.Errorf("leader election = %v, want %v", got, want)
	}
	if cfg.ClientConnection.Kubeconfig != "/etc/fleetlet/kubeconfig" || cfg.ClientConnection.QPS != 50 || cfg.ClientConnection.Burst != 100 {
		t.Errorf("client connection = %+v", cfg.ClientConnection)
	}
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
			if err != nil {
				t.Fatal(err)
			}
			err = CheckConfiguration(cfg)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("CheckConfiguration() = %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("CheckConfiguration() = %v, want an error containing %q", err, tc.wantErr)
			}
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
	if err != nil {
		t.Fatal(err)
	}
	if err := SetPermitTimeout(cfg, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	args, err := DecodeArgs(pluginArgs(&cfg.Profiles[0]))
	if err != nil {
		t.Fatal(err)
	}
	if args.PermitTimeout.Duration != 3*time.Minute || *args.ReservationWorkers != 7 {
		t.Errorf("args = permitTimeout %s, reservationWorkers %d; want 3m and 7 kept", args.PermitTimeout.Duration, *args.ReservationWorkers)
	}

	// Without a pluginConfig entry, one is added.
	cfg = loadDefault(t, nil)
	cfg.Profiles[0].PluginConfig = nil
	if err := SetPermitTimeout(cfg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if args, err := DecodeArgs(pluginArgs(&cfg.Profiles[0])); err != nil || args.PermitTimeout.Duration != time.Minute {
		t.Errorf("args = %+v, %v; want permitTimeout 1m", args, err)
	}
}
