package chaperon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestDecideRecreate(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	const delay = time.Minute
	expiredAt := func(ago time.Duration) heartbeat { return heartbeat{known: true, expires: now.Add(-ago)} }
	// base: an elected Always-delegate, gone, whose source's heartbeat
	// expired 5 minutes ago and which was seen deleted 2 minutes ago.
	base := func() recreateInput {
		return recreateInput{
			elected: true, restartPolicy: corev1.RestartPolicyAlways, podGone: true,
			deletedAt: now.Add(-2 * time.Minute), heartbeat: expiredAt(5 * time.Minute), delay: delay, now: now,
		}
	}
	tests := []struct {
		name   string
		change func(*recreateInput)
		want   recreateVerdict
	}{
		{
			name:   "expired, delay elapsed since the deletion: recreate",
			change: func(*recreateInput) {},
			want:   recreateVerdict{kind: recreateNow, at: now.Add(-time.Minute)},
		},
		{
			name:   "no restartPolicy is Always",
			change: func(in *recreateInput) { in.restartPolicy = "" },
			want:   recreateVerdict{kind: recreateNow, at: now.Add(-time.Minute)},
		},
		{
			name:   "exactly at the instant: recreate",
			change: func(in *recreateInput) { in.deletedAt = now.Add(-delay) },
			want:   recreateVerdict{kind: recreateNow, at: now},
		},
		{
			name:   "expired, seen deleted 10s ago: wait for the delay from the deletion",
			change: func(in *recreateInput) { in.deletedAt = now.Add(-10 * time.Second) },
			want:   recreateVerdict{kind: awaitDelay, at: now.Add(50 * time.Second)},
		},
		{
			name: "deleted first, expired 10s ago: wait for the delay from the expiry",
			change: func(in *recreateInput) {
				in.deletedAt = now.Add(-time.Hour)
				in.heartbeat = expiredAt(10 * time.Second)
			},
			want: recreateVerdict{kind: awaitDelay, at: now.Add(50 * time.Second)},
		},
		{
			name:   "fresh heartbeat: the source replaces it; look again at the expiry",
			change: func(in *recreateInput) { in.heartbeat = heartbeat{known: true, expires: now.Add(20 * time.Second)} },
			want:   recreateVerdict{kind: sourceReachable, at: now.Add(20 * time.Second)},
		},
		{
			name:   "no heartbeat Lease (never created, or deleted): never",
			change: func(in *recreateInput) { in.heartbeat = heartbeat{} },
			want:   recreateVerdict{kind: keepDeleted},
		},
		{
			name:   "a candidate never elected: never",
			change: func(in *recreateInput) { in.elected = false },
			want:   recreateVerdict{kind: keepDeleted},
		},
		{
			name:   "restartPolicy OnFailure: never",
			change: func(in *recreateInput) { in.restartPolicy = corev1.RestartPolicyOnFailure },
			want:   recreateVerdict{kind: keepDeleted},
		},
		{
			name:   "restartPolicy Never: never",
			change: func(in *recreateInput) { in.restartPolicy = corev1.RestartPolicyNever },
			want:   recreateVerdict{kind: keepDeleted},
		},
		{
			name:   "the pod is there: nothing to recreate",
			change: func(in *recreateInput) { in.podGone = false },
			want:   recreateVerdict{kind: keepDeleted},
		},
		{
			name: "not elected and fresh: never",
			change: func(in *recreateInput) {
				in.elected = false
				in.heartbeat = heartbeat{known: true, expires: now.Add(time.Hour)}
			},
			want: recreateVerdict{kind: keepDeleted},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.change(&in)
			got := decideRecreate(in)
			assert.Empty(t, cmp.Diff(tt.want, got, cmp.AllowUnexported(recreateVerdict{})), "decideRecreate() (-want,+got)")
		})
	}
}

func TestVerdictRequeue(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tests := []struct {
		name    string
		verdict recreateVerdict
		want    ctrl.Result
	}{
		{"reachable: at the expiry", recreateVerdict{kind: sourceReachable, at: now.Add(15 * time.Second)}, ctrl.Result{RequeueAfter: 15 * time.Second}},
		{"awaiting the delay: at the recreation", recreateVerdict{kind: awaitDelay, at: now.Add(time.Second)}, ctrl.Result{RequeueAfter: time.Second}},
		{"recreate now: nothing to wait for", recreateVerdict{kind: recreateNow, at: now}, ctrl.Result{}},
		{"never: a Lease event wakes it", recreateVerdict{kind: keepDeleted}, ctrl.Result{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.verdict.requeue(now)
			assert.Equal(t, tt.want, got, "requeue()")
		})
	}
}

