package gc_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Two real control planes: the source, where proxies live, and a target,
// where chaperons live. Neither runs kube-controller-manager, so a chaperon
// deleted with Foreground propagation stays, marked deleted, with the
// foregroundDeletion finalizer: "deleted" below means marked so.
var sourceEnv, targetEnv *testenv.Env

const sourceName = "src"

func TestMain(m *testing.M) {
	os.Exit(func() int {
		return testenv.StartMainWithCRDs(m, &sourceEnv, &targetEnv)
	}())
}

type testTarget struct {
	key proxy.TargetKey
	c   client.Client
}

func (t testTarget) Key() proxy.TargetKey  { return t.key }
func (t testTarget) Client() client.Client { return t.c }
func (t testTarget) Ready() bool           { return true }
func (t testTarget) Self() bool            { return false }

type testTargets []gc.Target

func (t testTargets) List() []gc.Target { return t }

type fixture struct {
	source, target client.Client
	ns             string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	testenv.Need(t, sourceEnv)
	s := testenv.Scheme()
	src, err := client.New(sourceEnv.Config, client.Options{Scheme: s})
	require.NoError(t, err)
	tgt, err := client.New(targetEnv.Config, client.Options{Scheme: s})
	require.NoError(t, err)
	f := &fixture{source: src, target: tgt}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-", Labels: map[string]string{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}}}
	require.NoError(t, src.Create(ctx, ns))
	f.ns = ns.Name
	// Last: the namespace stops mattering to later tests' passes.
	t.Cleanup(func() {
		patch := client.MergeFrom(ns.DeepCopy())
		delete(ns.Labels, v1alpha1.LabelEnabled)
		assert.NoError(t, src.Patch(context.Background(), ns, patch))
	})
	require.NoError(t, tgt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	return f
}

// proxy creates a proxy pod in the source (our finalizer, and others).
func (f *fixture) proxy(t *testing.T, name string, finalizers ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Finalizers: finalizers},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	require.NoError(t, f.source.Create(context.Background(), p))
	t.Cleanup(func() { f.forget(t, p) })
	return p
}

// forget removes every finalizer and deletes the pod: a proxy gone.
func (f *fixture) forget(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	var cur corev1.Pod
	if err := f.source.Get(ctx, client.ObjectKeyFromObject(p), &cur); apierrors.IsNotFound(err) {
		return
	} else {
		require.NoError(t, err)
	}
	cur.Finalizers = nil
	require.NoError(t, client.IgnoreNotFound(f.source.Update(ctx, &cur)))
	require.NoError(t, client.IgnoreNotFound(f.source.Delete(ctx, &cur)))
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := f.source.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		require.FailNowf(t, "pod not gone", "pod %s not gone: %v", p.Name, err)
	}
}

// chaperon creates, in the target, the chaperon source created for proxy.
func (f *fixture) chaperon(t *testing.T, p *corev1.Pod, source string) *v1alpha1.PodChaperon {
	t.Helper()
	pc := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID),
			Labels:      map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: source},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}},
	}
	require.NoError(t, f.target.Create(context.Background(), pc))
	return pc
}

// elected writes the proxy's election record naming a target, as the
// elector does.
func (f *fixture) elected(t *testing.T, p *corev1.Pod, target string) *corev1.Pod {
	t.Helper()
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Reason: "Elected",
		Message: proxy.Record{TargetName: target, Chaperon: naming.RemoteName(p.Name, p.UID)}.Message(),
	})
	require.NoError(t, f.source.Status().Update(context.Background(), p))
	return p
}

// deleted reports whether the chaperon is gone or marked deleted.
func (f *fixture) deleted(t *testing.T, pc *v1alpha1.PodChaperon) bool {
	t.Helper()
	var cur v1alpha1.PodChaperon
	err := f.target.Get(context.Background(), client.ObjectKeyFromObject(pc), &cur)
	if apierrors.IsNotFound(err) {
		return true
	}
	require.NoError(t, err)
	return cur.DeletionTimestamp != nil
}

