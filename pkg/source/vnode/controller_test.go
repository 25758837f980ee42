package vnode

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Short intervals keep the integration tests quick.
const (
	testLeaseDuration  = 2 * time.Second
	testRenewInterval  = 200 * time.Millisecond
	testStatusInterval = 500 * time.Millisecond
	// testResourceInterval: how long a held-back change of a node's
	// resources waits in most tests.
	testResourceInterval = 500 * time.Millisecond
	waitTimeout          = 20 * time.Second
	pollInterval         = 50 * time.Millisecond
)

type fixture struct {
	t       *testing.T
	ctx     context.Context
	cs      kubernetes.Interface
	c       *Controller
	kubelet *fakeKubelet
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

// startController runs a Controller against the test control plane until
// the test ends (or stop).
func startController(t *testing.T) *fixture {
	t.Helper()
	testenv.Need(t, env)
	return startControllerOn(t, env.Config)
}

// startControllerOn runs a Controller whose client reaches the test control
// plane through cfg; the fixture's own client does not.
func startControllerOn(t *testing.T, cfg *rest.Config, opts ...func(*Config)) *fixture {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	controllerClient, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	kubelet := &fakeKubelet{next: 10250, served: map[string]context.Context{}}
	config := Config{
		Client:           controllerClient,
		LeaseDuration:    testLeaseDuration,
		RenewInterval:    testRenewInterval,
		StatusInterval:   testStatusInterval,
		ResourceInterval: testResourceInterval,
		Kubelet:          kubelet,
		NodeAddress:      "10.1.2.3",
		Logger:           testLogger(t),
	}
	for _, o := range opts {
		o(&config)
	}
	c, err := NewController(config)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{t: t, ctx: context.Background(), cs: cs, c: c, kubelet: kubelet, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- c.Run(ctx) }()
	t.Cleanup(f.stop)
	return f
}

// fakeKubelet plays the kubelet API server: it hands out ports in order
// and keeps each node's serving context.
type fakeKubelet struct {
	mu     sync.Mutex
	next   int32
	served map[string]context.Context
	ports  map[string]int32
}

func (k *fakeKubelet) Serve(ctx context.Context, node string) (int32, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ports == nil {
		k.ports = map[string]int32{}
	}
	k.served[node] = ctx
	k.ports[node] = k.next
	k.next++
	return k.ports[node], nil
}

// servedCtx is the context node's kubelet API is served with, or nil.
func (k *fakeKubelet) servedCtx(node string) (context.Context, int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served[node], k.ports[node]
}

// stop cancels Run and waits for it to return.
func (f *fixture) stop() {
	f.t.Helper()
	f.once.Do(func() {
		f.cancel()
		select {
		case err := <-f.done:
			assert.NoError(f.t, err, "Run")
		case <-time.After(waitTimeout):
			require.FailNow(f.t, "Run did not return after its context ended")
		}
	})
}

// testLogger logs through t, at V(1) and below.
func testLogger(t *testing.T) logr.Logger {
	return logr.New(&tLogSink{t: t})
}

type tLogSink struct {
	t      *testing.T
	name   string
	values []any
}

func (s *tLogSink) Init(logr.RuntimeInfo)  {}
func (s *tLogSink) Enabled(level int) bool { return level <= 1 }
func (s *tLogSink) Info(level int, msg string, kv ...any) {
	s.t.Logf("%s: %s %v", s.name, msg, append(append([]any{}, s.values...), kv...))
}
func (s *tLogSink) Error(err error, msg string, kv ...any) {
	s.t.Logf("%s: ERROR %s: %v %v", s.name, msg, err, append(append([]any{}, s.values...), kv...))
}
func (s *tLogSink) WithValues(kv ...any) logr.LogSink {
	return &tLogSink{t: s.t, name: s.name, values: append(append([]any{}, s.values...), kv...)}
}
func (s *tLogSink) WithName(n string) logr.LogSink {
	return &tLogSink{t: s.t, name: s.name + "/" + n, values: s.values}
}

// uniqueKey returns a ClusterTarget key no other test uses.
func uniqueKey(base string) proxy.TargetKey {
	return proxy.TargetKey{Name: base + "-" + utilrand.String(5)}
}

// waitFor polls cond until it holds, failing the test after waitTimeout
// with cond's last explanation.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	require.NoError(t, err, "waiting for %s (last: %s)", what, last)
}

