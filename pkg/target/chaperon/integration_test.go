package chaperon

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// The chaperon's pod is created as the Source's ServiceAccount, owned by
// the chaperon, and mirrored back as a kubelet and scheduler change it.
func TestCreatesPodAsSourceAndMirrorsIt(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, map[string]string{labelCreatorCheck: "cluster-a"})
	sa := provisionSource(t, ns, "cluster-a")
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: sa})
	waitCreatorPolicy(t, ns)

	ch := makeChaperon(ns, "web-0a1b2c3d").
		labels(map[string]string{v1alpha1.LabelParentUID: "proxy-uid-1", v1alpha1.LabelParentCluster: "cluster-a"}).
		annotations(map[string]string{v1alpha1.AnnotationParentName: "web", v1alpha1.AnnotationParentNamespace: "shop"}).
		templateLabels(map[string]string{"app": "web", v1alpha1.LabelParentUID: "forged"}).
		templateAnnotations(map[string]string{"note": "kept"}).obj()
	create(t, ch)

	// A candidate's pod created costs its chaperon no status write until
	// the pod has news (a scheduler's word, a binding): that record was
	// every candidate's write, and a losing candidate's only one.
	waitPod(t, ch)
	time.Sleep(time.Second) // the passes the pod's creation brings
	assert.Empty(t, getChaperon(t, ch).Status, "the status of a chaperon whose pod no one has touched yet")

	got := recorded(t, ch)
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &pod))
	// Only source cluster-a's ServiceAccount passes the creator policy of
	// this namespace (the administrator does not, see waitCreatorPolicy):
	// the pod exists, so the API server saw it created as that account.
	wantLabels := map[string]string{"app": "web", v1alpha1.LabelParentUID: "proxy-uid-1", v1alpha1.LabelParentCluster: "cluster-a"}
	assert.Empty(t, cmp.Diff(wantLabels, pod.Labels), "pod labels (-want,+got)")
	wantAnnotations := map[string]string{"note": "kept", v1alpha1.AnnotationParentName: "web", v1alpha1.AnnotationParentNamespace: "shop"}
	assert.Empty(t, cmp.Diff(wantAnnotations, pod.Annotations), "pod annotations (-want,+got)")
	assert.Empty(t, cmp.Diff([]metav1.OwnerReference{OwnerReference(got)}, pod.OwnerReferences), "pod owner references (-want,+got)")
	ref := pod.OwnerReferences[0]
	assert.Falsef(t, ref.UID != got.UID || !*ref.Controller || !*ref.BlockOwnerDeletion, "owner reference %+v does not control and block the chaperon %s", ref, got.UID)
	assert.Equalf(t, ch.Spec.Template.Spec.Containers[0].Image, pod.Spec.Containers[0].Image, "pod image %q, want the template's", pod.Spec.Containers[0].Image)
	assert.Falsef(t, len(pod.ManagedFields) == 0 || pod.ManagedFields[0].Manager != FieldOwner, "pod field managers %v, want %s", pod.ManagedFields, FieldOwner)
	assert.Falsef(t, got.Status.ObservedGeneration != got.Generation || got.Status.PodStatus.Phase != corev1.PodPending,
		"status observedGeneration %d (generation %d), podStatus.phase %q, want Pending",
		got.Status.ObservedGeneration, got.Generation, got.Status.PodStatus.Phase)
	waitCondition(t, ch, metav1.ConditionTrue, ReasonPodCreated)

	t.Run("the candidate scheduler's reservation costs no status write", func(t *testing.T) {
		// The reservation is the annotation's to say: mirrored as
		// status.nodeName, it cost every candidate a write more.
		patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) { c.Annotations[v1alpha1.AnnotationReserved] = "node-r" })
		got := lookAgain(t, ch) // a pass that sees the reservation
		assert.Empty(t, got.Status.NodeName, "status.nodeName of a candidate reserved, not bound")
	})
	t.Run("the node it is bound to", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(env.Config)
		require.NoError(t, cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "node-b"},
		}, metav1.CreateOptions{}))
		waitChaperon(t, ch, "status.nodeName node-b", func(c *v1alpha1.PodChaperon) error {
			return expect("status.nodeName", c.Status.NodeName, "node-b")
		})
	})
	t.Run("the pod's status, as its kubelet writes it", func(t *testing.T) {
		var p corev1.Pod
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &p))
		start := metav1.NewTime(time.Now().Truncate(time.Second))
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "10.0.0.7"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}}
		p.Status.HostIP = "192.168.0.2"
		p.Status.StartTime = &start
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start,
		})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: "registry.example/app:1", ImageID: "sha256:1", Ready: true, Started: ptrTo(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
		}}
		require.NoError(t, k8sClient.Status().Update(ctx, &p))
		waitChaperon(t, ch, "status.podStatus mirrors the pod", func(c *v1alpha1.PodChaperon) error {
			if diff := cmp.Diff(p.Status, c.Status.PodStatus); diff != "" {
				return fmt.Errorf("podStatus (-pod,+chaperon):\n%s", diff)
			}
			return expect("status.nodeName", c.Status.NodeName, "node-b")
		})
	})
	t.Run("another source refused by the target's admission: PodRejected, nothing created", func(t *testing.T) {
		saB := provisionSource(t, ns, "cluster-b")
		grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: saB})
		chB := makeChaperon(ns, "web-b-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-b").obj()
		create(t, chB)
		c := waitCondition(t, chB, metav1.ConditionFalse, ReasonPodRejected)
		// The policy's message names the creator as the API server saw it.
		want := "not by system:serviceaccount:" + ns + ":" + saB
		msg := podCreated(c).Message
		assert.Containsf(t, msg, want, "PodRejected message %q does not contain %q", msg, want)
		assertNoPod(t, chB)
		waitEvent(t, chB, ReasonPodRejected, want)
	})
}

