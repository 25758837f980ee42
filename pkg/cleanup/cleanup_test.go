package cleanup_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/cleanup"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/target/summary"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Three real control planes: a source and a target with fleetlet's CRDs,
// and a bare cluster whose CRDs are gone (as after `helm uninstall`). None
// runs kube-controller-manager: the tests play its garbage collector by
// removing the foregroundDeletion finalizer of a chaperon.
var sourceEnv, targetEnv, bareEnv *testenv.Env

const otherGate = "example.com/quota"
const otherFinalizer = "example.com/keep"

func TestMain(m *testing.M) {
	os.Exit(func() int {
		root, err := testenv.ModuleRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		flag.Parse()
		if _, err := testenv.FindBinaries("etcd", "kube-apiserver", "kubectl"); err == nil {
			if bareEnv, err = testenv.Start(testenv.Options{}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer func() { _ = bareEnv.Stop() }()
		}
		crds := testenv.Options{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}}
		return testenv.StartMain(m, crds, &sourceEnv, &targetEnv)
	}())
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	return c
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		require.NoErrorf(t, c.Create(context.Background(), o), "creating %T %s", o, o.GetName())
	}
}

func pod(ns, name, node string, gates []string, finalizers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

func chaperonOf(p *corev1.Pod, sourceName string) *v1alpha1.PodChaperon {
	return &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID),
			Labels:      map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: sourceName},
			Annotations: map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace},
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}},
	}
}

func virtualNode(name, cluster string) *corev1.Node {
	l := map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}
	if cluster != "" {
		l[v1alpha1.LabelCluster] = cluster
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	require.NoErrorf(t, wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond), "waiting for %s", what)
}

// gcChaperon plays the garbage collector once the chaperon is marked
// deleted: its (absent) pod is gone, so the foregroundDeletion finalizer
// goes, and so does the chaperon.
func gcChaperon(t *testing.T, c client.Client, pc *v1alpha1.PodChaperon) {
	t.Helper()
	var cur v1alpha1.PodChaperon
	poll(t, "chaperon "+pc.Name+" to be deleted", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pc), &cur)
		return err == nil && cur.DeletionTimestamp != nil, client.IgnoreNotFound(err)
	})
	assert.Truef(t, slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents), "chaperon %s was not deleted Foreground: finalizers %v", pc.Name, cur.Finalizers)
	cur.Finalizers = nil
	require.NoError(t, client.IgnoreNotFound(c.Update(context.Background(), &cur)))
}

func run(t *testing.T, c client.Client, opts cleanup.Options) (cleanup.Summary, error) {
	t.Helper()
	opts.Client = c
	opts.Logger = testr.New(t)
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	return cleanup.Run(context.Background(), opts)
}