func (f *fixture) node(name string) (*corev1.Node, error) {
	return f.cs.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
}

func (f *fixture) lease(name string) (*coordinationv1.Lease, error) {
	return f.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(f.ctx, name, metav1.GetOptions{})
}

func hasTaint(n *corev1.Node, want corev1.Taint) bool {
	for _, t := range n.Spec.Taints {
		if t.MatchTaint(&want) && t.Value == want.Value {
			return true
		}
	}
	return false
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// waitNode waits until the node exists and pred holds for it.
func (f *fixture) waitNode(name, what string, pred func(*corev1.Node) (bool, string)) *corev1.Node {
	f.t.Helper()
	var n *corev1.Node
	waitFor(f.t, fmt.Sprintf("node %s: %s", name, what), func() (bool, string) {
		var err error
		if n, err = f.node(name); err != nil {
			return false, err.Error()
		}
		return pred(n)
	})
	return n
}

func isReady(want corev1.ConditionStatus, reason string) func(*corev1.Node) (bool, string) {
	return func(n *corev1.Node) (bool, string) {
		c := readyCondition(n)
		return c.Status == want && (reason == "" || c.Reason == reason), fmt.Sprintf("Ready=%s reason=%s", c.Status, c.Reason)
	}
}

func allocatableIs(name corev1.ResourceName, want string) func(*corev1.Node) (bool, string) {
	q := resource.MustParse(want)
	return func(n *corev1.Node) (bool, string) {
		got := n.Status.Allocatable[name]
		return got.Cmp(q) == 0, fmt.Sprintf("allocatable %s = %s", name, got.String())
	}
}

// renewTime returns the lease's renew time, zero when it has none.
func (f *fixture) renewTime(name string) (time.Time, error) {
	l, err := f.lease(name)
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}, nil
	}
	return l.Spec.RenewTime.Time, nil
}

// waitLeaseRenewed waits until the node's lease is renewed after it was
// last seen (twice, to be sure renewals go on).
func (f *fixture) waitLeaseRenewed(name string) {
	f.t.Helper()
	for range 2 {
		before, _ := f.renewTime(name)
		waitFor(f.t, "lease "+name+" renewed", func() (bool, string) {
			now, err := f.renewTime(name)
			if err != nil {
				return false, err.Error()
			}
			return now.After(before), fmt.Sprintf("renewTime %s, was %s", now, before)
		})
	}
}

func targetState(key proxy.TargetKey) TargetState {
	s := TargetState{
		Key:        key,
		Ready:      true,
		Reason:     v1alpha1.ReasonConnected,
		SourceName: "source-1",
		Summary: newSummary().
			capacity(rl("cpu", "8", "memory", "16Gi", "pods", "110")).
			allocatable(rl("cpu", "4", "memory", "8Gi", "pods", "110")).
			requested(rl("cpu", "1500m", "memory", "2Gi", "pods", "10")).
			bySource("source-1", rl("cpu", "500m", "memory", "1Gi", "pods", "2")).obj(),
	}
	s.Summary.Labels = map[string]string{"topology.kubernetes.io/region": "eu-1", "tier": "gold"}
	return s
}

