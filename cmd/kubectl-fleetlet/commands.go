package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetlet/fleetlet/pkg/connect"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/version"
)

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	var kubeconfig string
	root := &cobra.Command{
		Use:   "kubectl-fleetlet",
		Short: "Join Kubernetes clusters with fleetlet",
		Long: `kubectl fleetlet joins clusters so that pods created in one (the source) run
in another (the target), where the target appears in the source as a virtual
node. Both clusters need fleetlet installed.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fleetlet"},
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "",
		"kubeconfig file(s) holding the contexts (a list like $KUBECONFIG); default $KUBECONFIG or ~/.kube/config")
	root.AddCommand(
		newConnectCommand(&kubeconfig, stdout),
		newDisconnectCommand(&kubeconfig, stdout),
		newStatusCommand(&kubeconfig, stdout),
	)
	version.AddTo(root)
	return root
}

// connectFlags are the flags of connect and disconnect.
type connectFlags struct {
	sourceContext, targetContext string
	namespace                    string
	sourceName, targetName       string
	fleetletNamespace            string
	targetServer                 string
	timeout                      time.Duration
	self                         bool
}

func (f *connectFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.sourceContext, "source-context", "", "kubeconfig context of the source cluster, where pods are created (required)")
	fl.StringVar(&f.targetContext, "target-context", "", "kubeconfig context of the target cluster, where pods run (required unless --self)")
	fl.StringVarP(&f.namespace, "namespace", "n", "", "join this namespace only (a Target and a Source in it); default: cluster-wide (ClusterTarget and ClusterSource)")
	fl.StringVar(&f.sourceName, "source-name", "", "name of the source cluster in the target (the Source's name); default: the source context's name")
	fl.StringVar(&f.targetName, "target-name", "", "name of the target in the source cluster (the Target's name); default: the target context's name (the source context's with --self)")
	fl.StringVar(&f.fleetletNamespace, "fleetlet-namespace", connect.DefaultFleetletNamespace, "namespace fleetlet is installed in, in both clusters")
	fl.StringVar(&f.targetServer, "target-server", "", "URL of the target's API server as fleetlet in the source cluster reaches it; default: the target context's server")
	fl.DurationVar(&f.timeout, "timeout", connect.DefaultTimeout, "how long to wait for fleetlet and the token controller in the target cluster")
	fl.BoolVar(&f.self, "self", false, "make the source cluster its own target (spec.self: true)")
}

// options checks the flags and loads the contexts.
func (f *connectFlags) options(kubeconfig string) (connect.Options, error) {
	var opts connect.Options
	switch {
	case f.sourceContext == "":
		return opts, errors.New("--source-context is required")
	case f.self && f.targetContext != "":
		return opts, errors.New("--self and --target-context exclude each other: with --self the source cluster is the target")
	case !f.self && f.targetContext == "":
		return opts, errors.New("--target-context is required (or --self to make the source cluster its own target)")
	case f.self && (f.sourceName != "" || f.targetServer != ""):
		return opts, errors.New("--source-name and --target-server do not apply with --self")
	}
	opts = connect.Options{
		SourceName:        f.sourceName,
		TargetName:        f.targetName,
		Namespace:         f.namespace,
		FleetletNamespace: f.fleetletNamespace,
		Self:              f.self,
		TargetServer:      f.targetServer,
		Timeout:           f.timeout,
		SourceContext:     f.sourceContext,
		TargetContext:     f.targetContext,
	}
	if opts.TargetName == "" {
		opts.TargetName = f.targetContext
		if f.self {
			opts.TargetName = f.sourceContext
		}
		if msgs := validation.IsDNS1123Subdomain(opts.TargetName); len(msgs) > 0 {
			return opts, fmt.Errorf("the context name %q is not a valid target name (%s): pass --target-name", opts.TargetName, strings.Join(msgs, "; "))
		}
	}
	if opts.SourceName == "" {
		opts.SourceName = f.sourceContext
		if msgs := validation.IsDNS1123Label(opts.SourceName); len(msgs) > 0 {
			return opts, fmt.Errorf("the context name %q is not a valid source name (%s): pass --source-name", opts.SourceName, strings.Join(msgs, "; "))
		}
	}
	var err error
	if opts.Source, err = restConfig(kubeconfig, f.sourceContext); err != nil {
		return opts, err
	}
	if !f.self {
		if opts.Target, err = restConfig(kubeconfig, f.targetContext); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// restConfig loads one context; empty means the current one.
func restConfig(kubeconfig, context string) (*rest.Config, error) {
	cc := clientConfig(kubeconfig, context)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if context == "" {
			return nil, fmt.Errorf("loading the current kubeconfig context: %w", err)
		}
		return nil, fmt.Errorf("loading kubeconfig context %q: %w", context, err)
	}
	return cfg, nil
}

func clientConfig(kubeconfig, context string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if paths := filepath.SplitList(kubeconfig); len(paths) == 1 {
		// One file: it must exist.
		rules.ExplicitPath = paths[0]
	} else if len(paths) > 1 {
		// A list merges like $KUBECONFIG.
		rules.Precedence = paths
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func printChanges(w io.Writer, res *connect.Result) {
	if res == nil {
		return
	}
	for _, c := range res.Changes {
		fmt.Fprintln(w, c)
	}
}

func newConnectCommand(kubeconfig *string, stdout io.Writer) *cobra.Command {
	var f connectFlags
	cmd := &cobra.Command{
		Use:   "connect --source-context A --target-context B [--namespace NS]",
		Short: "Let the source cluster run pods in the target cluster",
		Long: `connect makes the target cluster B appear in the source cluster A as a
virtual node. In B it creates a Source (with --namespace) or ClusterSource,
waits for fleetlet there to give it a ServiceAccount, and creates a long-lived
service-account token Secret for it. In A it writes a kubeconfig holding that
token to the Secret fleetlet-target-<target name> and creates the Target (with
--namespace) or ClusterTarget that uses it.

A ClusterSource may only act in the namespaces of B labelled for it:
  kubectl --context B label namespace NS source.multicluster.fleetlet.io/<source name>=true

connect is idempotent: running it again changes nothing and keeps the token.`,
		Example: `  # Every enabled namespace of cluster-1 may run pods in cluster-2.
  kubectl fleetlet connect --source-context cluster-1 --target-context cluster-2

  # Only namespace team-a.
  kubectl fleetlet connect --source-context cluster-1 --target-context cluster-2 -n team-a

  # cluster-1 runs pods on its own real nodes too.
  kubectl fleetlet connect --self --source-context cluster-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			res, err := connect.Connect(ctx, opts)
			printChanges(stdout, res)
			if err != nil {
				return err
			}
			if !opts.Self && opts.Namespace == "" {
				fmt.Fprintf(stdout, "\nThe ClusterSource %s may act only in the namespaces of %q labelled for it, for example:\n  kubectl --context %s label namespace NAMESPACE %s=true\n",
					opts.SourceName, opts.TargetContext, opts.TargetContext, access.DefaultNamespaceLabel(opts.SourceName))
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newDisconnectCommand(kubeconfig *string, stdout io.Writer) *cobra.Command {
	var f connectFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "disconnect --source-context A --target-context B [--namespace NS]",
		Short: "Undo connect",
		Long: `disconnect deletes, with the same flags as connect, what connect created: the
Target or ClusterTarget and its kubeconfig Secret in the source cluster, the
token Secret and the Source or ClusterSource in the target cluster. Objects
not created by kubectl-fleetlet, and namespaces, are never deleted.

The Target goes first, and disconnect waits (--timeout) until fleetlet has
drained it: the proxies on its virtual node are evicted (PodDisruptionBudgets
respected), so that their controllers recreate them in the other targets,
and this source's chaperons are gone there. While it waits it says why (the
Target's Draining condition). --force ends the drain at once and leaves
what is still there behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options(*kubeconfig)
			if err != nil {
				return err
			}
			opts.Force = force
			ctx, cancel := signalContext()
			defer cancel()
			res, err := connect.Disconnect(ctx, opts)
			printChanges(stdout, res)
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "end the Target's drain at once, leaving behind what still runs there for this source")
	return cmd
}

func newStatusCommand(kubeconfig *string, stdout io.Writer) *cobra.Command {
	var kubeContext string
	cmd := &cobra.Command{
		Use:   "status [--context A]",
		Short: "List the targets of a cluster, their virtual nodes and capacity, and which targets can take each enabled namespace's pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := restConfig(*kubeconfig, kubeContext)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			rows, err := connect.Status(ctx, cfg)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				fmt.Fprintln(stdout, "No targets: connect one with `kubectl fleetlet connect`.")
				return nil
			}
			if err := connect.WriteStatus(stdout, rows); err != nil {
				return err
			}
			namespaces, err := connect.Namespaces(ctx, cfg)
			if err != nil || len(namespaces) == 0 {
				return err
			}
			fmt.Fprintln(stdout)
			return connect.WriteNamespaces(stdout, namespaces)
		},
	}
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context of the source cluster; default: the current context")
	return cmd
}
