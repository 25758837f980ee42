package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/cleanup"
)

// cleanupOptions are the flags of `fleetlet cleanup`.
type cleanupOptions struct {
	kubeconfig  string
	clusterName string
	timeout     time.Duration
	dryRun      bool
}

func newCleanupCommand() *cobra.Command {
	o := cleanupOptions{timeout: cleanup.DefaultTimeout}
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what fleetlet left in this cluster after uninstall: gated proxies, chaperons, finalizers, virtual nodes, its own ClusterRoles and PriorityClass",
		Long: `Remove what fleetlet left in this cluster after it was uninstalled (the Helm
post-delete hook runs it in every cluster; run it by hand after stopping the
manager). Proxy pods never elected are deleted, never ungated; the chaperons
of every other proxy are deleted in each Target that still exists, and the
delegate finalizer is removed once they are gone; virtual nodes are deleted.
Every PodChaperon in this cluster is deleted. It is safe to run twice, and
exits non-zero, naming what it could not do, when something is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(klog.NewKlogr()) // honours -v and -vmodule
			cfg, err := restConfig(o.kubeconfig)
			if err != nil {
				return fmt.Errorf("loading the cluster configuration: %w", err)
			}
			cfg.UserAgent = "fleetlet-cleanup"
			c, err := client.New(cfg, client.Options{Scheme: newScheme()})
			if err != nil {
				return err
			}
			sum, err := cleanup.Run(runContext(cmd), cleanup.Options{
				Client:     c,
				SourceName: o.clusterName,
				Timeout:    o.timeout,
				DryRun:     o.dryRun,
			})
			sum.Print(cmd.OutOrStdout(), o.dryRun)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to clean (default: in-cluster, else $KUBECONFIG)")
	f.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name as a source: only chaperons labelled with it are deleted in targets (default: any chaperon of this cluster's proxies, by UID)")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "how long to wait for the chaperons in targets to be gone")
	f.BoolVar(&o.dryRun, "dry-run", false, "only print what would be done")
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	f.AddGoFlagSet(fs)
	return cmd
}