func TestHeartbeatOf(t *testing.T) {
	renew := time.Unix(5000, 0)
	full := heartbeatLease("ns", "cluster-a", renew, 40*time.Second)
	noRenew := full.DeepCopy()
	noRenew.Spec.RenewTime = nil
	noDuration := full.DeepCopy()
	noDuration.Spec.LeaseDurationSeconds = nil
	zeroDuration := full.DeepCopy()
	zeroDuration.Spec.LeaseDurationSeconds = ptrTo(int32(0))
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  heartbeat
	}{
		{"renewed", full, heartbeat{known: true, expires: renew.Add(40 * time.Second)}},
		{"missing", nil, heartbeat{}},
		{"never renewed", noRenew, heartbeat{}},
		{"no duration", noDuration, heartbeat{}},
		{"zero duration", zeroDuration, heartbeat{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Empty(t, cmp.Diff(tt.want, heartbeatOf(tt.lease), cmp.AllowUnexported(heartbeat{})), "heartbeatOf() (-want,+got)")
		})
	}
}

// The controller, on a chaperon whose delegate is gone, against the
// source's heartbeat Lease.
func TestReconcileRecreation(t *testing.T) {
	chaperon := func() *chaperonWrapper {
		return makeChaperon(testNS, testName).uid(chaperonUID).elected().restartPolicy(corev1.RestartPolicyAlways)
	}
	ns := namespace(testNS, map[string]string{"team": "shop"})
	src := readySource(testNS, "cluster-a", "fleetlet-source-cluster-a")
	created := []string{sourceUser + " " + testNS + "/" + testName}
	// expired: the source last renewed an hour ago; fresh: 5s ago, for 20s.
	expired := heartbeatLease(testNS, "cluster-a", testNow.Add(-time.Hour), 40*time.Second)
	fresh := heartbeatLease(testNS, "cluster-a", testNow.Add(-5*time.Second), 20*time.Second)
	deletedLongAgo := testNow.Add(-testDelay - time.Second)
	deletedRecently := testNow.Add(-10 * time.Second)
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), testName, fmt.Errorf("quota exceeded"))

	tests := []reconcileCase{
		{
			name:       "seen gone, source unreachable: PodDeleted says when it comes back",
			chaperon:   chaperon().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantMessage: "fleetlet creates it again at " + testNow.Add(testDelay).UTC().Format(time.RFC3339),
			wantResult:  ctrl.Result{RequeueAfter: testDelay},
			wantPods:    map[string]types.UID{},
			wantEvents:  []string{ReasonPodDeleted},
		},
		{
			name:        "gone for the delay, source unreachable: created again as the source",
			chaperon:    chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:     []client.Object{ns, src, expired},
			wantCreates: created,
			wantStatus:  metav1.ConditionTrue, wantReason: ReasonDelegateRecreated,
			wantMessage: "(uid created-pod-uid) is held by this chaperon: it was created again",
			wantPods:    map[string]types.UID{testName: "created-pod-uid"},
			wantEvents:  []string{ReasonDelegateRecreated},
		},
		{
			name:       "gone for less than the delay: come back when it has passed",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedRecently, "earlier").obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "unless the source renews its heartbeat first",
			wantResult: ctrl.Result{RequeueAfter: testDelay - 10*time.Second},
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "source reachable: not created again; look again at the expiry",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, fresh},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "is reachable",
			wantResult: ctrl.Result{RequeueAfter: 15 * time.Second},
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "no heartbeat Lease: never created again",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:     "a Lease never renewed: never created again",
			chaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects: []client.Object{ns, src, func() client.Object {
				l := expired.DeepCopy()
				l.Spec.RenewTime = nil
				return l
			}()},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "a candidate never elected: never created again",
			chaperon:   chaperon().noAnnotation(v1alpha1.AnnotationElected).condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "restartPolicy OnFailure: never created again",
			chaperon:   chaperon().restartPolicy(corev1.RestartPolicyOnFailure).condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "restartPolicy Never: never created again",
			chaperon:   chaperon().restartPolicy(corev1.RestartPolicyNever).condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "a chaperon being deleted: never created again",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").deleting().obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "earlier",
			wantPods: map[string]types.UID{},
		},
		{
			name:       "a pod of that name that is not ours: left alone, not created again",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, expired, foreignPod(testNS, testName)},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "earlier",
			wantPods: map[string]types.UID{testName: "foreign-uid"},
		},
		{
			name:       "the Source is not Ready: no identity, not created again",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, readySource(testNS, "cluster-a", ""), expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:     "a ClusterSource's Lease is in its ServiceAccount's namespace",
			chaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects: []client.Object{ns, readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a", map[string]string{"team": "shop"}),
				heartbeatLease("fleetlet-system", "cluster-a", testNow.Add(-time.Hour), 40*time.Second)},
			wantCreates: []string{"system:serviceaccount:fleetlet-system:sa-cluster-a " + testNS + "/" + testName},
			wantStatus:  metav1.ConditionTrue, wantReason: ReasonDelegateRecreated, wantMessage: "fleetlet-system/fleetlet-source-cluster-a",
			wantPods:   map[string]types.UID{testName: "created-pod-uid"},
			wantEvents: []string{ReasonDelegateRecreated},
		},
		{
			name:     "a ClusterSource's Lease anywhere else does not count",
			chaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects: []client.Object{ns, readyClusterSource("cluster-a", "fleetlet-system", "sa-cluster-a", map[string]string{"team": "shop"}),
				expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "does not create it again",
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:        "recreation refused: the deletion stays recorded, retried with backoff",
			chaperon:    chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:     []client.Object{ns, src, expired},
			createErr:   forbidden,
			wantCreates: created,
			wantStatus:  metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "Creating it again failed (PodRejected)",
			wantResult: ctrl.Result{RequeueAfter: testBackoff},
			wantPods:   map[string]types.UID{},
			wantEvents: []string{ReasonPodDeleted},
		},
		{
			name:       "the cache is behind the source's renewal: the API server's fresh Lease wins",
			chaperon:   chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:    []client.Object{ns, src, fresh},
			staleLease: expired,
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "earlier",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantPods:   map[string]types.UID{},
		},
		{
			name:          "the cache is behind the source deleting the chaperon: not created again",
			chaperon:      chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").deleting().obj(),
			staleChaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects:       []client.Object{ns, src, expired},
			wantStatus:    metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "earlier",
			wantResult: ctrl.Result{RequeueAfter: testInterval},
			wantPods:   map[string]types.UID{},
		},
		{
			name: "the recreated pod keeps its record while it lives",
			chaperon: chaperon().condAt(metav1.ConditionTrue, ReasonDelegateRecreated, deletedLongAgo,
				"Pod "+testName+" (uid pod-uid) is held by this chaperon: it was created again").obj(),
			objects:    []client.Object{ns, src, fresh, heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodRunning)},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonDelegateRecreated, wantMessage: "created again",
			wantPods:     map[string]types.UID{testName: "pod-uid"},
			wantNodeName: "node-1",
		},
		{
			name: "another pod than the recreated one: PodCreated",
			chaperon: chaperon().condAt(metav1.ConditionTrue, ReasonDelegateRecreated, deletedLongAgo,
				"Pod "+testName+" (uid old-uid) is held by this chaperon: it was created again").obj(),
			objects:    []client.Object{ns, src, fresh, heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodRunning)},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated, wantMessage: "(uid pod-uid)",
			wantPods:     map[string]types.UID{testName: "pod-uid"},
			wantNodeName: "node-1",
		},
		{
			// The recreation's status write conflicted, and the pass
			// from the API server that followed saw the record of the
			// deletion and the new pod. Before: left PodDeleted, so the
			// source, back, deleted the proxy of a running delegate.
			name:     "a pod it holds created after the deletion record: recorded as held",
			chaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects: []client.Object{ns, src, expired, func() client.Object {
				p := heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodRunning)
				p.CreationTimestamp = metav1.NewTime(deletedLongAgo.Add(time.Second))
				return p
			}()},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonPodCreated, wantMessage: "(uid pod-uid)",
			wantPods:     map[string]types.UID{testName: "pod-uid"},
			wantNodeName: "node-1",
		},
		{
			name:     "a pod it holds older than the deletion record (a cache behind): the record stands",
			chaperon: chaperon().condAt(metav1.ConditionFalse, ReasonPodDeleted, deletedLongAgo, "earlier").obj(),
			objects: []client.Object{ns, src, expired, func() client.Object {
				p := heldPod(chaperon().obj(), "pod-uid", "node-1", corev1.PodRunning)
				p.CreationTimestamp = metav1.NewTime(deletedLongAgo.Add(-time.Minute))
				return p
			}()},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted, wantMessage: "earlier",
			wantPods: map[string]types.UID{testName: "pod-uid"},
		},
		{
			name:       "a recreated pod deleted again while the source is still away: PodDeleted, counted from now",
			chaperon:   chaperon().condAt(metav1.ConditionTrue, ReasonDelegateRecreated, deletedLongAgo, "Pod x (uid pod-uid) created again").obj(),
			objects:    []client.Object{ns, src, expired},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
			wantMessage: "fleetlet creates it again at " + testNow.Add(testDelay).UTC().Format(time.RFC3339),
			wantResult:  ctrl.Result{RequeueAfter: testDelay},
			wantPods:    map[string]types.UID{},
			wantEvents:  []string{ReasonPodDeleted},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runReconcileCase(t, tt) })
	}
}

