package elector_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/indexer"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/elector"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/fleet/fleettest"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where proxies, Targets and virtual
// nodes live, and one target. The source is a target too (a second Target
// whose kubeconfig points at it), so that an election has two candidates.
// No scheduler, kubelet or kube-controller-manager runs: the tests play
// the candidate scheduler (reservations, bindings) and the virtual node
// controller (nodes and their allocatable).
var sourceEnv, targetEnv *testenv.Env

const sourceName = "src"

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv))
}

// harness is the source side of a manager with the proxy reconciler only,
// and administrator clients of both control planes.
type harness struct {
	source, target client.Client
	ns             string
	// writes counts the writes (every verb but GET) the harness's own
	// clients made.
	writes *atomic.Int64
}

// start runs the proxy reconciler until the test ends, in a namespace of
// its own that exists in both control planes, with a Target for each.
func start(t *testing.T, opts elector.Options) (*harness, proxy.TargetKey, proxy.TargetKey) {
	t.Helper()
	testenv.Need(t, sourceEnv)
	scheme := testenv.Scheme()
	mgr := testenv.NewManager(t, sourceEnv.Config, testenv.ManagerOptions{Verbosity: 2, UncachedSecrets: true})
	ctx := mgr.Context()
	require.NoError(t, indexer.Register(ctx, mgr.GetFieldIndexer(), indexer.All...))
	reg, err := fleet.New(fleettest.Options(sourceName), fleettest.NoNodes{})
	require.NoError(t, err)
	require.NoError(t, reg.SetupWithManager(ctx, mgr))
	opts.SourceName = sourceName
	if opts.Spec == nil {
		opts.Spec = func(p *corev1.Pod) (*corev1.PodSpec, error) { return p.Spec.DeepCopy(), nil }
	}
	opts.Registry = reg
	proxies, err := elector.New(opts)
	require.NoError(t, err)
	require.NoError(t, proxies.SetupWithManager(ctx, mgr))
	mgr.Run()
	h := &harness{writes: &atomic.Int64{}}
	h.source, err = client.New(counted(sourceEnv.Config, h.writes), client.Options{Scheme: scheme})
	require.NoError(t, err)
	h.target, err = client.New(counted(targetEnv.Config, h.writes), client.Options{Scheme: scheme})
	require.NoError(t, err)
	for _, c := range []client.Client{h.source, h.target} {
		cs := &v1alpha1.ClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterSummaryName}}
		if err := c.Create(ctx, cs); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	h.ns = h.namespace(t)
	mgr.WaitForCacheSync()
	return h, h.connect(t, "remote", targetEnv.Config), h.connect(t, "local", sourceEnv.Config)
}

// counted is cfg with every write (every method but GET) counted in
// writes.
func counted(cfg *rest.Config, writes *atomic.Int64) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				writes.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// namespace creates a namespace in both control planes; at the end every
// pod and chaperon left in it loses its finalizers.
func (h *harness) namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "elector-"}}
	require.NoError(t, h.source.Create(ctx, ns))
	require.NoError(t, h.target.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}))
	t.Cleanup(func() {
		ctx := context.Background()
		for _, c := range []client.Client{h.source, h.target} {
			var pods corev1.PodList
			var chaperons v1alpha1.PodChaperonList
			_ = c.List(ctx, &pods, client.InNamespace(ns.Name))
			_ = c.List(ctx, &chaperons, client.InNamespace(ns.Name))
			objs := []client.Object{}
			for i := range pods.Items {
				objs = append(objs, &pods.Items[i])
			}
			for i := range chaperons.Items {
				objs = append(objs, &chaperons.Items[i])
			}
			for _, o := range objs {
				if len(o.GetFinalizers()) > 0 {
					_ = c.Patch(ctx, o, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
				}
			}
		}
	})
	return ns.Name
}

// connect creates a Target in the test's namespace whose kubeconfig holds
// cfg, and its virtual node in the source (plenty of room), and waits for
// it to be Ready.
func (h *harness) connect(t *testing.T, name string, cfg *rest.Config) proxy.TargetKey {
	t.Helper()
	ctx := context.Background()
	data := testenv.Kubeconfig(t, cfg, h.ns, "")
	require.NoError(t, h.source.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name + "-kubeconfig"}, Data: map[string][]byte{"config": data}}))
	require.NoError(t, h.source.Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name},
		Spec:       v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: name + "-kubeconfig"}},
	}))
	key := proxy.TargetKey{Namespace: h.ns, Name: name}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(key), Labels: map[string]string{
		"type": "virtual-kubelet", v1alpha1.LabelCluster: name,
	}}}
	require.NoError(t, h.source.Create(ctx, node))
	t.Cleanup(func() {
		_ = h.source.Delete(context.Background(), node)
		tg := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}}
		_ = h.source.Delete(context.Background(), tg)
		_ = h.source.Patch(context.Background(), tg, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})
	h.allocatable(t, key, "100", "100")
	testenv.EventuallyTrue(t, waitTimeout, "Target "+name+" Ready", func(ctx context.Context) bool {
		var tg v1alpha1.Target
		if err := h.source.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &tg); err != nil {
			return false
		}
		c := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	return key
}