// A source whose ServiceAccount may not create pods in the namespace gets
// PodRejected with the API server's RBAC message, where the manager
// itself could have created the pod; once the right is granted, the
// backoff retry creates it.
func TestPodRejectedByRBACUntilGranted(t *testing.T) {
	testenv.Need(t, env)
	ns := newNamespace(t, nil)
	sa := provisionSourceByHand(t, ns, "cluster-h", "sa-h")
	ch := makeChaperon(ns, "job-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-h").obj()
	create(t, ch)

	c := waitCondition(t, ch, metav1.ConditionFalse, ReasonPodRejected)
	for _, want := range []string{`"system:serviceaccount:` + ns + ":" + sa.Name + `"`, `cannot create resource "pods"`} {
		msg := podCreated(c).Message
		assert.Containsf(t, msg, want, "PodRejected message %q does not contain %q", msg, want)
	}
	assertNoPod(t, ch)
	// The manager's own identity (an administrator's) would have been
	// allowed: the refusal is the source's.
	control := BuildPod(ch)
	control.Name, control.OwnerReferences = "control", nil
	require.NoError(t, k8sClient.Create(t.Context(), control, client.DryRunAll), "the administrator cannot create the same pod either")

	grantPodCreate(t, ns, sa)
	recorded(t, ch)
}

// A pod that was created and then deleted is not created again.
func TestDeletedPodIsNotRecreated(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	_, ch := createdChaperon(t, "api-0a1b2c3d")

	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &pod))
	require.NoError(t, k8sClient.Delete(ctx, &pod, client.GracePeriodSeconds(0)))
	waitCondition(t, ch, metav1.ConditionFalse, ReasonPodDeleted)
	waitEvent(t, ch, ReasonPodDeleted, "does not create it again")

	// Make the controller look again, and see it did.
	c := lookAgain(t, ch)
	assertNoPod(t, ch)
	cond := podCreated(c)
	assert.Equalf(t, ReasonPodDeleted, cond.Reason, "PodCreated %s %s, want it to stay PodDeleted", cond.Status, cond.Reason)
}

