package feedback

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
)

// Mirroring limits: per proxy, a burst of EventBurst Events, then one every
// EventInterval; more are dropped (and counted).
const (
	EventBurst    = 5
	EventInterval = 10 * time.Second
	// limiterIdle is how long an unused per-proxy limiter is kept.
	limiterIdle = 10 * time.Minute
)

// eventLimiter rate-limits mirrored Events per proxy.
type eventLimiter struct {
	mu       sync.Mutex
	limiters map[types.UID]*limiter
	lastGC   time.Time
}

type limiter struct {
	bucket flowcontrol.RateLimiter
	used   time.Time
}

func (l *eventLimiter) allow(uid types.UID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limiters == nil {
		l.limiters = map[types.UID]*limiter{}
	}
	if now.Sub(l.lastGC) > limiterIdle {
		for k, v := range l.limiters {
			if now.Sub(v.used) > limiterIdle {
				delete(l.limiters, k)
			}
		}
		l.lastGC = now
	}
	lim, ok := l.limiters[uid]
	if !ok {
		lim = &limiter{bucket: flowcontrol.NewTokenBucketRateLimiter(float32(time.Second)/float32(EventInterval), EventBurst)}
		l.limiters[uid] = lim
	}
	lim.used = now
	return lim.bucket.TryAccept()
}

// eventTime is when an Event last happened.
func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	if t.IsZero() {
		t = e.CreationTimestamp.Time
	}
	return t
}

// OnDelegateEvent mirrors an Event about a delegate onto its proxy,
// rate-limited per proxy. Events from before this process started are not
// mirrored again (a cache's first list replays them all), and neither are
// Events about candidates that were not elected.
func (r *Reconciler) OnDelegateEvent(key proxypod.TargetKey, e *corev1.Event) {
	if r == nil || r.client == nil || eventTime(e).Before(r.started) {
		return
	}
	cl, ok := r.registry.Get(key)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pod corev1.Pod
	if err := cl.Chaperons(e.InvolvedObject.Namespace).Get(ctx, types.NamespacedName{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}, &pod); err != nil {
		return // not one of ours
	}
	if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != pod.UID {
		return
	}
	ns, name := pod.Annotations[v1alpha1.AnnotationParentNamespace], pod.Annotations[v1alpha1.AnnotationParentName]
	if ns == "" || name == "" {
		return
	}
	var proxy corev1.Pod
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &proxy); err != nil {
		return
	}
	if string(proxy.UID) != pod.Labels[v1alpha1.LabelParentUID] {
		return
	}
	if k, chaperon, ok := proxypod.ElectedTarget(&proxy); !ok || k != key || chaperon != pod.Name {
		return // a candidate's news (scheduling attempts) is not the proxy's
	}
	if !r.events.allow(proxy.UID, time.Now()) {
		eventsTotal.WithLabelValues("dropped").Inc()
		return
	}
	eventsTotal.WithLabelValues("mirrored").Inc()
	typ := e.Type
	if typ != corev1.EventTypeWarning {
		typ = corev1.EventTypeNormal
	}
	action := e.Action
	if action == "" {
		action = "Delegate"
	}
	r.recorder.Eventf(&proxy, nil, typ, e.Reason, action, "%s (delegate in %s)", e.Message, key)
}
