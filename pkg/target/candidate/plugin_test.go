package candidate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const ns = "team-a"

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

// counter reads a counter of the plugin's metrics.
func counter(t *testing.T, vec *metrics.CounterVec, labels ...string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(vec.WithLabelValues(labels...))
	require.NoError(t, err)
	return v
}

// eventually waits, with a deadline, for cond; the plugin's queues move
// delayed items on their own goroutines.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	require.NoErrorf(t, err, "%s: not true after 5s", what)
}

func TestChaperonOf(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		want    chaperonRef
		wantOK  bool
		comment string
	}{
		{name: "candidate", pod: newCandidate(ns, "web").obj(), want: chaperonRef{key: key("web"), uid: "web-uid"}, wantOK: true},
		{name: "another scheduler", pod: newCandidate(ns, "web").schedulerName("default-scheduler").obj()},
		{name: "no owner", pod: newCandidate(ns, "web").noOwner().obj()},
		{name: "owner not controller", pod: newCandidate(ns, "web").notController().obj()},
		{name: "owned by a ReplicaSet", pod: newCandidate(ns, "web").ownerKind("apps/v1", "ReplicaSet").obj()},
		{name: "PodChaperon of another group", pod: newCandidate(ns, "web").ownerKind("example.com/v1", chaperonKind).obj()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := chaperonOf(tc.pod)
			assert.Falsef(t, ok != tc.wantOK || got != tc.want, "chaperonOf() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
		})
	}
}

func TestPermit(t *testing.T) {
	errAPI := apierrors.NewServiceUnavailable("down")
	tests := []struct {
		name string
		// cached and server override the fake's contents when set.
		cached, server *chaperonBuilder
		notSynced      bool
		getErr         error
		pod            *corev1.Pod
		wantCode       fwk.Code
		wantMsg        string
		wantTimeout    time.Duration
		wantGets       int
		wantWaiters    int
	}{{
		name:     "not a candidate: left alone",
		server:   newChaperon(ns, "web"),
		pod:      newCandidate(ns, "web").schedulerName("default-scheduler").obj(),
		wantCode: fwk.Success,
	}, {
		name:     "elected: allowed at once, from the cache",
		server:   newChaperon(ns, "web").reserved("node-1").elected(),
		pod:      newCandidate(ns, "web").obj(),
		wantCode: fwk.Success,
	}, {
		name:        "not elected yet: waits the Permit timeout",
		server:      newChaperon(ns, "web").reserved("node-1"),
		pod:         newCandidate(ns, "web").obj(),
		wantCode:    fwk.Wait,
		wantTimeout: DefaultPermitTimeout,
		wantWaiters: 1,
	}, {
		name:     "gone: rejected after the API server confirms",
		pod:      newCandidate(ns, "web").obj(),
		wantCode: fwk.Unschedulable,
		wantMsg:  msgChaperonGone,
		wantGets: 1,
	}, {
		name:     "being deleted: rejected from the cache",
		server:   newChaperon(ns, "web").deleting(),
		pod:      newCandidate(ns, "web").obj(),
		wantCode: fwk.Unschedulable,
		wantMsg:  msgChaperonDeleting,
	}, {
		name:     "replaced by a chaperon of the same name: rejected",
		server:   newChaperon(ns, "web").uid("other-uid"),
		pod:      newCandidate(ns, "web").obj(),
		wantCode: fwk.Unschedulable,
		wantMsg:  msgChaperonReplaced,
		wantGets: 1,
	}, {
		name:        "the cache has not seen a new chaperon yet: the API server has, so it waits",
		server:      newChaperon(ns, "web"),
		cached:      &chaperonBuilder{},
		pod:         newCandidate(ns, "web").obj(),
		wantCode:    fwk.Wait,
		wantTimeout: DefaultPermitTimeout,
		wantGets:    1,
		wantWaiters: 1,
	}, {
		name:      "cache not synced: elected read from the API server",
		server:    newChaperon(ns, "web").elected(),
		notSynced: true,
		pod:       newCandidate(ns, "web").obj(),
		wantCode:  fwk.Success,
		wantGets:  1,
	}, {
		name:      "cache not synced and the API server down: an error, retried by the scheduler",
		server:    newChaperon(ns, "web"),
		notSynced: true,
		getErr:    errAPI,
		pod:       newCandidate(ns, "web").obj(),
		wantCode:  fwk.Error,
		wantMsg:   "reading PodChaperon team-a/web: down",
		wantGets:  1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeChaperons()
			if tc.server != nil {
				f.put(tc.server.obj())
			}
			if tc.cached != nil {
				f.cached = map[types.NamespacedName]*metav1.PartialObjectMetadata{}
				if tc.cached.ch != nil {
					f.cached[keyOf(tc.cached.ch)] = tc.cached.obj()
				}
			}
			f.isSynced = !tc.notSynced
			f.getErr = tc.getErr
			p := newTestPlugin(t, f)

			status, timeout := p.Permit(context.Background(), nil, tc.pod, "node-1")
			assert.Falsef(t, status.Code() != tc.wantCode || !strings.Contains(status.Message(), tc.wantMsg), "Permit() = %v %q, want %v containing %q", status.Code(), status.Message(), tc.wantCode, tc.wantMsg)
			assert.Equal(t, tc.wantTimeout, timeout, "Permit() timeout")
			assert.Equal(t, tc.wantGets, f.apiGets(), "API reads")
			assert.Equal(t, tc.wantWaiters, p.waiters.len(), "waiting candidates")
			assert.Emptyf(t, f.patchCalls(), "Permit wrote %v", f.patchCalls())
		})
	}
}