func nodeName(key proxy.TargetKey) string {
	return proxy.NodeName(key)
}

// allocatable sets the virtual node's allocatable CPU and pod count.
func (h *harness) allocatable(t *testing.T, key proxy.TargetKey, cpu, pods string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := h.source.Get(context.Background(), client.ObjectKey{Name: nodeName(key)}, &n); err != nil {
			return err
		}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse(pods)}
		n.Status.Capacity = n.Status.Allocatable
		return h.source.Status().Update(context.Background(), &n)
	})
	require.NoError(t, err)
}

// proxy creates a proxy as the webhook leaves it: our finalizer and gate
// (after any gates given), no grace period, 100m of CPU.
func (h *harness) proxy(t *testing.T, name string, gates ...string) *corev1.Pod {
	t.Helper()
	return h.proxyWith(t, name, nil, gates...)
}

// proxyWith is proxy with change made to the pod before it is created.
func (h *harness) proxyWith(t *testing.T, name string, change func(*corev1.Pod), gates ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name, Finalizers: []string{v1alpha1.FinalizerDelegate}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector:                  map[string]string{"type": "virtual-kubelet"},
			// The webhook's: a new node starts tainted not-ready.
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
		},
	}
	for _, g := range append(gates, v1alpha1.SchedulingGateElection) {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	if change != nil {
		change(p)
	}
	require.NoError(t, h.source.Create(context.Background(), p))
	return p
}

// clientOf is the administrator's client of a target.
func (h *harness) clientOf(key proxy.TargetKey) client.Client {
	if key.Name == "local" {
		return h.source
	}
	return h.target
}

// chaperonKey is the proxy's chaperon, the same name in every target.
func chaperonKey(p *corev1.Pod) client.ObjectKey {
	return client.ObjectKey{Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID)}
}

