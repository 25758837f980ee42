package candidate_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/candidate"
	"github.com/fleetlet/fleetlet/pkg/target/summary"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// One control plane (a target cluster without kubelets: binding only sets
// spec.nodeName) for the package; each test has its own namespace and runs
// its own candidate scheduler in-process.
var (
	env        *testenv.Env
	k8sClient  client.Client
	kubeconfig string // file of env's administrator, for the scheduler
	scheme     = runtime.NewScheme()
)

// The nodes of the cluster: 4 CPUs each.
var nodes = []string{"node-1", "node-2"}

// waitTimeout bounds every wait on the scheduler.
const waitTimeout = 30 * time.Second

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	if testing.Short() {
		return m.Run() // unit tests only
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start(testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	dir, err := os.MkdirTemp("", "candidate-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := setupCluster(dir); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the test cluster:", err)
		return 1
	}
	return m.Run()
}

// setupCluster writes the kubeconfig and creates what a target has: the
// fleetlet-candidate PriorityClass and Ready nodes.
func setupCluster(dir string) error {
	var err error
	if k8sClient, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(env.Config, kubeconfig); err != nil {
		return err
	}
	ctx := context.Background()
	if err := k8sClient.Create(ctx, summary.CandidatePriorityClass()); err != nil {
		return err
	}
	for _, name := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
		if err := k8sClient.Create(ctx, node); err != nil {
			return err
		}
		resources := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		node.Status = corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		}
		if err := k8sClient.Status().Update(ctx, node); err != nil {
			return err
		}
		// The TaintNodesByCondition admission plugin tainted the new
		// node not-ready; no node lifecycle controller runs to lift it.
		node.Spec.Taints = nil
		if err := k8sClient.Update(ctx, node); err != nil {
			return err
		}
	}
	return nil
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// startScheduler runs the candidate scheduler in-process, the way
// kube-scheduler runs a --config file with the plugin registered through
// app.WithPlugin, without leader election or serving. The returned stop ends
// it like a killed process: waiting candidates are not unreserved.
func startScheduler(t *testing.T, permitTimeout time.Duration) (stop func()) {
	t.Helper()
	o := candidate.DefaultConfigOptions("kube-system")
	o.Kubeconfig = kubeconfig
	o.LeaderElect = false
	o.PermitTimeout = permitTimeout
	cfg, err := candidate.Configuration(o)
	require.NoError(t, err)
	data, err := candidate.EncodeConfiguration(cfg)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "scheduler.yaml")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	opts := options.NewOptions()
	opts.ConfigFile = file
	opts.SecureServing.BindPort = 0

	// As `fleetlet scheduler` runs it (cmd/fleetlet/scheduler.go).
	require.NoError(t, candidate.ApplySchedulerFeatureDefaults(utilfeature.DefaultMutableFeatureGate, ""))
	ctx, cancel := context.WithCancel(context.Background())
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(candidate.Name, candidate.New))
	if err != nil {
		cancel()
		require.FailNow(t, err.Error())
	}
	candidate.QuietLosses(sched)
	cc.EventBroadcaster.StartRecordingToSink(ctx.Done())
	cc.InformerFactory.Start(ctx.Done())
	cc.DynInformerFactory.Start(ctx.Done())
	cc.InformerFactory.WaitForCacheSync(ctx.Done())
	cc.DynInformerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		cancel()
		require.FailNow(t, err.Error())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sched.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cc.EventBroadcaster.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// newNamespace creates a namespace for one integration test, skipping it in
// -short mode.
func newNamespace(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test skipped in -short mode")
	}
	testenv.Need(t, env)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "candidate-"}}
	require.NoError(t, k8sClient.Create(context.Background(), ns))
	return ns.Name
}

