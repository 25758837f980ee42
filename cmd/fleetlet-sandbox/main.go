// Command fleetlet-sandbox runs several real Kubernetes clusters as local
// processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok), with no container engine. See package sandbox.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	var dir string
	root := &cobra.Command{
		Use:           "fleetlet-sandbox",
		Short:         "Run several local Kubernetes clusters for fleetlet, without Docker",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	version.AddTo(root)
	root.PersistentFlags().StringVar(&dir, "dir", ".sandbox", "folder that holds the sandbox: kubeconfigs, sandbox.json, data and logs")

	opts := sandbox.Options{Out: os.Stdout}
	withFleetlet := true
	addUpFlags := func(cmd *cobra.Command) {
		f := cmd.Flags()
		f.IntVar(&opts.Clusters, "clusters", sandbox.DefaultClusters, "number of clusters (cluster-1 … cluster-N)")
		f.IntVar(&opts.Nodes, "nodes", sandbox.DefaultNodes, "fake kwok nodes per cluster")
		f.StringVar(&opts.BinDir, "bin-dir", "", "folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, fleetlet and helm (default: beside this program, else ./bin)")
		f.StringVar(&opts.FleetletBinDir, "fleetlet-bin-dir", "", "folder with the fleetlet binary and packaged chart to install, when not --bin-dir's: an earlier release (`make upgrade-from`) to try `upgrade` from")
		f.StringVar(&opts.NodeCPU, "node-cpu", sandbox.DefaultNodeCPU, "CPU capacity of each fake node")
		f.StringVar(&opts.NodeMemory, "node-memory", sandbox.DefaultNodeMemory, "memory capacity of each fake node")
		f.StringVar(&opts.NodePods, "node-pods", sandbox.DefaultNodePods, "pod capacity of each fake node")
		f.IntVar(&opts.TolerationSeconds, "toleration-seconds", sandbox.DefaultTolerationSeconds, "default not-ready and unreachable NoExecute toleration the apiservers give pods")
		f.DurationVar(&opts.NodeMonitorGracePeriod, "node-monitor-grace-period", sandbox.DefaultNodeMonitorGracePeriod, "how long a node may miss heartbeats before it is marked Unknown")
		f.DurationVar(&opts.CompleteAfter, "complete-after", sandbox.DefaultCompleteAfter, "how long a pod with restartPolicy Never or OnFailure runs before it succeeds (per pod: annotation "+sandbox.AnnotationCompleteAfter+")")
		f.DurationVar(&opts.ReadyTimeout, "ready-timeout", sandbox.DefaultReadyTimeout, "how long one cluster may take to become ready")
		f.BoolVar(&withFleetlet, "fleetlet", true, "run fleetlet in every cluster and connect them ("+sandbox.SourceCluster+" the source, every cluster a target); false starts bare clusters")
		f.BoolVar(&opts.MetricsServer, "metrics-server", false, "run metrics-server (bin/metrics-server, `make metrics-server`) in every cluster, behind its apiserver's aggregation layer, so that kubectl top and HorizontalPodAutoscalers work; kwok's pods use what their kwok.x-k8s.io/usage-cpu and usage-memory annotations say")
		f.BoolVar(&opts.Furnished, "furnished", true, "run in every cluster's kube-system what production clusters run: kube-proxy- and CNI-like DaemonSets that tolerate every taint, and a CoreDNS")
		f.Var(devicesFlag{&opts.Devices}, "devices", "publish devices for Dynamic Resource Allocation: cluster=N pairs, comma-separated (cluster-2=8: 8 devices of DeviceClass "+sandbox.DeviceClassGPU+" on each fake node of cluster-2); the scheduler's DRA plugin allocates them")
		f.BoolVar(&opts.Kueue, "kueue", false, "run Kueue (bin/kueue, `make kueue`) against "+sandbox.SourceCluster+"; it queues the Jobs and pods of namespaces labelled "+sandbox.KueueNamespaceLabel+"=true")
	}

	up := &cobra.Command{
		Use:   "up",
		Short: "Start the clusters and wait until every one is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Dir = dir
			opts.NoFleetlet = !withFleetlet
			s, err := sandbox.Up(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printUsage(s)
			return nil
		},
	}
	addUpFlags(up)

	var provisionKubeconfig, provisionVolumes string
	provision := &cobra.Command{
		Use:    "provision",
		Short:  "Run a cluster's storage provisioner (up starts one in every furnished cluster)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sandbox.RunProvisioner(cmd.Context(), provisionKubeconfig, provisionVolumes)
		},
	}
	provision.Flags().StringVar(&provisionKubeconfig, "kubeconfig", "", "the cluster's kubeconfig")
	provision.Flags().StringVar(&provisionVolumes, "volumes", "", "folder that holds the volumes")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop every process the sandbox started",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sandbox.Load(dir, sandbox.Options{Out: os.Stdout})
			if err != nil {
				return err
			}
			return s.Down(cmd.Context())
		},
	}

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Uninstall fleetlet from every cluster as `helm uninstall` would (cleanup hook included), leaving the clusters running",
		Long: `Uninstall fleetlet from every cluster, ` + sandbox.SourceCluster + ` first, in Helm's order: the
manager and candidate scheduler processes stop, ` + "`helm uninstall`" + ` deletes the release,
and the chart's post-delete hook runs ` + "`fleetlet cleanup`" + ` as a local process with a
token of the hook's ServiceAccount (its RBAC created from the chart, then
deleted). The CRDs stay (the chart's crds.keep).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sandbox.Load(dir, sandbox.Options{Out: os.Stdout})
			if err != nil {
				return err
			}
			return s.Uninstall(cmd.Context())
		},
	}

	var upgradeFrom string
	upgrade := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade (or roll back) fleetlet in every cluster to the binary and chart of --fleetlet-bin-dir, as an operator would",
		Long: `Upgrade fleetlet in every cluster, one after the other, to the fleetlet binary
