package connect

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

// Disconnect undoes Connect with the same options: in the source cluster
// it deletes the Target or ClusterTarget and waits until fleetlet has
// drained it (its proxies evicted, so that their controllers recreate them
// elsewhere, and this source's chaperons gone there; opts.Force ends the
// drain at once), then its kubeconfig Secret, then in
// the target cluster the token Secret and the Source or ClusterSource (whose
// ServiceAccount and bindings fleetlet there removes with it). It deletes
// only objects that carry the kubectl-fleetlet label, and never a
// namespace. Running it again finds nothing and succeeds.
func Disconnect(ctx context.Context, opts Options) (*Result, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	res := &Result{}
	src, err := newClient(opts.Source)
	if err != nil {
		return res, err
	}

	// Source cluster first: fleetlet there stops using the credential
	// before it is revoked.
	var tgtObj client.Object = &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: opts.TargetName}}
	kind := "ClusterTarget"
	if opts.Namespace != "" {
		tgtObj = &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.TargetName}}
		kind = "Target"
	}
	if err := disconnectTarget(ctx, src, &opts, tgtObj, kind, res); err != nil {
		return res, err
	}
	if !opts.Self {
		key := opts.secretKey()
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := deleteOurs(ctx, src, opts.sourceCluster(), secret, "Secret", res); err != nil {
			return res, err
		}
	}
	if opts.Self {
		return res, nil
	}

	tgt, err := newClient(opts.Target)
	if err != nil {
		return res, err
	}
	cluster := opts.targetCluster()
	var srcObj client.Object
	kind = access.KindClusterSource
	sa := types.NamespacedName{Namespace: opts.FleetletNamespace, Name: access.DefaultServiceAccountName(opts.SourceName)}
	if opts.Namespace != "" {
		s := &v1alpha1.Source{}
		kind, srcObj = access.KindSource, s
		sa.Namespace = opts.Namespace
		err = tgt.Get(ctx, types.NamespacedName{Namespace: opts.Namespace, Name: opts.SourceName}, s)
		if err == nil && s.Status.ServiceAccountName != "" {
			sa.Name = s.Status.ServiceAccountName
		} else if err == nil {
			sa.Name = access.ServiceAccountNameFor(s.Name, s.Spec.ServiceAccountName)
		}
	} else {
		s := &v1alpha1.ClusterSource{}
		srcObj = s
		err = tgt.Get(ctx, types.NamespacedName{Name: opts.SourceName}, s)
		if err == nil {
			sa = types.NamespacedName{Namespace: s.Spec.ServiceAccountNamespace, Name: access.ServiceAccountNameFor(s.Name, s.Spec.ServiceAccountName)}
			if s.Status.ServiceAccountName != "" {
				sa = types.NamespacedName{Namespace: s.Status.ServiceAccountNamespace, Name: s.Status.ServiceAccountName}
			}
		}
	}
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return res, fmt.Errorf("reading %s %s in %s: %w", kind, opts.SourceName, cluster, err)
	}
	foundSource := err == nil

	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: TokenSecretName(sa.Name)}}
	if err := deleteOurs(ctx, tgt, cluster, token, "Secret", res); err != nil {
		return res, err
	}
	if !foundSource {
		srcObj.SetName(opts.SourceName)
		srcObj.SetNamespace(opts.Namespace)
		res.add(cluster, srcObj, kind, Absent)
		return res, nil
	}
	if err := deleteOurs(ctx, tgt, cluster, srcObj, kind, res); err != nil {
		return res, err
	}
	return res, nil
}

// deleteOurs deletes obj (only its name and namespace are set) if it
// exists and carries the kubectl-fleetlet label.
// disconnectTarget deletes the Target or ClusterTarget (ours only) and
// waits until its drain is over and it is gone; with Force it first asks
// fleetlet to end the drain at once.
func disconnectTarget(ctx context.Context, c client.Client, opts *Options, obj client.Object, kind string, res *Result) error {
	key := client.ObjectKeyFromObject(obj)
	if opts.Force {
		err := c.Get(ctx, key, obj)
		if err == nil && ours(obj) && obj.GetAnnotations()[v1alpha1.AnnotationForceDisconnect] != "true" {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, v1alpha1.AnnotationForceDisconnect)
			if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("marking %s %s for a forced disconnect in %s: %w", kind, displayName(key), opts.sourceCluster(), err)
			}
		}
	}
	if err := deleteOurs(ctx, c, opts.sourceCluster(), obj, kind, res); err != nil {
		return err
	}
	if !ours(obj) {
		return nil
	}
	err := waitGone(ctx, c, key, obj, opts.Timeout)
	if err == nil {
		return nil
	}
	why := "fleetlet did not remove it"
	if st := targetStatus(obj); st != nil {
		if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDraining); cond != nil {
			why = cond.Message
		}
	}
	return fmt.Errorf("%s %s in %s is still draining after %s: %s (its kubeconfig Secret and the target's Source are kept until it is gone; run again with --force to leave what is left behind)",
		kind, displayName(key), opts.sourceCluster(), opts.Timeout, why)
}

func targetStatus(obj client.Object) *v1alpha1.TargetStatus {
	switch t := obj.(type) {
	case *v1alpha1.Target:
		return &t.Status
	case *v1alpha1.ClusterTarget:
		return &t.Status
	}
	return nil
}

func deleteOurs(ctx context.Context, c client.Client, cluster string, obj client.Object, kind string, res *Result) error {
	key := client.ObjectKeyFromObject(obj)
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			obj.SetName(key.Name)
			obj.SetNamespace(key.Namespace)
			res.add(cluster, obj, kind, Absent)
			return nil
		}
		return fmt.Errorf("reading %s %s in %s: %w", kind, displayName(key), cluster, err)
	}
	if !ours(obj) {
		res.add(cluster, obj, kind, Kept)
		return nil
	}
	uid := obj.GetUID()
	if err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s in %s: %w", kind, displayName(key), cluster, err)
	}
	res.add(cluster, obj, kind, Deleted)
	return nil
}
