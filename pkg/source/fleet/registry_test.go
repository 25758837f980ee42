package fleet_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/fleet/fleettest"
	"github.com/fleetlet/fleetlet/pkg/source/vnode"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where Targets live, and a target.
var sourceEnv, targetEnv *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(func() int {
		return testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv)
	}())
}

// recordingNodes stands in for the virtual node controller.
type recordingNodes struct {
	mu      sync.Mutex
	states  map[proxypod.TargetKey]vnode.TargetState
	removed map[proxypod.TargetKey]int
}

func (r *recordingNodes) Upsert(_ context.Context, s vnode.TargetState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states[s.Key] = s
}

func (r *recordingNodes) Remove(_ context.Context, key proxypod.TargetKey) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, key)
	r.removed[key]++
	return nil
}

func (r *recordingNodes) Release(key proxypod.TargetKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.states, key)
}

func (r *recordingNodes) get(key proxypod.TargetKey) (vnode.TargetState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.states[key]
	return s, ok
}

type fixture struct {
	source, target client.Client
	registry       *fleet.Registry
	nodes          *recordingNodes
	ns             string
}

// start runs a manager with the registry on the source, in a namespace of
// its own.
func start(t *testing.T, options ...func(*fleet.Options)) *fixture {
	t.Helper()
	testenv.Need(t, sourceEnv)
	scheme := testenv.Scheme()
	mgr := testenv.NewManager(t, sourceEnv.Config, testenv.ManagerOptions{Verbosity: 2, UncachedSecrets: true})
	ctx := mgr.Context()
	nodes := &recordingNodes{states: map[proxypod.TargetKey]vnode.TargetState{}, removed: map[proxypod.TargetKey]int{}}
	opts := fleettest.Options("src")
	for _, o := range options {
		o(&opts)
	}
	reg, err := fleet.New(opts, nodes)
	require.NoError(t, err)
	require.NoError(t, indexer.Register(ctx, mgr.GetFieldIndexer(), indexer.All...))
	require.NoError(t, reg.SetupWithManager(ctx, mgr))
	mgr.Run()
	src, err := client.New(sourceEnv.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	tgt, err := client.New(targetEnv.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	f := &fixture{source: src, target: tgt, registry: reg, nodes: nodes}
	f.ns = f.namespace(t, src, "registry-")
	// The test's Targets go when it ends: every later test's registry
	// reconciles every Target, and one left behind reaches the same
	// cluster (a DuplicateCluster for them all).
	t.Cleanup(func() {
		var list v1alpha1.TargetList
		if err := src.List(context.Background(), &list, client.InNamespace(f.ns)); err != nil {
			return
		}
		for i := range list.Items {
			forceDelete(t, src, &list.Items[i])
		}
	})
	return f
}

func (f *fixture) namespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	require.NoError(t, c.Create(context.Background(), ns))
	return ns.Name
}

func (f *fixture) putSecret(t *testing.T, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Data: map[string][]byte{"config": data}}
	if err := f.source.Create(ctx, s); apierrors.IsAlreadyExists(err) {
		err = f.source.Update(ctx, s)
		require.NoError(t, err)
	} else {
		require.NoError(t, err)
	}
}

func (f *fixture) createTarget(t *testing.T, name, secret string) {
	t.Helper()
	tg := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: secret}},
	}
	require.NoError(t, f.source.Create(context.Background(), tg))
}

// waitReady waits for the Target's Ready condition to have status and
// reason, and returns its message.
func (f *fixture) waitReady(t *testing.T, name string, status metav1.ConditionStatus, reason string) string {
	t.Helper()
	var last *metav1.Condition
	var tg v1alpha1.Target
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := f.source.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &tg); err != nil {
			return false, nil
		}
		last = meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
		return last != nil && last.Status == status && last.Reason == reason && last.ObservedGeneration == tg.Generation, nil
	})
	require.NoErrorf(t, err, "Target %s never became Ready=%s/%s; last condition: %+v", name, status, reason, last)
	assert.Falsef(t, tg.Status.VirtualNodeName != proxypod.NodeName(proxypod.TargetKey{Namespace: f.ns, Name: name}), "status.virtualNodeName = %q", tg.Status.VirtualNodeName)
	return last.Message
}

// ensureSummary creates the target's ClusterSummary as fleetlet there would.
func ensureSummary(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	cs := &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}
	if err := c.Create(ctx, cs); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

