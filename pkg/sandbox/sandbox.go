package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MergedKubeconfig is the file, in the sandbox folder, with one context per
// cluster (named like the cluster).
const MergedKubeconfig = "kubeconfig"

// pollInterval is how often readiness is checked while a cluster starts.
const pollInterval = 100 * time.Millisecond

// Sandbox is a set of local clusters recorded in DIR/sandbox.json.
type Sandbox struct {
	opts Options

	mu    sync.Mutex
	state *State
	// procs are the processes this program started itself, by PID: it waits
	// on them, so they never linger as zombies and an early exit is seen at
	// once.
	procs map[int]*running
	// chartMu serializes writing the clusters' chart values files.
	chartMu sync.Mutex
}

// Up starts a new sandbox in opts.Dir and returns when every cluster is ready:
// its control plane serves, its fake nodes are Ready and its default
// ServiceAccount exists. A sandbox already running there is an error. If any
// cluster fails to start, everything started is stopped again.
func Up(ctx context.Context, opts Options) (*Sandbox, error) {
	o := opts.Defaulted()
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.BinDir, err = filepath.Abs(o.BinDir); err != nil {
		return nil, err
	}
	if o.FleetletBinDir, err = filepath.Abs(o.FleetletBinDir); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("invalid sandbox options: %w", err)
	}
	unlock, err := lockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if old, err := LoadState(o.Dir); err == nil {
		for _, p := range old.AllProcesses() {
			if p.Alive() {
				return nil, fmt.Errorf("a sandbox is already running in %s (%s pid %d): run `fleetlet-sandbox down --dir %s` first", o.Dir, p.Component, p.PID, o.Dir)
			}
		}
	}
	if err := removeOld(o.Dir); err != nil {
		return nil, err
	}

	start := time.Now()
	ports, err := freePorts(o.Clusters * portsPerCluster)
	if err != nil {
		return nil, err
	}
	state := &State{Version: stateVersion, Dir: o.Dir, BinDir: o.BinDir, Settings: settingsFrom(o)}
	for i := 1; i <= o.Clusters; i++ {
		name := fmt.Sprintf("cluster-%d", i)
		p := portsFrom(ports[(i-1)*portsPerCluster : i*portsPerCluster])
		state.Clusters = append(state.Clusters, ClusterState{
			Name:         name,
			Index:        i,
			APIServerURL: fmt.Sprintf("https://127.0.0.1:%d", p.APIServer),
			Kubeconfig:   filepath.Join(o.Dir, name+".kubeconfig"),
			DataDir:      filepath.Join(o.Dir, name),
			LogDir:       filepath.Join(o.Dir, "logs", name),
			Ports:        p,
			PodCIDR:      fmt.Sprintf("10.%d.0.1/16", 100+i),
		})
	}
	for i := range state.Clusters {
		if err := prepareCluster(o, &state.Clusters[i]); err != nil {
			return nil, fmt.Errorf("%s: preparing: %w", state.Clusters[i].Name, err)
		}
	}
	if err := writeMergedKubeconfig(state); err != nil {
		return nil, err
	}
	if err := state.save(); err != nil {
		return nil, err
	}

	s := &Sandbox{opts: o, state: state, procs: map[int]*running{}}
	fmt.Fprintf(o.Out, "Starting %d clusters in %s (each a real control plane from %s; about 5 s each, logs in %s)\n",
		o.Clusters, o.Dir, o.BinDir, filepath.Join(o.Dir, "logs"))
	g, gctx := errgroup.WithContext(ctx)
	for i := range state.Clusters {
		c := &state.Clusters[i]
		g.Go(func() error { return s.startCluster(gctx, c, true) })
	}
	err = g.Wait()
	if err == nil && !o.NoFleetlet {
		err = s.connectClusters(ctx)
	}
	if err != nil {
		fmt.Fprintf(o.Out, "Starting the sandbox failed; stopping what was started\n")
		if stopErr := s.stopAll(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	fmt.Fprintf(o.Out, "Sandbox with %d clusters ready in %s (%s)\n", o.Clusters, time.Since(start).Round(100*time.Millisecond), o.Dir)
	return s, nil
}

// Load opens the sandbox recorded in dir. base supplies Out and DieWithParent
// for what this process starts; the rest comes from sandbox.json.
func Load(dir string, base Options) (*Sandbox, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	state, err := LoadState(abs)
	if err != nil {
		return nil, err
	}
	o, err := state.options(base.Defaulted())
	if err != nil {
		return nil, err
	}
	return &Sandbox{opts: o, state: state, procs: map[int]*running{}}, nil
}

// State returns a copy of the recorded state.
func (s *Sandbox) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := *s.state
	st.Clusters = make([]ClusterState, len(s.state.Clusters))
	for i, c := range s.state.Clusters {
		c.Processes = append([]Process(nil), c.Processes...)
		st.Clusters[i] = c
	}
	return st
}

