package candidate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// eventually waits, with a deadline, for cond; the plugin's queues move
// delayed items on their own goroutines.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not true after 5s", what)
	}
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
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("chaperonOf() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
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
			if status.Code() != tc.wantCode || !strings.Contains(status.Message(), tc.wantMsg) {
				t.Errorf("Permit() = %v %q, want %v containing %q", status.Code(), status.Message(), tc.wantCode, tc.wantMsg)
			}
			if timeout != tc.wantTimeout {
				t.Errorf("Permit() timeout = %s, want %s", timeout, tc.wantTimeout)
			}
			if got := f.apiGets(); got != tc.wantGets {
				t.Errorf("API reads = %d, want %d", got, tc.wantGets)
			}
			if got := p.waiters.len(); got != tc.wantWaiters {
				t.Errorf("waiting candidates = %d, want %d", got, tc.wantWaiters)
			}
			if len(f.patchCalls()) != 0 {
				t.Errorf("Permit wrote %v", f.patchCalls())
			}
		})
	}
}

// permitWait runs Permit on a candidate whose chaperon is not elected and
// registers it as waiting, as the framework does.
func permitWait(t *testing.T, p *testPlugin, pod *corev1.Pod) *fakeWaitingPod {
	t.Helper()
	if s, _ := p.Permit(context.Background(), nil, pod, "node-1"); s.Code() != fwk.Wait {
		t.Fatalf("Permit() = %v %q, want Wait", s.Code(), s.Message())
	}
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
	if allowed, rejected := wp.result(); len(allowed)+len(rejected) != 0 {
		t.Fatalf("decided on an unrelated change: allowed %v, rejected %v", allowed, rejected)
	}

	p.clock.Step(1500 * time.Millisecond)
	old = ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background())

	allowed, rejected := wp.result()
	if diff := cmp.Diff([]string{Name}, allowed); diff != "" || len(rejected) != 0 {
		t.Errorf("Allow calls (-want,+got):\n%s\nrejected: %v", diff, rejected)
	}
	if p.waiters.len() != 0 {
		t.Errorf("the candidate is still registered as waiting")
	}
	if got := counter(t, waitsTotal, waitAllowed) - allowedBefore; got != 1 {
		t.Errorf("waits_total{allowed} grew by %v, want 1", got)
	}
	if len(p.handle.activations()) != 0 {
		t.Errorf("a waiting candidate was activated: %v", p.handle.activations())
	}
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
	if diff := cmp.Diff([]string{msgChaperonGone}, rejected); diff != "" || len(allowed) != 0 {
		t.Errorf("Reject calls (-want,+got):\n%s\nallowed: %v", diff, allowed)
	}
	// The framework unreserves the rejected candidate: the chaperon is
	// known gone, so neither the rejection nor the unreservation costs a
	// request beyond the reservation.
	p.Unreserve(context.Background(), nil, pod, "node-1")
	drain(p)
	if got := len(f.patchCalls()); got != 1 {
		t.Errorf("patches = %d, want 1 (the reservation only)", got)
	}
	if got := f.apiGets(); got != 0 {
		t.Errorf("API reads = %d, want 0 (the watch saw the deletion)", got)
	}
	if len(p.reservations.written) != 0 {
		t.Errorf("what was known of the gone chaperon is kept: %v", p.reservations.written)
	}
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
	if _, rejected := wp.result(); !cmp.Equal(rejected, []string{msgChaperonDeleting}) {
		t.Errorf("rejected = %v, want %q", rejected, msgChaperonDeleting)
	}
	if f.apiGets() != 0 {
		t.Errorf("a deletion timestamp in the cache needs no API read, got %d", f.apiGets())
	}
}

// The election can land between Permit's answer and the framework's
// registration of the waiting pod: the decision is retried until the pod
// waits, never lost.
func TestElectionBeforeTheWaitingPodIsRegistered(t *testing.T) {
	ch := newChaperon(ns, "web")
	f := newFakeChaperons(ch.obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	if s, _ := p.Permit(context.Background(), nil, pod, "node-1"); s.Code() != fwk.Wait {
		t.Fatalf("Permit() = %v, want Wait", s.Code())
	}

	old := ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	p.decideNext(context.Background()) // no waiting pod yet: retried later
	if got := p.decisions.NumRequeues(pod.UID); got != 1 {
		t.Fatalf("decision requeues = %d, want 1", got)
	}

	wp := p.handle.wait(pod)
	p.clock.Step(decideRetryBase)
	eventually(t, "the retried decision is queued", func() bool { return p.decisions.Len() == 1 })
	p.decideNext(context.Background())
	if allowed, _ := wp.result(); !cmp.Equal(allowed, []string{Name}) {
		t.Errorf("allowed = %v, want [%s]", allowed, Name)
	}
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
	if p.decisions.Len() != 0 {
		t.Fatalf("an event queued a decision for a pod that does not wait")
	}
	f.put(ch.elected().obj())
	if s, _ := p.Permit(context.Background(), nil, pod, "node-1"); !s.IsSuccess() {
		t.Errorf("Permit() = %v, want Success", s.Code())
	}
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
	if p.waiters.len() != 0 {
		t.Errorf("the candidate still waits after Unreserve")
	}
	if got := counter(t, waitsTotal, waitEnded) - endedBefore; got != 1 {
		t.Errorf("waits_total{ended} grew by %v, want 1", got)
	}
	// A later election has no waiting candidate to allow.
	old := ch.obj()
	f.put(ch.elected().obj())
	p.onChaperon(context.Background(), old, ch.obj())
	if p.decisions.Len() != 0 {
		t.Errorf("an election queued a decision for an unreserved candidate")
	}
	if allowed, rejected := wp.result(); len(allowed)+len(rejected) != 0 {
		t.Errorf("allowed %v, rejected %v after Unreserve", allowed, rejected)
	}
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
			if diff := cmp.Diff(tc.want, p.handle.activations()); diff != "" {
				t.Errorf("activations (-want,+got):\n%s", diff)
			}
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
	if s := p.Reserve(context.Background(), nil, pod, "node-1"); !s.IsSuccess() {
		t.Fatalf("Reserve() = %v", s)
	}
	if got := p.reservations.queue.Len(); got != 1 {
		t.Fatalf("queued writes = %d, want 1", got)
	}
	if len(f.patchStart) != 0 {
		t.Fatalf("Reserve wrote to the API server itself")
	}

	done := make(chan struct{})
	go func() {
		p.reservations.processNext(context.Background())
		close(done)
	}()
	call := <-f.patchStart
	close(f.patchBlock)
	<-done
	want := `{"metadata":{"annotations":{"multicluster.fleetlet.io/reserved":"node-1"},"uid":"web-uid"}}`
	if call.pt != types.MergePatchType || call.data != want || call.key != key("web") {
		t.Errorf("patch = %s %s %s, want merge patch %s", call.key, call.pt, call.data, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.server[key("web")].Annotations[v1alpha1.AnnotationReserved]; got != "node-1" {
		t.Errorf("reserved = %q, want node-1", got)
	}
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
			if diff := cmp.Diff(tc.wantPatches, got); diff != "" {
				t.Errorf("patches (-want,+got):\n%s", diff)
			}
			f.mu.Lock()
			reserved := f.server[key("web")].Annotations[v1alpha1.AnnotationReserved]
			f.mu.Unlock()
			if reserved != tc.wantReserved {
				t.Errorf("reserved = %q, want %q", reserved, tc.wantReserved)
			}
			for k, want := range tc.wantResults {
				op, result, _ := strings.Cut(k, "/")
				if got := counter(t, reservationWrites, op, result) - before[k]; got != want {
					t.Errorf("reservation_writes_total{%s} grew by %v, want %v", k, got, want)
				}
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
		if got := len(f.patchCalls()); got != attempt {
			t.Fatalf("attempts = %d, want %d", got, attempt)
		}
		// Backoff: the retry waits on the clock.
		p.clock.Step(writeRetryBase << (attempt - 1))
		eventually(t, "the retry is queued", func() bool { return p.reservations.queue.Len() == 1 })
		drain(p)
	}
	if got := len(f.patchCalls()); got != 3 {
		t.Fatalf("attempts = %d, want 3", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.server[key("web")].Annotations[v1alpha1.AnnotationReserved]; got != "node-1" {
		t.Errorf("reserved = %q after retries, want node-1", got)
	}
}

func TestReservationOfAGoneChaperonIsDropped(t *testing.T) {
	f := newFakeChaperons()
	p := newTestPlugin(t, f)
	p.Reserve(context.Background(), nil, newCandidate(ns, "web").obj(), "node-1")
	drain(p)
	if got := len(f.patchCalls()); got != 1 {
		t.Errorf("attempts = %d, want 1 (NotFound is not retried)", got)
	}
	if p.reservations.queue.NumRequeues(key("web")) != 0 || len(p.reservations.intents) != 0 {
		t.Errorf("the write of a gone chaperon is still pending")
	}
}

func TestNotACandidateIsLeftAlone(t *testing.T) {
	f := newFakeChaperons(newChaperon(ns, "web").obj())
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").schedulerName("default-scheduler").obj()
	if s := p.Reserve(context.Background(), nil, pod, "node-1"); !s.IsSuccess() {
		t.Errorf("Reserve() = %v", s)
	}
	p.Unreserve(context.Background(), nil, pod, "node-1")
	if p.reservations.queue.Len() != 0 || p.waiters.len() != 0 {
		t.Errorf("the plugin acted on a pod of another scheduler")
	}
}

func TestEventsToRegister(t *testing.T) {
	p := newTestPlugin(t, newFakeChaperons())
	events, err := p.EventsToRegister(context.Background())
	if err != nil || len(events) != 0 {
		t.Errorf("EventsToRegister() = %v, %v; want none (the plugin activates elected candidates itself)", events, err)
	}
}

// A candidate whose chaperon is already gone when it reaches Permit is
// rejected after one read, and its queued reservation is never written.
func TestCandidateOfAGoneChaperonCostsNoWrite(t *testing.T) {
	f := newFakeChaperons()
	p := newTestPlugin(t, f)
	pod := newCandidate(ns, "web").obj()
	p.Reserve(context.Background(), nil, pod, "node-1")
	if s, _ := p.Permit(context.Background(), nil, pod, "node-1"); s.Code() != fwk.Unschedulable {
		t.Fatalf("Permit() = %v, want Unschedulable", s.Code())
	}
	p.Unreserve(context.Background(), nil, pod, "node-1")
	drain(p)
	if got := len(f.patchCalls()); got != 0 {
		t.Errorf("patches = %d, want 0", got)
	}
	if got := f.apiGets(); got != 1 {
		t.Errorf("API reads = %d, want 1 (the confirmation)", got)
	}
	if len(p.reservations.written) != 0 || len(p.reservations.intents) != 0 {
		t.Errorf("state kept for a gone chaperon: written %v, intents %v", p.reservations.written, p.reservations.intents)
	}
}