// permitWait runs Permit on a candidate whose chaperon is not elected and
// registers it as waiting, as the framework does.
func permitWait(t *testing.T, p *testPlugin, pod *corev1.Pod) *fakeWaitingPod {
	t.Helper()
	s, _ := p.Permit(context.Background(), nil, pod, "node-1")
	require.Equalf(t, fwk.Wait, s.Code(), "Permit() = %v %q, want Wait", s.Code(), s.Message())
	return p.handle.wait(pod)
}

func TestWaitingCandidateAllowedWhenElected(t *testing.T) {
	ch := newChaperon(ns, "web").reserved("node-1")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	allowedBefore := counter(t, waitsTotal, waitAllowed)

	wp := permitWait(t, p, pod)
	// An unrelated change: nothing decided.
	old := ch.obj()
	f.put(ch.annotation("example.com/other", "x").obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background())
	allowed, rejected := wp.result()
	require.Equalf(t, 0, len(allowed)+len(rejected), "decided on an unrelated change: allowed %v, rejected %v", allowed, rejected)

	p.clock.Step(1500 * time.Millisecond)
	old = ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background())

	allowed, rejected = wp.result()
	diff := cmp.Diff([]string{Name}, allowed)
	assert.Falsef(t, diff != "" || len(rejected) != 0, "Allow calls (-want,+got):\n%s\nrejected: %v", diff, rejected)
	assert.Equal(t, 0, p.waiters.len(), "the candidate is still registered as waiting")
	assert.Equal(t, 1.0, counter(t, waitsTotal, waitAllowed)-allowedBefore, "waits_total{allowed} growth")
	assert.Emptyf(t, p.handle.activations(), "a waiting candidate was activated: %v", p.handle.activations())
}

func TestWaitingCandidateRejectedWhenChaperonDeleted(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	p.Reserve(context.Background(), nil, pod, "node-1")
	drain(p)

	wp := permitWait(t, p, pod)
	f.del(key("web"))
	// A deletion the watch missed arrives as a tombstone.
	p.onChaperonDeleted(cache.DeletedFinalStateUnknown{Key: "team-a/web", Obj: ch.obj()})
	p.decideNext(context.Background())

	allowed, rejected := wp.result()
	diff := cmp.Diff([]string{msgChaperonGone}, rejected)
	assert.Falsef(t, diff != "" || len(allowed) != 0, "Reject calls (-want,+got):\n%s\nallowed: %v", diff, allowed)
	// The framework unreserves the rejected candidate: the chaperon is
	// known gone, so neither the rejection nor the unreservation costs a
	// request beyond the reservation.
	p.Unreserve(context.Background(), nil, pod, "node-1")
	drain(p)
	got := len(f.patchCalls())
	assert.Equalf(t, 1, got, "patches = %d, want 1 (the reservation only)", got)
	got = f.apiGets()
	assert.Equalf(t, 0, got, "API reads = %d, want 0 (the watch saw the deletion)", got)
	assert.Emptyf(t, p.reservations.written, "what was known of the gone chaperon is kept: %v", p.reservations.written)
}

func TestWaitingCandidateRejectedWhenChaperonStartsDeleting(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	wp := permitWait(t, p, newCandidate(ns, "web").obj())

	old := ch.obj()
	f.put(ch.deleting().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background())
	_, rejected := wp.result()
	assert.Truef(t, cmp.Equal(rejected, []string{msgChaperonDeleting}), "rejected = %v, want %q", rejected, msgChaperonDeleting)
	assert.Equalf(t, 0, f.apiGets(), "a deletion timestamp in the cache needs no API read, got %d", f.apiGets())
}

// The election can land between Permit's answer and the framework's
// registration of the waiting pod: the decision is retried until the pod
// waits, never lost.
func TestElectionBeforeTheWaitingPodIsRegistered(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	s, _ := p.Permit(context.Background(), nil, pod, "node-1")
	require.Equalf(t, fwk.Wait, s.Code(), "Permit() = %v, want Wait", s.Code())

	old := ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background()) // no waiting pod yet: retried later
	got := p.decisions.NumRequeues(pod.UID)
	require.Equalf(t, 1, got, "decision requeues = %d, want 1", got)

	wp := p.handle.wait(pod)
	p.clock.Step(decideRetryBase)
	eventually(t, "the retried decision is queued", func() bool { return p.decisions.Len() == 1 })
	p.decideNext(context.Background())
	allowed, _ := wp.result()
	assert.Truef(t, cmp.Equal(allowed, []string{Name}), "allowed = %v, want [%s]", allowed, Name)
}

// A change between Permit's registration and its read is not lost either:
// Permit reads after registering, so it sees it itself.
func TestPermitRegistersBeforeReading(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	// The watch event of a change arrives while nothing waits yet.
	p.onChaperon(context.Background(), nil, ch.obj())
	require.Equal(t, 0, p.decisions.Len(), "an event queued a decision for a pod that does not wait")
	f.put(ch.elected().obj())
	s, _ := p.Permit(context.Background(), nil, pod, "node-1")
	assert.Truef(t, s.IsSuccess(), "Permit() = %v, want Success", s.Code())
}

func TestUnreserveEndsTheWait(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	endedBefore := counter(t, waitsTotal, waitEnded)

	wp := permitWait(t, p, pod)
	// The Permit timeout: the framework rejects the pod and unreserves it.
	p.Unreserve(context.Background(), nil, pod, "node-1")
	assert.Equal(t, 0, p.waiters.len(), "the candidate still waits after Unreserve")
	assert.Equal(t, 1.0, counter(t, waitsTotal, waitEnded)-endedBefore, "waits_total{ended} growth")
	// A later election has no waiting candidate to allow.
	old := ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	assert.Equal(t, 0, p.decisions.Len(), "an election queued a decision for an unreserved candidate")
	allowed, rejected := wp.result()
	assert.Equalf(t, 0, len(allowed)+len(rejected), "allowed %v, rejected %v after Unreserve", allowed, rejected)
}

func TestElectedCandidateNotWaitingIsActivated(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		old     *chaperonBuilder
		want    []string
		comment string
	}{
		{name: "pending candidate", pod: newCandidate(ns, "web").obj(), want: []string{"team-a/web"}},
		{name: "already elected before: nothing new", pod: newCandidate(ns, "web").obj(), old: newChaperon(ns, "web").elected()},
		{name: "bound candidate", pod: newCandidate(ns, "web").nodeName("node-1").obj()},
		{name: "pod of another chaperon of the same name", pod: newCandidate(ns, "web").obj(), old: nil},
		{name: "no pod"},
	}
	tests[3].pod.OwnerReferences[0].UID = "older-uid"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch := newChaperon(ns, "web").elected()
			f := newFakeChaperons(ch.obj())
			var pods []*corev1.Pod
			if tc.pod != nil {
				pods = append(pods, tc.pod)
			}
			p := newTestPlugin(t, f, pods...)
			var old any
			if tc.old != nil {
				old = tc.old.obj()
			}
			p.onChaperon(context.Background(), old, ch.obj())
			assert.Empty(t, cmp.Diff(tc.want, p.handle.activations()), "activations (-want,+got)")
		})
	}
}

// The sweep after the cache syncs reconsiders candidates that waited on a
// live read: a chaperon deleted meanwhile sends no event.
func TestSweepAfterSync(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	f.isSynced = false
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	wp := permitWait(t, p, pod)
	f.del(key("web"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := make(chan struct{})
	go p.run(ctx, func() bool {
		select {
		case <-synced:
			return true
		default:
			return false
		}
	})
	f.mu.Lock()
	f.isSynced = true
	f.mu.Unlock()
	close(synced)
	eventually(t, "the candidate is rejected", func() bool { _, r := wp.result(); return len(r) == 1 })
}

func TestReserveDoesNotWaitForTheAPIServer(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	f.patchBlock = make(chan struct{})
	f.patchStart = make(chan patchCall, 1)
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()

	// The API server hangs; Reserve still returns at once, the write queued.
	s := p.Reserve(context.Background(), nil, pod, "node-1")
	require.Truef(t, s.IsSuccess(), "Reserve() = %v", s)
	got := p.reservations.queue.Len()
	require.Equalf(t, 1, got, "queued writes = %d, want 1", got)
	require.Empty(t, f.patchStart, "Reserve wrote to the API server itself")

	done := make(chan struct{})
	go func() {
		p.reservations.processNext(context.Background())
		close(done)
	}()
	call := <-f.patchStart
	close(f.patchBlock)
	<-done
	want := `{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"},"uid":"web-uid"}}`
	assert.Falsef(t, call.pt != types.MergePatchType || call.data != want || call.key != key("web"), "patch = %s %s %s, want merge patch %s", call.key, call.pt, call.data, want)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, "node-1", f.server[key("web")].Annotations[v1alpha1.AnnotationReserved], "reserved")
}

// drain applies every queued reservation write.
func drain(p *testPlugin) {
	for p.reservations.queue.Len() > 0 {
		p.reservations.processNext(context.Background())
	}
}

func TestReservationWrites(t *testing.T) {
	unreservePatch := `[{"op":"test","path":"/metadata/uid","value":"web-uid"},` +
		`{"op":"test","path":"/metadata/annotations/multicluster.fleetlet.io~1reserved","value":"node-1"},` +
		`{"op":"remove","path":"/metadata/annotations/multicluster.fleetlet.io~1reserved"}]`
	tests := []struct {
		name         string
		chaperon     *chaperonBuilder
		do           func(p *testPlugin, pod *corev1.Pod)
		wantPatches  []string // data of each patch, in order
		wantReserved string
		wantResults  map[string]float64 // reservation_writes_total deltas, by "operation/result"
	}{{
		name:         "reserve writes the node",
		chaperon:     newChaperon(ns, "web"),
		do:           func(p *testPlugin, pod *corev1.Pod) { p.Reserve(context.Background(), nil, pod, "node-1") },
		wantPatches:  []string{`{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"},"uid":"web-uid"}}`},
		wantReserved: "node-1",
		wantResults:  map[string]float64{"reserve/written": 1},
	}, {
		name:         "reserve of the node already recorded: no request",
		chaperon:     newChaperon(ns, "web").reserved("node-1"),
		do:           func(p *testPlugin, pod *corev1.Pod) { p.Reserve(context.Background(), nil, pod, "node-1") },
		wantReserved: "node-1",
		wantResults:  map[string]float64{"reserve/unchanged": 1},
	}, {
		name:     "reserve then unreserve before the write: no request at all",
		chaperon: newChaperon(ns, "web"),
		do: func(p *testPlugin, pod *corev1.Pod) {
			p.Reserve(context.Background(), nil, pod, "node-1")
			p.Unreserve(context.Background(), nil, pod, "node-1")
		},
		wantResults: map[string]float64{"unreserve/unchanged": 1},
	}, {
		name:     "reserve, written, then unreserve: removed only if it still names the node",
		chaperon: newChaperon(ns, "web"),
		do: func(p *testPlugin, pod *corev1.Pod) {
			p.Reserve(context.Background(), nil, pod, "node-1")
			drain(p)
			p.Unreserve(context.Background(), nil, pod, "node-1")
		},
		wantPatches: []string{
			`{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"},"uid":"web-uid"}}`,
			unreservePatch,
		},
		wantResults: map[string]float64{"reserve/written": 1, "unreserve/written": 1},
	}, {
		name:         "unreserve of another node than the recorded one: left alone",
		chaperon:     newChaperon(ns, "web").reserved("node-2"),
		do:           func(p *testPlugin, pod *corev1.Pod) { p.Unreserve(context.Background(), nil, pod, "node-1") },
		wantReserved: "node-2",
		wantResults:  map[string]float64{"unreserve/unchanged": 1},
	}, {
		name:     "unreserve after a newer reservation on another node: left alone",
		chaperon: newChaperon(ns, "web"),
		do: func(p *testPlugin, pod *corev1.Pod) {
			p.Reserve(context.Background(), nil, pod, "node-2")
			p.Unreserve(context.Background(), nil, pod, "node-1")
		},
		wantPatches:  []string{`{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-2"},"uid":"web-uid"}}`},
		wantReserved: "node-2",
		wantResults:  map[string]float64{"reserve/written": 1},
	}, {
		name:     "unreserve when the cache cannot tell: the API server's test decides",
		chaperon: newChaperon(ns, "web").reserved("node-2"),
		do: func(p *testPlugin, pod *corev1.Pod) {
			p.chaperons.isSynced = false
			p.Unreserve(context.Background(), nil, pod, "node-1")
		},
		wantPatches: []string{unreservePatch},
		// The test op fails (node-2 is recorded): Invalid, nothing to do.
		wantReserved: "node-2",
		wantResults:  map[string]float64{"unreserve/gone": 1},
	}, {
		name:        "reserve on a chaperon being deleted: no request",
		chaperon:    newChaperon(ns, "web").deleting(),
		do:          func(p *testPlugin, pod *corev1.Pod) { p.Reserve(context.Background(), nil, pod, "node-1") },
		wantResults: map[string]float64{"reserve/gone": 1},
	}, {
		// A loser's pod, deleted with its chaperon: the reservation goes
		// with the chaperon, no request.
		name:     "unreserve on a chaperon being deleted: no request",
		chaperon: newChaperon(ns, "web").reserved("node-1").deleting(),
		do: func(p *testPlugin, pod *corev1.Pod) {
			p.Unreserve(context.Background(), nil, pod, "node-1")
		},
		wantReserved: "node-1",
		wantResults:  map[string]float64{"unreserve/gone": 1},
	}, {
		name:        "reserve on a replaced chaperon: the UID refuses it",
		chaperon:    newChaperon(ns, "web").uid("new-uid"),
		do:          func(p *testPlugin, pod *corev1.Pod) { p.Reserve(context.Background(), nil, pod, "node-1") },
		wantPatches: []string{`{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"},"uid":"web-uid"}}`},
		wantResults: map[string]float64{"reserve/gone": 1},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeChaperons(tc.chaperon.obj())
			p := newTestPlugin(t, f)
			pod := newCandidate(ns, "web").obj()
			before := map[string]float64{}
			for k := range tc.wantResults {
				op, result, _ := strings.Cut(k, "/")
				before[k] = counter(t, reservationWrites, op, result)
			}
			tc.do(p, pod)
			drain(p)

			var got []string
			for _, c := range f.patchCalls() {
				got = append(got, c.data)
			}
			assert.Empty(t, cmp.Diff(tc.wantPatches, got), "patches (-want,+got)")
			f.mu.Lock()
			reserved := f.server[key("web")].Annotations[v1alpha1.AnnotationReserved]
			f.mu.Unlock()
			assert.Equal(t, tc.wantReserved, reserved, "reserved")
			for k, want := range tc.wantResults {
				op, result, _ := strings.Cut(k, "/")
				got := counter(t, reservationWrites, op, result) - before[k]
				assert.Equalf(t, want, got, "reservation_writes_total{%s} growth", k)
			}
		})
	}
}

func TestFailedReservationWriteIsRetried(t *testing.T) {
	f := newFakeChaperons(newChaperon(ns, "web").obj())
	f.patchErrs = []error{apierrors.NewInternalError(errors.New("etcd hiccup")), apierrors.NewTooManyRequests("slow down", 1)}
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()

	p.Reserve(context.Background(), nil, pod, "node-1")
	drain(p)
	for attempt := 1; attempt <= 2; attempt++ {
		got := len(f.patchCalls())
		require.Equal(t, attempt, got, "attempts")
		// Backoff: the retry waits on the clock.
		p.clock.Step(writeRetryBase << (attempt - 1))
		eventually(t, "the retry is queued", func() bool { return p.reservations.queue.Len() == 1 })
		drain(p)
	}
	got := len(f.patchCalls())
	require.Equalf(t, 3, got, "attempts = %d, want 3", got)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Equal(t, "node-1", f.server[key("web")].Annotations[v1alpha1.AnnotationReserved], "reserved after retries")
}

func TestReservationOfAGoneChaperonIsDropped(t *testing.T) {
	f := newFakeChaperons()
	p := newTestPlugin(t, f)
	p.Reserve(context.Background(), nil, newCandidate(ns, "web").obj(), "node-1")
	drain(p)
	got := len(f.patchCalls())
	assert.Equalf(t, 1, got, "attempts = %d, want 1 (NotFound is not retried)", got)
	assert.False(t, p.reservations.queue.NumRequeues(key("web")) != 0 || len(p.reservations.intents) != 0, "the write of a gone chaperon is still pending")
}

func TestNotACandidateIsLeftAlone(t *testing.T) {
	f := newFakeChaperons(newChaperon(ns, "web").obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").schedulerName("default-scheduler").obj()
	s := p.Reserve(context.Background(), nil, pod, "node-1")
	assert.Truef(t, s.IsSuccess(), "Reserve() = %v", s)
	p.Unreserve(context.Background(), nil, pod, "node-1")
	assert.False(t, p.reservations.queue.Len() != 0 || p.waiters.len() != 0, "the plugin acted on a pod of another scheduler")
}

func TestEventsToRegister(t *testing.T) {
	p := newTestPlugin(t, newFakeChaperons())
	events, err := p.EventsToRegister(context.Background())
	assert.Falsef(t, err != nil || len(events) != 0, "EventsToRegister() = %v, %v; want none (the plugin activates elected candidates itself)", events, err)
}

// A candidate whose chaperon is already gone when it reaches Permit is
// rejected after one read, and its queued reservation is never written.
func TestCandidateOfAGoneChaperonCostsNoWrite(t *testing.T) {
	f := newFakeChaperons()
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	p.Reserve(context.Background(), nil, pod, "node-1")
	s, _ := p.Permit(context.Background(), nil, pod, "node-1")
	require.Equalf(t, fwk.Unschedulable, s.Code(), "Permit() = %v, want Unschedulable", s.Code())
	p.Unreserve(context.Background(), nil, pod, "node-1")
	drain(p)
	got := len(f.patchCalls())
	assert.Equalf(t, 0, got, "patches = %d, want 0", got)
	got = f.apiGets()
	assert.Equalf(t, 1, got, "API reads = %d, want 1 (the confirmation)", got)
	assert.Falsef(t, len(p.reservations.written) != 0 || len(p.reservations.intents) != 0, "state kept for a gone chaperon: written %v, intents %v", p.reservations.written, p.reservations.intents)
}
