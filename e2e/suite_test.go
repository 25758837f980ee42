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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
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

// gcMinAge is the managers' --gc-min-age in the suite's sandbox (a minute
// by default): TestGarbageCollectorRemovesOrphans waits that long for an
// orphan to be old enough.
const gcMinAge = 20 * time.Second

// gcInterval is the managers' --gc-interval in the suite's sandbox (two
// minutes by default): TestNamespacesOnDemand waits for a pass to delete the
// namespaces a source created.
const gcInterval = 30 * time.Second

// groupTimeout is the source manager's --group-timeout while
// TestGangThatFitsNowhereLetsGo runs (not the suite's: an earlier release,
// which the upgrade scenario runs, has no such flag).
const groupTimeout = 15 * time.Second

func run(m *testing.M) int {
	if testing.Short() {
		return m.Run() // every scenario skips itself; no sandbox
	}
	bin, err := testenv.FindBinaries("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl", "fleetlet", "kubectl-fleetlet", "kueue", "metrics-server")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if dir := os.Getenv(ExistingSandboxEnv); dir != "" {
		return runOnExisting(m, dir)
	}
	dir, err := os.MkdirTemp("", "fleetlet-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	sb, err = sandbox.Up(ctx, sandbox.Options{Dir: dir, BinDir: bin, Clusters: 3, Kueue: true, MetricsServer: true, Furnished: true, DieWithParent: true, Out: os.Stderr,
		ManagerArgs: []string{"--gc-min-age=" + gcMinAge.String(), "--gc-interval=" + gcInterval.String()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	up := time.Since(began)
	code := m.Run()
	if code == 0 && !testing.Short() {
		code = checkSystemWorkloadsAfterAll()
	}
	if err := sb.Down(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox down:", err)
		code = 1
	}
	fmt.Fprintln(os.Stderr, scenarioTimes.summary(time.Since(began), up))
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "sandbox logs kept in %s/logs\n", dir)
	}
	return code
}

// ExistingSandboxEnv names a sandbox folder to run the scenarios on instead
// of starting one (`fleetlet-sandbox up --dir DIR` first), left running
// after: one scenario at a time while developing, with -test.run
// (TestUninstall takes fleetlet out of the sandbox).
const ExistingSandboxEnv = "FLEETLET_E2E_SANDBOX"

func runOnExisting(m *testing.M, dir string) int {
	var err error
	if sb, err = sandbox.Load(dir, sandbox.Options{Out: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	began := time.Now()
	code := m.Run()
	fmt.Fprintln(os.Stderr, scenarioTimes.summary(time.Since(began), 0))
	return code
}

// checkSystemWorkloadsAfterAll fails the suite when, once every scenario
// has run, a cluster's system workloads are not all available and
// undisturbed (systemWorkloadProblems), within a minute.
func checkSystemWorkloadsAfterAll() int {
	var problems []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), tryTimeout)
		problems = systemWorkloadProblems(ctx)
		cancel()
		if len(problems) == 0 {
			fmt.Fprintln(os.Stderr, "e2e suite: every cluster's system workloads available and undisturbed after all scenarios")
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "e2e suite: FAIL: after all scenarios, system workloads disturbed:\n  "+strings.Join(problems, "\n  "))
	return 1
}

// tryTimeout bounds one try of an eventually: the clients' own request
// timeout.
const tryTimeout = 30 * time.Second

// timings are the scenarios' durations, for the suite's summary.
type timings struct {
	mu  sync.Mutex
	ran []timing
}

type timing struct {
	name   string
	took   time.Duration
	failed bool
}

var scenarioTimes timings

func (ts *timings) add(t timing) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.ran = append(ts.ran, t)
}

