package candidate

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Retries of a failed reservation write: from writeRetryBase doubling up to
// writeRetryMax, given up after maxWriteRetries attempts (a few minutes).
const (
	writeRetryBase  = 50 * time.Millisecond
	writeRetryMax   = 30 * time.Second
	maxWriteRetries = 15
)

// intent is what a chaperon's reservation annotation should become.
type intent struct {
	uid  types.UID
	node string
	// reserve: write node; otherwise remove the annotation if it still
	// names node.
	reserve bool
	// seq tells intents apart, so that a worker only forgets the intent it
	// applied, never a newer one.
	seq   uint64
	since time.Time
}

// written is the reservation this process last wrote on a chaperon: more
// recent than the cache, which sees our own writes only later. gone marks a
// chaperon the plugin found deleted: the Unreserve that follows needs no
// request.
type written struct {
	uid  types.UID
	node string // empty: removed
	gone bool
}

// reservations writes the multicluster.fleetlet.io/reserved annotation of
// chaperons outside the scheduling cycle. Reserve and Unreserve only record
// an intent and queue the chaperon; workers apply the latest intent of each
// chaperon, retry failed writes with backoff, and skip writes that would
// change nothing. A chaperon is never written by two workers at once.
type reservations struct {
	api        chaperonAPI
	cache      chaperonCache
	apiTimeout time.Duration
	clock      clock.PassiveClock
	queue      workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu      sync.Mutex
	seq     uint64
	intents map[types.NamespacedName]intent
	written map[types.NamespacedName]written
}

func newReservations(api chaperonAPI, c chaperonCache, apiTimeout time.Duration, clk clock.WithTicker) *reservations {
	return &reservations{
		api:        api,
		cache:      c,
		apiTimeout: apiTimeout,
		clock:      clk,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](writeRetryBase, writeRetryMax),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "fleetlet_candidate_reservations", Clock: clk}),
		intents: map[types.NamespacedName]intent{},
		written: map[types.NamespacedName]written{},
	}
}

// reserve records that the chaperon's candidate is reserved on node. It
// never blocks on the API server.
func (r *reservations) reserve(ref chaperonRef, node string) {
	r.set(ref, node, true)
}

// unreserve records that the chaperon's reservation on node is void. A
// reservation on another node, recorded since, is left alone.
func (r *reservations) unreserve(ref chaperonRef, node string) {
	r.mu.Lock()
	cur, ok := r.intents[ref.key]
	r.mu.Unlock()
	if ok && cur.reserve && cur.uid == ref.uid && cur.node != node {
		return
	}
	r.set(ref, node, false)
}

func (r *reservations) set(ref chaperonRef, node string, reserve bool) {
	r.mu.Lock()
	r.seq++
	r.intents[ref.key] = intent{uid: ref.uid, node: node, reserve: reserve, seq: r.seq, since: r.clock.Now()}
	r.mu.Unlock()
	r.queue.Add(ref.key)
}

// markGone records that the chaperon (this UID) no longer exists: the
// writes queued for it are dropped without a request. Every candidate the
// plugin rejects for a gone chaperon is unreserved next, which applies and
// clears the mark.
func (r *reservations) markGone(ref chaperonRef) {
	r.mu.Lock()
	r.written[ref.key] = written{uid: ref.uid, gone: true}
	r.mu.Unlock()
}

// isGone reports whether the chaperon (this UID) was marked gone.
func (r *reservations) isGone(ref chaperonRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.written[ref.key]
	return ok && w.gone && w.uid == ref.uid
}

// forget drops what is known of a deleted chaperon.
func (r *reservations) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.written, key)
	r.mu.Unlock()
}

