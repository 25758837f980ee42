package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// StateFile is the name of the file, in the sandbox folder, that records the
// clusters and the processes they run.
const StateFile = "sandbox.json"

// stateVersion changes when State changes incompatibly.
const stateVersion = 1

// State is what sandbox.json holds: enough for another process to use the
// clusters, to stop and restart them, and to stop every process by PID.
type State struct {
	Version int    `json:"version"`
	Dir     string `json:"dir"`
	BinDir  string `json:"binDir"`
	// Settings are the options the clusters were started with; `start` reuses
	// them.
	Settings Settings `json:"settings"`
	// Clusters are in order: cluster-1 first.
	Clusters []ClusterState `json:"clusters"`
}

// Settings are the persisted options a restarted cluster needs again.
type Settings struct {
	Nodes                  int    `json:"nodes"`
	NodeCPU                string `json:"nodeCPU"`
	NodeMemory             string `json:"nodeMemory"`
	NodePods               string `json:"nodePods"`
	TolerationSeconds      int    `json:"tolerationSeconds"`
	NodeMonitorGracePeriod string `json:"nodeMonitorGracePeriod"`
	CompleteAfter          string `json:"completeAfter"`
	NoFleetlet             bool   `json:"noFleetlet,omitempty"`
	Kueue                  bool   `json:"kueue,omitempty"`
	MetricsServer          bool   `json:"metricsServer,omitempty"`
	Furnished              bool   `json:"furnished,omitempty"`
	// Devices are the devices per fake node each cluster publishes.
	Devices map[string]int `json:"devices,omitempty"`
	// FleetletBinDir is where the fleetlet binary and chart the clusters
	// run come from, when not the sandbox's BinDir.
	FleetletBinDir string `json:"fleetletBinDir,omitempty"`
	// ManagerArgs are the managers' extra arguments.
	ManagerArgs []string `json:"managerArgs,omitempty"`
	// SchedulerArgs are the candidate schedulers' extra arguments.
	SchedulerArgs []string `json:"schedulerArgs,omitempty"`
}

// ClusterState describes one cluster of the sandbox.
type ClusterState struct {
	// Name is cluster-<index>.
	Name  string `json:"name"`
	Index int    `json:"index"`
	// APIServerURL is the cluster's https endpoint on loopback.
	APIServerURL string `json:"apiServerURL"`
	// Kubeconfig is the admin kubeconfig, DIR/<name>.kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// DataDir holds the cluster's certificates, configuration and etcd data.
	DataDir string `json:"dataDir"`
	// LogDir holds one log per component.
	LogDir string `json:"logDir"`
	// Ports are chosen once, at `up`, and kept across stop and start.
	Ports Ports `json:"ports"`
	// Stopped is true between `stop` and `start`.
	Stopped bool `json:"stopped,omitempty"`
	// Uninstalled is true once fleetlet was uninstalled from the cluster
	// (`fleetlet-sandbox uninstall`): `start` brings back the control
	// plane only.
	Uninstalled bool `json:"uninstalled,omitempty"`
	// Processes are the running components, in start order.
	Processes []Process `json:"processes"`
	// PodCIDR is where kwok takes the fake pods' IPs from.
	PodCIDR string `json:"podCIDR"`
}

// Ports are the loopback ports of one cluster's components.
type Ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiServer"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	// KwokServer is kwok's kubelet API, which its nodes advertise.
	KwokServer int `json:"kwokServer"`
	// FleetletMetrics and FleetletHealth are the ports of the cluster's
	// fleetlet manager (its virtual nodes' kubelet APIs take free ports).
	FleetletMetrics int `json:"fleetletMetrics"`
	FleetletHealth  int `json:"fleetletHealth"`
	// FleetletWebhook serves the manager's proxy-pod webhook;
	// FleetletScheduler is the candidate scheduler's secure port.
	FleetletWebhook   int `json:"fleetletWebhook"`
	FleetletScheduler int `json:"fleetletScheduler"`
	// StandbyMetrics and StandbyHealth are the ports of a second manager
	// replica, started only on demand (ComponentManagerStandby).
	StandbyMetrics int `json:"standbyMetrics"`
	StandbyHealth  int `json:"standbyHealth"`
	// KueueWebhook, KueueMetrics and KueueHealth are the Kueue manager's
	// (Options.Kueue; the source only).
	KueueWebhook int `json:"kueueWebhook,omitempty"`
	KueueMetrics int `json:"kueueMetrics,omitempty"`
	KueueHealth  int `json:"kueueHealth,omitempty"`
	// MetricsServer is metrics-server's secure port (Options.MetricsServer),
	// which its APIService names.
	MetricsServer int `json:"metricsServer,omitempty"`
}