and packaged chart (fleetlet-VERSION.tgz) in --fleetlet-bin-dir: ` + "`helm upgrade`" + ` to
that chart, then the candidate scheduler and the manager are stopped
(SIGTERM) and started from that binary. Later starts run it too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sandbox.Load(dir, sandbox.Options{Out: os.Stdout})
			if err != nil {
				return err
			}
			return s.InstallFleetlet(cmd.Context(), cmp.Or(upgradeFrom, s.BinDir()))
		},
	}
	upgrade.Flags().StringVar(&upgradeFrom, "fleetlet-bin-dir", "", "folder with the fleetlet binary and packaged chart to install (default: the sandbox's --bin-dir)")

	// stop and start act on a whole cluster, or with --only on one of its
	// components.
	clusterCommand := func(use, short, verb string,
		whole func(*sandbox.Sandbox, context.Context, string) error,
		one func(*sandbox.Sandbox, context.Context, string, string) error,
	) *cobra.Command {
		var only string
		cmd := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				s, err := sandbox.Load(dir, sandbox.Options{Out: os.Stdout})
				if err != nil {
					return err
				}
				if only != "" {
					return one(s, cmd.Context(), args[0], only)
				}
				return whole(s, cmd.Context(), args[0])
			},
		}
		cmd.Flags().StringVar(&only, "only", "", verb+" only this component, for example "+sandbox.ComponentManager)
		return cmd
	}
	stopCmd := clusterCommand("stop cluster-<i>", "Take one cluster's control plane down, keeping its data (an outage); --only stops one component", "stop",
		(*sandbox.Sandbox).Stop, (*sandbox.Sandbox).StopComponent)
	start := clusterCommand("start cluster-<i>", "Bring a stopped cluster (or, with --only, one component) back with its data", "start",
		(*sandbox.Sandbox).Start, (*sandbox.Sandbox).StartComponent)

	env := &cobra.Command{
		Use:   "env [cluster-<i>]",
		Short: "Print the shell lines that point kubectl at a cluster (default cluster-1)",
		Long:  "Print the shell lines that point kubectl at a cluster (default cluster-1). Use: eval \"$(fleetlet-sandbox env --dir DIR cluster-2)\"",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := sandbox.Load(dir, sandbox.Options{})
			if err != nil {
				return err
			}
			name := "cluster-1"
			if len(args) == 1 {
				name = args[0]
			}
			lines, err := s.Env(name)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), lines)
			return nil
		},
	}

	demo := &cobra.Command{
		Use:   "demo",
		Short: "Start a sandbox (or reuse the one in --dir), run a pod in every cluster and show where it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sandbox.Load(dir, sandbox.Options{Out: os.Stdout})
			if err == nil && !allRunning(s) {
				s = nil
			}
			if s == nil {
				opts.Dir = dir
				opts.NoFleetlet = !withFleetlet
				if s, err = sandbox.Up(cmd.Context(), opts); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(os.Stdout, "Using the sandbox already running in %s\n", s.Dir())
			}
			fmt.Fprintln(os.Stdout)
			if err := s.Demo(cmd.Context(), os.Stdout); err != nil {
				return err
			}
			fmt.Fprintln(os.Stdout)
			printUsage(s)
			return nil
		},
	}
	addUpFlags(demo)

	httpStdio := &cobra.Command{
		Use:    sandbox.PortForwardCommand,
		Short:  "Answer one HTTP request on stdin and stdout: what the fake nodes' forwarded ports serve",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sandbox.ServeHTTPStdio(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	root.AddCommand(up, down, upgrade, stopCmd, start, env, demo, uninstall, httpStdio, provision)
	return root
}

// allRunning reports whether every recorded process of every cluster is alive.
func allRunning(s *sandbox.Sandbox) bool {
	st := s.State()
	for _, c := range st.Clusters {
		if c.Stopped || len(c.Processes) == 0 {
			return false
		}
		for _, p := range c.Processes {
			if !p.Alive() {
				return false
			}
		}
	}
	return len(st.Clusters) > 0
}

func printUsage(s *sandbox.Sandbox) {
	self, err := os.Executable()
	if err != nil {
		self = "fleetlet-sandbox"
	}
	fmt.Printf(`Use a cluster:   eval "$(%[1]s env --dir %[2]s cluster-1)"; kubectl get nodes
All contexts:    KUBECONFIG=%[2]s/%[3]s kubectl --context cluster-2 get pods -A
Stop it all:     %[1]s down --dir %[2]s
`, self, s.Dir(), sandbox.MergedKubeconfig)
}

// devicesFlag is --devices: cluster=N pairs.
type devicesFlag struct{ m *map[string]int }

func (f devicesFlag) String() string {
	if f.m == nil {
		return ""
	}
	return sandbox.FormatDevices(*f.m)
}

func (f devicesFlag) Set(s string) error {
	m, err := sandbox.ParseDevices(s)
	if err != nil {
		return err
	}
	*f.m = m
	return nil
}

func (devicesFlag) Type() string { return "cluster=N,..." }