// Dir is the sandbox folder.
func (s *Sandbox) Dir() string { return s.opts.Dir }

// BinDir is where the sandbox's binaries are.
func (s *Sandbox) BinDir() string { return s.opts.BinDir }

// FleetletBinDir is where the fleetlet binary and chart the clusters run
// come from: BinDir, or an earlier release's until InstallFleetlet.
func (s *Sandbox) FleetletBinDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cmp.Or(s.opts.FleetletBinDir, s.opts.BinDir)
}

// binary is the path of one of the programs the sandbox runs: fleetlet's
// from FleetletBinDir, every other from BinDir.
func (s *Sandbox) binary(name string) string {
	if name == binFleetlet {
		return filepath.Join(s.FleetletBinDir(), name)
	}
	return filepath.Join(s.opts.BinDir, name)
}

// ClusterNames lists the clusters in order.
func (s *Sandbox) ClusterNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.state.Clusters))
	for _, c := range s.state.Clusters {
		names = append(names, c.Name)
	}
	return names
}

// RESTConfig returns an administrator's client configuration for a cluster.
func (s *Sandbox) RESTConfig(name string) (*rest.Config, error) {
	s.mu.Lock()
	c, err := s.state.Cluster(name)
	var path string
	if err == nil {
		path = c.Kubeconfig
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// Client returns an administrator's clientset for a cluster.
func (s *Sandbox) Client(name string) (kubernetes.Interface, error) {
	cfg, err := s.RESTConfig(name)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Env returns shell lines that point kubectl at a cluster.
func (s *Sandbox) Env(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.state.Cluster(name)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("export KUBECONFIG=%s\nexport PATH=%s:$PATH\n", shellQuote(c.Kubeconfig), shellQuote(s.opts.BinDir)), nil
}

// Stop takes one cluster's whole control plane down, keeping its data, as an
// outage would. Start brings it back.
func (s *Sandbox) Stop(ctx context.Context, name string) error {
	c, unlock, err := s.lockCluster(name)
	if err != nil {
		return err
	}
	defer unlock()
	start := time.Now()
	if err := s.stopCluster(c); err != nil {
		return err
	}
	s.mu.Lock()
	c.Stopped = true
	err = s.state.save()
	s.mu.Unlock()
	fmt.Fprintf(s.opts.Out, "%s stopped in %s\n", name, time.Since(start).Round(100*time.Millisecond))
	return err
}

// Start restarts a stopped cluster with its data, ports and certificates.
func (s *Sandbox) Start(ctx context.Context, name string) error {
	c, unlock, err := s.lockCluster(name)
	if err != nil {
		return err
	}
	defer unlock()
	for _, p := range c.Processes {
		if p.Alive() {
			return fmt.Errorf("%s is running (%s pid %d): stop it first", name, p.Component, p.PID)
		}
	}
	s.mu.Lock()
	c.Processes = nil
	s.mu.Unlock()
	if err := s.startCluster(ctx, c, false); err != nil {
		_ = s.stopCluster(c)
		return err
	}
	s.mu.Lock()
	c.Stopped = false
	err = s.state.save()
	s.mu.Unlock()
	return err
}

// lockCluster locks the sandbox folder for one command and returns the named
// cluster; unlock releases the folder.
func (s *Sandbox) lockCluster(name string) (c *ClusterState, unlock func(), err error) {
	unlock, err = lockDir(s.opts.Dir)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	c, err = s.state.Cluster(name)
	s.mu.Unlock()
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return c, unlock, nil
}

// Down stops every process the sandbox started, by PID, and leaves the data
// and logs in place.
func (s *Sandbox) Down(ctx context.Context) error {
	unlock, err := lockDir(s.opts.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	start := time.Now()
	if err := s.stopAll(); err != nil {
		return err
	}
	fmt.Fprintf(s.opts.Out, "Sandbox in %s stopped in %s\n", s.opts.Dir, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// stopAll stops every cluster in parallel and records it.
func (s *Sandbox) stopAll() error {
	var g errgroup.Group
	for i := range s.state.Clusters {
		c := &s.state.Clusters[i]
		g.Go(func() error { return s.stopCluster(c) })
	}
	err := g.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(err, s.state.save())
}

// stopCluster stops a cluster's processes in the reverse of their start order.
// Processes that stopped are dropped from the record; any that would not stop
// stay in it, so that a later `down` tries again.
func (s *Sandbox) stopCluster(c *ClusterState) error {
	s.mu.Lock()
	procs := append([]Process(nil), c.Processes...)
	s.mu.Unlock()
	var errs []error
	var left []Process
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if err := stopProcess(p, stopGrace(p.Component, s.opts.StopGracePeriod)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
			left = append([]Process{p}, left...)
			continue
		}
		s.reap(p.PID)
	}
	s.mu.Lock()
	c.Processes = left
	s.mu.Unlock()
	return errors.Join(errs...)
}

// startCluster starts a cluster's components in order and waits until it is
// ready. Every process is recorded in sandbox.json as soon as it starts.
// install installs fleetlet's chart first (a new cluster); either way the
// manager and scheduler get fresh ServiceAccount tokens.
func (s *Sandbox) startCluster(ctx context.Context, c *ClusterState, install bool) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReadyTimeout)
	defer cancel()

	var started []*running
	s.step(c, start, "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok")
	for _, comp := range components {
		if comp.name == binKwok {
			// The API server serves by now (waited for when it started).
			if err := s.dropNodeLeases(ctx, c); err != nil {
				return err
			}
		}
		r, err := s.launch(c, comp)
		if err != nil {
			return err
		}
		started = append(started, r)
		if comp.ready == nil {
			continue
		}
		// The components that follow need etcd and the apiserver, so wait for
		// those two before going on; the rest start together.
		if comp.name == binEtcd || comp.name == binAPIServer {
			if err := s.waitFor(ctx, c, comp.name+" to serve", started, func(ctx context.Context) error { return comp.ready(ctx, c) }); err != nil {
				return err
			}
		}
	}
	for _, comp := range components {
		if comp.ready == nil || comp.name == binEtcd || comp.name == binAPIServer {
			continue
		}
		if err := s.waitFor(ctx, c, comp.name+" to be healthy", started, func(ctx context.Context) error { return comp.ready(ctx, c) }); err != nil {
			return err
		}
	}

	cs, err := s.Client(c.Name)
	if err != nil {
		return err
	}
	s.step(c, start, "control plane serving; creating %d fake nodes and waiting for them to be Ready", s.opts.Nodes)
	if err := s.waitFor(ctx, c, "the fake nodes to be created", started, func(ctx context.Context) error {
		return ensureNodes(ctx, cs, s.opts, c)
	}); err != nil {
		return err
	}
	if err := s.waitFor(ctx, c, "the fake nodes to be Ready", started, func(ctx context.Context) error {
		return nodesReady(ctx, cs, s.opts, c, start)
	}); err != nil {
		return err
	}
	if err := s.waitFor(ctx, c, "the default ServiceAccount", started, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(corev1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if install && s.opts.Furnished {
		s.step(c, start, "furnishing kube-system (kube-proxy and CNI DaemonSets, CoreDNS) and storage (a default StorageClass)")
		if err := furnish(ctx, cs); err != nil {
			return fmt.Errorf("%s: furnishing: %w", c.Name, err)
		}
	}
	if s.opts.Furnished {
		if err := ensureStorageClass(ctx, cs); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if err := s.startComponent(ctx, c, provisionerComponent, started); err != nil {
			return err
		}
	}
	if n := s.opts.Devices[c.Name]; n > 0 {
		s.step(c, start, "publishing %d devices of class %s per node", n, DeviceClassGPU)
		if err := PublishDevices(ctx, cs, nodeNames(c.Name, s.opts.Nodes), n); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	if runsMetricsServer(s.opts) {
		s.step(c, start, "starting metrics-server")
		if err := s.startMetricsServer(ctx, c, install, started); err != nil {
			return fmt.Errorf("%s: metrics-server: %w", c.Name, err)
		}
	}
	if !s.opts.NoFleetlet && !c.Uninstalled {
		if install {
			s.step(c, start, "installing fleetlet's packaged chart with helm")
			if err := s.installFleetlet(ctx, c); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
		}
		if err := s.issueCredentials(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		s.step(c, start, "starting fleetlet manager and fleetlet scheduler")
		if err := s.startComponent(ctx, c, fleetletComponent, started); err != nil {
			return err
		}
		if err := s.startComponent(ctx, c, schedulerComponent, started); err != nil {
			return err
		}
		if runsKueue(s.opts, c) {
			s.step(c, start, "starting Kueue")
			if err := s.startKueue(ctx, c, install, started); err != nil {
				return fmt.Errorf("%s: kueue: %w", c.Name, err)
			}
		}
	}
	fmt.Fprintf(s.opts.Out, "%s ready in %s (%s, %d nodes)\n", c.Name, time.Since(start).Round(100*time.Millisecond), c.APIServerURL, s.opts.Nodes)
	return nil
}

// startComponent launches one component and waits until it is ready.
func (s *Sandbox) startComponent(ctx context.Context, c *ClusterState, comp component, watch []*running) error {
	r, err := s.launch(c, comp)
	if err != nil {
		return err
	}
	if comp.ready == nil {
		return nil
	}
	return s.waitFor(ctx, c, comp.name+" to be ready", append(watch, r), func(ctx context.Context) error { return comp.ready(ctx, c) })
}

// StopComponent stops one component of a cluster (for example
// ComponentManager, to simulate a fleetlet outage) and leaves the rest
// running. StartComponent brings it back.
func (s *Sandbox) StopComponent(ctx context.Context, cluster, name string) error {
	return s.stopComponent(cluster, name, s.opts.StopGracePeriod)
}

// KillComponent kills one component of a cluster with SIGKILL, giving it no
// chance to clean up (leader election Leases are not released): a crash.
func (s *Sandbox) KillComponent(ctx context.Context, cluster, name string) error {
	return s.stopComponent(cluster, name, 0)
}

// PauseComponent freezes one component of a cluster (SIGSTOP): it keeps
// its connections and its state, but does nothing, as in a long
// stop-the-world pause or a partition. ResumeComponent lets it go on.
func (s *Sandbox) PauseComponent(ctx context.Context, cluster, name string) error {
	return s.signalComponent(cluster, name, syscall.SIGSTOP)
}

// ResumeComponent lets a paused component go on (SIGCONT).
func (s *Sandbox) ResumeComponent(ctx context.Context, cluster, name string) error {
	return s.signalComponent(cluster, name, syscall.SIGCONT)
}

func (s *Sandbox) signalComponent(cluster, name string, sig syscall.Signal) error {
	c, unlock, err := s.lockCluster(cluster)
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	procs := append([]Process(nil), c.Processes...)
	s.mu.Unlock()
	for _, p := range procs {
		if p.Component == name && p.Alive() {
			if err := syscall.Kill(p.PID, sig); err != nil {
				return fmt.Errorf("%s: %s (pid %d): %w", cluster, name, p.PID, err)
			}
			fmt.Fprintf(s.opts.Out, "%s: %s sent %s\n", cluster, name, sig)
			return nil
		}
	}
	return fmt.Errorf("%s: %s is not running", cluster, name)
}

func (s *Sandbox) stopComponent(cluster, name string, grace time.Duration) error {
	c, unlock, err := s.lockCluster(cluster)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := componentNamed(name); err != nil {
		return err
	}
	if err := s.stopComponentsOf(c, grace, name); err != nil {
		return err
	}
	fmt.Fprintf(s.opts.Out, "%s: %s stopped\n", cluster, name)
	return nil
}

// StartComponent starts one component of a running cluster again.
func (s *Sandbox) StartComponent(ctx context.Context, cluster, name string) error {
	return s.StartComponentWith(ctx, cluster, name)
}

// StartComponentWith starts one component of a running cluster again with
// extra arguments, for this run only (a fault-injection flag, say).
func (s *Sandbox) StartComponentWith(ctx context.Context, cluster, name string, extraArgs ...string) error {
	comp, err := componentNamed(name)
	if err != nil {
		return err
	}
	if len(extraArgs) > 0 {
		args := comp.args
		comp.args = func(o Options, c *ClusterState) []string { return append(args(o, c), extraArgs...) }
	}
	c, unlock, err := s.lockCluster(cluster)
	if err != nil {
		return err
	}
	defer unlock()
	for _, p := range c.Processes {
		if p.Component == name && p.Alive() {
			return fmt.Errorf("%s: %s is running (pid %d)", cluster, name, p.PID)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReadyTimeout)
	defer cancel()
	if name == ComponentManager || name == ComponentManagerStandby || name == ComponentScheduler {
		// A fresh token: the last may have expired since.
		if err := s.issueCredentials(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", cluster, err)
		}
	}
	if err := s.startComponent(ctx, c, comp, nil); err != nil {
		return err
	}
	if len(extraArgs) > 0 {
		fmt.Fprintf(s.opts.Out, "%s: %s started with %s\n", cluster, name, strings.Join(extraArgs, " "))
	} else {
		fmt.Fprintf(s.opts.Out, "%s: %s started\n", cluster, name)
	}
	return nil
}

func componentNamed(name string) (component, error) {
	all := append(components[:len(components):len(components)], fleetletComponent, standbyComponent, schedulerComponent, kueueComponent, metricsServerComponent, provisionerComponent)
	var names []string
	for _, c := range all {
		if c.name == name {
			return c, nil
		}
		names = append(names, c.name)
	}
	return component{}, fmt.Errorf("no component %q (components: %v)", name, names)
}

// reap waits for a process this program started, so no zombie is left.
func (s *Sandbox) reap(pid int) {
	s.mu.Lock()
	r := s.procs[pid]
	delete(s.procs, pid)
	s.mu.Unlock()
	if r != nil {
		<-r.done
	}
}

// launch starts one component and records it.
func (s *Sandbox) launch(c *ClusterState, comp component) (*running, error) {
	r, err := startProcess(processSpec{
		component:     comp.name,
		binary:        s.binary(cmp.Or(comp.binary, comp.name)),
		args:          comp.args(s.opts, c),
		log:           c.logFile(comp.name),
		env:           memoryEnv(comp.memoryLimit),
		dieWithParent: s.opts.DieWithParent,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[r.PID] = r
	c.Processes = append(c.Processes, r.Process)
	if err := s.state.save(); err != nil {
		return nil, err
	}
	return r, nil
}

// waitFor polls check until it succeeds. It fails at once, naming the
// component and showing the end of its log, if any watched process exits,
// and when ctx ends.
func (s *Sandbox) waitFor(ctx context.Context, c *ClusterState, what string, watch []*running, check func(context.Context) error) error {
	var last error
	for {
		for _, r := range watch {
			if done, err := r.exited(); done {
				if err == nil {
					err = errors.New("exit status 0")
				}
				return fmt.Errorf("%s: %s exited (%w) while waiting for %s; last lines of %s:\n%s",
					c.Name, r.Component, err, what, r.Log, tailFile(r.Log, 20))
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if len(watch) == 0 {
				return fmt.Errorf("%s: timed out waiting for %s: %w", c.Name, what, last)
			}
			r := watch[len(watch)-1]
			return fmt.Errorf("%s: timed out waiting for %s: %w; last lines of %s:\n%s",
				c.Name, what, last, r.Log, tailFile(r.Log, 20))
		case <-time.After(pollInterval):
		}
	}
}

// writeMergedKubeconfig writes DIR/kubeconfig with a context per cluster.
func writeMergedKubeconfig(state *State) error {
	merged := clientcmdapi.NewConfig()
	for _, c := range state.Clusters {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		if err != nil {
			return err
		}
		merged.Clusters[c.Name] = cfg.Clusters[c.Name]
		merged.AuthInfos[c.Name] = cfg.AuthInfos[c.Name]
		merged.Contexts[c.Name] = cfg.Contexts[c.Name]
	}
	if len(state.Clusters) > 0 {
		merged.CurrentContext = state.Clusters[0].Name
	}
	return clientcmd.WriteToFile(*merged, filepath.Join(state.Dir, MergedKubeconfig))
}

// removeOld deletes what an earlier sandbox left in dir: the files and
// folders a sandbox writes, and nothing else.
func removeOld(dir string) error {
	old, _ := filepath.Glob(filepath.Join(dir, "cluster-*"))
	old = append(old, filepath.Join(dir, "logs"), filepath.Join(dir, MergedKubeconfig), filepath.Join(dir, StateFile),
		filepath.Join(dir, "chart"), filepath.Join(dir, helmDir)) // "chart": where older sandboxes wrote theirs
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"$`\\!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