// Before its pod has news, a candidate's creation is recorded by its
// source's mark alone: a marked candidate's pod deleted then is not
// created again (it may have been bound and run), while an unmarked one's,
// which never ran, is created again as a new candidate. Before the record
// waited, both were recorded deleted.
func TestMarkIsTheRecordUntilThePodHasNews(t *testing.T) {
	testenv.Need(t, env)
	ns := newNamespace(t, nil)
	sa := provisionSource(t, ns, "cluster-a")
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: sa})
	marked := makeChaperon(ns, "marked-0a1b2c3d").restartPolicy(corev1.RestartPolicyNever).obj()
	unmarked := makeChaperon(ns, "unmarked-0a1b2c3d").restartPolicy(corev1.RestartPolicyNever).obj()
	create(t, marked)
	create(t, unmarked)
	waitPod(t, marked)
	firstUID := waitPod(t, unmarked).UID
	patchChaperon(t, marked, func(c *v1alpha1.PodChaperon) { c.Annotations[v1alpha1.AnnotationElected] = "true" })
	waitChaperon(t, marked, "the mark in the cache", func(c *v1alpha1.PodChaperon) error {
		return expect("elected", c.Annotations[v1alpha1.AnnotationElected], "true")
	})
	time.Sleep(time.Second) // the passes the mark brings
	assert.Nil(t, podCreated(getChaperon(t, marked)), "the record of a marked candidate whose pod has no news")

	deletePod(t, marked)
	deletePod(t, unmarked)
	waitCondition(t, marked, metav1.ConditionFalse, ReasonPodDeleted)
	assertStaysDeleted(t, marked)
	again := waitPod(t, unmarked)
	assert.NotEqual(t, firstUID, again.UID, "the unmarked candidate's pod, created again")
	assert.Nil(t, podCreated(getChaperon(t, unmarked)), "the record of the unmarked candidate's new pod, which has no news")
}

// A chaperon deleted with a grace period passed by its source (its proxy
// deleted with `kubectl delete --grace-period=7`) deletes its pod with it,
// not with the pod's own 30 s; a pod already going with a longer one is
// deleted again, shorter. Before: the pod always went with its own grace
// period, whatever the proxy's delete said.
func TestDeletedChaperonPassesItsGracePeriod(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns, ch := createdChaperon(t, "web-0a1b2c3d")

	// Bound, and held by a finalizer, as a pod whose kubelet stops it.
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &pod))
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-x"}}
	require.NoError(t, k8sClient.SubResource("binding").Create(ctx, &pod, binding))
	held := pod.DeepCopy()
	held.Finalizers = append(held.Finalizers, "e2e.fleetlet.io/hold")
	require.NoError(t, k8sClient.Patch(ctx, held, client.MergeFrom(&pod)))
	t.Cleanup(func() {
		_ = k8sClient.Patch(context.Background(), held, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})

	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) { c.Annotations[v1alpha1.AnnotationDeletionGracePeriod] = "7" })
	require.NoError(t, k8sClient.Delete(ctx, ch, client.PropagationPolicy(metav1.DeletePropagationForeground)))
	testenv.Eventually(t, waitTimeout, "the pod deleted with the passed grace period", func() error {
		var p corev1.Pod
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &p); err != nil {
			return err
		}
		if g := p.DeletionGracePeriodSeconds; g == nil || *g != 7 {
			return fmt.Errorf("deletionGracePeriodSeconds %s, want 7", describeGrace(g))
		}
		return nil
	})
}