// newChaperon creates a PodChaperon, as a source does.
func newChaperon(t *testing.T, namespace, name string, finalizers ...string) *v1alpha1.PodChaperon {
	t.Helper()
	ch := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, Finalizers: finalizers,
			Labels:      map[string]string{v1alpha1.LabelParentUID: "proxy-" + name, v1alpha1.LabelParentCluster: "cluster-1"},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: name, v1alpha1.AnnotationParentNamespace: namespace},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		}}},
	}
	require.NoError(t, k8sClient.Create(context.Background(), ch))
	return ch
}

// newCandidate creates the candidate pod of a chaperon, as the chaperon
// controller does, requesting cpu.
func newCandidate(t *testing.T, ch *v1alpha1.PodChaperon, cpu string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ch.Namespace, Name: ch.Name,
			Labels: map[string]string{v1alpha1.LabelParentUID: ch.Labels[v1alpha1.LabelParentUID], v1alpha1.LabelParentCluster: "cluster-1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "PodChaperon", Name: ch.Name, UID: ch.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			SchedulerName:     v1alpha1.SchedulerNameCandidate,
			PriorityClassName: v1alpha1.PriorityClassCandidate,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			}}},
		},
	}
	require.NoError(t, k8sClient.Create(context.Background(), pod))
	return pod
}

// consistently checks, for d, that check keeps returning nil.
func consistently(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		require.NoErrorf(t, check(), "%s", what)
		time.Sleep(100 * time.Millisecond)
	}
}

func getChaperon(t *testing.T, ch *v1alpha1.PodChaperon) *v1alpha1.PodChaperon {
	t.Helper()
	got := &v1alpha1.PodChaperon{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(ch), got))
	return got
}

func getPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got := &corev1.Pod{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(pod), got))
	return got
}

// waitReserved waits for the chaperon's reservation and returns its node.
func waitReserved(t *testing.T, ch *v1alpha1.PodChaperon) string {
	t.Helper()
	var node string
	testenv.Eventually(t, waitTimeout, "the chaperon records the reservation", func() error {
		node = getChaperon(t, ch).Annotations[v1alpha1.AnnotationReserved]
		if node == "" {
			return fmt.Errorf("no %s annotation", v1alpha1.AnnotationReserved)
		}
		return nil
	})
	return node
}

// elect marks the chaperon elected, as the source does, and returns when.
func elect(t *testing.T, ch *v1alpha1.PodChaperon) time.Time {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, v1alpha1.AnnotationElected)
	require.NoError(t, k8sClient.Patch(context.Background(), ch, client.RawPatch(types.MergePatchType, patch)))
	return time.Now()
}

// waitBound waits for the pod to be bound and returns its node.
func waitBound(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	var node string
	testenv.Eventually(t, waitTimeout, "the candidate is bound", func() error {
		node = getPod(t, pod).Spec.NodeName
		if node == "" {
			return fmt.Errorf("pod %s not bound", pod.Name)
		}
		return nil
	})
	return node
}

func notBound(t *testing.T, pod *corev1.Pod) func() error {
	return func() error {
		if n := getPod(t, pod).Spec.NodeName; n != "" {
			return fmt.Errorf("pod %s is bound to %s", pod.Name, n)
		}
		return nil
	}
}

// podScheduled returns the pod's PodScheduled condition, nil if none.
func podScheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// rejections is how many candidates the plugin has rejected in this
// process, at Permit ("permit") or while they waited ("waits").
func rejections(t *testing.T, where string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	name := "fleetlet_candidate_" + where + "_total"
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "rejected" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// allRejections is how many candidates the plugin has rejected in this
// process, at Permit and while they waited.
func allRejections(t *testing.T) float64 {
	t.Helper()
	return rejections(t, "permit") + rejections(t, "waits")
}

// waitRejected waits until the plugin has rejected more candidates than
// before (allRejections): a candidate whose chaperon is deleted as it
// reaches Permit is rejected there rather than while it waits.
func waitRejected(t *testing.T, before float64) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "a rejection counted", func() error {
		if n := allRejections(t); n <= before {
			return fmt.Errorf("rejections: %v", n)
		}
		return nil
	})
}
