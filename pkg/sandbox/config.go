package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Options configure a sandbox. The zero value of every field but Dir means its
// default; Defaulted fills them in and Validate checks the result.
type Options struct {
	// Dir holds everything the sandbox writes: kubeconfigs, sandbox.json, data
	// and logs.
	Dir string
	// Clusters is how many clusters to start (cluster-1 … cluster-N).
	Clusters int
	// Nodes is how many kwok nodes each cluster gets.
	Nodes int
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl and kwok.
	BinDir string
	// FleetletBinDir holds the fleetlet binary and packaged chart the
	// clusters run, when not BinDir's: an earlier release built with `make
	// upgrade-from`, to upgrade from (Sandbox.InstallFleetlet).
	FleetletBinDir string
	// NodeCPU, NodeMemory and NodePods are each fake node's capacity.
	NodeCPU    string
	NodeMemory string
	NodePods   string
	// TolerationSeconds is the apiserver's default not-ready and unreachable
	// NoExecute toleration (the upstream default is 300 s; shorter here so that
	// outage tests finish quickly).
	TolerationSeconds int
	// NodeMonitorGracePeriod is how long the node lifecycle controller waits
	// for a node's heartbeat before it marks the node Unknown.
	NodeMonitorGracePeriod time.Duration
	// CompleteAfter is how long a pod with restartPolicy Never or OnFailure
	// runs before kwok marks it Succeeded, so that Jobs complete. A pod may
	// set its own with the annotation sandbox.fleetlet.io/complete-after.
	CompleteAfter time.Duration
	// ReadyTimeout bounds how long starting one cluster may take.
	ReadyTimeout time.Duration
	// StopGracePeriod is how long a process gets after SIGTERM before SIGKILL.
	StopGracePeriod time.Duration
	// NoFleetlet starts bare clusters: no fleetlet manager, no targets.
	NoFleetlet bool
	// Kueue runs a Kueue manager (bin/kueue) against the source cluster,
	// with its CRDs and webhooks: a quota system whose flavors may name
	// clusters. Off by default.
	Kueue bool
	// MetricsServer runs metrics-server (bin/metrics-server) in every
	// cluster, registered through the aggregation layer, with the fake
	// nodes reporting the usage their pods' kwok.x-k8s.io/usage-cpu and
	// usage-memory annotations ask for. Off by default.
	MetricsServer bool
	// Furnished runs in every cluster's kube-system what production
	// clusters run from their first day (furniture.go): DaemonSets that
	// tolerate every taint and a CoreDNS. The e2e suite and the demo turn
	// it on.
	Furnished bool
	// Devices publishes devices for Dynamic Resource Allocation (devices.go):
	// cluster name → devices of class DeviceClassGPU per fake node. Clusters
	// not named publish none.
	Devices map[string]int
	// ManagerArgs are more arguments for every cluster's fleetlet manager
	// (the bench's --manager-arg, to compare settings; the e2e suite's
	// shorter --gc-min-age).
	ManagerArgs []string
	// SchedulerArgs are more arguments for every cluster's candidate
	// scheduler (the bench's --scheduler-arg).
	SchedulerArgs []string
	// DieWithParent makes every started process die with the process that
	// started it. Tests set it; the command-line tool does not.
	DieWithParent bool
	// Out receives progress lines; nil discards them.
	Out io.Writer
}

// Defaults for Options.
const (
	DefaultClusters               = 3
	DefaultNodes                  = 3
	DefaultNodeCPU                = "32"
	DefaultNodeMemory             = "128Gi"
	DefaultNodePods               = "250"
	DefaultTolerationSeconds      = 60
	DefaultNodeMonitorGracePeriod = 30 * time.Second
	DefaultCompleteAfter          = 5 * time.Second
	DefaultReadyTimeout           = 2 * time.Minute
	DefaultStopGracePeriod        = 10 * time.Second
	// MaxClusters bounds N: each cluster costs about 500 MB and the zone and
	// pod CIDR layout assumes fewer than 250.
	MaxClusters = 16
)