// A chaperon being deleted whose pod is gone asks the API server nothing
// more about it: nothing is created for a chaperon that is going. Before:
// each pass after the pod went confirmed it gone with a live read.
func TestDeletingChaperonReadsNoPodLive(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns, ch := createdChaperon(t, "db-0a1b2c3d")
	t.Cleanup(func() { // no garbage collector here to end the foreground deletion
		_ = k8sClient.Patch(context.Background(), ch, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})

	// The harness lists pods from here on: every GET of one is the
	// controller's.
	before := testenv.Served(t, env.Config)
	require.NoError(t, k8sClient.Delete(ctx, ch, client.PropagationPolicy(metav1.DeletePropagationForeground)))
	testenv.Eventually(t, waitTimeout, "the controller deleted the pod of the chaperon being deleted", func() error {
		var pods corev1.PodList
		if err := k8sClient.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Name == ch.Name {
				return fmt.Errorf("pod %s still there", p.Name)
			}
		}
		return nil
	})
	time.Sleep(time.Second) // the passes the pod's deletion brings
	const get = "GET pods/"
	assert.Zerof(t, testenv.Served(t, env.Config)[get]-before[get], "pods read from the API server for a chaperon being deleted")
}

func describeGrace(g *int64) string {
	if g == nil {
		return "unset"
	}
	return fmt.Sprint(*g)
}

func TestDeletionGrace(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "7": 7, "31536000": 31536000, "-1": -1, "x": -1, "31536001": -1, "": -1} {
		ch := makeChaperon("ns", "c").annotations(map[string]string{v1alpha1.AnnotationDeletionGracePeriod: v}).obj()
		got, ok := DeletionGrace(ch)
		assert.Falsef(t, (want >= 0) != ok || (ok && got != want), "DeletionGrace(%q) = %d, %t; want %d", v, got, ok, want)
	}
	_, ok := DeletionGrace(makeChaperon("ns", "c").obj())
	assert.False(t, ok, "a chaperon without the annotation has a grace period")
}

// A pod of the chaperon's name that it does not own is never touched; the
// chaperon gets its pod once that one is gone.
func TestForeignPodIsLeftAlone(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, nil)
	sa := provisionSource(t, ns, "cluster-a")
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: sa})
	foreign := foreignPod(ns, "db-0a1b2c3d")
	foreign.UID = ""
	require.NoError(t, k8sClient.Create(ctx, foreign))
	before := foreign.DeepCopy()

	ch := makeChaperon(ns, "db-0a1b2c3d").obj()
	create(t, ch)
	waitCondition(t, ch, metav1.ConditionFalse, ReasonPodNotOwned)
	waitEvent(t, ch, ReasonPodNotOwned, "leaves it alone")

	var after corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(foreign), &after))
	assert.Falsef(t, after.ResourceVersion != before.ResourceVersion || after.UID != before.UID || len(after.OwnerReferences) != 0,
		"the foreign pod was touched: resourceVersion %s→%s, uid %s→%s, owners %v",
		before.ResourceVersion, after.ResourceVersion, before.UID, after.UID, after.OwnerReferences)

	// Once it is gone, the chaperon, which never had a pod, gets one.
	require.NoError(t, k8sClient.Delete(ctx, &after, client.GracePeriodSeconds(0)))
	recorded(t, ch)
}

// Without a Source there is no pod, and the chaperon says why; the Source's
// arrival wakes it up.
func TestSourceNotFoundUntilAdmitted(t *testing.T) {
	testenv.Need(t, env)
	ns := newNamespace(t, nil)
	ch := makeChaperon(ns, "late-0a1b2c3d").label(v1alpha1.LabelParentCluster, "cluster-late").obj()
	create(t, ch)
	c := waitCondition(t, ch, metav1.ConditionFalse, ReasonSourceNotFound)
	msg := podCreated(c).Message
	assert.Containsf(t, msg, `No Source "cluster-late"`, "SourceNotFound message %q", msg)
	waitEvent(t, ch, ReasonSourceNotFound, "cluster-late")
	assertNoPod(t, ch)

	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: access.DefaultServiceAccountName("cluster-late")})
	provisionSource(t, ns, "cluster-late")
	recorded(t, ch)
}