// Cluster returns the named cluster.
func (s *State) Cluster(name string) (*ClusterState, error) {
	for i := range s.Clusters {
		if s.Clusters[i].Name == name {
			return &s.Clusters[i], nil
		}
	}
	names := make([]string, 0, len(s.Clusters))
	for _, c := range s.Clusters {
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("no cluster %q in the sandbox (it has %v)", name, names)
}

// AllProcesses lists every recorded process of every cluster.
func (s State) AllProcesses() []Process {
	var ps []Process
	for _, c := range s.Clusters {
		ps = append(ps, c.Processes...)
	}
	return ps
}

// settingsFrom records the options a restart needs.
func settingsFrom(o Options) Settings {
	return Settings{
		Nodes:                  o.Nodes,
		NodeCPU:                o.NodeCPU,
		NodeMemory:             o.NodeMemory,
		NodePods:               o.NodePods,
		TolerationSeconds:      o.TolerationSeconds,
		NodeMonitorGracePeriod: o.NodeMonitorGracePeriod.String(),
		CompleteAfter:          o.CompleteAfter.String(),
		NoFleetlet:             o.NoFleetlet,
		Kueue:                  o.Kueue,
		MetricsServer:          o.MetricsServer,
		Furnished:              o.Furnished,
		Devices:                o.Devices,
		FleetletBinDir:         fleetletBinDirSetting(o),
		ManagerArgs:            o.ManagerArgs,
		SchedulerArgs:          o.SchedulerArgs,
	}
}

// fleetletBinDirSetting is o's FleetletBinDir as recorded: empty when it
// is the BinDir.
func fleetletBinDirSetting(o Options) string {
	if o.FleetletBinDir == o.BinDir {
		return ""
	}
	return o.FleetletBinDir
}

// options rebuilds the Options a sandbox was started with.
func (s *State) options(base Options) (Options, error) {
	o := base
	o.Dir = s.Dir
	o.BinDir = s.BinDir
	o.Clusters = len(s.Clusters)
	o.Nodes = s.Settings.Nodes
	o.NodeCPU, o.NodeMemory, o.NodePods = s.Settings.NodeCPU, s.Settings.NodeMemory, s.Settings.NodePods
	o.TolerationSeconds = s.Settings.TolerationSeconds
	o.NoFleetlet = s.Settings.NoFleetlet
	o.Kueue = s.Settings.Kueue
	o.MetricsServer = s.Settings.MetricsServer
	o.Furnished = s.Settings.Furnished
	o.Devices = s.Settings.Devices
	o.FleetletBinDir = s.Settings.FleetletBinDir // "" defaults to BinDir
	o.ManagerArgs = s.Settings.ManagerArgs
	o.SchedulerArgs = s.Settings.SchedulerArgs
	var err error
	if o.NodeMonitorGracePeriod, err = time.ParseDuration(s.Settings.NodeMonitorGracePeriod); err != nil {
		return o, fmt.Errorf("%s: nodeMonitorGracePeriod: %w", StateFile, err)
	}
	if o.CompleteAfter, err = time.ParseDuration(s.Settings.CompleteAfter); err != nil {
		return o, fmt.Errorf("%s: completeAfter: %w", StateFile, err)
	}
	return o.Defaulted(), nil
}

// LoadState reads DIR/sandbox.json.
func LoadState(dir string) (*State, error) {
	path := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no sandbox in %s (%s not found): run `fleetlet-sandbox up --dir %s` first", dir, StateFile, dir)
		}
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("%s has version %d, this fleetlet-sandbox reads version %d: run `down` with the fleetlet-sandbox that wrote it", path, s.Version, stateVersion)
	}
	return &s, nil
}

// save writes the state atomically.
func (s *State) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, StateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// lockDir takes an exclusive lock on the sandbox folder so that two commands
// never change the same sandbox at once. The returned function releases it.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another fleetlet-sandbox command is working on %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func validQuantity(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return err
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("must be positive, got %s", s)
	}
	return nil
}
