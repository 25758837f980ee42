package chaperon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const (
	testNS       = "shop"
	testName     = "web-1a2b3c4d"
	chaperonUID  = types.UID("chaperon-uid")
	sourceUser   = "system:serviceaccount:shop:fleetlet-source-cluster-a"
	testInterval = 7 * time.Second
	testBackoff  = 3 * time.Second
	// testDelay is the reconciler's RecreateDelay in the unit tests.
	testDelay = 30 * time.Second
)

// testNow is the fake clock's time in the unit tests.
var testNow = time.Unix(1_000_000, 0)

// fakeImpersonator hands out clients that create through the fake API
// server, recording who created what, and failing with createErr if set.
type fakeImpersonator struct {
	c         client.WithWatch
	createErr error

	mu      sync.Mutex
	creates []string // "user namespace/name"
}

func (f *fakeImpersonator) ClientFor(user string) (client.Client, error) {
	return interceptor.NewClient(f.c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			f.mu.Lock()
			f.creates = append(f.creates, user+" "+obj.GetNamespace()+"/"+obj.GetName())
			f.mu.Unlock()
			if f.createErr != nil {
				return f.createErr
			}
			if pod, ok := obj.(*corev1.Pod); ok && pod.UID == "" {
				pod.UID = "created-pod-uid" // the fake API server sets none
			}
			return c.Create(ctx, obj, opts...)
		},
	}), nil
}