// The uninstall story on the source side, then on the target side, each run
// twice.
func TestCleanup(t *testing.T) {
	testenv.Need(t, sourceEnv)
	ctx := context.Background()
	src, tgt := newClient(t, sourceEnv.Config), newClient(t, targetEnv.Config)
	const ns = "apps"
	create(t, src, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	create(t, tgt, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})

	// The source: a Target reached through its kubeconfig Secret, its
	// virtual node, a node that only looks like one, and two proxies.
	create(t, src,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t1-kubeconfig"}, Data: map[string][]byte{"config": testenv.Kubeconfig(t, targetEnv.Config, "", "")}},
		&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t1"}, Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "t1-kubeconfig"}}},
		virtualNode("fleetlet-apps-t1", "t1"),
		virtualNode("lookalike", ""),
	)
	gated := pod(ns, "gated", "", []string{v1alpha1.SchedulingGateElection, otherGate}, v1alpha1.FinalizerDelegate)
	elected := pod(ns, "elected", "fleetlet-apps-t1", nil, otherFinalizer, v1alpha1.FinalizerDelegate)
	plain := pod(ns, "plain", "", []string{otherGate}, otherFinalizer)
	create(t, src, gated, elected, plain)
	candidate, delegate := chaperonOf(gated, "src"), chaperonOf(elected, "src")
	create(t, tgt, candidate, delegate)

	t.Run("source side", func(t *testing.T) {
		type result struct {
			sum cleanup.Summary
			err error
		}
		done := make(chan result, 1)
		go func() {
			sum, err := run(t, src, cleanup.Options{SourceName: "src", Timeout: time.Minute})
			done <- result{sum, err}
		}()

		// The gated proxy is deleted, never ungated; the elected one keeps
		// running, finalizer and all, while its chaperon is being deleted.
		gcChaperon(t, tgt, candidate)
		poll(t, "the delegate's chaperon to be deleted", func(ctx context.Context) (bool, error) {
			var pc v1alpha1.PodChaperon
			err := tgt.Get(ctx, client.ObjectKeyFromObject(delegate), &pc)
			return err == nil && pc.DeletionTimestamp != nil, err
		})
		var e corev1.Pod
		require.NoError(t, src.Get(ctx, client.ObjectKeyFromObject(elected), &e))
		assert.Falsef(t, e.DeletionTimestamp != nil || !slices.Contains(e.Finalizers, v1alpha1.FinalizerDelegate), "the elected proxy lost its finalizer or was deleted before its chaperon was gone: %+v", e.ObjectMeta)
		gcChaperon(t, tgt, delegate)

		res := <-done
		require.NoError(t, res.err, "cleanup")
		want := cleanup.Summary{GatedProxiesDeleted: 1, RemoteChaperonsDeleted: 2, FinalizersRemoved: 2, VirtualNodesDeleted: 1}
		assert.Empty(t, cmp.Diff(want, res.sum), "summary (-want,+got)")

		err := src.Get(ctx, client.ObjectKeyFromObject(gated), &corev1.Pod{})
		assert.Truef(t, apierrors.IsNotFound(err), "the gated proxy still exists (%v)", err)
		require.NoError(t, src.Get(ctx, client.ObjectKeyFromObject(elected), &e))
		assert.Empty(t, cmp.Diff([]string{otherFinalizer}, e.Finalizers), "elected proxy finalizers (-want,+got)")
		assert.Nil(t, e.DeletionTimestamp, "the elected proxy was deleted")
		var p corev1.Pod
		require.NoError(t, src.Get(ctx, client.ObjectKeyFromObject(plain), &p))
		assert.Falsef(t, len(p.Spec.SchedulingGates) != 1 || !slices.Equal(p.Finalizers, []string{otherFinalizer}) || p.DeletionTimestamp != nil, "a pod fleetlet never managed was touched: %+v %+v", p.ObjectMeta, p.Spec.SchedulingGates)
		err = src.Get(ctx, client.ObjectKey{Name: "fleetlet-apps-t1"}, &corev1.Node{})
		assert.Truef(t, apierrors.IsNotFound(err), "the virtual node still exists (%v)", err)
		assert.NoError(t, src.Get(ctx, client.ObjectKey{Name: "lookalike"}, &corev1.Node{}), "a node without the cluster label was deleted")

		again, err := run(t, src, cleanup.Options{SourceName: "src"})
		assert.Falsef(t, err != nil || !cmp.Equal(cleanup.Summary{}, again), "second run = %+v, %v; want nothing done", again, err)
	})

	t.Run("unreachable target keeps the finalizer", func(t *testing.T) {
		const ns2 = "apps2"
		create(t, src,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns2}},
			&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "lost"}, Spec: v1alpha1.TargetSpec{KubeconfigSecret: &v1alpha1.KubeconfigSecretReference{Name: "missing"}}},
			virtualNode("fleetlet-apps2-lost", "lost"),
		)
		stuck := pod(ns2, "stuck", "fleetlet-apps2-lost", nil, v1alpha1.FinalizerDelegate)
		create(t, src, stuck)
		sum, err := run(t, src, cleanup.Options{SourceName: "src"})
		require.Error(t, err, "cleanup succeeded though a target could not be reached")
		t.Logf("error, as expected: %v", err)
		assert.Falsef(t, sum.FinalizersRemoved != 0 || sum.VirtualNodesDeleted != 0, "summary %+v: nothing of the unreachable target's may go", sum)
		var p corev1.Pod
		err = src.Get(ctx, client.ObjectKeyFromObject(stuck), &p)
		assert.Falsef(t, err != nil || !slices.Contains(p.Finalizers, v1alpha1.FinalizerDelegate), "the proxy of an unreachable target lost its finalizer (%v)", err)
		assert.NoError(t, src.Get(ctx, client.ObjectKey{Name: "fleetlet-apps2-lost"}, &corev1.Node{}), "the virtual node of a proxy that keeps its finalizer was deleted")
		// The Target goes (helm uninstall): now it can finish.
		require.NoError(t, src.Delete(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "lost"}}))
		sum, err = run(t, src, cleanup.Options{SourceName: "src"})
		assert.Falsef(t, err != nil || sum.FinalizersRemoved != 1 || sum.VirtualNodesDeleted != 1, "after the Target went: %+v, %v", sum, err)
	})

	t.Run("target side", func(t *testing.T) {
		require.NoError(t, access.EnsureClusterRoles(ctx, tgt))
		require.NoError(t, summary.EnsurePriorityClass(ctx, tgt))
		p := pod(ns, "anyone", "", nil, v1alpha1.FinalizerDelegate)
		p.UID = "some-uid"
		left := chaperonOf(p, "another-source")
		srcObj := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "src", Finalizers: []string{access.FinalizerClusterRoleBinding, otherFinalizer}}}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: access.SourceClusterRoleBindingName(ns, "src"), Labels: map[string]string{
				access.LabelManagedBy: access.ManagedBy, access.LabelSourceKind: access.KindSource,
				access.LabelSourceName: "src", access.LabelSourceNamespace: ns,
			}},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: access.ClusterRoleSourceReader},
		}
		create(t, tgt, left, srcObj, crb)
		made := clusterSourceIdentity(ns, "fleet")
		foreign := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-fleetlets", Labels: map[string]string{access.LabelSourceKind: access.KindClusterSource}}}
		create(t, tgt, append(made, foreign)...)

		dry, err := run(t, tgt, cleanup.Options{DryRun: true})
		want := cleanup.Summary{ChaperonsDeleted: 1, SourceFinalizersRemoved: 1, ClusterObjectsDeleted: 4, SourceIdentitiesDeleted: 1 + len(made)}
		assert.Falsef(t, err != nil || !cmp.Equal(want, dry), "dry run = %+v, %v; want %+v", dry, err, want)
		assert.NoError(t, tgt.Get(ctx, client.ObjectKeyFromObject(left), &v1alpha1.PodChaperon{}), "the dry run deleted a chaperon")

		sum, err := run(t, tgt, cleanup.Options{})
		require.NoError(t, err)
		assert.Empty(t, cmp.Diff(want, sum), "summary (-want,+got)")
		err = tgt.Get(ctx, client.ObjectKeyFromObject(left), &v1alpha1.PodChaperon{})
		assert.Truef(t, apierrors.IsNotFound(err), "the chaperon of another source still exists (%v)", err)
		var s v1alpha1.Source
		require.NoError(t, tgt.Get(ctx, client.ObjectKeyFromObject(srcObj), &s))
		assert.Truef(t, slices.Equal(s.Finalizers, []string{otherFinalizer}), "Source finalizers = %v, want only %s", s.Finalizers, otherFinalizer)
		err = tgt.Get(ctx, client.ObjectKeyFromObject(crb), &rbacv1.ClusterRoleBinding{})
		assert.Truef(t, apierrors.IsNotFound(err), "the Source's ClusterRoleBinding still exists (%v)", err)
		for _, o := range made {
			err := tgt.Get(ctx, client.ObjectKeyFromObject(o), o)
			assert.Truef(t, apierrors.IsNotFound(err), "the ClusterSource's %T %s still exists (%v)", o, o.GetName(), err)
		}
		assert.NoError(t, tgt.Get(ctx, client.ObjectKeyFromObject(foreign), foreign), "a ServiceAccount fleetlet did not make was deleted")
		for _, o := range []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSource}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceReader}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceNamespaces}},
			&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PriorityClassCandidate}},
		} {
			err := tgt.Get(ctx, client.ObjectKeyFromObject(o), o)
			assert.Truef(t, apierrors.IsNotFound(err), "%T %s still exists (%v)", o, o.GetName(), err)
		}
		again, err := run(t, tgt, cleanup.Options{})
		assert.Falsef(t, err != nil || !cmp.Equal(cleanup.Summary{}, again), "second run = %+v, %v; want nothing done", again, err)
	})
}