func TestUpsertCreatesReadyNodeWithRenewedLease(t *testing.T) {
	f := startController(t)
	key := uniqueKey("ready")
	name := proxy.NodeName(key)
	f.c.Upsert(f.ctx, targetState(key))

	n := f.waitNode(name, "Ready", isReady(corev1.ConditionTrue, ReasonTargetReady))
	wantLabels := map[string]string{
		"type":                             "virtual-kubelet",
		"kubernetes.io/role":               "cluster",
		"kubernetes.io/hostname":           name,
		"kubernetes.io/os":                 "linux",
		"multicluster.fleetlet.io/cluster": key.Name,
		"target.multicluster.fleetlet.io/topology.kubernetes.io.region": "eu-1",
		"target.multicluster.fleetlet.io/tier":                          "gold",
	}
	assert.Empty(t, cmp.Diff(wantLabels, n.Labels), "labels (-want,+got)")
	// Admission adds node.kubernetes.io/not-ready at creation, and the node
	// lifecycle controller (not running here) would remove it.
	assert.Truef(t, hasTaint(n, v1alpha1.VirtualNodeTaint()), "taints = %v, want %v among them", n.Spec.Taints, v1alpha1.VirtualNodeTaint())
	// No proxies yet: 4 - 1.5 = 2.5 cpu, 8Gi - 2Gi = 6Gi, 110 - 10 = 100 pods.
	assert.Empty(t, cmp.Diff(rl("cpu", "2500m", "memory", "6Gi", "pods", "100"), n.Status.Allocatable, quantityEqual), "allocatable (-want,+got)")
	assert.Empty(t, cmp.Diff(rl("cpu", "8", "memory", "16Gi", "pods", "110"), n.Status.Capacity, quantityEqual), "capacity (-want,+got)")
	assert.Equal(t, int32(10250), n.Status.DaemonEndpoints.KubeletEndpoint.Port, "kubelet port")
	wantAddrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}}
	assert.Empty(t, cmp.Diff(wantAddrs, n.Status.Addresses), "addresses (-want,+got)")
	for _, typ := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		found := false
		for _, c := range n.Status.Conditions {
			if c.Type == typ {
				found = true
				assert.Equal(t, corev1.ConditionFalse, c.Status, "%s", typ)
			}
		}
		assert.Truef(t, found, "condition %s missing", typ)
	}

	var l *coordinationv1.Lease
	waitFor(t, "lease "+name, func() (bool, string) {
		var err error
		l, err = f.lease(name)
		return err == nil, fmt.Sprint(err)
	})
	assert.Falsef(t, l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != name, "lease holder = %v, want %s", l.Spec.HolderIdentity, name)
	assert.Falsef(t, l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 2, "lease duration = %v, want 2", l.Spec.LeaseDurationSeconds)
	f.waitLeaseRenewed(name)
	l, err := f.lease(name)
	require.NoError(t, err)
	assert.Falsef(t, len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID, "lease owner references = %+v, want the node %s", l.OwnerReferences, n.UID)
}

func TestTargetNotReadyKeepsRenewingLease(t *testing.T) {
	f := startController(t)
	key := uniqueKey("down")
	name := proxy.NodeName(key)
	s := targetState(key)
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "Ready", isReady(corev1.ConditionTrue, ReasonTargetReady))

	s.Ready, s.Partitioned, s.Reason, s.Message = false, true, v1alpha1.ReasonUnreachable, "dial tcp 10.9.9.9:6443: connect: connection refused"
	f.c.Upsert(f.ctx, s)
	n := f.waitNode(name, "Ready=False", isReady(corev1.ConditionFalse, v1alpha1.ReasonUnreachable))
	assert.Equal(t, s.Message, readyCondition(n).Message, "Ready message")
	// The lease tells that fleetlet runs: it goes on while the target is down.
	f.waitLeaseRenewed(name)
	assert.Equal(t, corev1.ConditionFalse, readyCondition(n).Status, "Ready while the target is down")

	s.Ready, s.Partitioned, s.Reason, s.Message = true, false, v1alpha1.ReasonConnected, ""
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "Ready again", isReady(corev1.ConditionTrue, ReasonTargetReady))
}

// ensureNamespace creates a namespace for the test with the default
// ServiceAccount pods need (no controller manager makes it here).
func (f *fixture) ensureNamespace() string {
	f.t.Helper()
	ns, err := f.cs.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vnode-"}}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	_, err = f.cs.CoreV1().ServiceAccounts(ns.Name).Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(f.t, err)
	}
	return ns.Name
}

func (f *fixture) createPod(ns string, p *corev1.Pod) *corev1.Pod {
	f.t.Helper()
	p = p.DeepCopy()
	p.Namespace, p.UID = ns, ""
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Image = "registry.k8s.io/pause:3.10"
	}
	got, err := f.cs.CoreV1().Pods(ns).Create(f.ctx, p, metav1.CreateOptions{})
	require.NoError(f.t, err)
	return got
}

// fullTarget registers a target that is full: only proxies make room on its
// node, whose name it returns with its key.
func (f *fixture) fullTarget(base string) (proxy.TargetKey, string) {
	key := uniqueKey(base)
	name := proxy.NodeName(key)
	s := targetState(key)
	s.Summary.Allocatable = rl("cpu", "2", "memory", "4Gi", "pods", "10")
	s.Summary.Requested = rl("cpu", "2", "memory", "4Gi", "pods", "10")
	s.Summary.RequestedBySource = nil
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "full", allocatableIs(corev1.ResourceCPU, "0"))
	return key, name
}