// staleCache is the manager's cache seen late: it shows chaperon (when
// set) as it was, and hides the pods in hidePods.
type staleCache struct {
	client.Client
	chaperon *v1alpha1.PodChaperon
	hidePods bool
	// lease, when set, is what the cache shows of the Lease of its name.
	lease *coordinationv1.Lease
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch o := obj.(type) {
	case *v1alpha1.PodChaperon:
		if s.chaperon != nil && key == client.ObjectKeyFromObject(s.chaperon) {
			s.chaperon.DeepCopyInto(o)
			return nil
		}
	case *corev1.Pod:
		if s.hidePods {
			return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
		}
	case *coordinationv1.Lease:
		if s.lease != nil && key == client.ObjectKeyFromObject(s.lease) {
			s.lease.DeepCopyInto(o)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

// reconcileCase is one chaperon reconciled once (or more) against fakes.
type reconcileCase struct {
	name     string
	chaperon *v1alpha1.PodChaperon
	objects  []client.Object
	// createErr makes every impersonated create fail.
	createErr error
	// staleChaperon, when set, is what the cache shows of the chaperon,
	// the chaperon itself being what the API server has.
	staleChaperon *v1alpha1.PodChaperon
	// hidePods hides every pod from the cache.
	hidePods bool
	// staleLease, when set, is what the cache shows of the Lease of its
	// name, the API server having the one in objects.
	staleLease *coordinationv1.Lease
	// times reconciles this many times (default 1).
	times int

	wantCreates []string
	wantStatus  metav1.ConditionStatus
	wantReason  string // "" with wantStatus "": no condition
	wantMessage string // a substring of the condition's message
	wantResult  ctrl.Result
	wantErr     bool
	// wantPods are the pods after reconciling, by name: their UID.
	wantPods map[string]types.UID
	// wantPodStatus and wantNodeName check the mirror.
	wantPodStatus *corev1.PodStatus
	wantNodeName  string
	// wantEvents are the reasons of the Events recorded, in order.
	wantEvents []string
}

func TestReconcile(t *testing.T) {
	chaperon := func() *chaperonWrapper { return makeChaperon(testNS, testName).uid(chaperonUID) }
	ns := namespace(testNS, map[string]string{"team": "shop"})
	source := readySource(testNS, "cluster-a", "fleetlet-source-cluster-a")
	created := []string{sourceUser + " " + testNS + "/" + testName}
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), testName,
		fmt.Errorf(`User %q cannot create resource "pods" in API group "" in the namespace %q`, sourceUser, testNS))

	tests := []reconcileCase{
		{
			// The record waits for the pod's first news (recordWaits).
			name:        "creates the pod as the Source's ServiceAccount, and writes nothing yet",
			chaperon:    chaperon().obj(),
			objects:     []client.Object{ns, source},
			wantCreates: created,
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  nil, // a candidate created is no Event
		},
		{
			name:     "a ClusterSource that selects the namespace",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a",
				map[string]string{"team": "shop"})},
			wantCreates: []string{"system:serviceaccount:fleetlet-system:sa-cluster-a " + testNS + "/" + testName},
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  nil, // a candidate created is no Event
		},
		{
			name:     "a ClusterSource without a selector selects the namespaces labelled for it",
			chaperon: chaperon().obj(),
			objects: []client.Object{namespace(testNS, map[string]string{"source.multicluster.fleetlet.io/cluster-a": "true"}),
				readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a", nil)},
			wantCreates: []string{"system:serviceaccount:fleetlet-system:sa-cluster-a " + testNS + "/" + testName},
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  nil, // a candidate created is no Event
		},
		{
			name:     "a ClusterSource admits the namespaces its source created, whatever its selector",
			chaperon: chaperon().obj(),
			objects: []client.Object{namespace(testNS, map[string]string{v1alpha1.LabelCreatedBySource: "cluster-a"}),
				readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a", map[string]string{"team": "other"})},
			wantCreates: []string{"system:serviceaccount:fleetlet-system:sa-cluster-a " + testNS + "/" + testName},
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  nil, // a candidate created is no Event
		},
		{
			name:     "nor those another source created",
			chaperon: chaperon().obj(),
			objects: []client.Object{namespace(testNS, map[string]string{v1alpha1.LabelCreatedBySource: "cluster-b"}),
				readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a", map[string]string{"team": "other"})},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNamespaceNotSelected, wantMessage: "its source did not create it",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantEvents: []string{ReasonNamespaceNotSelected},
		},
		{
			name:     "a ClusterSource that does not select the namespace",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a",
				map[string]string{"team": "other"})},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNamespaceNotSelected, wantMessage: `"team=other"`,
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantEvents: []string{ReasonNamespaceNotSelected},
		},
		{
			name:     "the Source of the namespace wins over a ClusterSource of the same name",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, source, readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a",
				map[string]string{"team": "shop"})},
			wantCreates: created,
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  nil, // a candidate created is no Event
		},
		{
			name:       "no Source and no ClusterSource",
			chaperon:   chaperon().obj(),
			objects:    []client.Object{ns, readySource("other-ns", "cluster-a", "sa")},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonSourceNotFound, wantMessage: `No Source "cluster-a" in namespace shop`,
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantEvents: []string{ReasonSourceNotFound},
		},
		{
			name:     "a Source that is not Ready",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, func() client.Object {
				s := readySource(testNS, "cluster-a", "")
				s.Status.Conditions[0].Status = metav1.ConditionFalse
				s.Status.Conditions[0].Reason = v1alpha1.ReasonServiceAccountNotOwned
				s.Status.Conditions[0].Message = "ServiceAccount x belongs to Source y"
				return s
			}()},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonSourceNotReady, wantMessage: "ServiceAccount x belongs to Source y",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantEvents: []string{ReasonSourceNotReady},
		},
		{
			name:     "a Source whose status is of an older generation",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, func() client.Object {
				s := readySource(testNS, "cluster-a", "old-sa")
				s.Generation = 2
				return s
			}()},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonSourceNotReady, wantMessage: "not provisioned yet",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantEvents: []string{ReasonSourceNotReady},
		},
		{
			name:       "a chaperon without parent-uid gets no pod",
			chaperon:   chaperon().noLabel(v1alpha1.LabelParentUID).obj(),
			objects:    []client.Object{ns, source},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidChaperon, wantMessage: v1alpha1.LabelParentUID,
			wantEvents: []string{ReasonInvalidChaperon},
		},
		{
			name:        "a pod the target refuses: PodRejected with its message, backoff",
			chaperon:    chaperon().obj(),
			objects:     []client.Object{ns, source},
			createErr:   forbidden,
			wantCreates: created,
			wantStatus:  metav1.ConditionFalse, wantReason: ReasonPodRejected, wantMessage: `cannot create resource "pods"`,
			wantResult: ctrl.Result{RequeueAfter: testBackoff},
			wantEvents: []string{ReasonPodRejected},
		},
		{
			name:        "refused again: the backoff doubles, one Event only",
			chaperon:    chaperon().obj(),
			objects:     []client.Object{ns, source},
			createErr:   forbidden,
			times:       2,
			wantCreates: append(append([]string{}, created...), created...),
			wantStatus:  metav1.ConditionFalse, wantReason: ReasonPodRejected,
			wantResult: ctrl.Result{RequeueAfter: 2 * testBackoff},
			wantEvents: []string{ReasonPodRejected},
		},
		{
			name:        "a transient error is returned, not reported as a rejection",
			chaperon:    chaperon().obj(),
			objects:     []client.Object{ns, source},
			createErr:   apierrors.NewTooManyRequests("slow down", 1),
			wantCreates: created,
			wantErr:     true,
		},
		{
			name:     "the pod exists and is held: its status is mirrored",
			chaperon: chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects: []client.Object{ns, source,
				heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodRunning)},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated, wantMessage: "uid pod-uid",
			wantPods:      map[string]types.UID{testName: "pod-uid"},
			wantPodStatus: &corev1.PodStatus{Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort},
			wantNodeName:  "node-1",
		},
		{
			name:     "an unbound pod, reserved: no nodeName (the reservation is the annotation's)",
			chaperon: chaperon().annotation(v1alpha1.AnnotationReserved, "node-r").cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects: []client.Object{ns, source,
				heldPod(chaperon().obj(), "pod-uid", "", corev1.PodPending)},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated,
			wantPods:      map[string]types.UID{testName: "pod-uid"},
			wantPodStatus: &corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
			wantNodeName:  "",
		},
		{
			name:       "a pod of that name that the chaperon does not own is left alone",
			chaperon:   chaperon().obj(),
			objects:    []client.Object{ns, source, foreignPod(testNS, testName)},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodNotOwned, wantMessage: "leaves it alone",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantPods:   map[string]types.UID{testName: "foreign-uid"},
			wantEvents: []string{ReasonPodNotOwned},
		},
		{
			name:       "a created pod that is gone is not created again",
			chaperon:   chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).nodeName("node-1").obj(),
			objects:    []client.Object{ns, source},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantPods:     map[string]types.UID{},
			wantNodeName: "node-1",
			wantEvents:   []string{ReasonPodDeleted},
		},
		{
			name:       "a created pod replaced by someone else's: PodDeleted, the other left alone",
			chaperon:   chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects:    []client.Object{ns, source, foreignPod(testNS, testName)},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not own now exists",
			wantPods:   map[string]types.UID{testName: "foreign-uid"},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "PodDeleted is final",
			chaperon:   chaperon().cond(metav1.ConditionFalse, ReasonPodDeleted).obj(),
			objects:    []client.Object{ns, source, heldPod(chaperon().obj(), "another-uid", "", corev1.PodPending)},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantPods: map[string]types.UID{testName: "another-uid"},
		},
		{
			name:     "the cache has not seen our record yet: the API server's record counts",
			chaperon: chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			// The cache shows the chaperon before its pod was recorded.
			staleChaperon: chaperon().obj(),
			objects:       []client.Object{ns, source},
			wantStatus:    metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:     "a pod the cache has not seen yet is not taken for deleted",
			chaperon: chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects: []client.Object{ns, source,
				heldPod(chaperon().obj(), "pod-uid", "", corev1.PodPending)},
			hidePods:   true,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated,
			wantPods:      map[string]types.UID{testName: "pod-uid"},
			wantPodStatus: &corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
		},
		{
			name:     "created before the cache showed it: adopted, not doubled",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, source,
				heldPod(chaperon().obj(), "pod-uid", "", corev1.PodPending)},
			hidePods:    true,
			wantCreates: created,
			wantPods:    map[string]types.UID{testName: "pod-uid"},
		},
		{
			// Its creation is in no status to show the cache's lag: the
			// controller remembers it, and waits for the pod's event.
			name:        "a second pass before the cache shows the pod it created: no second create",
			chaperon:    chaperon().obj(),
			objects:     []client.Object{ns, source},
			hidePods:    true,
			times:       2,
			wantCreates: created,
			wantResult:  ctrl.Result{RequeueAfter: waitForOwnWrite},
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
		},
		{
			name:     "a pod the scheduler has touched: the record, with its mirror",
			chaperon: chaperon().obj(),
			objects: []client.Object{ns, source,
				heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodPending)},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated, wantMessage: "uid pod-uid",
			wantPods:     map[string]types.UID{testName: "pod-uid"},
			wantNodeName: "node-1",
		},
		{
			// Its mark is the record until its status says more: a pod
			// that may have run is never created again.
			name:       "an elected chaperon whose pod is gone before its record: recorded deleted, not created",
			chaperon:   chaperon().elected().restartPolicy(corev1.RestartPolicyNever).obj(),
			objects:    []client.Object{ns, source},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:     "a chaperon being deleted gets no pod and no condition",
			chaperon: chaperon().deleting().obj(),
			objects:  []client.Object{ns, source},
			wantPods: map[string]types.UID{},
		},
		{
			name:       "a chaperon being deleted whose pod is gone gets no PodDeleted",
			chaperon:   chaperon().deleting().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects:    []client.Object{ns, source},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated,
			wantPods: map[string]types.UID{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runReconcileCase(t, tt) })
	}
}

