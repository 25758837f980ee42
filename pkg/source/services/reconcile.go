package services

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
)

// Event reasons on Services.
const (
	// EventGlobalRefused: a Service asks to be global where the operator
	// has not declared pod networks routable between clusters.
	EventGlobalRefused = "GlobalServiceRefused"
)

// serviceState is what one pass decides from: the Service (nil when it is
// gone), the proxies it selects, the targets running their delegates, and
// whether it is global here.
type serviceState struct {
	key     types.NamespacedName
	svc     *corev1.Service
	proxies []corev1.Pod
	need    map[proxy.TargetKey]bool
	global  bool
}

// Reconcile brings one Service's copies (and a global one's slices) to the
// targets that need them, and removes the others.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	st, err := c.state(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(st.need) == 0 && !c.held.known(st.key) && !c.namespaceMayHold(ctx, st.key.Namespace) {
		return reconcile.Result{}, nil
	}
	var errs []error
	wait := false
	for _, cl := range c.Registry.List() {
		tk := cl.Key()
		if cl.Self() || (tk.Namespace != "" && tk.Namespace != st.key.Namespace) {
			continue
		}
		// A target not looked at since the start (or since it came) may
		// hold anything of this Service.
		h, seen := c.held.get(st.key, tk)
		unknown := !seen
		if !st.need[tk] && seen && !h.copy && !h.slices {
			continue
		}
		if !cl.Health().Ready {
			// Looked at again once it answers: it may hold both.
			c.held.set(st.key, tk, holding{copy: true, slices: true})
			wait = true
			continue
		}
		if err := c.converge(ctx, cl, st, h, unknown); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tk, err))
		}
	}
	if st.svc == nil && len(errs) == 0 && !wait {
		c.held.forget(st.key)
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if wait {
		return reconcile.Result{RequeueAfter: serviceRetry}, nil
	}
	return reconcile.Result{}, nil
}

// state reads what a pass decides from, and says with an Event when a
// Service asks to be global where it cannot be.
func (c *Controller) state(ctx context.Context, key types.NamespacedName) (serviceState, error) {
	st := serviceState{key: key, need: map[proxy.TargetKey]bool{}}
	var cur corev1.Service
	switch err := c.client.Get(ctx, key, &cur); {
	case apierrors.IsNotFound(err):
		return st, nil
	case err != nil:
		return st, err
	case cur.DeletionTimestamp != nil:
		return st, nil
	}
	st.svc = &cur
	sel := selectorOf(st.svc)
	if sel == nil {
		return st, nil
	}
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return st, fmt.Errorf("listing the pods Service %s selects: %w", key, err)
	}
	for i := range pods.Items {
		if !proxy.IsManaged(&pods.Items[i]) {
			continue
		}
		st.proxies = append(st.proxies, pods.Items[i])
		if tk, ok := delegateTarget(&pods.Items[i]); ok {
			st.need[tk] = true
		}
	}
	if c.wantsGlobal(ctx, st.svc) {
		st.global = c.RoutablePodNetworks
		if !st.global && c.refusedGlobal(key, cur.ResourceVersion) {
			c.recorder.Eventf(st.svc, nil, corev1.EventTypeWarning, EventGlobalRefused, "Follow",
				"global (%s=true or a ServiceExport) is ignored: the operator has not declared pod networks routable between clusters (chart value services.routablePodNetworks); each cluster's copy reaches its own delegates only", v1alpha1.AnnotationGlobal)
		}
	}
	return st, nil
}

// converge makes one target hold what a Service needs there: its copy and,
// global, its slices; or neither. A clash or a refusal of the target is
// said by an Event on the source's Service and not retried.
func (c *Controller) converge(ctx context.Context, cl *fleet.Cluster, st serviceState, h holding, unknown bool) error {
	tk := cl.Key()
	name := tk.String()
	if !st.need[tk] {
		if h.slices || unknown {
			if err := c.Follower.RemoveSlices(ctx, cl.Client(), name, st.key.Namespace, st.key.Name); err != nil {
				return err
			}
		}
		if _, err := c.Follower.RemoveService(ctx, cl.Client(), name, st.key.Namespace, st.key.Name); err != nil {
			c.held.set(st.key, tk, holding{copy: true})
			return err
		}
		c.held.set(st.key, tk, holding{})
		return nil
	}
	now := time.Now()
	if !h.fresh(st.svc.ResourceVersion, now) {
		cp, err := c.Follower.EnsureService(ctx, cl.Client(), name, st.svc)
		if c.refused(st.svc, tk, err) {
			c.held.set(st.key, tk, holding{})
			return nil
		}
		if err != nil {
			return err
		}
		h = holding{copy: true, slices: h.slices || unknown, version: st.svc.ResourceVersion, uid: cp.UID, ensured: now}
	}
	switch {
	case st.global:
		owner := &corev1.Service{}
		owner.Namespace, owner.Name, owner.UID = st.key.Namespace, st.key.Name, h.uid
		err := c.Follower.EnsureSlices(ctx, cl.Client(), name, owner, GlobalSlices(st.svc, st.proxies, tk, c.Follower.SourceName()))
		if c.refused(st.svc, tk, err) {
			err = nil
		}
		if err != nil {
			return err
		}
		h.slices = true
	case h.slices:
		if err := c.Follower.RemoveSlices(ctx, cl.Client(), name, st.key.Namespace, st.key.Name); err != nil {
			return err
		}
		h.slices = false
	}
	c.held.set(st.key, tk, h)
	return nil
}

// refused reports whether err is a refusal, and says it with an Event on
// the Service.
func (c *Controller) refused(svc *corev1.Service, tk proxy.TargetKey, err error) bool {
	var refusal *follow.Refusal
	if !errors.As(err, &refusal) {
		return false
	}
	c.recorder.Eventf(svc, nil, corev1.EventTypeWarning, follow.EventRefused, "Follow",
		"%s: not copied: %s; what is there is left untouched", tk, refusal.Error())
	return true
}

// refusedGlobal reports whether this version of a Service has not been
// told yet that it cannot be global (one Event per version).
func (c *Controller) refusedGlobal(key types.NamespacedName, version string) bool {
	c.held.mu.Lock()
	defer c.held.mu.Unlock()
	if c.refusedGlobalAt == nil {
		c.refusedGlobalAt = map[types.NamespacedName]string{}
	}
	if c.refusedGlobalAt[key] == version {
		return false
	}
	c.refusedGlobalAt[key] = version
	return true
}

// namespaceMayHold tells whether copies of a namespace's Services may be
// in targets: it is enabled (or cannot be read).
func (c *Controller) namespaceMayHold(ctx context.Context, name string) bool {
	var ns corev1.Namespace
	if err := c.client.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return !apierrors.IsNotFound(err)
	}
	return ns.Labels[v1alpha1.LabelEnabled] == v1alpha1.LabelEnabledValue
}
