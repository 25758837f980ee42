package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/pkg/features"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/target/summary"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// schedulerConfig parses args as `fleetlet scheduler` does and returns the
// configuration it would run.
func schedulerConfig(t *testing.T, args ...string) (*schedulerconfig.KubeSchedulerConfiguration, error) {
	t.Helper()
	o := newSchedulerOptions()
	cmd := o.command()
	require.NoError(t, cmd.ParseFlags(args))
	return o.configuration(cmd.Flags().Changed)
}

// schedConfigSummary is what a test checks of a configuration.
type schedConfigSummary struct {
	Kubeconfig     string
	QPS            float32
	LeaderElect    bool
	Lease          string
	LeaseDuration  time.Duration
	Profiles       []string
	PermitTimeout  time.Duration
	MultiPointHas  bool
	ReservationWks int32
}

func summarizeSchedConfig(t *testing.T, cfg *schedulerconfig.KubeSchedulerConfiguration) schedConfigSummary {
	t.Helper()
	s := schedConfigSummary{
		Kubeconfig:    cfg.ClientConnection.Kubeconfig,
		QPS:           cfg.ClientConnection.QPS,
		LeaderElect:   cfg.LeaderElection.LeaderElect,
		Lease:         cfg.LeaderElection.ResourceNamespace + "/" + cfg.LeaderElection.ResourceName,
		LeaseDuration: cfg.LeaderElection.LeaseDuration.Duration,
	}
	for _, p := range cfg.Profiles {
		s.Profiles = append(s.Profiles, p.SchedulerName)
		if p.SchedulerName != candidate.ProfileName {
			continue
		}
		for _, pl := range p.Plugins.MultiPoint.Enabled {
			s.MultiPointHas = s.MultiPointHas || pl.Name == candidate.Name
		}
		var raw runtime.Object // no pluginConfig: the defaults
		for _, pc := range p.PluginConfig {
			if pc.Name == candidate.Name {
				raw = pc.Args
			}
		}
		args, err := candidate.DecodeArgs(raw)
		require.NoError(t, err)
		s.PermitTimeout = args.PermitTimeout.Duration
		s.ReservationWks = *args.ReservationWorkers
	}
	return s
}

func schedWriteFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

const schedUserConfig = `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /from/file
leaderElection:
  leaderElect: true
  resourceName: candidates
  resourceNamespace: from-file
profiles:
- schedulerName: batch
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled:
      - name: candidate
  pluginConfig:
  - name: candidate
    args:
      permitTimeout: 1m
      reservationWorkers: 8
`