func TestTargetReadiness(t *testing.T) {
	f := start(t)
	ensureSummary(t, f.target)
	targetNS := f.namespace(t, f.target, "identity-")
	good := testenv.Kubeconfig(t, targetEnv.Config, targetNS, "")

	t.Run("secret missing, then created: reconnects live", func(t *testing.T) {
		f.createTarget(t, "late", "late-secret")
		msg := f.waitReady(t, "late", metav1.ConditionFalse, v1alpha1.ReasonKubeconfigSecretNotFound)
		assert.Truef(t, strings.Contains(msg, "late-secret"), "message %q does not name the Secret", msg)
		f.putSecret(t, "late-secret", good)
		f.waitReady(t, "late", metav1.ConditionTrue, v1alpha1.ReasonConnected)
		st, ok := f.nodes.get(proxypod.TargetKey{Namespace: f.ns, Name: "late"})
		assert.Falsef(t, !ok || !st.Ready || st.SourceName != "src", "virtual node state = %+v, %t", st, ok)
	})

	t.Run("unsafe kubeconfig is refused and never used", func(t *testing.T) {
		kc, err := clientcmd.Load(good)
		require.NoError(t, err)
		kc.AuthInfos["t"].Exec = &clientcmdapi.ExecConfig{Command: "/bin/touch", Args: []string{"/tmp/fleetlet-pwned"}, APIVersion: "client.authentication.k8s.io/v1"}
		data, err := clientcmd.Write(*kc)
		require.NoError(t, err)
		f.putSecret(t, "exec-secret", data)
		f.createTarget(t, "exec", "exec-secret")
		msg := f.waitReady(t, "exec", metav1.ConditionFalse, v1alpha1.ReasonBadKubeconfig)
		assert.Truef(t, strings.Contains(msg, "exec"), "message %q does not say exec was refused", msg)
		if _, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "exec"}); ok {
			assert.Fail(t, "a cluster connection exists for an unsafe kubeconfig")
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		kc, _ := clientcmd.Load(good)
		kc.Clusters["t"].Server = "https://127.0.0.1:1"
		data, _ := clientcmd.Write(*kc)
		f.putSecret(t, "down-secret", data)
		f.createTarget(t, "down", "down-secret")
		msg := f.waitReady(t, "down", metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
		// A namespace's users read it: the kind of failure, not the address.
		assert.Falsef(t, !strings.Contains(msg, "connection refused") || strings.Contains(msg, "127.0.0.1"), "message %q: want the kind of failure without the address", msg)
	})

	t.Run("a certificate for another name", func(t *testing.T) {
		kc, _ := clientcmd.Load(good)
		kc.Clusters["t"].TLSServerName = "not-the-target.example"
		data, _ := clientcmd.Write(*kc)
		f.putSecret(t, "tls-secret", data)
		f.createTarget(t, "tls", "tls-secret")
		msg := f.waitReady(t, "tls", metav1.ConditionFalse, v1alpha1.ReasonTLS)
		assert.Falsef(t, strings.Contains(msg, "127.0.0.1"), "message %q names the address", msg)
	})

	t.Run("forbidden", func(t *testing.T) {
		user, err := targetEnv.ControlPlane.AddUser(envtest.User{Name: "nobody"}, nil)
		require.NoError(t, err)
		f.putSecret(t, "nobody-secret", testenv.Kubeconfig(t, user.Config(), targetNS, ""))
		f.createTarget(t, "nobody", "nobody-secret")
		f.waitReady(t, "nobody", metav1.ConditionFalse, v1alpha1.ReasonForbidden)
	})

	t.Run("secret change reconnects live", func(t *testing.T) {
		f.putSecret(t, "nobody-secret", good)
		f.waitReady(t, "nobody", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	})

	t.Run("heartbeat lease renewed in the identity's namespace", func(t *testing.T) {
		var first, second coordinationv1.Lease
		key := client.ObjectKey{Namespace: targetNS, Name: fleet.HeartbeatLeaseName("src")}
		testenv.EventuallyTrue(t, waitTimeout, "heartbeat lease", func(ctx context.Context) bool { return f.target.Get(ctx, key, &first) == nil })
		testenv.EventuallyTrue(t, waitTimeout, "heartbeat renewal", func(ctx context.Context) bool {
			return f.target.Get(ctx, key, &second) == nil && second.Spec.RenewTime.After(first.Spec.RenewTime.Time)
		})
		assert.Falsef(t, *second.Spec.HolderIdentity != "src", "holder = %q", *second.Spec.HolderIdentity)
	})

	t.Run("deleting one target stops only its machinery", func(t *testing.T) {
		require.NoError(t, f.source.Delete(context.Background(), &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "late"}}))
		lateKey := proxypod.TargetKey{Namespace: f.ns, Name: "late"}
		testenv.EventuallyTrue(t, waitTimeout, "virtual node removal", func(context.Context) bool {
			f.nodes.mu.Lock()
			defer f.nodes.mu.Unlock()
			return f.nodes.removed[lateKey] > 0
		})
		if _, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "late"}); ok {
			assert.Fail(t, "the deleted target's connection is still live")
		}
		other, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "nobody"})
		require.True(t, ok, "the other target's connection is gone")
		before := other.Health().LastProbe
		testenv.EventuallyTrue(t, waitTimeout, "the other target to keep being probed", func(context.Context) bool { return other.Health().LastProbe.After(before) })
		if st, ok := f.nodes.get(proxypod.TargetKey{Namespace: f.ns, Name: "nobody"}); !ok || !st.Ready {
			assert.Failf(t, "the other target's node is not Ready", "the other target's node state = %+v, %t", st, ok)
		}
	})
}