func (f *fixture) collector(t *testing.T, tgt client.Client, clk *clocktesting.FakeClock, targets ...gc.Target) *gc.GC {
	t.Helper()
	if len(targets) == 0 {
		targets = []gc.Target{testTarget{key: proxy.TargetKey{Name: "t1"}, c: tgt}}
	}
	g, err := gc.New(gc.Options{
		SourceName: sourceName,
		Targets:    testTargets(targets),
		Reader:     f.source, APIReader: f.source,
		MinAge: time.Minute,
		Clock:  clk,
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	return g
}

// A clock a while after every object of the test was created.
func later() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Now().Add(10 * time.Minute))
}

func TestCollectOrphans(t *testing.T) {
	f := setup(t)
	ctx := context.Background()

	live := f.proxy(t, "live", "example.com/keep", v1alpha1.FinalizerDelegate)
	gone := f.proxy(t, "gone", v1alpha1.FinalizerDelegate)
	replaced := f.proxy(t, "replaced", v1alpha1.FinalizerDelegate)
	unmanaged := f.proxy(t, "unmanaged", "example.com/keep")
	foreign := f.proxy(t, "foreign", v1alpha1.FinalizerDelegate)
	// Live proxies whose election record stands: the chaperon in t1 is
	// the winner's, or a loser's when the record names t2.
	winner := f.elected(t, f.proxy(t, "winner", v1alpha1.FinalizerDelegate), "t1")
	loser := f.elected(t, f.proxy(t, "loser", v1alpha1.FinalizerDelegate), "t2")

	pcLive := f.chaperon(t, live, sourceName)
	pcWinner := f.chaperon(t, winner, sourceName)
	pcLoser := f.chaperon(t, loser, sourceName)
	pcGone := f.chaperon(t, gone, sourceName)
	pcReplaced := f.chaperon(t, replaced, sourceName)
	pcUnmanaged := f.chaperon(t, unmanaged, sourceName)
	pcForeign := f.chaperon(t, foreign, "other-source")

	f.forget(t, gone)
	f.forget(t, foreign)
	f.forget(t, replaced)
	f.proxy(t, "replaced", v1alpha1.FinalizerDelegate) // same name, new UID

	g := f.collector(t, f.target, later())
	report, err := g.Collect(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		pc      *v1alpha1.PodChaperon
		deleted bool
		reason  gc.Reason
	}{
		{pcLive, false, ""},
		{pcGone, true, gc.ReasonProxyNotFound},
		{pcReplaced, true, gc.ReasonProxyReplaced},
		{pcUnmanaged, true, gc.ReasonProxyNotManaged},
		{pcForeign, false, ""},
		{pcWinner, false, ""},
		{pcLoser, true, gc.ReasonLostElection},
	} {
		got := f.deleted(t, tc.pc)
		assert.Falsef(t, got != tc.deleted, "chaperon %s (proxy %s): deleted = %t, want %t", tc.pc.Name, tc.pc.Annotations[v1alpha1.AnnotationParentName], got, tc.deleted)
		var reported gc.Reason
		for _, d := range report.Deleted {
			if d.Name == tc.pc.Name {
				reported = d.Reason
			}
		}
		assert.Falsef(t, reported != tc.reason, "chaperon %s reported with reason %q, want %q", tc.pc.Name, reported, tc.reason)
	}

	// Deletion is Foreground (the delegate goes first): with no garbage
	// collector running here, the orphan waits on its finalizer.
	var cur v1alpha1.PodChaperon
	require.NoError(t, f.target.Get(ctx, client.ObjectKeyFromObject(pcGone), &cur), "orphan chaperon vanished at once, so it was not deleted Foreground")
	assert.Truef(t, containsString(cur.Finalizers, metav1.FinalizerDeleteDependents), "orphan chaperon finalizers %v, want %s (Foreground deletion)", cur.Finalizers, metav1.FinalizerDeleteDependents)

	// A second pass finds nothing more to do: chaperons being deleted are
	// left to finish.
	again, err := g.Collect(ctx)
	require.NoError(t, err)
	assert.Falsef(t, len(again.Deleted) != 0, "second pass deleted %v, want nothing", again.Deleted)
}