// Each proxy pinned to a virtual node raises its allocatable with a status
// patch; the patch is computed against the node as the last one left it,
// not read again each time. Before: a GET of the node before every patch.
func TestStatusPatchesDoNotReadTheNodeEachTime(t *testing.T) {
	testenv.Need(t, env)
	var gets, patches atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if strings.HasPrefix(req.URL.Path, "/api/v1/nodes/") {
				switch {
				case req.Method == http.MethodGet:
					gets.Add(1)
				case req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/status"):
					patches.Add(1)
				}
			}
			return rt.RoundTrip(req)
		})
	}
	f := startControllerOn(t, cfg)
	_, name := f.fullTarget("reads")
	ns := f.ensureNamespace()
	gets0, patches0 := gets.Load(), patches.Load()
	const n = 8
	for i := range n {
		p := newPod(fmt.Sprintf("pinned-%d", i)).container("c", rl("cpu", "100m")).pinnedTo(name).obj()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		f.createPod(ns, p)
		f.waitNode(name, "the proxy counted", allocatableIs(corev1.ResourcePods, fmt.Sprint(i+1)))
	}
	g, p := gets.Load()-gets0, patches.Load()-patches0
	t.Logf("%d pinned proxies: %d status patches, %d reads of the node", n, p, g)
	require.GreaterOrEqual(t, p, int64(n), "fewer status patches than proxies")
	assert.LessOrEqualf(t, g, p/4, "%d reads of the node for %d status patches", g, p)
}