// Defaulted returns a copy of o with every unset field at its default.
func (o Options) Defaulted() Options {
	if o.Clusters == 0 {
		o.Clusters = DefaultClusters
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir()
	}
	if o.FleetletBinDir == "" {
		o.FleetletBinDir = o.BinDir
	}
	if o.NodeCPU == "" {
		o.NodeCPU = DefaultNodeCPU
	}
	if o.NodeMemory == "" {
		o.NodeMemory = DefaultNodeMemory
	}
	if o.NodePods == "" {
		o.NodePods = DefaultNodePods
	}
	if o.TolerationSeconds == 0 {
		o.TolerationSeconds = DefaultTolerationSeconds
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if o.CompleteAfter == 0 {
		o.CompleteAfter = DefaultCompleteAfter
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.StopGracePeriod == 0 {
		o.StopGracePeriod = DefaultStopGracePeriod
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// Binaries every sandbox cluster runs, looked up in Options.BinDir.
var requiredBinaries = []string{binEtcd, binAPIServer, binControllerManager, binScheduler, binKwok}

// Validate checks defaulted options, including that the binaries exist.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("dir must be set"))
	}
	if o.Clusters < 1 || o.Clusters > MaxClusters {
		errs = append(errs, fmt.Errorf("clusters must be between 1 and %d, got %d", MaxClusters, o.Clusters))
	}
	if o.Nodes < 1 || o.Nodes > 100 {
		errs = append(errs, fmt.Errorf("nodes must be between 1 and 100, got %d", o.Nodes))
	}
	if o.TolerationSeconds < 1 {
		errs = append(errs, fmt.Errorf("toleration seconds must be positive, got %d", o.TolerationSeconds))
	}
	for name, d := range map[string]time.Duration{
		"node monitor grace period": o.NodeMonitorGracePeriod,
		"complete after":            o.CompleteAfter,
		"ready timeout":             o.ReadyTimeout,
		"stop grace period":         o.StopGracePeriod,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	for _, q := range []struct{ name, value string }{{"node cpu", o.NodeCPU}, {"node memory", o.NodeMemory}, {"node pods", o.NodePods}} {
		if err := validQuantity(q.value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.name, err))
		}
	}
	bins := requiredBinaries
	if !o.NoFleetlet {
		bins = append(bins[:len(bins):len(bins)], binHelm)
		if _, err := os.Stat(filepath.Join(o.FleetletBinDir, binFleetlet)); err != nil {
			errs = append(errs, fmt.Errorf("binary %s not found in %s (run `make build`): %w", binFleetlet, o.FleetletBinDir, err))
		}
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("binary %s not found in %s (run `make build`): %w", b, o.BinDir, err))
		}
	}
	if o.Kueue {
		for _, f := range []string{binKueue, filepath.Join(kueueConfigDir, "webhooks.yaml")} {
			if _, err := os.Stat(filepath.Join(o.BinDir, f)); err != nil {
				errs = append(errs, fmt.Errorf("%s not found in %s (run `make kueue`): %w", f, o.BinDir, err))
			}
		}
	}
	for name, n := range o.Devices {
		if i, err := strconv.Atoi(strings.TrimPrefix(name, "cluster-")); err != nil || !strings.HasPrefix(name, "cluster-") || i < 1 || i > o.Clusters || n < 0 {
			errs = append(errs, fmt.Errorf("devices: %s=%d names no cluster of cluster-1 … cluster-%d, or a negative count", name, n, o.Clusters))
		}
	}
	if o.MetricsServer {
		if _, err := os.Stat(filepath.Join(o.BinDir, binMetricsServer)); err != nil {
			errs = append(errs, fmt.Errorf("%s not found in %s (run `make metrics-server`): %w", binMetricsServer, o.BinDir, err))
		}
	}
	return errors.Join(errs...)
}

// DefaultBinDir is the folder of the running executable when it holds the
// cluster binaries (bin/fleetlet-sandbox sits beside them), else ./bin.
func DefaultBinDir() string {
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(dir, binAPIServer)); err == nil {
			return dir
		}
	}
	if abs, err := filepath.Abs("bin"); err == nil {
		return abs
	}
	return "bin"
}