// reserve plays a target's candidate scheduler: it waits for the proxy's
// candidate there and reserves a node for it.
func (h *harness) reserve(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	c := h.clientOf(key)
	testenv.EventuallyTrue(t, waitTimeout, "a candidate in "+key.Name, func(ctx context.Context) bool {
		var pc v1alpha1.PodChaperon
		if c.Get(ctx, chaperonKey(p), &pc) != nil || pc.DeletionTimestamp != nil {
			return false
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"node-1"}}}`, v1alpha1.AnnotationReserved)
		return c.Patch(ctx, &pc, client.RawPatch("application/merge-patch+json", patch)) == nil
	})
}

// unschedulable plays a target's candidate scheduler finding no node with
// room for the candidate.
func (h *harness) unschedulable(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	h.unschedulableFor(t, key, p, "0/1 nodes are available: 1 Insufficient cpu.")
}

// unschedulableFor plays a target's candidate scheduler finding no node for
// the candidate, saying why in msg.
func (h *harness) unschedulableFor(t *testing.T, key proxy.TargetKey, p *corev1.Pod, msg string) {
	t.Helper()
	h.chaperonStatus(t, key, p, func(pc *v1alpha1.PodChaperon) {
		pc.Status.PodStatus.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	})
}

// bind plays the binding: the chaperon mirrors PodScheduled=True.
func (h *harness) bind(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	h.chaperonStatus(t, key, p, func(pc *v1alpha1.PodChaperon) {
		pc.Status.PodStatus.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	})
}

// admit plays the target's kubelet admitting the delegate: its first
// status, with a start time.
func (h *harness) admit(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	now := metav1.Now()
	h.chaperonStatus(t, key, p, func(pc *v1alpha1.PodChaperon) {
		pc.Status.PodStatus.Phase = corev1.PodPending
		pc.Status.PodStatus.StartTime = &now
	})
}

// refuse plays the target's kubelet refusing the delegate at admission:
// Failed, never started.
func (h *harness) refuse(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	h.chaperonStatus(t, key, p, func(pc *v1alpha1.PodChaperon) {
		pc.Status.PodStatus.Phase = corev1.PodFailed
		pc.Status.PodStatus.Reason = "OutOfcpu"
		pc.Status.PodStatus.Message = "Pod was rejected: Node didn't have enough resource: cpu"
	})
}

// chaperon reads the proxy's chaperon in a target; false when it is gone.
func (h *harness) chaperon(t *testing.T, key proxy.TargetKey, p *corev1.Pod) (*v1alpha1.PodChaperon, bool) {
	t.Helper()
	var pc v1alpha1.PodChaperon
	err := h.clientOf(key).Get(context.Background(), chaperonKey(p), &pc)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	require.NoError(t, err)
	return &pc, true
}

// collect plays the target's chaperon controller and garbage collector for
// a deleted chaperon (its pod, which no kubelet runs here, counts as gone):
// it removes the finalizers (delegate-pod, foregroundDeletion) so that the
// chaperon goes.
func (h *harness) collect(t *testing.T, key proxy.TargetKey, p *corev1.Pod) {
	t.Helper()
	c := h.clientOf(key)
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon in "+key.Name+" deleted, then gone", func(ctx context.Context) bool {
		var pc v1alpha1.PodChaperon
		if err := c.Get(ctx, chaperonKey(p), &pc); apierrors.IsNotFound(err) {
			return true
		} else if err != nil || pc.DeletionTimestamp == nil {
			return false
		}
		_ = c.Patch(ctx, &pc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
		return false
	})
}

// unreachable points a Target's kubeconfig at a server nobody answers, and
// waits for the Target to be NotReady; the returned func points it back
// and waits for Ready.
func (h *harness) unreachable(t *testing.T, key proxy.TargetKey, cfg *rest.Config) (restore func()) {
	t.Helper()
	set := func(server string, ready metav1.ConditionStatus) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: key.Name + "-kubeconfig"}}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := h.source.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			s.Data = map[string][]byte{"config": testenv.Kubeconfig(t, cfg, h.ns, server)}
			return h.source.Update(context.Background(), s)
		})
		require.NoError(t, err)
		testenv.EventuallyTrue(t, waitTimeout, "Target "+key.Name+" Ready="+string(ready), func(ctx context.Context) bool {
			var tg v1alpha1.Target
			if err := h.source.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &tg); err != nil {
				return false
			}
			c := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
			return c != nil && c.Status == ready
		})
	}
	set("https://127.0.0.1:1", metav1.ConditionFalse)
	return func() { set("", metav1.ConditionTrue) }
}

func (h *harness) chaperonStatus(t *testing.T, key proxy.TargetKey, p *corev1.Pod, change func(*v1alpha1.PodChaperon)) {
	t.Helper()
	c := h.clientOf(key)
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon's status written in "+key.Name, func(ctx context.Context) bool {
		var pc v1alpha1.PodChaperon
		if c.Get(ctx, chaperonKey(p), &pc) != nil {
			return false
		}
		change(&pc)
		return c.Status().Update(ctx, &pc) == nil
	})
}

// get reads the proxy again.
func (h *harness) get(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	require.NoError(t, h.source.Get(context.Background(), client.ObjectKeyFromObject(p), &cur))
	return &cur
}

// waitProxy waits until the proxy satisfies cond.
func (h *harness) waitProxy(t *testing.T, p *corev1.Pod, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	testenv.EventuallyTrue(t, waitTimeout, "the proxy "+what, func(ctx context.Context) bool {
		return h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur) == nil && cond(&cur)
	}, func() string {
		return fmt.Sprintf("proxy: nodeSelector %v gates %v deleted %v conditions %+v", cur.Spec.NodeSelector, cur.Spec.SchedulingGates, cur.DeletionTimestamp, cur.Status.Conditions)
	})
	return &cur
}

// waitProxyDeleted waits until the proxy is being deleted, or gone (its
// finalizer goes at once when no chaperon is left); present says which,
// with the proxy as it was then.
func (h *harness) waitProxyDeleted(t *testing.T, p *corev1.Pod, what string) (cur *corev1.Pod, present bool) {
	t.Helper()
	var got corev1.Pod
	testenv.EventuallyTrue(t, waitTimeout, "the proxy "+what, func(ctx context.Context) bool {
		err := h.source.Get(ctx, client.ObjectKeyFromObject(p), &got)
		if apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID) {
			present = false
			return true
		}
		present = err == nil
		return present && got.DeletionTimestamp != nil
	}, func() string {
		return fmt.Sprintf("proxy: nodeSelector %v gates %v deleted %v", got.Spec.NodeSelector, got.Spec.SchedulingGates, got.DeletionTimestamp)
	})
	return &got, present
}

// waitProxyGone waits until the proxy is gone from the source (its
// finalizer removed).
func (h *harness) waitProxyGone(t *testing.T, p *corev1.Pod, what string) {
	t.Helper()
	testenv.EventuallyTrue(t, waitTimeout, what, func(ctx context.Context) bool {
		return apierrors.IsNotFound(h.source.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
	})
}

// waitEvent waits for an Event with reason about the proxy.
func (h *harness) waitEvent(t *testing.T, p *corev1.Pod, reason string) {
	t.Helper()
	testenv.EventuallyTrue(t, waitTimeout, "an Event "+reason, func(ctx context.Context) bool {
		var list eventsv1.EventList
		if err := h.source.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.UID == p.UID && e.Reason == reason {
				return true
			}
		}
		return false
	})
}

// waitTimeout only ends a test that would hang: what a test waits for is
// its condition.
const waitTimeout = 60 * time.Second
