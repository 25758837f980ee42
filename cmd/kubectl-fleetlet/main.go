// Command kubectl-fleetlet is the kubectl plugin that joins clusters with
// fleetlet: `kubectl fleetlet connect`, `disconnect` and `status`. It only
// loads kubeconfig contexts; the work is pkg/connect's.
package main

import (
	"os"
)

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		os.Exit(1)
	}
}