// A ClusterSource's ServiceAccount creates pods in the namespaces it
// selects, and only there.
func TestClusterSource(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	saNS := newNamespace(t, nil)
	name := "cs-" + saNS // unique: ClusterSources are cluster-scoped
	selected := newNamespace(t, map[string]string{access.DefaultNamespaceLabel(name): "true"})
	other := newNamespace(t, nil)
	sa := types.NamespacedName{Namespace: saNS, Name: access.DefaultServiceAccountName(name)}
	grantPodCreate(t, selected, sa)
	grantPodCreate(t, other, sa)
	cs := &v1alpha1.ClusterSource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: saNS},
	}
	require.NoError(t, k8sClient.Create(ctx, cs))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), cs) })

	inSelected := makeChaperon(selected, "a-0a1b2c3d").label(v1alpha1.LabelParentCluster, name).obj()
	inOther := makeChaperon(other, "b-0a1b2c3d").label(v1alpha1.LabelParentCluster, name).obj()
	create(t, inSelected)
	create(t, inOther)
	recorded(t, inSelected)
	waitCondition(t, inOther, metav1.ConditionFalse, ReasonNamespaceNotSelected)
	assertNoPod(t, inOther)

	// Selecting the namespace wakes its chaperon up.
	var ns corev1.Namespace
	require.NoError(t, k8sClient.Get(ctx, types.NamespacedName{Name: other}, &ns))
	ns.Labels[access.DefaultNamespaceLabel(name)] = "true"
	require.NoError(t, k8sClient.Update(ctx, &ns))
	recorded(t, inOther)
}

// The manager's right to impersonate can be exactly "create pods as this
// ServiceAccount" with constrained impersonation, as the package
// documentation proposes: no other verb, no other account.
func TestConstrainedImpersonationIsEnough(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, nil)
	for _, name := range []string{"manager", "source-x", "source-y"} {
		require.NoError(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	}
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: "source-x"})
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: "source-y"})
	bindRole(t, ns, "impersonate-source-x", types.NamespacedName{Namespace: ns, Name: "manager"}, []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"source-x"}, Verbs: []string{"impersonate:serviceaccount"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"impersonate-on:serviceaccount:create"}},
	})

	// The manager's REST mapper, as SetupWithManager shares it: the
	// impersonated identity may do nothing but create pods, not even
	// discovery.
	imp, err := NewImpersonator(tokenConfig(t, ns, "manager"), client.Options{Scheme: scheme, Mapper: k8sClient.RESTMapper()})
	require.NoError(t, err)
	asX, _ := imp.ClientFor("system:serviceaccount:" + ns + ":source-x")
	asY, _ := imp.ClientFor("system:serviceaccount:" + ns + ":source-y")
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		}
	}
	testenv.Eventually(t, waitTimeout, "the manager creates a pod as source-x", func() error {
		return asX.Create(ctx, pod("as-x"))
	})
	err = asY.Create(ctx, pod("as-y"))
	assert.Truef(t, apierrors.IsForbidden(err), "creating as source-y: %v, want Forbidden", err)
	err = asX.Get(ctx, types.NamespacedName{Namespace: ns, Name: "as-x"}, &corev1.Pod{})
	assert.Truef(t, apierrors.IsForbidden(err), "reading as source-x: %v, want Forbidden (only create is allowed)", err)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "chaperon-", Labels: labels}}
	require.NoError(t, k8sClient.Create(t.Context(), ns))
	return ns.Name
}

// provisionSource creates a Source that the real Source controller
// provisions, waits until it is Ready and returns its ServiceAccount.
func provisionSource(t *testing.T, namespace, name string) string {
	t.Helper()
	src := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{labelProvisioned: "true"}}}
	require.NoError(t, k8sClient.Create(t.Context(), src))
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("Source %s/%s Ready", namespace, name), func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(src), src); err != nil {
			return err
		}
		c := meta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || src.Status.ServiceAccountName == "" {
			return fmt.Errorf("not Ready: %+v", src.Status)
		}
		return nil
	})
	return src.Status.ServiceAccountName
}