// A second pass over a chaperon awaiting its delegate's recreation writes
// nothing new: the recreation instant, in the condition's message, comes
// from the recorded lastTransitionTime, the same in every pass.
func TestAwaitingRecreationIsStable(t *testing.T) {
	runReconcileCase(t, reconcileCase{
		name:       "twice",
		chaperon:   makeChaperon(testNS, testName).uid(chaperonUID).elected().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
		objects:    []client.Object{namespace(testNS, nil), readySource(testNS, "cluster-a", "fleetlet-source-cluster-a"), heartbeatLease(testNS, "cluster-a", testNow.Add(-time.Hour), 40*time.Second)},
		times:      2,
		wantStatus: metav1.ConditionFalse, wantReason: ReasonPodDeleted,
		wantMessage: "fleetlet creates it again at " + testNow.Add(testDelay).UTC().Format(time.RFC3339),
		wantResult:  ctrl.Result{RequeueAfter: testDelay},
		wantPods:    map[string]types.UID{},
		wantEvents:  []string{ReasonPodDeleted},
	})
}

// A heartbeat Lease wakes exactly the chaperons of its source whose
// delegate may be created again.
func TestChaperonsOfLease(t *testing.T) {
	awaiting := func(name string) *chaperonWrapper {
		return makeChaperon(testNS, name).elected().cond(metav1.ConditionFalse, ReasonPodDeleted)
	}
	objs := []client.Object{
		awaiting("awaiting").obj(),
		awaiting("default-policy").restartPolicy("").obj(),
		makeChaperon("other-ns", "in-other-namespace").elected().cond(metav1.ConditionFalse, ReasonPodDeleted).obj(),
		awaiting("other-source").label(v1alpha1.LabelParentCluster, "cluster-b").obj(),
		awaiting("not-elected").noAnnotation(v1alpha1.AnnotationElected).obj(),
		awaiting("on-failure").restartPolicy(corev1.RestartPolicyOnFailure).obj(),
		awaiting("deleting").deleting().obj(),
		makeChaperon(testNS, "held").elected().cond(metav1.ConditionTrue, ReasonPodCreated).obj(),
		makeChaperon(testNS, "never-created").elected().obj(),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&v1alpha1.PodChaperon{}, IndexAwaitingRecreation, awaitingRecreationIndex).Build()
	r := &PodChaperonReconciler{Client: c}
	got := r.chaperonsOfLease(context.Background(), heartbeatLease(testNS, "cluster-a", testNow, time.Minute))
	want := []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "awaiting"}},
		{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "default-policy"}},
		{NamespacedName: types.NamespacedName{Namespace: "other-ns", Name: "in-other-namespace"}},
	}
	byKey := func(a, b reconcile.Request) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(got, byKey)
	slices.SortFunc(want, byKey)
	assert.Empty(t, cmp.Diff(want, got), "chaperonsOfLease() (-want,+got)")
}