// summary is the suite's total time and its five slowest scenarios.
func (ts *timings) summary(total, up time.Duration) string {
	ts.mu.Lock()
	ran := slices.Clone(ts.ran)
	ts.mu.Unlock()
	slices.SortStableFunc(ran, func(a, b timing) int { return int(b.took - a.took) })
	failed := 0
	for _, r := range ran {
		if r.failed {
			failed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "e2e suite: %d scenarios (%d failed) in %s, the shared sandbox up in %s; slowest:",
		len(ran), failed, total.Round(time.Second), up.Round(time.Second))
	for _, r := range ran[:min(5, len(ran))] {
		fmt.Fprintf(&b, "\n  %-55s %s", r.name, r.took.Round(100*time.Millisecond))
	}
	return b.String()
}

// need skips a scenario in -short mode and fails it when the sandbox is
// missing. It times the scenario, its cleanups included.
func need(t *testing.T) {
	t.Helper()
	if sb == nil {
		if testing.Short() {
			t.Skip("e2e scenario skipped in -short mode")
		}
		require.FailNow(t, "no sandbox")
	}
	began := time.Now()
	t.Cleanup(func() { scenarioTimes.add(timing{name: t.Name(), took: time.Since(began), failed: t.Failed()}) })
	t.Cleanup(func() {
		if t.Failed() {
			dumpClusters(t)
		}
	})
}

// needMetricsServer fails a scenario at once, saying why, on a sandbox
// started without metrics-server (FLEETLET_E2E_SANDBOX's own).
func needMetricsServer(t *testing.T) {
	t.Helper()
	require.Truef(t, sb.State().Settings.MetricsServer, "the sandbox in %s runs no metrics-server: start it with `fleetlet-sandbox up --metrics-server`", sb.Dir())
}

func kube(t *testing.T, cluster string) kubernetes.Interface {
	t.Helper()
	cs, err := sb.Client(cluster)
	require.NoError(t, err)
	return cs
}

func ctrlClient(t *testing.T, cluster string) client.Client {
	t.Helper()
	cfg, err := sb.RESTConfig(cluster)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// kubectlEnv is the environment of a bin/kubectl run against the
// sandbox: its merged kubeconfig, and a discovery cache of its own (the
// default one, keyed by host and port, would serve a sandbox the kinds an
// earlier one on the same ports had: `kubectl get fleetlet` then found no
// such category).
func kubectlEnv() []string {
	return append(os.Environ(), "KUBECONFIG="+filepath.Join(sb.Dir(), sandbox.MergedKubeconfig), "KUBECACHEDIR="+filepath.Join(sb.Dir(), "kubectl-cache"))
}

// kubectl runs bin/kubectl against the sandbox's merged kubeconfig.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(sb.BinDir(), "kubectl"), args...)
	cmd.Env = append(kubectlEnv(), "PATH="+sb.BinDir()+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// eventually polls cond until it holds, failing with the last reason after
// timeout. Each try gets a context of its own: a request in flight when the
// deadline passes finishes, so the failure names the last state seen, not
// "context deadline exceeded".
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), tryTimeout)
		defer cancel()
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	require.NoErrorf(t, err, "timed out after %s waiting for %s; last: %s", timeout, what, last)
	return time.Since(start)
}

// dumpClusters keeps what a failed scenario needs to be understood: the
// fleetlet objects, nodes, Leases and Events of every cluster, in a file
// beside the sandbox's logs (kept when the suite fails), so that the
// failure's own message stays the last thing the scenario prints.
func dumpClusters(t *testing.T) {
	var b strings.Builder
	for _, c := range sb.ClusterNames() {
		for _, what := range [][]string{
			{"get", "nodes", "-o", "wide", "--show-labels"},
			{"get", "fleetlet", "-A", "-o", "wide"},
			{"get", "leases", "-A"},
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		} {
			out, _ := kubectl(t, append([]string{"--context", c}, what...)...)
			fmt.Fprintf(&b, "%s: kubectl %s\n%s\n", c, strings.Join(what, " "), out)
		}
	}
	path := filepath.Join(sb.Dir(), "logs", "failed-"+strings.ReplaceAll(t.Name(), "/", "_")+".txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("%s (writing it to %s: %v)", b.String(), path, err)
		return
	}
	t.Logf("the clusters' nodes, fleetlet objects, Leases and Events: %s", path)
}