// provisionSourceByHand creates a Source the Source controller does not
// see, and its ServiceAccount with no rights at all, and marks it Ready.
func provisionSourceByHand(t *testing.T, namespace, name, serviceAccount string) types.NamespacedName {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceAccount}}))
	src := &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.SourceSpec{ServiceAccountName: serviceAccount}}
	require.NoError(t, k8sClient.Create(ctx, src))
	src.Status = v1alpha1.SourceStatus{
		ObservedGeneration: src.Generation,
		ServiceAccountName: serviceAccount,
		Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProvisioned,
			Message: "provisioned by the test", ObservedGeneration: src.Generation, LastTransitionTime: metav1.Now(),
		}},
	}
	require.NoError(t, k8sClient.Status().Update(ctx, src))
	return types.NamespacedName{Namespace: namespace, Name: serviceAccount}
}

// grantPodCreate lets sa create pods in namespace.
func grantPodCreate(t *testing.T, namespace string, sa types.NamespacedName) {
	t.Helper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "pods-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRoleSourcePods},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	require.NoError(t, k8sClient.Create(t.Context(), rb))
}

// bindRole creates a Role with rules in namespace and binds sa to it.
func bindRole(t *testing.T, namespace, name string, sa types.NamespacedName, rules []rbacv1.PolicyRule) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	for _, obj := range []client.Object{role, rb} {
		require.NoError(t, k8sClient.Create(t.Context(), obj))
	}
}

// tokenConfig is a client configuration authenticated as a ServiceAccount
// (TokenRequest: envtest runs no token controller).
func tokenConfig(t *testing.T, namespace, name string) *rest.Config {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
}

// waitCreatorPolicy waits until the creator policy refuses, in namespace,
// a pod the administrator creates: from then on, only the source's
// ServiceAccount can create pods there.
func waitCreatorPolicy(t *testing.T, namespace string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "the creator policy refuses the administrator", func() error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "admin-probe"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		}
		err := k8sClient.Create(t.Context(), pod, client.DryRunAll)
		if err == nil {
			return fmt.Errorf("the administrator may still create pods")
		}
		if !strings.Contains(err.Error(), "not by ") {
			return err
		}
		return nil
	})
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	require.NoError(t, k8sClient.Create(t.Context(), obj))
}

// patchChaperon changes a chaperon's metadata as a source would.
func patchChaperon(t *testing.T, ch *v1alpha1.PodChaperon, change func(*v1alpha1.PodChaperon)) {
	t.Helper()
	var cur v1alpha1.PodChaperon
	require.NoError(t, k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &cur))
	orig := cur.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	change(&cur)
	require.NoError(t, k8sClient.Patch(t.Context(), &cur, client.MergeFrom(orig)))
}

// createdChaperon makes a namespace where source cluster-a may create pods,
// and a chaperon there whose pod the controller has created.
func createdChaperon(t *testing.T, name string) (ns string, ch *v1alpha1.PodChaperon) {
	t.Helper()
	ns = newNamespace(t, nil)
	sa := provisionSource(t, ns, "cluster-a")
	grantPodCreate(t, ns, types.NamespacedName{Namespace: ns, Name: sa})
	ch = makeChaperon(ns, name).obj()
	create(t, ch)
	recorded(t, ch)
	return ns, ch
}

// lookAgain makes the controller reconcile ch again and returns ch once it
// has: a change of the template (a probe annotation) moves the generation,
// and the controller records each generation it has looked at as
// status.observedGeneration.
func lookAgain(t *testing.T, ch *v1alpha1.PodChaperon) *v1alpha1.PodChaperon {
	t.Helper()
	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) {
		if c.Spec.Template.Metadata.Annotations == nil {
			c.Spec.Template.Metadata.Annotations = map[string]string{}
		}
		c.Spec.Template.Metadata.Annotations["test.fleetlet.io/look-again"] = strconv.FormatInt(time.Now().UnixNano(), 10)
	})
	want := getChaperon(t, ch).Generation
	return waitChaperon(t, ch, fmt.Sprintf("status.observedGeneration %d", want), func(c *v1alpha1.PodChaperon) error {
		if c.Status.ObservedGeneration < want {
			return fmt.Errorf("status.observedGeneration %d", c.Status.ObservedGeneration)
		}
		return nil
	})
}