func TestFleetletMissing(t *testing.T) {
	f := start(t)
	// A target cluster where fleetlet's CRDs exist but its ClusterSummary
	// does not: fleetlet is not running there. Use a fresh context namespace
	// and remove the summary for the duration of the test.
	ctx := context.Background()
	_ = f.target.Delete(ctx, &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}})
	t.Cleanup(func() { ensureSummary(t, f.target) })
	f.putSecret(t, "s", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "bare", "s")
	msg := f.waitReady(t, "bare", metav1.ConditionFalse, v1alpha1.ReasonFleetletMissing)
	assert.Truef(t, strings.Contains(msg, "install"), "message %q gives no hint", msg)
	ensureSummary(t, f.target)
	f.waitReady(t, "bare", metav1.ConditionTrue, v1alpha1.ReasonConnected)
}

func TestMetricsFollowTargets(t *testing.T) {
	f := start(t)
	ensureSummary(t, f.target)
	f.putSecret(t, "m", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "measured", "m")
	f.waitReady(t, "measured", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	cluster := f.ns + "/measured"
	testenv.EventuallyTrue(t, waitTimeout, "fleetlet_target_ready=1", func(context.Context) bool { return gauge(t, "fleetlet_target_ready", cluster) == 1 })
	require.NoError(t, f.source.Delete(context.Background(), &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "measured"}}))
	testenv.EventuallyTrue(t, waitTimeout, "the series of a deleted target to go", func(context.Context) bool { return gauge(t, "fleetlet_target_ready", cluster) == -1 })
}

// gauge reads a gauge of the registry for a cluster; -1 when absent.
func gauge(t *testing.T, name, cluster string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// One failed probe is not an outage (a loaded apiserver answers late): a
// Ready target stays Ready until ProbeFailureThreshold probes in a row have
// failed, then turns NotReady, and Ready again at the first good probe.
// Before: the first failure flipped it, which stopped every election and
// status copy for that target until the next good probe.
func TestProbeFailureThreshold(t *testing.T) {
	f := start(t, func(o *fleet.Options) { o.ProbeFailureThreshold = 6 })
	ensureSummary(t, f.target)
	f.putSecret(t, "flaky-secret", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
	f.createTarget(t, "flaky", "flaky-secret")
	f.waitReady(t, "flaky", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	cl, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "flaky"})
	require.True(t, ok, "no connection for the Target")
	cluster := f.ns + "/flaky"
	before := probes(t, cluster, v1alpha1.ReasonFleetletMissing)

	// Every probe fails from now on (the ClusterSummary is what it reads).
	require.NoError(t, f.target.Delete(context.Background(), &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}))
	t.Cleanup(func() { ensureSummary(t, f.target) })
	testenv.EventuallyTrue(t, waitTimeout, "three failed probes", func(context.Context) bool { return probes(t, cluster, v1alpha1.ReasonFleetletMissing) >= before+3 })
	h := cl.Health()
	assert.True(t, h.Ready, "the target turned NotReady after 3 failed probes of 6 allowed: %+v", h)
	assert.Equal(t, 1.0, gauge(t, "fleetlet_target_ready", cluster), "fleetlet_target_ready")

	f.waitReady(t, "flaky", metav1.ConditionFalse, v1alpha1.ReasonFleetletMissing)
	assert.GreaterOrEqual(t, probes(t, cluster, v1alpha1.ReasonFleetletMissing), before+6, "NotReady before 6 failed probes")
	ensureSummary(t, f.target)
	f.waitReady(t, "flaky", metav1.ConditionTrue, v1alpha1.ReasonConnected)
}

// probes reads fleetlet_target_probes_total for a cluster and a result.
func probes(t *testing.T, cluster, result string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "fleetlet_target_probes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A chaperon cache's first list reaches the ChaperonSource before the cache
// counts as synced: a reader that skips an unsynced cache (the elector
// deleting losers) would never be called back. Once synced, every chaperon
// is delivered once more. Before: a loser seen only during the first list
// of a restarted manager was never deleted (e2e
// TestCrashesMidElectionNeverDoubleDelegates: "the losing candidates to
// be gone").
func TestChaperonsDeliveredOnceSynced(t *testing.T) {
	f := start(t)
	q := &syncedQueue{TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()),
		registry: f.registry, key: proxypod.TargetKey{Namespace: f.ns, Name: "t"}, synced: map[string]int{}}
	t.Cleanup(q.ShutDown)
	require.NoError(t, f.registry.ChaperonSource(nil).Start(context.Background(), q))
	ctx := context.Background()
	ensureSummary(t, f.target)
	require.NoError(t, f.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	names := []string{"a-1", "b-2", "c-3"}
	for _, n := range names {
		require.NoError(t, f.target.Create(ctx, &v1alpha1.PodChaperon{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: n, Labels: map[string]string{v1alpha1.LabelParentCluster: "src", v1alpha1.LabelParentUID: "u-" + n},
				Annotations: map[string]string{v1alpha1.AnnotationParentName: n, v1alpha1.AnnotationParentNamespace: f.ns}},
			Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
		}))
	}
	f.putSecret(t, "s", testenv.Kubeconfig(t, targetEnv.Config, f.ns, ""))
	f.createTarget(t, "t", "s") // a namespaced Target watches its namespace from the start
	testenv.EventuallyTrue(t, waitTimeout, "every chaperon's proxy enqueued while the cache is synced", func(context.Context) bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, n := range names {
			if q.synced[n] == 0 {
				return false
			}
		}
		return true
	})
}

// A target's chaperon cache keeps no managed fields: nothing reads who wrote
// which field, and they are most of a cached chaperon's, pod's or Event's
// size. Before: every cached object kept them.
func TestChaperonCacheKeepsNoManagedFields(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	ensureSummary(t, f.target)
	require.NoError(t, f.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	pc := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a-1", Labels: map[string]string{v1alpha1.LabelParentCluster: "src", v1alpha1.LabelParentUID: "u-a"},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: "a", v1alpha1.AnnotationParentNamespace: f.ns}},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "1d"}}},
			NodeSelector: map[string]string{"disk": "ssd"},
		}}},
	}
	require.NoError(t, f.target.Create(ctx, pc))
	require.NotEmpty(t, pc.ManagedFields, "the API server wrote no managed fields: the check below would prove nothing")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a-1", Labels: pc.Labels, Annotations: pc.Annotations},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}},
	}
	require.NoError(t, f.target.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}
	require.NoError(t, f.target.Status().Update(ctx, pod))
	f.putSecret(t, "s", testenv.Kubeconfig(t, targetEnv.Config, f.ns, ""))
	f.createTarget(t, "t", "s") // a namespaced Target watches its namespace from the start
	var cached v1alpha1.PodChaperon
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon in the synced cache", func(ctx context.Context) bool {
		cl, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "t"})
		if !ok {
			return false
		}
		r, synced := cl.ChaperonCache(f.ns)
		return synced && r.Get(ctx, client.ObjectKeyFromObject(pc), &cached) == nil
	})
	assert.Empty(t, cached.ManagedFields, "the cached chaperon's managed fields")
	// Its template as the source reads it (proxy.TemplateAsRead).
	assert.Equal(t, proxypod.TemplateAsRead(&pc.Spec.Template), cached.Spec.Template, "the cached chaperon's template")
	assert.Empty(t, cached.Spec.Template.Spec.NodeSelector, "the cached template's node selector")

	// Its pod: metadata and status, and of its spec only where it runs.
	// Before: the whole pod, its spec a second copy of the template.
	cl, _ := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "t"})
	var cachedPod corev1.Pod
	testenv.EventuallyTrue(t, waitTimeout, "the pod Running in the cache", func(ctx context.Context) bool {
		r, _ := cl.ChaperonCache(f.ns)
		return r.Get(ctx, client.ObjectKeyFromObject(pod), &cachedPod) == nil && cachedPod.Status.Phase == corev1.PodRunning
	})
	assert.Empty(t, cachedPod.ManagedFields, "the cached pod's managed fields")
	assert.Empty(t, cachedPod.Spec.Containers, "the cached pod's containers")
	assert.Equal(t, "node-1", cachedPod.Spec.NodeName, "where the cached pod runs")
	assert.Equal(t, "10.0.0.7", cachedPod.Status.PodIP, "the cached pod's status")
	assert.Equal(t, pc.Labels, cachedPod.Labels, "the cached pod's labels")
}

