// claims: a pod's PersistentVolumeClaims decide its target: placed claims
// keep it where they are; unplaced ones are placed by probe candidates.

package elector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/claims"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// Event reasons of claims.
const (
	// EventClaimsPlaced: the pod's claims were placed in the target its
	// probe candidates chose.
	EventClaimsPlaced = "ClaimsPlaced"
	// EventClaimsUnavailable: the pod's claims cannot be placed now (one
	// is missing, being deleted, or they are in different targets).
	EventClaimsUnavailable = "ClaimsUnavailable"
)

// claimsOf reads where the pod's claims are. A *claims.Problem is written
// on the pod (Elected=False) and stops this pass.
func (r *Reconciler) claimsOf(ctx context.Context, pod *corev1.Pod, userSpec *corev1.PodSpec) (claims.Placement, *reconcile.Result, error) {
	names := claims.Names(userSpec)
	if len(names) == 0 {
		return claims.Placement{}, nil, nil
	}
	place, err := claims.Read(ctx, r.client, pod.Namespace, names)
	var problem *claims.Problem
	if errors.As(err, &problem) {
		res := r.requeueAfter(pod, requeueClaims, r.opts.RetryInterval)
		return place, &res, r.setNotElected(ctx, pod, problem.Reason, problem.Message, EventClaimsUnavailable)
	}
	if err != nil {
		return place, &reconcile.Result{}, err
	}
	return place, nil, nil
}

// keepWithClaims leaves out every target but the one that holds the pod's
// placed claims, and says of that one, when it cannot take the pod, that
// the pod waits for it.
func keepWithClaims(place claims.Placement, states []*targetState) {
	for _, ts := range states {
		if len(place.Claims) > 0 && ts.cluster.Self() {
			// The delegate would mount the proxy's own claim, bound to a
			// volume of a real node: the proxy could never be bound to
			// the virtual node.
			ts.eligible, ts.reason = false, "a pod that mounts claims does not run in its own cluster through fleetlet (self target)"
			continue
		}
		if place.Target == "" {
			continue
		}
		if why := place.Why(ts.key.String()); why != "" {
			ts.eligible, ts.reason = false, why
			continue
		}
		if !ts.eligible && ts.reason != "" {
			ts.reason = place.Holds(ts.reason)
		}
	}
}

// isProbe tells a chaperon made to place claims.
func isProbe(pc *v1alpha1.PodChaperon) bool {
	return pc.Annotations[v1alpha1.AnnotationProbe] == "true"
}

// readyClaims places the pod's unplaced claims in the target that takes
// its candidate and copies them there, before the candidate: the
// placement is recorded in the source first. It returns why the target
// cannot have them, or an error.
func (r *Reconciler) readyClaims(ctx context.Context, place claims.Placement, ts *targetState) (string, error) {
	if len(place.Claims) == 0 || place.Probing() {
		return "", nil
	}
	if err := claims.Place(ctx, r.client, place.Unplaced(), ts.key.String()); err != nil {
		return "", err
	}
	for _, c := range place.Claims {
		why, err := claims.Ensure(ctx, ts.cluster.Client(), c, r.opts.SourceName, ts.cluster.StorageClasses())
		if err != nil || why != "" {
			return why, err
		}
	}
	return "", nil
}

// placeClaims ends a probe round: the winner's target is recorded on the
// pod's claims, and every probe is deleted. The pod is then elected into
// that target with its claims (the probes' deletions bring it back).
func (r *Reconciler) placeClaims(ctx context.Context, pod *corev1.Pod, place claims.Placement, winner *targetState, states []*targetState) (reconcile.Result, error) {
	target := winner.key.String()
	if err := claims.Place(ctx, r.client, place.Unplaced(), target); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Another pod placed a shared claim meanwhile, or it is gone:
			// decide again on fresh claims.
			return r.requeueAfter(pod, requeueConflict, requeueSoon), nil
		}
		return reconcile.Result{}, err
	}
	names := make([]string, len(place.Claims))
	for i, c := range place.Claims {
		names[i] = c.Name
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Placing claims", "target", target, "claims", names)
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, EventClaimsPlaced, "Elect", "Claims %s kept in target %s", strings.Join(names, ", "), target)
	r.forget(pod.UID)
	var errs []error
	for _, ts := range states {
		if ts.chaperon == nil || !isProbe(ts.chaperon) {
			continue
		}
		if err := r.deleteChaperon(ctx, ts.cluster, ts.chaperon, pod.UID); err != nil {
			errs = append(errs, fmt.Errorf("deleting the probe in %s: %w", ts.key, err))
			continue
		}
		if ts != winner {
			r.release(ctx, pod, ts.cluster)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return r.requeueAfter(pod, requeueSafety, r.opts.ResyncInterval), nil
}

// bindSourceClaims binds the claims the proxy mounts to their mirror
// volumes on its virtual node before it is ungated: the source's
// scheduler then binds it there, and never provisions a volume in the
// source for it. It tells whether the proxy must wait.
func (r *Reconciler) bindSourceClaims(ctx context.Context, pod *corev1.Pod, cl *fleet.Cluster, nodeName string) (reconcile.Result, bool, error) {
	names := claims.Names(&pod.Spec)
	if len(names) == 0 {
		return reconcile.Result{}, false, nil
	}
	place, err := claims.Read(ctx, r.client, pod.Namespace, names)
	if err != nil {
		return r.requeueAfter(pod, requeueAwaitingClaims, time.Second), true, nil
	}
	waiting := false
	for _, c := range place.Claims {
		if claims.TargetOf(c) == "" {
			return r.requeueAfter(pod, requeueAwaitingClaims, time.Second), true, nil
		}
		var held *corev1.PersistentVolumeClaim
		if claims.NeedsHeld(c) {
			// Its copy there, bound by now (the delegate was admitted):
			// the mirror shows its size, and the claim its volume.
			held = &corev1.PersistentVolumeClaim{}
			if err := cl.Client().Get(ctx, client.ObjectKeyFromObject(c), held); err != nil {
				held = nil
			}
		}
		bound, err := claims.BindMirror(ctx, r.client, c, nodeName, held)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Binding a claim to its mirror volume", "claim", c.Name, "err", err.Error())
		}
		waiting = waiting || !bound
	}
	if waiting {
		return r.requeueAfter(pod, requeueAwaitingClaims, time.Second), true, nil
	}
	return reconcile.Result{}, false, nil
}