func getChaperon(t *testing.T, ch *v1alpha1.PodChaperon) *v1alpha1.PodChaperon {
	t.Helper()
	var got v1alpha1.PodChaperon
	require.NoError(t, k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &got))
	return &got
}

// waitChaperon waits until check passes on the chaperon and returns it.
func waitChaperon(t *testing.T, ch *v1alpha1.PodChaperon, what string, check func(*v1alpha1.PodChaperon) error) *v1alpha1.PodChaperon {
	t.Helper()
	var got v1alpha1.PodChaperon
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("PodChaperon %s: %s", klogKey(ch), what), func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &got); err != nil {
			return err
		}
		return check(&got)
	})
	return &got
}

// waitCondition waits for PodCreated to be status/reason for the current
// generation.
func waitCondition(t *testing.T, ch *v1alpha1.PodChaperon, status metav1.ConditionStatus, reason string) *v1alpha1.PodChaperon {
	t.Helper()
	return waitChaperon(t, ch, fmt.Sprintf("PodCreated=%s %s", status, reason), func(c *v1alpha1.PodChaperon) error {
		cond := podCreated(c)
		if cond == nil {
			return fmt.Errorf("no PodCreated condition")
		}
		if cond.Status != status || cond.Reason != reason || cond.ObservedGeneration != c.Generation || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("PodCreated=%s %s (generation %d observed %d): %s", cond.Status, cond.Reason, c.Generation, cond.ObservedGeneration, cond.Message)
		}
		return nil
	})
}

// recorded waits for ch's pod, gives it news as a target's scheduler
// would, and waits for the record of its creation (which waits for the
// pod's first news: recordWaits).
func recorded(t *testing.T, ch *v1alpha1.PodChaperon) *v1alpha1.PodChaperon {
	t.Helper()
	touchPod(t, ch)
	return waitCondition(t, ch, metav1.ConditionTrue, ReasonPodCreated)
}

// touchedCondition is the pod condition touchPod writes.
const touchedCondition corev1.PodConditionType = "test.fleetlet.io/Touched"

// touchPod waits for ch's pod and writes a condition to its status, as a
// scheduler does when it cannot place it yet.
func touchPod(t *testing.T, ch *v1alpha1.PodChaperon) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "a condition written to the pod of "+klogKey(ch), func() error {
		pod := waitPod(t, ch)
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: touchedCondition, Status: corev1.ConditionTrue})
		return k8sClient.Status().Update(t.Context(), pod)
	})
}

// waitPod waits until ch's pod exists and returns it.
func waitPod(t *testing.T, ch *v1alpha1.PodChaperon) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	testenv.Eventually(t, waitTimeout, "the pod of "+klogKey(ch), func() error {
		return k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &pod)
	})
	return &pod
}

func podCreated(c *v1alpha1.PodChaperon) *metav1.Condition {
	return meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionPodCreated)
}

// waitEvent waits for an Event on the chaperon with reason and a note
// containing text.
func waitEvent(t *testing.T, ch *v1alpha1.PodChaperon, reason, text string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("Event %s on %s", reason, klogKey(ch)), func() error {
		var list eventsv1.EventList
		if err := k8sClient.List(t.Context(), &list, client.InNamespace(ch.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == KindPodChaperon && e.Regarding.Name == ch.Name {
				if e.Reason == reason && strings.Contains(e.Note, text) {
					return nil
				}
				seen = append(seen, e.Reason+": "+e.Note)
			}
		}
		return fmt.Errorf("events: %q", seen)
	})
}

func assertNoPod(t *testing.T, ch *v1alpha1.PodChaperon) {
	t.Helper()
	err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(ch), &corev1.Pod{})
	assert.Truef(t, apierrors.IsNotFound(err), "pod %s: %v, want NotFound", klogKey(ch), err)
}

func expect(what, got, want string) error {
	if got != want {
		return fmt.Errorf("%s = %q, want %q", what, got, want)
	}
	return nil
}

func klogKey(obj client.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }
