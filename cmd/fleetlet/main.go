// Command fleetlet is fleetlet's one binary: `fleetlet manager` runs in every
// cluster (source and target side controllers, the proxy-pod webhook and the
// virtual nodes); later subcommands add the candidate scheduler and cleanup.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetlet/fleetlet/pkg/version"
)

func main() {
	// Best-effort: without a readable cgroup limit the runtime keeps its
	// default (no limit), which is what it had before.
	_, _ = setMemoryLimit(memlimit.FromCgroup)
	if err := newRootCommand().ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetlet",
		Short:         "fleetlet runs pods of one Kubernetes cluster in others, each target cluster a virtual node",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newManagerCommand(), newSchedulerCommand(), newCleanupCommand())
	version.AddTo(root)
	return root
}

// runContext is what subcommands run with; a variable so tests can stop them.
var runContext = func(cmd *cobra.Command) context.Context { return cmd.Context() }