// nodeStatusPatches counts the status patches of virtual nodes made
// through the config it returns.
func nodeStatusPatches() (*rest.Config, *atomic.Int64) {
	var patches atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && strings.HasPrefix(req.URL.Path, "/api/v1/nodes/") && strings.HasSuffix(req.URL.Path, "/status") {
				patches.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	return cfg, &patches
}

// A change of a virtual node's resources that its proxies do not need
// waits for the resource interval; one they need (a proxy more than the
// written node has room for) is written at once. Before: a status patch
// for each proxy pinned to the node, room or not.
func TestResourceChangesWaitWhileTheNodeHasRoomForItsProxies(t *testing.T) {
	testenv.Need(t, env)
	cfg, patches := nodeStatusPatches()
	const interval = 10 * time.Second
	f := startControllerOn(t, cfg, func(c *Config) { c.ResourceInterval, c.StatusInterval = interval, time.Minute })
	key := uniqueKey("settle")
	name := proxy.NodeName(key)
	s := targetState(key)
	s.Summary.Allocatable = rl("cpu", "2", "memory", "4Gi", "pods", "10")
	s.Summary.Requested = rl("cpu", "1700m", "pods", "0")
	s.Summary.RequestedBySource = nil
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "300m free", allocatableIs(corev1.ResourceCPU, "300m"))
	ns := f.ensureNamespace()

	// 300m free: the fourth proxy of 100m needs a raise (to 700m), and
	// the eighth another (to 1100m); the others fit what is written.
	before := patches.Load()
	start := time.Now()
	const n = 8
	for i := range n {
		p := newPod(fmt.Sprintf("pinned-%d", i)).container("c", rl("cpu", "100m")).pinnedTo(name).obj()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
		f.createPod(ns, p)
		want := resource.MustParse(fmt.Sprintf("%dm", 100*(i+1)))
		f.waitNode(name, "room for every pinned proxy", func(n *corev1.Node) (bool, string) {
			got := n.Status.Allocatable[corev1.ResourceCPU]
			return got.Cmp(want) >= 0, fmt.Sprintf("allocatable cpu %s, the pinned proxies request %s", got.String(), want.String())
		})
	}
	took := time.Since(start)
	written := patches.Load() - before
	t.Logf("%d pinned proxies in %s: %d status patches", n, took, written)
	if took < interval {
		assert.LessOrEqualf(t, written, int64(3), "%d status patches for %d pinned proxies, 2 of which needed a raise", written, n)
	}
	f.waitNode(name, "the raise the eighth proxy needed", allocatableIs(corev1.ResourceCPU, "1100m"))

	// The target frees 500m: nobody needs it now, so it is written within
	// the interval, not at once.
	before = patches.Load()
	s.Summary.Requested = rl("cpu", "1200m", "pods", "0")
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "the freed room, within the interval", allocatableIs(corev1.ResourceCPU, "1600m"))
	assert.Equal(t, int64(1), patches.Load()-before, "status patches for one change of the summary")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestProxiesRaiseAllocatable(t *testing.T) {
	f := startController(t)
	_, name := f.fullTarget("proxies")

	ns := f.ensureNamespace()
	pinned := newPod("pinned").container("c", rl("cpu", "1500m", "memory", "1Gi")).pinnedTo(name).obj()
	pinned.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
	pinned = f.createPod(ns, pinned)
	f.waitNode(name, "pinned proxy counted", allocatableIs(corev1.ResourceCPU, "1500m"))
	n := f.waitNode(name, "pinned proxy counted", allocatableIs(corev1.ResourcePods, "1"))
	mem := n.Status.Allocatable[corev1.ResourceMemory]
	assert.Zerof(t, mem.Cmp(resource.MustParse("1Gi")), "allocatable memory = %s, want 1Gi", mem.String())
	// A pod pinned elsewhere or not a proxy does not count.
	notProxy := newPod("not-a-proxy").container("c", rl("cpu", "4")).obj()
	notProxy.Spec.NodeSelector = map[string]string{v1alpha1.LabelHostname: name}
	f.createPod(ns, notProxy)
	f.createPod(ns, newPod("elsewhere").container("c", rl("cpu", "4")).pinnedTo("fleetlet-elsewhere").obj())

	// A pod bound to the node counts too.
	f.createPod(ns, newPod("bound").container("c", rl("cpu", "500m")).boundTo(name).obj())
	f.waitNode(name, "bound pod counted", allocatableIs(corev1.ResourceCPU, "2"))
	f.waitNode(name, "bound pod counted", allocatableIs(corev1.ResourcePods, "2"))

	// Binding the pinned proxy moves it from one watch to the other: the
	// node never shows less than both pods in between.
	w, err := f.cs.CoreV1().Nodes().Watch(f.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(t, err)
	defer w.Stop()
	_, err = f.cs.CoreV1().Pods(ns).Patch(f.ctx, pinned.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	err = f.cs.CoreV1().Pods(ns).Bind(f.ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pinned.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: name},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	deadline := time.After(time.Second)
	two := resource.MustParse("2")
watching:
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				continue
			}
			got := ev.Object.(*corev1.Node).Status.Allocatable[corev1.ResourceCPU]
			assert.Falsef(t, got.Cmp(two) < 0, "allocatable cpu dropped to %s while the pinned proxy was being bound", got.String())
		case <-deadline:
			break watching
		}
	}

	// A finished pod stops counting.
	bound, err := f.cs.CoreV1().Pods(ns).Get(f.ctx, pinned.Name, metav1.GetOptions{})
	require.NoError(t, err)
	bound.Status.Phase = corev1.PodSucceeded
	_, err = f.cs.CoreV1().Pods(ns).UpdateStatus(f.ctx, bound, metav1.UpdateOptions{})
	require.NoError(t, err)
	f.waitNode(name, "finished pod not counted", allocatableIs(corev1.ResourceCPU, "500m"))
	f.waitNode(name, "finished pod not counted", allocatableIs(corev1.ResourcePods, "1"))
}

func TestOwnedLabelsFollowTargetOthersStay(t *testing.T) {
	f := startController(t)
	key := uniqueKey("labels")
	name := proxy.NodeName(key)
	s := targetState(key)
	f.c.Upsert(f.ctx, s)
	f.waitNode(name, "tier label", func(n *corev1.Node) (bool, string) {
		return n.Labels["target.multicluster.fleetlet.io/tier"] == "gold", fmt.Sprint(n.Labels)
	})

	// A user labels, taints and cordons the node.
	maintenance := corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}
	// (taints are replaced as a whole, as kubectl taint does)
	patch := `{"metadata":{"labels":{"team":"blue"}},"spec":{"unschedulable":true,"taints":[` +
		`{"key":"virtual-kubelet.io/provider","value":"fleetlet","effect":"NoSchedule"},{"key":"maintenance","effect":"NoSchedule"}]}}`
	_, err := f.cs.CoreV1().Nodes().Patch(f.ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)

	// The target stops sharing tier and moves region.
	s.Summary.Labels = map[string]string{"topology.kubernetes.io/region": "us-2"}
	f.c.Upsert(f.ctx, s)
	n := f.waitNode(name, "labels updated", func(n *corev1.Node) (bool, string) {
		_, tier := n.Labels["target.multicluster.fleetlet.io/tier"]
		return !tier && n.Labels["target.multicluster.fleetlet.io/topology.kubernetes.io.region"] == "us-2", fmt.Sprint(n.Labels)
	})
	assert.Equal(t, "blue", n.Labels["team"], "the user's label is gone: %v", n.Labels)
	assert.Falsef(t, !n.Spec.Unschedulable || !hasTaint(n, maintenance) || !hasTaint(n, v1alpha1.VirtualNodeTaint()), "the user's cordon or taint, or ours, is gone: unschedulable=%v taints=%v", n.Spec.Unschedulable, n.Spec.Taints)
	// A status rewrite later changes nothing of that.
	time.Sleep(2 * testStatusInterval)
	n, err = f.node(name)
	require.NoError(t, err)
	assert.Falsef(t, n.Labels["team"] != "blue" || !n.Spec.Unschedulable || !hasTaint(n, maintenance), "the user's changes did not survive a status update: labels=%v unschedulable=%v taints=%v", n.Labels, n.Spec.Unschedulable, n.Spec.Taints)
}

