// Package e2e holds the end-to-end suite: user stories told against a
// fleetlet sandbox of real control planes (cluster-1 the source, every
// cluster a target), one file per scenario.
package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// sb is the sandbox every scenario of the package shares.
var sb *sandbox.Sandbox

func TestMain(m *testing.M) {
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := testenv.FindBinaries("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl", "fleetlet", "kubectl-fleetlet")
	if err != nil {
		if testing.Short() {
			return m.Run() // every scenario skips itself
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "fleetlet-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err = sandbox.Up(ctx, sandbox.Options{Dir: dir, BinDir: bin, Clusters: 3, DieWithParent: true, Out: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := sb.Down(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox down:", err)
		code = 1
	}
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "sandbox logs kept in %s/logs\n", dir)
	}
	return code
}

// need skips a scenario in -short mode and fails it when the sandbox is
// missing.
func need(t *testing.T) {
	t.Helper()
	if sb == nil {
		if testing.Short() {
			t.Skip("e2e scenario skipped in -short mode")
		}
		t.Fatal("no sandbox")
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpClusters(t)
		}
	})
}

func kube(t *testing.T, cluster string) kubernetes.Interface {
	t.Helper()
	cs, err := sb.Client(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func ctrlClient(t *testing.T, cluster string) client.Client {
	t.Helper()
	cfg, err := sb.RESTConfig(cluster)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs bin/kubectl against the sandbox's merged kubeconfig.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(sb.BinDir(), "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(sb.Dir(), sandbox.MergedKubeconfig), "PATH="+sb.BinDir()+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// eventually polls cond until it holds, failing with the last reason after
// timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
	}
	return time.Since(start)
}

// dumpClusters prints what a failed scenario needs to be understood: the
// fleetlet objects and nodes of every cluster.
func dumpClusters(t *testing.T) {
	for _, c := range sb.ClusterNames() {
		for _, what := range [][]string{
			{"get", "nodes", "-o", "wide", "--show-labels"},
			{"get", "fleetlet", "-A", "-o", "wide"},
			{"get", "leases", "-A"},
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		} {
			out, _ := kubectl(t, append([]string{"--context", c}, what...)...)
			t.Logf("%s: kubectl %s\n%s", c, strings.Join(what, " "), out)
		}
	}
}
