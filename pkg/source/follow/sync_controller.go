package follow

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// IndexRefs indexes proxy pods by the objects they follow, as
// "<Kind>/<name>" (ConfigMap, Secret, ServiceAccount references found in
// the spec). A source object that no proxy references is never synced.
const IndexRefs = "follow.refs"

// SpecOpener returns what the user asked for: the proxy's spec with its
// sealed source-spec restored.
type SpecOpener func(*corev1.Pod) (*corev1.PodSpec, error)

// SyncController pushes changes of the source's ConfigMaps, Secrets and
// ServiceAccounts to their copies in every target. It watches ConfigMaps and
// ServiceAccounts through the manager's cache and Secrets by metadata only
// (their data is read when a referenced one changes, never cached), and
// does anything only for objects some proxy pod references.
type SyncController struct {
	Follower *Follower
	Registry *fleet.Registry
	// Spec opens proxies' source-specs for the reference index.
	Spec SpecOpener

	client   client.Client
	recorder events.EventRecorder
}

// SetupWithManager registers the index and one controller per kind.
func (c *SyncController) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if c.Follower == nil || c.Registry == nil || c.Spec == nil {
		return errors.New("follow: the sync controller needs a follower, the target registry and a spec opener")
	}
	c.client = mgr.GetClient()
	c.recorder = mgr.GetEventRecorder("fleetlet-follow")
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexRefs, c.indexRefs); err != nil {
		return fmt.Errorf("indexing proxies by the objects they follow: %w", err)
	}
	changed := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
		},
	}
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(KindSecret))
	for _, w := range []struct {
		kind string
		obj  client.Object
	}{
		{KindConfigMap, &corev1.ConfigMap{}},
		{KindServiceAccount, &corev1.ServiceAccount{}},
		{KindSecret, secrets},
	} {
		r := &kindSync{c: c, gk: schema.GroupKind{Kind: w.kind}}
		b := ctrl.NewControllerManagedBy(mgr).
			Named("follow-" + w.kind).
			WithOptions(controller.Options{MaxConcurrentReconciles: 4})
		if w.kind == KindSecret {
			b = b.WatchesMetadata(w.obj, &handler.EnqueueRequestForObject{}, builder.WithPredicates(changed))
		} else {
			b = b.Watches(w.obj, &handler.EnqueueRequestForObject{}, builder.WithPredicates(changed))
		}
		if err := b.Complete(r); err != nil {
			return err
		}
	}
	return nil
}

// indexRefs is the index function of IndexRefs: proxies only.
func (c *SyncController) indexRefs(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok || !hasFinalizer(pod) {
		return nil
	}
	spec, err := c.Spec(pod)
	if err != nil {
		return nil
	}
	refs, err := Refs(pod, spec)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range refs {
		if !r.Annotated {
			out = append(out, r.Kind+"/"+r.Name)
		}
	}
	return out
}

func hasFinalizer(pod *corev1.Pod) bool { return proxy.IsManaged(pod) }

// kindSync syncs one kind.
type kindSync struct {
	c  *SyncController
	gk schema.GroupKind
}

// Reconcile pushes one source object to every target that holds a copy of
// it, if any proxy of its namespace references it.
func (k *kindSync) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var proxies corev1.PodList
	if err := k.c.client.List(ctx, &proxies, client.InNamespace(req.Namespace),
		client.MatchingFields{IndexRefs: k.gk.Kind + "/" + req.Name}); err != nil {
		return reconcile.Result{}, err
	}
	if len(proxies.Items) == 0 {
		return reconcile.Result{}, nil
	}
	var errs []error
	for _, cl := range k.c.Registry.List() {
		key := cl.Key()
		if cl.Self() || !cl.Health().Ready || (key.Namespace != "" && key.Namespace != req.Namespace) {
			continue
		}
		err := k.c.Follower.Sync(ctx, cl.Client(), key.String(), k.gk, req.Namespace, req.Name)
		var gone *SourceGone
		switch {
		case errors.As(err, &gone):
			for i := range proxies.Items {
				k.c.recorder.Eventf(&proxies.Items[i], nil, corev1.EventTypeWarning, EventSourceGone, "Follow",
					"%s %s was deleted in the source; its copy in %s stays while this pod's delegate needs it", k.gk.Kind, req.Name, key)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// Event reasons on proxy pods.
const (
	// EventSourceGone: an object a delegate follows was deleted in the
	// source; its copies stay while delegates use them.
	EventSourceGone = "FollowedObjectDeleted"
	// EventRefused: an object the pod needs cannot be taken to a target,
	// which is filtered for the pod.
	EventRefused = "FollowRefused"
)