func TestRemoveDeletesNodeAndLease(t *testing.T) {
	f := startController(t)
	key := uniqueKey("removed")
	name := proxy.NodeName(key)
	f.c.Upsert(f.ctx, targetState(key))
	f.waitNode(name, "Ready", isReady(corev1.ConditionTrue, ""))
	waitFor(t, "lease", func() (bool, string) {
		_, err := f.lease(name)
		return err == nil, fmt.Sprint(err)
	})

	require.NoError(t, f.c.Remove(f.ctx, key))
	_, err := f.node(name)
	assert.Truef(t, apierrors.IsNotFound(err), "node after Remove: %v, want NotFound", err)
	_, err = f.lease(name)
	assert.Truef(t, apierrors.IsNotFound(err), "lease after Remove: %v, want NotFound", err)
	// Nothing brings them back: the node controller is stopped.
	time.Sleep(3 * testRenewInterval)
	_, err = f.node(name)
	assert.Truef(t, apierrors.IsNotFound(err), "node some time after Remove: %v, want NotFound", err)
	_, err = f.lease(name)
	assert.Truef(t, apierrors.IsNotFound(err), "lease some time after Remove: %v, want NotFound", err)
	// Removing again is fine.
	assert.NoError(t, f.c.Remove(f.ctx, key), "second Remove")
}

func TestStoppingLeavesNodesAndLetsLeasesLapse(t *testing.T) {
	f := startController(t)
	key := uniqueKey("stopped")
	name := proxy.NodeName(key)
	f.c.Upsert(f.ctx, targetState(key))
	f.waitNode(name, "Ready", isReady(corev1.ConditionTrue, ""))
	f.waitLeaseRenewed(name)

	f.stop()
	assert.Error(t, f.c.Run(context.Background()), "Run ran a second time")
	last, err := f.renewTime(name)
	require.NoError(t, err)
	time.Sleep(4 * testRenewInterval)
	n, err := f.node(name)
	require.NoError(t, err, "node after Run stopped")
	assert.Equal(t, corev1.ConditionTrue, readyCondition(n).Status, "Ready after Run stopped; fleetlet must not report its own outage as the target's")
	now, err := f.renewTime(name)
	require.NoError(t, err, "lease after Run stopped")
	assert.Truef(t, now.Equal(last), "lease renewed after Run stopped: %s, then %s", last, now)
}

// A node deleted by someone while its target is still there comes back.
func TestDeletedNodeIsCreatedAgain(t *testing.T) {
	f := startController(t)
	key := uniqueKey("deleted")
	name := proxy.NodeName(key)
	f.c.Upsert(f.ctx, targetState(key))
	old := f.waitNode(name, "Ready", isReady(corev1.ConditionTrue, ""))
	require.NoError(t, f.cs.CoreV1().Nodes().Delete(f.ctx, name, metav1.DeleteOptions{}))
	f.waitNode(name, "created again", func(n *corev1.Node) (bool, string) {
		return n.UID != old.UID && readyCondition(n).Status == corev1.ConditionTrue, string(n.UID)
	})
}