func runReconcileCase(t *testing.T, tt reconcileCase) {
	t.Helper()
	ctx := context.Background()
	api := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(append([]client.Object{tt.chaperon.DeepCopy()}, tt.objects...)...).
		WithStatusSubresource(&v1alpha1.PodChaperon{}, &v1alpha1.Source{}, &v1alpha1.ClusterSource{}, &corev1.Pod{}).
		Build()
	var cache client.Client = api
	if tt.staleChaperon != nil || tt.hidePods || tt.staleLease != nil {
		sc := staleCache{Client: api, hidePods: tt.hidePods, lease: tt.staleLease}
		if tt.staleChaperon != nil {
			// Stale: the resourceVersion before the record was written.
			sc.chaperon = tt.staleChaperon.DeepCopy()
			var cur v1alpha1.PodChaperon
			require.NoError(t, api.Get(ctx, client.ObjectKeyFromObject(tt.chaperon), &cur))
			sc.chaperon.ResourceVersion = "1"
			sc.chaperon.UID = cur.UID
		}
		cache = sc
	}
	imp := &fakeImpersonator{c: api, createErr: tt.createErr}
	rec := events.NewFakeRecorder(10)
	r := &PodChaperonReconciler{
		Client:                 cache,
		APIReader:              api,
		Impersonator:           imp,
		Recorder:               rec,
		RetryInterval:          testInterval,
		RejectedBackoffInitial: testBackoff,
		RejectedBackoffMax:     time.Minute,
		RecreateDelay:          testDelay,
		Clock:                  testingclock.NewFakePassiveClock(testNow),
	}
	key := client.ObjectKeyFromObject(tt.chaperon)
	var (
		res ctrl.Result
		err error
	)
	for range max(tt.times, 1) {
		res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	}
	require.Equalf(t, tt.wantErr, err != nil, "Reconcile() error = %v, want error %v", err, tt.wantErr)
	assert.Empty(t, cmp.Diff(tt.wantResult, res), "Reconcile() result (-want,+got)")
	assert.Empty(t, cmp.Diff(tt.wantCreates, imp.creates), "impersonated creates (-want,+got)")

	var got v1alpha1.PodChaperon
	require.NoError(t, api.Get(ctx, key, &got))
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionPodCreated)
	switch {
	case tt.wantStatus == "" && cond != nil && !tt.wantErr:
		assert.Failf(t, "unexpected PodCreated condition", "PodCreated = %+v, want none", cond)
	case tt.wantStatus != "" && cond == nil:
		assert.Failf(t, "no PodCreated condition", "no PodCreated condition, want %s %s", tt.wantStatus, tt.wantReason)
	case cond != nil && tt.wantStatus != "":
		assert.Falsef(t, cond.Status != tt.wantStatus || cond.Reason != tt.wantReason, "PodCreated = %s %s (%s), want %s %s", cond.Status, cond.Reason, cond.Message, tt.wantStatus, tt.wantReason)
		assert.Containsf(t, cond.Message, tt.wantMessage, "PodCreated message %q does not contain %q", cond.Message, tt.wantMessage)
		assert.Falsef(t, cond.ObservedGeneration != got.Generation || got.Status.ObservedGeneration != got.Generation, "observedGeneration: condition %d, status %d, want %d", cond.ObservedGeneration, got.Status.ObservedGeneration, got.Generation)
	}
	if tt.wantPodStatus != nil {
		assert.Empty(t, cmp.Diff(*tt.wantPodStatus, got.Status.PodStatus), "status.podStatus (-want,+got)")
	}
	assert.Equal(t, tt.wantNodeName, got.Status.NodeName, "status.nodeName")

	if tt.wantPods != nil {
		var pods corev1.PodList
		require.NoError(t, api.List(ctx, &pods))
		gotPods := map[string]types.UID{}
		for _, p := range pods.Items {
			gotPods[p.Name] = p.UID
		}
		assert.Empty(t, cmp.Diff(tt.wantPods, gotPods), "pods (-want,+got)")
		for _, p := range pods.Items {
			if p.UID == "foreign-uid" {
				diff := cmp.Diff(foreignPod(testNS, testName).Labels, p.Labels)
				assert.Falsef(t, diff != "" || len(p.OwnerReferences) != 0, "the foreign pod was changed: labels (-want,+got) %s, owners %v", diff, p.OwnerReferences)
			}
		}
	}

	close(rec.Events)
	var reasons []string
	for e := range rec.Events {
		reasons = append(reasons, strings.Fields(e)[1])
	}
	assert.Empty(t, cmp.Diff(tt.wantEvents, reasons), "Event reasons (-want,+got)")
}