func TestLeasePredicates(t *testing.T) {
	lease := func(name string) *coordinationv1.Lease {
		l := heartbeatLease("ns", "x", testNow, time.Minute)
		l.Name = name
		return l
	}
	for name, want := range map[string]bool{
		"fleetlet-source-cluster-a": true,
		"fleetlet-source-":          false,
		"fleetlet-manager":          false,
		"kube-scheduler":            false,
		"node-1":                    false,
	} {
		got := isHeartbeatLease().Create(event.CreateEvent{Object: lease(name)})
		assert.Equalf(t, want, got, "isHeartbeatLease(%q)", name)
	}

	old := heartbeatLease("ns", "x", testNow, time.Minute)
	renewed := heartbeatLease("ns", "x", testNow.Add(time.Second), time.Minute)
	relabelled := old.DeepCopy()
	relabelled.Labels["other"] = "y"
	longer := heartbeatLease("ns", "x", testNow, time.Hour)
	for _, tt := range []struct {
		name string
		new  *coordinationv1.Lease
		want bool
	}{
		{"renewed", renewed, true},
		{"longer", longer, true},
		{"only labels", relabelled, false},
	} {
		got := heartbeatChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: tt.new})
		assert.Equalf(t, tt.want, got, "heartbeatChanged(%s)", tt.name)
	}
}

func TestHeartbeatLeaseCache(t *testing.T) {
	sel := HeartbeatLeaseCache().Label
	assert.Truef(t, sel.Matches(labels.Set{v1alpha1.LabelParentCluster: "cluster-a"}), "%s does not select a heartbeat Lease", sel)
	assert.Falsef(t, sel.Matches(labels.Set{"other": "x"}) || sel.Matches(labels.Set{}), "%s selects Leases that are not heartbeats", sel)
}
