package chaperon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	}{
		{name: "a chaperon newer than the lead: the cache's word, no read", leading: &leadLongBefore, wantCreate: true},
		{name: "the lead's start unknown: read", wantReads: 1, wantCreate: true},
		{name: "a chaperon from before the lead (and its margin): read", leading: &leadJustBefore, wantReads: 1, wantCreate: true},
		{name: "the cache behind a write of ours: read, and the record the API server has counts", leading: &leadLongBefore, oursBehind: true, wantReads: 1},
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
				r.writes.Wrote(chaperonUID, "1")
			}
			reader := &countingReader{Reader: api}
			imp := &fakeImpersonator{c: api}
			r.Client, r.APIReader, r.Impersonator = cache, reader, imp
			if tc.leading != nil {
				r.leadingSince(*tc.leading)
			}
			_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ch)})
			require.NoError(t, err)
			assert.Equalf(t, tc.wantReads, reader.chaperonGets, "chaperon read from the API server %d times, want %d", reader.chaperonGets, tc.wantReads)
			got := len(imp.creates) == 1
			assert.Equalf(t, tc.wantCreate, got, "pod created: %v (%v), want %v", got, imp.creates, tc.wantCreate)
		})
	}
}

// The writes kept are only those the cache has not shown yet: an event of a
// later version, or of the chaperon's deletion, forgets them (else one
// would be kept for every chaperon ever written).
func TestChaperonEventsForgetOurWrites(t *testing.T) {
	r := &PodChaperonReconciler{}
	pred := r.chaperonChanged()
	at := func(rv string) *v1alpha1.PodChaperon {
		ch := makeChaperon(testNS, testName).uid(chaperonUID).obj()
		ch.ResourceVersion = rv
		return ch
	}
	r.writes.Wrote(chaperonUID, "1")
	pred.Update(event.UpdateEvent{ObjectOld: at("1"), ObjectNew: at("2")})
	assert.False(t, r.writes.Stale(chaperonUID, "1"), "a write the cache has shown is still kept")
	r.writes.Wrote(chaperonUID, "2")
	pred.Delete(event.DeleteEvent{Object: at("2")})
	assert.False(t, r.writes.Stale(chaperonUID, "2"), "a write of a deleted chaperon is still kept")
}