// After `helm uninstall` deleted the CRDs: no error, finalizers and virtual
// nodes still go, and what fleetlet did not make stays.
func TestCleanupWithoutCRDs(t *testing.T) {
	testenv.Need(t, sourceEnv)
	testenv.Need(t, bareEnv)
	ctx := context.Background()
	c := newClient(t, bareEnv.Config)
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, virtualNode("fleetlet-t", "t"))
	p := pod("apps", "proxy", "fleetlet-t", nil, v1alpha1.FinalizerDelegate, otherFinalizer)
	notOurs := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSource}}
	create(t, c, p, notOurs)
	// What a ClusterSource owned, found by its labels alone (no CRD to
	// list ClusterSources with).
	made := clusterSourceIdentity("apps", "fleet")
	create(t, c, made...)

	sum, err := run(t, c, cleanup.Options{})
	require.NoError(t, err, "cleanup without CRDs")
	assert.Empty(t, cmp.Diff(cleanup.Summary{FinalizersRemoved: 1, VirtualNodesDeleted: 1, SourceIdentitiesDeleted: len(made)}, sum), "summary (-want,+got)")
	for _, o := range made {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		assert.Truef(t, apierrors.IsNotFound(err), "the ClusterSource's %T %s still exists (%v)", o, o.GetName(), err)
	}
	err = c.Get(ctx, client.ObjectKeyFromObject(p), p)
	assert.Falsef(t, err != nil || !slices.Equal(p.Finalizers, []string{otherFinalizer}), "proxy finalizers = %v (%v), want only %s", p.Finalizers, err, otherFinalizer)
	assert.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(notOurs), notOurs), "a ClusterRole without fleetlet's managed-by label was deleted")
	again, err := run(t, c, cleanup.Options{})
	assert.Falsef(t, err != nil || !cmp.Equal(cleanup.Summary{}, again), "second run = %+v, %v; want nothing done", again, err)
}

// clusterSourceIdentity is what the ClusterSource controller makes for a
// ClusterSource whose ServiceAccount lives in ns, labelled as it labels
// them (owner references left out: the CRD may be gone).
func clusterSourceIdentity(ns, name string) []client.Object {
	l := func() map[string]string {
		return map[string]string{access.LabelManagedBy: access.ManagedBy, access.LabelSourceKind: access.KindClusterSource, access.LabelSourceName: name}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "fleetlet-source-" + name}}
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleetlet-source-" + name, Labels: l()}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleetlet-heartbeat-" + name, Labels: l()}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleetlet-source-" + name, Labels: l()}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: access.ClusterRoleSource}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-clustersource-" + name + "-" + ns, Labels: l()}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: access.ClusterRoleSourceReader}},
	}
}
