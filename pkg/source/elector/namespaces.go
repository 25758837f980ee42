// namespaces: a namespace a candidate needs, created in a target on demand
// where the target's ClusterSource lets this source create it.

package elector

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

const (
	// namespaceRetry is how long a target's answer to a namespace create
	// stands: a refusal is not asked again before (every pass of every
	// pod of that namespace would ask), a creation is taken to be waiting
	// for the target to admit the source there (its ClusterSource binds
	// the source's role in the new namespace).
	namespaceRetry = 30 * time.Second
	// namespaceAdmitWait is how soon a proxy whose namespace was just
	// created in a target runs again: no event of the target brings it
	// back when the source is admitted there.
	namespaceAdmitWait = 2 * time.Second
)

// namespaceTries remembers, per target and namespace, the last create asked.
type namespaceTries struct {
	mu sync.Mutex
	m  map[namespaceKey]namespaceTry
}

type namespaceKey struct {
	target proxy.TargetKey
	name   string
}

type namespaceTry struct {
	at      time.Time
	created bool
	why     string
}

func (n *namespaceTries) get(k namespaceKey, now time.Time) (namespaceTry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.m[k]
	if !ok || now.Sub(t.at) > namespaceRetry {
		return namespaceTry{}, false
	}
	return t, true
}

func (n *namespaceTries) put(k namespaceKey, t namespaceTry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = map[namespaceKey]namespaceTry{}
	}
	for old, v := range n.m {
		if t.at.Sub(v.at) > namespaceRetry {
			delete(n.m, old)
		}
	}
	n.m[k] = t
}

// missingNamespaceThere is why a target lacking the pod's namespace takes no
// candidate: this source creates it there when the target's ClusterSource
// allows it (once per namespaceRetry), and says what the target answered.
// soon is true while a namespace it created waits to be admitted.
func (r *Reconciler) missingNamespaceThere(ctx context.Context, pod *corev1.Pod, ts *targetState) (why string, soon bool) {
	k := namespaceKey{target: ts.key, name: pod.Namespace}
	now := r.clock.Now()
	if t, ok := r.namespaces.get(k, now); ok {
		return t.why, t.created
	}
	var src corev1.Namespace
	if err := r.client.Get(ctx, types.NamespacedName{Name: pod.Namespace}, &src); err != nil {
		return fmt.Sprintf("%s (reading it in this cluster: %v)", missingNamespace(pod.Namespace), err), false
	}
	want := fleet.OnDemandNamespace(&src, r.opts.SourceName)
	err := ts.cluster.Client().Create(ctx, want)
	t := namespaceTry{at: now}
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Created a namespace in a target for a pod", "target", ts.key.String(), "namespace", pod.Namespace)
		t.created, t.why = true, fmt.Sprintf("namespace %s did not exist there: created it, waiting for the target to admit this source in it", pod.Namespace)
	case apierrors.IsAlreadyExists(err):
		// Created meanwhile, by someone else or a pass before: the next
		// pass finds it.
		t.created, t.why = true, fmt.Sprintf("namespace %s was just created there, waiting for the target to admit this source in it", pod.Namespace)
	case apierrors.IsForbidden(err):
		t.why = fmt.Sprintf("%s, and this source may not create it: %v", missingNamespace(pod.Namespace), err)
	default:
		t.why = fmt.Sprintf("%s; creating it: %v", missingNamespace(pod.Namespace), err)
	}
	r.namespaces.put(k, t)
	return t.why, t.created
}

// namespaceAbsent tells a target that refused this source in the pod's
// namespace because the namespace is not there (or is being deleted) from
// one where it exists and does not admit the source (absent false: the
// refusal says it). A missing namespace's answer stands for
// namespaceRetry; a namespace that exists (a target that does not admit
// this source there) is read again at each refusal.
func (r *Reconciler) namespaceAbsent(ctx context.Context, pod *corev1.Pod, ts *targetState) (why string, soon, absent bool) {
	if t, ok := r.namespaces.get(namespaceKey{target: ts.key, name: pod.Namespace}, r.clock.Now()); ok {
		return t.why, t.created, true
	}
	switch ts.cluster.Namespace(ctx, pod.Namespace) {
	case fleet.NamespaceGone:
		why, soon := r.missingNamespaceThere(ctx, pod, ts)
		return why, soon, true
	case fleet.NamespaceTerminating:
		return fmt.Sprintf("namespace %s is being deleted there", pod.Namespace), false, true
	}
	return "", false, false
}

// awaitingNamespace says, for a candidate the target refused (forbidden),
// whether that is because this source created the namespace a moment ago
// and is not admitted there yet.
func (r *Reconciler) awaitingNamespace(pod *corev1.Pod, ts *targetState) (string, bool) {
	t, ok := r.namespaces.get(namespaceKey{target: ts.key, name: pod.Namespace}, r.clock.Now())
	if !ok || !t.created {
		return "", false
	}
	return t.why, true
}