// A created pod's status is written with the chaperon's generation, and a
// second pass with nothing new writes nothing.
func TestReconcileWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	ch := makeChaperon(testNS, testName).uid(chaperonUID).cond(metav1.ConditionTrue, ReasonPodCreated).obj()
	ch.Generation = 3
	pod := heldPod(ch, "pod-uid", "node-1", corev1.PodRunning)
	writes := 0
	api := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(ch, pod, readySource(testNS, "cluster-a", "sa")).
		WithStatusSubresource(&v1alpha1.PodChaperon{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				writes++
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	r := &PodChaperonReconciler{Client: api, APIReader: api, Impersonator: &fakeImpersonator{c: api}}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ch)}
	for i := range 3 {
		_, err := r.Reconcile(ctx, req)
		require.NoErrorf(t, err, "pass %d", i)
	}
	assert.Equalf(t, 1, writes, "status written %d times, want 1", writes)
	var got v1alpha1.PodChaperon
	require.NoError(t, api.Get(ctx, req.NamespacedName, &got))
	assert.Falsef(t, got.Status.ObservedGeneration != 3 || got.Status.Conditions[0].ObservedGeneration != 3, "observedGeneration = %d / condition %d, want 3", got.Status.ObservedGeneration, got.Status.Conditions[0].ObservedGeneration)
	assert.Truef(t, got.Status.Conditions[0].LastTransitionTime.Equal(&metav1.Time{Time: time.Unix(1000, 0)}), "lastTransitionTime changed to %v although the status did not", got.Status.Conditions[0].LastTransitionTime)
}