// run applies intents with workers until ctx ends.
func (r *reservations) run(ctx context.Context, workers int) {
	defer r.queue.ShutDown()
	for range workers {
		go func() {
			for r.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
}

// processNext applies the intent of the next queued chaperon. It returns
// false when the queue is shut down.
func (r *reservations) processNext(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	r.mu.Lock()
	in, ok := r.intents[key]
	r.mu.Unlock()
	if !ok {
		r.queue.Forget(key)
		return true
	}

	op := opUnreserve
	if in.reserve {
		op = opReserve
	}
	log := klog.FromContext(ctx).WithValues("podChaperon", key, "node", in.node, "operation", op)
	result, err := r.apply(ctx, key, in)
	if result == writeRetry {
		if r.queue.NumRequeues(key) < maxWriteRetries {
			log.V(2).Info("Writing the reservation failed; retrying", "err", err)
			reservationWrites.WithLabelValues(op, writeRetry).Inc()
			r.queue.AddRateLimited(key)
			return true
		}
		log.Error(err, "Writing the reservation keeps failing; giving up")
		result = writeDropped
	}
	r.queue.Forget(key)
	r.mu.Lock()
	if cur, ok := r.intents[key]; ok && cur.seq == in.seq {
		delete(r.intents, key)
	}
	r.mu.Unlock()
	reservationWrites.WithLabelValues(op, result).Inc()
	if result == writeDone && in.reserve {
		reservationLatency.Observe(r.clock.Since(in.since).Seconds())
	}
	log.V(4).Info("Applied the reservation", "result", result)
	return true
}

// apply makes the chaperon's annotation what the intent says. It returns a
// result for the metrics (writeRetry when the write should be retried).
func (r *reservations) apply(ctx context.Context, key types.NamespacedName, in intent) (string, error) {
	if r.isGone(chaperonRef{key: key, uid: in.uid}) {
		r.forget(key)
		return writeGone, nil
	}
	node, deleting, known := r.known(key, in.uid)
	var (
		pt   types.PatchType
		data []byte
		err  error
	)
	if in.reserve {
		if deleting {
			return writeGone, nil
		}
		if known && node == in.node {
			return writeUnchanged, nil
		}
		// The UID makes the patch fail (the UID is immutable) if the
		// chaperon was replaced by another of the same name.
		pt = types.MergePatchType
		data, err = json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":         in.uid,
			"annotations": map[string]string{v1alpha1.AnnotationReserved: in.node},
		}})
	} else {
		if deleting {
			// A loser's, most likely: its reservation goes with it.
			return writeGone, nil
		}
		if known && node != in.node {
			return writeUnchanged, nil
		}
		// Remove the annotation only if it is still ours: same chaperon,
		// same node. A failed test is an Invalid error: nothing to do.
		pt = types.JSONPatchType
		path := "/metadata/annotations/" + jsonPointerEscape(v1alpha1.AnnotationReserved)
		data, err = json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": in.uid},
			{"op": "test", "path": path, "value": in.node},
			{"op": "remove", "path": path},
		})
	}
	if err != nil {
		return writeDropped, err
	}

	ctx, cancel := context.WithTimeout(ctx, r.apiTimeout)
	defer cancel()
	err = r.api.patch(ctx, key, pt, data)
	switch {
	case err == nil:
		w := written{uid: in.uid}
		if in.reserve {
			w.node = in.node
		}
		r.mu.Lock()
		r.written[key] = w
		r.mu.Unlock()
		return writeDone, nil
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsConflict(err):
		// Gone, replaced, or (unreserve) no longer naming this node:
		// what it holds now is not known.
		r.forget(key)
		return writeGone, nil
	default:
		return writeRetry, err
	}
}

// known returns the chaperon's reserved node as far as this process knows
// without asking the API server: what it last wrote itself, else the
// cache's copy of the same chaperon. known is false when neither knows.
func (r *reservations) known(key types.NamespacedName, uid types.UID) (node string, deleting, known bool) {
	ch := r.cache.get(key)
	if ch != nil && ch.UID == uid && ch.DeletionTimestamp != nil {
		deleting = true
	}
	r.mu.Lock()
	w, ok := r.written[key]
	r.mu.Unlock()
	if ok && w.uid == uid {
		return w.node, deleting, true
	}
	if ch == nil || ch.UID != uid || !r.cache.synced() {
		return "", deleting, false
	}
	return ch.Annotations[v1alpha1.AnnotationReserved], deleting, true
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