// syncedQueue counts, per proxy, the requests added while the target's
// chaperon cache of its namespace had synced.
type syncedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	registry *fleet.Registry
	key      proxypod.TargetKey

	mu     sync.Mutex
	synced map[string]int
}

func (q *syncedQueue) Add(r reconcile.Request) {
	if cl, ok := q.registry.Get(q.key); ok {
		if _, synced := cl.ChaperonCache(r.Namespace); synced {
			q.mu.Lock()
			q.synced[r.Name]++
			q.mu.Unlock()
		}
	}
	q.TypedRateLimitingInterface.Add(r)
}

// waitTimeout only ends a test that would hang.
const waitTimeout = 30 * time.Second

// With --allowed-target-hosts, a Target whose kubeconfig names another host
// is refused (HostNotAllowed) and never contacted; one that names an
// allowed host connects. Before: any https host was contacted.
func TestAllowedTargetHosts(t *testing.T) {
	// One registry at a time: each reconciles every Target of the source.
	t.Run("another host is refused", func(t *testing.T) {
		allowed, err := fleet.ParseHostAllowList([]string{"*.clusters.example.com"})
		require.NoError(t, err)
		f := start(t, func(o *fleet.Options) { o.AllowedHosts = allowed })
		ensureSummary(t, f.target)
		f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
		f.createTarget(t, "elsewhere", "c")
		msg := f.waitReady(t, "elsewhere", metav1.ConditionFalse, v1alpha1.ReasonHostNotAllowed)
		require.Contains(t, msg, "--allowed-target-hosts")
		_, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "elsewhere"})
		assert.False(t, ok, "a Target naming a host not allowed is connected")
	})
	t.Run("an allowed host connects", func(t *testing.T) {
		loopback, err := fleet.ParseHostAllowList([]string{"127.0.0.0/8"})
		require.NoError(t, err)
		f := start(t, func(o *fleet.Options) { o.AllowedHosts = loopback })
		ensureSummary(t, f.target)
		f.putSecret(t, "c", testenv.Kubeconfig(t, targetEnv.Config, "default", ""))
		f.createTarget(t, "here", "c")
		f.waitReady(t, "here", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	})
}

// With --secret-namespaces, a Target whose kubeconfig Secret lives in a
// namespace not listed is refused without a read, saying which setting
// decides; a ClusterTarget whose Secret is in a listed namespace connects.
func TestSecretNamespaces(t *testing.T) {
	ctx := context.Background()
	testenv.Need(t, sourceEnv)
	admin, err := client.New(sourceEnv.Config, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	listed := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "secrets-"}}
	require.NoError(t, admin.Create(ctx, listed))
	f := start(t, func(o *fleet.Options) { o.SecretNamespaces = []string{"fleetlet-system", listed.Name} })
	ensureSummary(t, f.target)
	kubeconfig := testenv.Kubeconfig(t, targetEnv.Config, "default", "")

	f.putSecret(t, "c", kubeconfig)
	f.createTarget(t, "unlisted", "c")
	msg := f.waitReady(t, "unlisted", metav1.ConditionFalse, v1alpha1.ReasonKubeconfigSecretNotFound)
	require.Contains(t, msg, "--secret-namespaces")
	if _, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "unlisted"}); ok {
		assert.Fail(t, "a Target whose Secret is in a namespace not listed is connected")
	}

	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: listed.Name, Name: "c"}, Data: map[string][]byte{"config": kubeconfig}}
	require.NoError(t, admin.Create(ctx, s))
	ct := &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "listed-"},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Namespace: listed.Name, Name: "c"}},
	}
	require.NoError(t, admin.Create(ctx, ct))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ct) })
	testenv.EventuallyTrue(t, waitTimeout, "the ClusterTarget whose Secret is in a listed namespace connected", func(context.Context) bool {
		_, ok := f.registry.Get(proxypod.TargetKey{Name: ct.Name})
		return ok
	})
}
