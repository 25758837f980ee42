package chaperon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// countingReader counts the chaperons read from the API server.
type countingReader struct {
	client.Reader
	chaperonGets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.PodChaperon); ok {
		c.chaperonGets++
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// A new chaperon's pod is created from the cache's word alone: only this
// controller records a creation, so the cache can lack one only behind a
// write of its own, or for a chaperon a manager before it may have
// written. Before, every pod create cost a read of its chaperon from the
// API server (one per candidate in every target).
func TestCreateReadsTheChaperonOnlyWhenTheCacheMayBeBehind(t *testing.T) {
	created := metav1.NewTime(testNow.Add(-time.Minute))
	leadLongBefore := testNow.Add(-time.Hour)
	leadJustBefore := created.Add(-takeoverMargin / 2)
	tests := []struct {
		name string
		// leading is when the controller started to act (nil: not told).
		leading *time.Time
		// oursBehind: the cache shows a version a status write of ours
		// replaced; the API server has the creation recorded.
		oursBehind bool
		wantReads  int
		wantCreate bool
		// wantWait: the pass does nothing until the cache shows our write.
		wantWait bool
	}{
		{name: "a chaperon newer than the lead: the cache's word, no read", leading: &leadLongBefore, wantCreate: true},
		{name: "the lead's start unknown: read", wantReads: 1, wantCreate: true},
		{name: "a chaperon from before the lead (and its margin): read", leading: &leadJustBefore, wantReads: 1, wantCreate: true},
		{name: "the cache behind a write of ours: no read, no create, the pass waits for the cache", leading: &leadLongBefore, oursBehind: true, wantWait: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ch := makeChaperon(testNS, testName).uid(chaperonUID).obj()
			ch.CreationTimestamp = created
			if tc.oursBehind {
				ch = makeChaperon(testNS, testName).uid(chaperonUID).cond(metav1.ConditionTrue, ReasonPodCreated).obj()
				ch.CreationTimestamp = created
			}
			api := fake.NewClientBuilder().WithScheme(scheme).
				WithObjects(ch, namespace(testNS, nil), readySource(testNS, "cluster-a", "fleetlet-source-cluster-a")).
				WithStatusSubresource(&v1alpha1.PodChaperon{}).
				Build()
			var cache client.Client = api
			r := &PodChaperonReconciler{Recorder: events.NewFakeRecorder(10), Clock: testingclock.NewFakePassiveClock(testNow)}
			if tc.oursBehind {
				// The cache still shows the chaperon before our record.
				stale := makeChaperon(testNS, testName).uid(chaperonUID).obj()
				stale.CreationTimestamp, stale.ResourceVersion = created, "1"
				cache = staleCache{Client: api, chaperon: stale}
				r.writes.wrote(chaperonUID, "2", testNow)
			}
			reader := &countingReader{Reader: api}
			imp := &fakeImpersonator{c: api}
			r.Client, r.APIReader, r.Impersonator = cache, reader, imp
			if tc.leading != nil {
				r.leadingSince(*tc.leading)
			}
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ch)})
			require.NoError(t, err)
			if tc.wantWait {
				assert.Equal(t, waitForOwnWrite, res.RequeueAfter, "the requeue of a pass that waits for the cache")
			}
			assert.Equalf(t, tc.wantReads, reader.chaperonGets, "chaperon read from the API server %d times, want %d", reader.chaperonGets, tc.wantReads)
			got := len(imp.creates) == 1
			assert.Equalf(t, tc.wantCreate, got, "pod created: %v (%v), want %v", got, imp.creates, tc.wantCreate)
		})
	}
}

// A pass never acts on a cache behind a status write of our own: it waits
// for the event that shows the write (which the predicate lets through for
// it alone), or a second. Before, such a pass wrote the status again from
// the version before, and its optimistic lock made it a conflict and a read
// from the API server. The writes kept are only those the cache has not
// shown yet: the event of the version a write made, of the chaperon's
// deletion, forgets them; a pass stops waiting after ownWriteMemory (a
// relist may have skipped the event).
func TestAPassWaitsForTheCacheToShowOurWrite(t *testing.T) {
	r := &PodChaperonReconciler{Clock: testingclock.NewFakePassiveClock(testNow)}
	pred := r.chaperonChanged()
	at := func(rv string) *v1alpha1.PodChaperon {
		ch := makeChaperon(testNS, testName).uid(chaperonUID).obj()
		ch.ResourceVersion = rv
		return ch
	}
	// Status-only events, as our own writes make.
	shown := func(from, to string) bool {
		return pred.Update(event.UpdateEvent{ObjectOld: at(from), ObjectNew: at(to)})
	}

	r.writes.wrote(chaperonUID, "3", testNow)
	assert.True(t, r.writes.wait(chaperonUID, "1", testNow), "the cache shows a version before our write")
	assert.False(t, shown("1", "2"), "an event of a version before ours brings the pass back")
	assert.True(t, r.writes.wait(chaperonUID, "2", testNow), "the cache shows another version before our write")
	assert.True(t, shown("2", "3"), "the event of our write brings back the pass that waits")
	assert.False(t, r.writes.wait(chaperonUID, "3", testNow), "the cache showed our write: nothing to wait for")

	r.writes.wrote(chaperonUID, "5", testNow)
	assert.False(t, shown("4", "5"), "our own write's event passes while no pass waits")
	assert.False(t, r.writes.wait(chaperonUID, "4", testNow), "a write the cache has shown is still kept")

	r.writes.wrote(chaperonUID, "7", testNow)
	assert.False(t, r.writes.wait(chaperonUID, "6", testNow.Add(ownWriteMemory+time.Second)), "a write waited for past ownWriteMemory (a relist may have skipped it)")
	assert.True(t, r.writes.behind(chaperonUID, "6"), "a write not shown yet, past ownWriteMemory: a creation still asks the API server")

	// The event of a write before its answer, or a write that changed
	// nothing (the version it returns is one the cache showed): nothing to
	// wait for. Before, such a pass waited the whole ownWriteMemory.
	assert.False(t, shown("7", "8"), "an event of a version nobody waits for")
	r.writes.wrote(chaperonUID, "8", testNow)
	assert.False(t, r.writes.wait(chaperonUID, "7", testNow), "a write whose event came before its answer")

	r.writes.wrote(chaperonUID, "9", testNow)
	pred.Delete(event.DeleteEvent{Object: at("9")})
	assert.False(t, r.writes.wait(chaperonUID, "8", testNow), "a write of a deleted chaperon is still kept")
}

// createdPods remembers a creation until the cache shows the pod or for
// ownWriteMemory, and drops forgotten entries without a walk per creation.
func TestCreatedPods(t *testing.T) {
	var c createdPods
	t0 := time.Unix(1_000_000, 0)
	c.created("a", t0)
	assert.True(t, c.lately("a", t0.Add(ownWriteMemory)), "a creation within ownWriteMemory")
	assert.False(t, c.lately("a", t0.Add(ownWriteMemory+time.Millisecond)), "a creation past ownWriteMemory")
	assert.False(t, c.lately("b", t0), "a chaperon whose pod this controller did not create")
	c.created("b", t0.Add(time.Second))
	c.shown("b")
	assert.False(t, c.lately("b", t0.Add(time.Second)), "a creation the cache has shown")
	c.created("c", t0.Add(2*ownWriteMemory))
	assert.NotContains(t, c.m, types.UID("a"), "an entry past ownWriteMemory, after the next sweep")
	assert.Len(t, c.m, 1, "entries after the sweep")
}