// Upserts before Run are kept, and the nodes start with Run.
func TestUpsertBeforeRun(t *testing.T) {
	testenv.Need(t, env)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	c, err := NewController(Config{Client: cs, LeaseDuration: testLeaseDuration, RenewInterval: testRenewInterval, StatusInterval: testStatusInterval, Logger: testLogger(t)})
	require.NoError(t, err)
	key := uniqueKey("early")
	c.Upsert(context.Background(), targetState(key))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f := &fixture{t: t, ctx: context.Background(), cs: cs, c: c}
	f.waitNode(proxy.NodeName(key), "Ready", isReady(corev1.ConditionTrue, ""))
}

// Two targets whose node names collide: the second is refused, and removing
// it leaves the first one's node alone.
func TestNodeNameConflict(t *testing.T) {
	cs := fake.NewClientset()
	c, err := NewController(Config{Client: cs, Logger: logr.Discard()})
	require.NoError(t, err)
	first := proxy.TargetKey{Name: "a-b"}
	second := proxy.TargetKey{Namespace: "a", Name: "b"}
	require.Equal(t, proxy.NodeName(first), proxy.NodeName(second), "test premise")
	c.Upsert(context.Background(), TargetState{Key: first, Ready: true})
	c.Upsert(context.Background(), TargetState{Key: second, Ready: true})
	assert.NotContains(t, c.nodes, second, "the second target was accepted")
	_, err = cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: proxy.NodeName(first)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Remove(context.Background(), second))
	_, err = cs.CoreV1().Nodes().Get(context.Background(), proxy.NodeName(first), metav1.GetOptions{})
	assert.NoError(t, err, "removing the refused target deleted the first one's node")
	require.NoError(t, c.Remove(context.Background(), first))
	_, err = cs.CoreV1().Nodes().Get(context.Background(), proxy.NodeName(first), metav1.GetOptions{})
	assert.Truef(t, apierrors.IsNotFound(err), "node after removing its target: %v, want NotFound", err)
}

func TestConfigValidation(t *testing.T) {
	cs := fake.NewClientset()
	cases := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "defaults", cfg: Config{Client: cs}},
		{name: "no client", cfg: Config{}, wantErr: true},
		{name: "lease not whole seconds", cfg: Config{Client: cs, LeaseDuration: 1500 * time.Millisecond}, wantErr: true},
		{name: "renew not shorter than lease", cfg: Config{Client: cs, LeaseDuration: 2 * time.Second, RenewInterval: 2 * time.Second}, wantErr: true},
		{name: "address", cfg: Config{Client: cs, NodeAddress: "manager.local"}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewController(tc.cfg)
			assert.Equal(t, tc.wantErr, err != nil, "NewController error = %v, want error", err)
		})
	}
	c, err := NewController(Config{Client: cs})
	require.NoError(t, err)
	assert.Falsef(t, c.cfg.LeaseDuration != DefaultLeaseDuration || c.cfg.RenewInterval != DefaultLeaseDuration/4 || c.cfg.StatusInterval != DefaultStatusInterval || c.cfg.NodeAddress != DefaultNodeAddress, "defaults not applied: %+v", c.cfg)
}