// The impersonator's clients send the user name, and nothing else, as the
// user to impersonate, and keep one client per user.
func TestImpersonator(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s user=%v groups=%v uid=%v", req.Method, req.URL.Path,
			req.Header.Values("Impersonate-User"), req.Header.Values("Impersonate-Group"), req.Header.Values("Impersonate-Uid")))
		mu.Unlock()
		body, _ := io.ReadAll(req.Body)
		w.Header().Set("Content-Type", req.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	defer srv.Close()

	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	// The manager's own configuration may impersonate someone: the
	// source's user replaces it.
	cfg := &rest.Config{Host: srv.URL, Impersonate: rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}}
	imp, err := NewImpersonator(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	require.NoError(t, err)
	a1, err := imp.ClientFor("system:serviceaccount:ns:a")
	require.NoError(t, err)
	a2, _ := imp.ClientFor("system:serviceaccount:ns:a")
	b, _ := imp.ClientFor("system:serviceaccount:ns:b")
	assert.False(t, a1 != a2, "two clients for the same user")
	assert.False(t, a1 == b, "one client for two users")
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	}
	require.NoError(t, a1.Create(context.Background(), pod()))
	require.NoError(t, b.Create(context.Background(), pod()))
	want := []string{
		"POST /api/v1/namespaces/ns/pods user=[system:serviceaccount:ns:a] groups=[] uid=[]",
		"POST /api/v1/namespaces/ns/pods user=[system:serviceaccount:ns:b] groups=[] uid=[]",
	}
	assert.Empty(t, cmp.Diff(want, seen), "requests (-want,+got)")
	_, err = imp.ClientFor("")
	assert.Error(t, err, "a client for no user")
	_, err = NewImpersonator(cfg, client.Options{HTTPClient: srv.Client()})
	assert.Error(t, err, "NewImpersonator accepted an HTTP client, which would bypass impersonation")
}