func TestSchedulerConfiguration(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	defaults := schedConfigSummary{
		QPS: 50, LeaderElect: true, Lease: "fleetlet-system/fleetlet-candidate-scheduler", LeaseDuration: 15 * time.Second,
		Profiles: []string{"fleetlet-candidate"}, PermitTimeout: 5 * time.Minute, MultiPointHas: true, ReservationWks: 4,
	}
	with := func(base schedConfigSummary, mutate func(*schedConfigSummary)) schedConfigSummary {
		mutate(&base)
		return base
	}
	fromFile := schedConfigSummary{
		Kubeconfig: "/from/file", QPS: 50, LeaderElect: true, Lease: "from-file/candidates", LeaseDuration: 15 * time.Second,
		Profiles: []string{"batch", "fleetlet-candidate"}, PermitTimeout: time.Minute, MultiPointHas: true, ReservationWks: 8,
	}
	userFile := schedWriteFile(t, "user.yaml", schedUserConfig)
	noProfile := schedWriteFile(t, "no-profile.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	sharedLease := schedWriteFile(t, "shared-lease.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: fleetlet-candidate
  plugins:
    multiPoint:
      enabled: [{name: candidate}]
`)

	tests := []struct {
		name    string
		args    []string
		want    schedConfigSummary
		wantErr string
	}{
		{name: "defaults", want: defaults},
		{name: "fleetlet flags", args: []string{"--kubeconfig=/k", "--namespace=ns1", "--permit-timeout=2m", "--kube-api-qps=10"},
			want: with(defaults, func(s *schedConfigSummary) {
				s.Kubeconfig, s.Lease, s.PermitTimeout, s.QPS = "/k", "ns1/fleetlet-candidate-scheduler", 2*time.Minute, 10
			})},
		{name: "kube-scheduler's leader election flags", args: []string{"--namespace=ns1", "--leader-elect-resource-name=x", "--leader-elect-resource-namespace=ns2", "--leader-elect-lease-duration=30s"},
			want: with(defaults, func(s *schedConfigSummary) { s.Lease, s.LeaseDuration = "ns2/x", 30*time.Second })},
		{name: "no leader election", args: []string{"--leader-elect=false"},
			want: with(defaults, func(s *schedConfigSummary) { s.LeaderElect = false })},
		{name: "--config with more profiles", args: []string{"--config=" + userFile}, want: fromFile},
		{name: "--config with flags that override it", args: []string{"--config=" + userFile, "--kubeconfig=/k", "--namespace=ns1", "--permit-timeout=3m"},
			want: with(fromFile, func(s *schedConfigSummary) {
				s.Kubeconfig, s.Lease, s.PermitTimeout = "/k", "ns1/candidates", 3*time.Minute
			})},
		{name: "--config without the fleetlet-candidate profile", args: []string{"--config=" + noProfile}, wantErr: `no profile with schedulerName "fleetlet-candidate"`},
		{name: "--config sharing kube-scheduler's Lease", args: []string{"--config=" + sharedLease}, wantErr: "belongs to the cluster's kube-scheduler"},
		{name: "--config sharing kube-scheduler's Lease, renamed by a flag", args: []string{"--config=" + sharedLease, "--leader-elect-resource-name=mine"},
			want: schedConfigSummary{QPS: 50, LeaderElect: true, Lease: "kube-system/mine", LeaseDuration: 15 * time.Second, Profiles: []string{"fleetlet-candidate"}, PermitTimeout: 5 * time.Minute, MultiPointHas: true, ReservationWks: 4}},
		{name: "--config that does not exist", args: []string{"--config=/nonexistent.yaml"}, wantErr: "reading --config"},
		{name: "permit timeout above the framework's cap", args: []string{"--permit-timeout=16m"}, wantErr: "at most 15m0s"},
		{name: "permit timeout zero", args: []string{"--permit-timeout=0s"}, wantErr: "must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := schedulerConfig(t, tc.args...)
			if tc.wantErr != "" {
				require.ErrorContainsf(t, err, tc.wantErr, "error = %v, want one containing %q", err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Empty(t, cmp.Diff(tc.want, summarizeSchedConfig(t, cfg)), "configuration (-want,+got)")
		})
	}
}

func TestSchedulerHelp(t *testing.T) {
	cmd := newSchedulerCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--help"})
	require.NoError(t, cmd.Execute())
	help := out.String()
	for _, want := range []string{
		"Fleetlet flags:", "--kubeconfig string", "--namespace string", "--permit-timeout duration",
		"Leader election flags:", `--leader-elect-resource-name string`, `(default "fleetlet-candidate-scheduler")`,
		"Secure serving flags:", "--secure-port int",
		"--write-config-to string",
	} {
		assert.Containsf(t, help, want, "--help lacks %q", want)
	}
	assert.NotContainsf(t, help, "DEPRECATED: path to kubeconfig", "--help shows kube-scheduler's deprecated --kubeconfig")
}

func TestSchedulerWriteConfigTo(t *testing.T) {
	// Other tests of the package may have applied logging already.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	file := filepath.Join(t.TempDir(), "scheduler.yaml")
	cmd := newSchedulerCommand()
	cmd.SetArgs([]string{"--write-config-to=" + file, "--namespace=ns1", "--permit-timeout=90s"})
	require.NoError(t, cmd.ExecuteContext(context.Background()))
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// What it wrote is a --config the scheduler accepts as it is.
	cfg, err := schedulerConfig(t, "--config="+file)
	require.NoError(t, err, "the written configuration is refused:\n%s", data)
	got := summarizeSchedConfig(t, cfg)
	assert.Falsef(t, got.Lease != "ns1/fleetlet-candidate-scheduler" || got.PermitTimeout != 90*time.Second || !got.MultiPointHas, "written configuration = %+v\n%s", got, data)
}

// The candidate scheduler runs with NominatedNodeNameForExpectation off (a
// status write per candidate that waits at Permit) unless --feature-gates
// names it.
func TestSchedulerFeatureDefaults(t *testing.T) {
	require.NotNil(t, newSchedulerOptions().command().Flags().Lookup("feature-gates"), "kube-scheduler's --feature-gates flag")
	for name, tc := range map[string]struct {
		args []string
		want bool
	}{
		"no --feature-gates":          {nil, false},
		"another gate given":          {[]string{"--feature-gates=SchedulerAsyncAPICalls=true"}, false},
		"the gate given on":           {[]string{"--feature-gates=NominatedNodeNameForExpectation=true"}, true},
		"the gate given off, as ours": {[]string{"--feature-gates=NominatedNodeNameForExpectation=false"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			fs := pflag.NewFlagSet("scheduler", pflag.ContinueOnError)
			given := fs.String("feature-gates", "", "")
			require.NoError(t, fs.Parse(tc.args))
			// kube-scheduler's gates with its default for this one (the
			// process's may have been changed by a test that ran the
			// command), then --feature-gates as the component registry
			// applies it.
			fg := utilfeature.DefaultMutableFeatureGate.DeepCopy()
			require.NoError(t, fg.SetFromMap(map[string]bool{string(features.NominatedNodeNameForExpectation): true}))
			if *given != "" {
				require.NoError(t, fg.Set(*given))
			}
			require.NoError(t, applyCandidateFeatureDefaults(fs, fg))
			assert.Equal(t, tc.want, fg.Enabled(features.NominatedNodeNameForExpectation))
		})
	}
}

// schedHelperEnv makes the test binary run `fleetlet scheduler` with the
// arguments after "--" (TestSchedulerHelperProcess): a real process, with
// signals and leader election, from the code under test.
const schedHelperEnv = "FLEETLET_TEST_SCHEDULER_PROCESS"

func TestSchedulerHelperProcess(t *testing.T) {
	if os.Getenv(schedHelperEnv) != "1" {
		t.Skip("runs only as the scheduler process of TestIntegrationSchedulerProcess")
	}
	args := os.Args
	for i, a := range os.Args {
		if a == "--" {
			args = os.Args[i+1:]
			break
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	cmd := newSchedulerCommand()
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// schedulerProcess is one `fleetlet scheduler` process.
type schedulerProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // its exit, once done
}

func startSchedulerProcess(t *testing.T, args ...string) *schedulerProcess {
	t.Helper()
	log := filepath.Join(t.TempDir(), "scheduler.log")
	f, err := os.Create(log)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestSchedulerHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), schedHelperEnv+"=1")
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	p := &schedulerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			data, _ := os.ReadFile(log)
			t.Logf("scheduler log %s:\n%s", log, schedTail(string(data), 60))
		}
	})
	return p
}

// stop sends SIGTERM and returns how the process exited.
func (p *schedulerProcess) stop(t *testing.T) error {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the scheduler did not exit 30s after SIGTERM")
		return nil
	}
}

func schedTail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The subcommand as a process: it takes its own Lease, reserves, binds an
// elected candidate, serves its metrics beside kube-scheduler's, releases
// its Lease on SIGTERM, and a new process binds a candidate elected while
// none ran.
func TestIntegrationSchedulerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test skipped in -short mode")
	}
	testenv.RequireBinaries(t, "etcd", "kube-apiserver", "kubectl")
	root, err := testenv.ModuleRoot()
	require.NoError(t, err)
	env, err := testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: newScheme()})
	require.NoError(t, err)
	ctx := context.Background()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, schedKubeconfig(env.Config, kubeconfig))
	for _, obj := range []client.Object{
		summary.CandidatePriorityClass(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-system"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
	} {
		require.NoError(t, c.Create(ctx, obj))
	}
	schedReadyNode(t, c, "node-1")

	port := schedFreePort(t)
	args := []string{
		"--kubeconfig=" + kubeconfig, "--namespace=fleetlet-system", "--permit-timeout=2m",
		"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
	}
	first := startSchedulerProcess(t, args...)

	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: "fleetlet-system", Name: candidate.DefaultLeaseName}
	testenv.Eventually(t, 30*time.Second, "the scheduler holds its Lease", func() error {
		if err := c.Get(ctx, leaseKey, lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			return errors.New("no holder")
		}
		return nil
	})

	ch, pod := schedCandidate(t, c, "team-a", "web-0")
	testenv.Eventually(t, 30*time.Second, "the reservation", func() error {
		got := &v1alpha1.PodChaperon{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ch), got); err != nil {
			return err
		}
		if got.Annotations[v1alpha1.AnnotationReserved] != "node-1" {
			return fmt.Errorf("reserved = %q", got.Annotations[v1alpha1.AnnotationReserved])
		}
		return nil
	})
	require.Empty(t, schedPodNode(t, c, pod), "bound before the election")
	// The reservation is on the chaperon: the scheduler writes no
	// nominatedNodeName on a candidate that waits at Permit.
	testenv.CandidateUnwritten(t, c, pod, 2*time.Second)
	schedElect(t, c, ch)
	testenv.Eventually(t, 30*time.Second, "the elected candidate binds", func() error { return schedBound(t, c, pod) })

	// The scheduler counts an attempt after its bind call returns, so the
	// bind may be seen in the API a moment before the counters move.
	testenv.Eventually(t, 10*time.Second, "the scheduler's and fleetlet's metrics", func() error {
		metrics := schedScrape(t, fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
		for _, want := range []string{`fleetlet_candidate_permit_total{result="waiting"} 1`, `fleetlet_candidate_waits_total{result="allowed"} 1`,
			`fleetlet_candidate_reservation_writes_total{operation="reserve",result="written"} 1`, "scheduler_schedule_attempts_total",
			// Its own API requests (the bench's per-client count).
			`rest_client_requests_total{code="201",host=`} {
			if !strings.Contains(metrics, want) {
				return fmt.Errorf("/metrics lacks %q", want)
			}
		}
		return nil
	})

	// A candidate that loses (its chaperon deleted while it waits; no
	// garbage collector here, so its pod stays) is rejected, and the
	// scheduler writes nothing about it: no FailedScheduling Event, no
	// PodScheduled=False. Its pod is about to go with its chaperon.
	lch, lpod := schedCandidate(t, c, "team-a", "web-lost")
	testenv.Eventually(t, 30*time.Second, "the loser's reservation", func() error {
		got := &v1alpha1.PodChaperon{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(lch), got); err != nil {
			return err
		}
		if got.Annotations[v1alpha1.AnnotationReserved] == "" {
			return errors.New("not reserved yet")
		}
		return nil
	})
	require.NoError(t, c.Delete(ctx, lch))
	testenv.Eventually(t, 10*time.Second, "the loser rejected", func() error {
		// While it waited, or at Permit if it got there after the delete.
		m := schedScrape(t, fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
		if !strings.Contains(m, `fleetlet_candidate_waits_total{result="rejected"} 1`) && !strings.Contains(m, `fleetlet_candidate_permit_total{result="rejected"} 1`) {
			return errors.New("no rejection counted yet")
		}
		return nil
	})
	testenv.CandidateUnwritten(t, c, lpod, 2*time.Second)

	assert.NoError(t, first.stop(t), "the scheduler's exit after SIGTERM, want 0")
	require.NoError(t, c.Get(ctx, leaseKey, lease))
	assert.Empty(t, ptr.Deref(lease.Spec.HolderIdentity, ""), "the Lease is still held after SIGTERM")

	// Elected while no scheduler runs: the next one binds it at once.
	ch2, pod2 := schedCandidate(t, c, "team-a", "web-1")
	schedElect(t, c, ch2)
	started := time.Now()
	startSchedulerProcess(t, args...)
	testenv.Eventually(t, 30*time.Second, "the candidate elected meanwhile binds", func() error { return schedBound(t, c, pod2) })
	t.Logf("a new scheduler process bound an elected candidate %s after it started", time.Since(started))
}

func schedKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

func schedReadyNode(t *testing.T, c client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	require.NoError(t, c.Create(ctx, node))
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status = corev1.NodeStatus{Capacity: rl, Allocatable: rl, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}}
	require.NoError(t, c.Status().Update(ctx, node))
	// Admission tainted the new node not-ready; no controller lifts it here.
	node.Spec.Taints = nil
	require.NoError(t, c.Update(ctx, node))
}

// schedCandidate creates a chaperon and its candidate pod, as the source
// and the chaperon controller do.
func schedCandidate(t *testing.T, c client.Client, namespace, name string) (*v1alpha1.PodChaperon, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	ch := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{v1alpha1.LabelParentUID: "proxy-" + name, v1alpha1.LabelParentCluster: "cluster-1"}},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		}}},
	}
	require.NoError(t, c.Create(ctx, ch))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: ch.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PodChaperon",
				Name: name, UID: ch.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			SchedulerName:     v1alpha1.SchedulerNameCandidate,
			PriorityClassName: v1alpha1.PriorityClassCandidate,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
		},
	}
	require.NoError(t, c.Create(ctx, pod))
	return ch, pod
}

func schedElect(t *testing.T, c client.Client, ch *v1alpha1.PodChaperon) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, v1alpha1.AnnotationElected)
	require.NoError(t, c.Patch(context.Background(), ch, client.RawPatch(types.MergePatchType, patch)))
}

func schedPodNode(t *testing.T, c client.Client, pod *corev1.Pod) string {
	t.Helper()
	got := &corev1.Pod{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	return got.Spec.NodeName
}

func schedBound(t *testing.T, c client.Client, pod *corev1.Pod) error {
	if n := schedPodNode(t, c, pod); n == "" {
		return fmt.Errorf("pod %s not bound", pod.Name)
	}
	return nil
}

func schedFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func schedScrape(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the scheduler's self-signed serving certificate, on loopback in a test
	}}
	resp, err := hc.Get(url)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s\n%s", url, resp.Status, body)
	return string(body)
}
