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
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
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
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
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
	if !slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Errorf("chaperon %s was not deleted Foreground: finalizers %v", pc.Name, cur.Finalizers)
	}
	cur.Finalizers = nil
	if err := c.Update(context.Background(), &cur); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
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
		if err := src.Get(ctx, client.ObjectKeyFromObject(elected), &e); err != nil {
			t.Fatal(err)
		}
		if e.DeletionTimestamp != nil || !slices.Contains(e.Finalizers, v1alpha1.FinalizerDelegate) {
			t.Errorf("the elected proxy lost its finalizer or was deleted before its chaperon was gone: %+v", e.ObjectMeta)
		}
		gcChaperon(t, tgt, delegate)

		res := <-done
		if res.err != nil {
			t.Fatalf("cleanup: %v", res.err)
		}
		want := cleanup.Summary{GatedProxiesDeleted: 1, RemoteChaperonsDeleted: 2, FinalizersRemoved: 2, VirtualNodesDeleted: 1}
		if diff := cmp.Diff(want, res.sum); diff != "" {
			t.Errorf("summary (-want,+got):\n%s", diff)
		}

		if err := src.Get(ctx, client.ObjectKeyFromObject(gated), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("the gated proxy still exists (%v)", err)
		}
		if err := src.Get(ctx, client.ObjectKeyFromObject(elected), &e); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{otherFinalizer}, e.Finalizers); diff != "" {
			t.Errorf("elected proxy finalizers (-want,+got):\n%s", diff)
		}
		if e.DeletionTimestamp != nil {
			t.Error("the elected proxy was deleted")
		}
		var p corev1.Pod
		if err := src.Get(ctx, client.ObjectKeyFromObject(plain), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.SchedulingGates) != 1 || !slices.Equal(p.Finalizers, []string{otherFinalizer}) || p.DeletionTimestamp != nil {
			t.Errorf("a pod fleetlet never managed was touched: %+v %+v", p.ObjectMeta, p.Spec.SchedulingGates)
		}
		if err := src.Get(ctx, client.ObjectKey{Name: "fleetlet-apps-t1"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
			t.Errorf("the virtual node still exists (%v)", err)
		}
		if err := src.Get(ctx, client.ObjectKey{Name: "lookalike"}, &corev1.Node{}); err != nil {
			t.Errorf("a node without the cluster label was deleted: %v", err)
		}

		again, err := run(t, src, cleanup.Options{SourceName: "src"})
		if err != nil || !cmp.Equal(cleanup.Summary{}, again) {
			t.Errorf("second run = %+v, %v; want nothing done", again, err)
		}
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
		if err == nil {
			t.Fatal("cleanup succeeded though a target could not be reached")
		}
		t.Logf("error, as expected: %v", err)
		if sum.FinalizersRemoved != 0 || sum.VirtualNodesDeleted != 0 {
			t.Errorf("summary %+v: nothing of the unreachable target's may go", sum)
		}
		var p corev1.Pod
		if err := src.Get(ctx, client.ObjectKeyFromObject(stuck), &p); err != nil || !slices.Contains(p.Finalizers, v1alpha1.FinalizerDelegate) {
			t.Errorf("the proxy of an unreachable target lost its finalizer (%v)", err)
		}
		if err := src.Get(ctx, client.ObjectKey{Name: "fleetlet-apps2-lost"}, &corev1.Node{}); err != nil {
			t.Errorf("the virtual node of a proxy that keeps its finalizer was deleted: %v", err)
		}
		// The Target goes (helm uninstall): now it can finish.
		if err := src.Delete(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "lost"}}); err != nil {
			t.Fatal(err)
		}
		sum, err = run(t, src, cleanup.Options{SourceName: "src"})
		if err != nil || sum.FinalizersRemoved != 1 || sum.VirtualNodesDeleted != 1 {
			t.Errorf("after the Target went: %+v, %v", sum, err)
		}
	})

	t.Run("target side", func(t *testing.T) {
		if err := access.EnsureClusterRoles(ctx, tgt); err != nil {
			t.Fatal(err)
		}
		if err := summary.EnsurePriorityClass(ctx, tgt); err != nil {
			t.Fatal(err)
		}
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
		if err != nil || !cmp.Equal(want, dry) {
			t.Errorf("dry run = %+v, %v; want %+v", dry, err, want)
		}
		if err := tgt.Get(ctx, client.ObjectKeyFromObject(left), &v1alpha1.PodChaperon{}); err != nil {
			t.Errorf("the dry run deleted a chaperon: %v", err)
		}

		sum, err := run(t, tgt, cleanup.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, sum); diff != "" {
			t.Errorf("summary (-want,+got):\n%s", diff)
		}
		if err := tgt.Get(ctx, client.ObjectKeyFromObject(left), &v1alpha1.PodChaperon{}); !apierrors.IsNotFound(err) {
			t.Errorf("the chaperon of another source still exists (%v)", err)
		}
		var s v1alpha1.Source
		if err := tgt.Get(ctx, client.ObjectKeyFromObject(srcObj), &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Finalizers, []string{otherFinalizer}) {
			t.Errorf("Source finalizers = %v, want only %s", s.Finalizers, otherFinalizer)
		}
		if err := tgt.Get(ctx, client.ObjectKeyFromObject(crb), &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Source's ClusterRoleBinding still exists (%v)", err)
		}
		for _, o := range made {
			if err := tgt.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				t.Errorf("the ClusterSource's %T %s still exists (%v)", o, o.GetName(), err)
			}
		}
		if err := tgt.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
			t.Errorf("a ServiceAccount fleetlet did not make was deleted: %v", err)
		}
		for _, o := range []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSource}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceReader}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: access.ClusterRoleSourceNamespaces}},
			&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PriorityClassCandidate}},
		} {
			if err := tgt.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s still exists (%v)", o, o.GetName(), err)
			}
		}
		again, err := run(t, tgt, cleanup.Options{})
		if err != nil || !cmp.Equal(cleanup.Summary{}, again) {
			t.Errorf("second run = %+v, %v; want nothing done", again, err)
		}
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
	if err != nil {
		t.Fatalf("cleanup without CRDs: %v", err)
	}
	if diff := cmp.Diff(cleanup.Summary{FinalizersRemoved: 1, VirtualNodesDeleted: 1, SourceIdentitiesDeleted: len(made)}, sum); diff != "" {
		t.Errorf("summary (-want,+got):\n%s", diff)
	}
	for _, o := range made {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("the ClusterSource's %T %s still exists (%v)", o, o.GetName(), err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil || !slices.Equal(p.Finalizers, []string{otherFinalizer}) {
		t.Errorf("proxy finalizers = %v (%v), want only %s", p.Finalizers, err, otherFinalizer)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(notOurs), notOurs); err != nil {
		t.Errorf("a ClusterRole without fleetlet's managed-by label was deleted: %v", err)
	}
	again, err := run(t, c, cleanup.Options{})
	if err != nil || !cmp.Equal(cleanup.Summary{}, again) {
		t.Errorf("second run = %+v, %v; want nothing done", again, err)
	}
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