func TestYoungOrphanKeptUntilMinAge(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	p := f.proxy(t, "young", v1alpha1.FinalizerDelegate)
	pc := f.chaperon(t, p, sourceName)
	f.forget(t, p)
	require.NoError(t, f.target.Get(ctx, client.ObjectKeyFromObject(pc), pc))
	clk := clocktesting.NewFakeClock(pc.CreationTimestamp.Add(30 * time.Second))
	g := f.collector(t, f.target, clk)

	report, err := g.Collect(ctx)
	require.NoError(t, err)
	require.False(t, f.deleted(t, pc), "an orphan younger than the minimum age was deleted")
	assert.Falsef(t, len(report.Young) != 1 || report.Young[0].Name != pc.Name, "young = %v, want the chaperon %s", report.Young, pc.Name)

	clk.Step(time.Minute)
	report, err = g.Collect(ctx)
	require.NoError(t, err)
	assert.True(t, f.deleted(t, pc), "an orphan older than the minimum age was kept")
	assert.Falsef(t, len(report.Deleted) != 1 || len(report.Young) != 0, "report = %+v, want one deletion and nothing young", report)
}

// A namespace the source's identity may not read in the target is skipped
// quietly; the namespaces it may read are collected.
func TestForbiddenNamespaceSkipped(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	denied := setup(t) // a second enabled namespace, not granted
	userName := "source-" + f.ns
	user, err := targetEnv.ControlPlane.AddUser(envtest.User{Name: userName}, nil)
	require.NoError(t, err)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "source"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"podchaperons"},
			Verbs: []string{"get", "list", "delete"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "source"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "source"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}},
	}
	for _, o := range []client.Object{role, binding} {
		require.NoError(t, f.target.Create(ctx, o))
	}
	limited, err := client.New(user.Config(), client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	p := f.proxy(t, "p", v1alpha1.FinalizerDelegate)
	q := denied.proxy(t, "q", v1alpha1.FinalizerDelegate)
	pc, qc := f.chaperon(t, p, sourceName), denied.chaperon(t, q, sourceName)
	f.forget(t, p)
	denied.forget(t, q)

	report, err := f.collector(t, limited, later()).Collect(ctx)
	require.NoError(t, err, "a forbidden namespace failed the pass")
	assert.True(t, f.deleted(t, pc), "the orphan in the granted namespace was kept")
	assert.False(t, f.deleted(t, qc), "the orphan in the forbidden namespace was deleted")
	assert.Falsef(t, len(report.Deleted) != 1, "deleted %v, want one", report.Deleted)
}

// Run by a manager, the collector passes on its own, shortly after start.
func TestRunsInManager(t *testing.T) {
	f := setup(t)
	p := f.proxy(t, "p", v1alpha1.FinalizerDelegate)
	pc := f.chaperon(t, p, sourceName)
	f.forget(t, p)

	mgr := testenv.NewManager(t, sourceEnv.Config, testenv.ManagerOptions{})
	g, err := gc.New(gc.Options{
		SourceName:   sourceName,
		Targets:      testTargets{testTarget{key: proxy.TargetKey{Name: "t1"}, c: f.target}},
		InitialDelay: 10 * time.Millisecond,
		Interval:     100 * time.Millisecond,
		MinAge:       time.Nanosecond,
	})
	require.NoError(t, err)
	require.NoError(t, g.SetupWithManager(mgr))
	mgr.Run()
	if err := wait.PollUntilContextTimeout(mgr.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return f.deleted(t, pc), nil
	}); err != nil {
		require.FailNowf(t, "the orphan was not collected", "the orphan was not collected by the running collector: %v", err)
	}
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