// A ClusterTarget p-q and a Target q in namespace p share a node name. A
// process that has not run the Target's node (a restart that reconciles
// the deleted ClusterTarget first) must not delete the Target's node on
// Remove of the ClusterTarget; and a node released by one target is taken
// over by the other, target annotation and all. Before: Remove deleted any
// node of that name, and with it the proxies bound there.
func TestRemoveLeavesAnotherTargetsNode(t *testing.T) {
	f := startController(t)
	suffix := utilrand.String(5)
	holder := proxy.TargetKey{Namespace: "p" + suffix, Name: "q"}
	other := proxy.TargetKey{Name: "p" + suffix + "-q"}
	name := proxy.NodeName(holder)
	require.Equal(t, name, proxy.NodeName(other), "NodeName(%v) and NodeName(%v): not a collision", holder, other)

	// The other target ran the node first, then gave it up.
	f.c.Upsert(f.ctx, targetState(other))
	f.waitNode(name, "made for the other target", func(n *corev1.Node) (bool, string) {
		return n.Annotations[v1alpha1.AnnotationTarget] == other.String(), fmt.Sprint(n.Annotations)
	})
	f.c.Release(other)
	f.c.Upsert(f.ctx, targetState(holder))
	f.waitNode(name, "taken over by the holder", func(n *corev1.Node) (bool, string) {
		return n.Annotations[v1alpha1.AnnotationTarget] == holder.String(), fmt.Sprint(n.Annotations)
	})

	f.stop() // the node stays; a restarted process has not run it yet
	fresh, err := NewController(Config{Client: f.cs, NodeAddress: "10.1.2.3", Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, fresh.Remove(f.ctx, other))
	_, err = f.node(name)
	require.NoError(t, err, "the holder's node after Remove of the other target")
	require.NoError(t, fresh.Remove(f.ctx, holder))
	_, err = f.node(name)
	assert.Truef(t, apierrors.IsNotFound(err), "the holder's node after its own Remove: %v, want NotFound", err)
}

func TestEachNodeAdvertisesItsOwnKubeletPort(t *testing.T) {
	f := startController(t)
	a, b := uniqueKey("port-a"), uniqueKey("port-b")
	f.c.Upsert(f.ctx, targetState(a))
	f.c.Upsert(f.ctx, targetState(b))
	ports := map[int32]string{}
	for _, key := range []proxy.TargetKey{a, b} {
		name := proxy.NodeName(key)
		n := f.waitNode(name, "a kubelet port", func(n *corev1.Node) (bool, string) {
			return n.Status.DaemonEndpoints.KubeletEndpoint.Port != 0, fmt.Sprint(n.Status.DaemonEndpoints)
		})
		ctx, served := f.kubelet.servedCtx(name)
		require.Falsef(t, ctx == nil, "node %s: no kubelet API served", name)
		assert.Equal(t, served, n.Status.DaemonEndpoints.KubeletEndpoint.Port, "node %s advertises a port its kubelet API does not serve", name)
		ports[served] = name
	}
	assert.Lenf(t, ports, 2, "two nodes share a kubelet port: %v", ports)
	require.NoError(t, f.c.Remove(f.ctx, a))
	ctx, _ := f.kubelet.servedCtx(proxy.NodeName(a))
	select {
	case <-ctx.Done():
	case <-time.After(waitTimeout):
		assert.Failf(t, "still served", "the kubelet API of removed node %s still serves", proxy.NodeName(a))
	}
	ctxB, _ := f.kubelet.servedCtx(proxy.NodeName(b))
	assert.NoError(t, ctxB.Err(), "the kubelet API of node %s stopped with another node's removal", proxy.NodeName(b))
}

// An elected proxy counts on its node from its election record on, before
// it is pinned, so that it fits by the time its delegate is admitted and
// the elector pins and ungates it in one write; a record dropped stops
// counting.
func TestElectedProxyRaisesAllocatable(t *testing.T) {
	f := startController(t)
	key, name := f.fullTarget("elected")

	ns := f.ensureNamespace()
	p := newPod("elected").container("c", rl("cpu", "700m")).obj()
	p.Finalizers = []string{v1alpha1.FinalizerDelegate}
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}}
	p = f.createPod(ns, p)
	setElected := func(status corev1.ConditionStatus, message string) {
		t.Helper()
		cur, err := f.cs.CoreV1().Pods(ns).Get(f.ctx, p.Name, metav1.GetOptions{})
		require.NoError(t, err)
		cur.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: status, Reason: "Test", Message: message}}
		_, err = f.cs.CoreV1().Pods(ns).UpdateStatus(f.ctx, cur, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	setElected(corev1.ConditionTrue, proxy.Record{TargetName: key.Name, Chaperon: "elected-0a1b2c3d"}.Message())
	f.waitNode(name, "elected proxy counted", allocatableIs(corev1.ResourceCPU, "700m"))
	f.waitNode(name, "elected proxy counted", allocatableIs(corev1.ResourcePods, "1"))

	// Elected elsewhere, then no record at all: it leaves this node.
	setElected(corev1.ConditionTrue, proxy.Record{TargetName: "another", Chaperon: "elected-0a1b2c3d"}.Message())
	f.waitNode(name, "proxy elected elsewhere not counted", allocatableIs(corev1.ResourceCPU, "0"))
	setElected(corev1.ConditionTrue, proxy.Record{TargetName: key.Name, Chaperon: "elected-0a1b2c3d"}.Message())
	f.waitNode(name, "elected proxy counted again", allocatableIs(corev1.ResourceCPU, "700m"))
	setElected(corev1.ConditionFalse, "electing again")
	f.waitNode(name, "record dropped", allocatableIs(corev1.ResourceCPU, "0"))
}
