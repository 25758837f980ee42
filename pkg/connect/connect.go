package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/target/access"
)

const (
	// DefaultFleetletNamespace is where fleetlet is installed, and where
	// the cluster-wide objects' Secrets and ServiceAccounts live.
	DefaultFleetletNamespace = "fleetlet-system"

	// DefaultTimeout bounds each wait: for the Source to become Ready, and
	// for the token controller to fill the token Secret.
	DefaultTimeout = time.Minute

	// LabelManagedBy and ManagedBy mark every object connect creates;
	// disconnect deletes only objects that carry them.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "kubectl-fleetlet"

	// KubeconfigSecretPrefix plus the target's name is the kubeconfig
	// Secret in the source cluster.
	KubeconfigSecretPrefix = "fleetlet-target-"

	// TokenSecretSuffix follows the ServiceAccount's name in the name of
	// its token Secret in the target cluster.
	TokenSecretSuffix = "-token"

	// pollInterval is how often a wait looks again.
	pollInterval = 250 * time.Millisecond
)

// Options say which two clusters to join, under which names.
type Options struct {
	// Source is the cluster whose pods are to run elsewhere: the
	// Target (or ClusterTarget) and its kubeconfig Secret are written
	// there.
	Source *rest.Config
	// Target is the cluster that runs them: the Source (or ClusterSource)
	// and the token Secret are written there. Unused with Self.
	Target *rest.Config

	// SourceName names the Source or ClusterSource in the target cluster:
	// the source cluster's name there. Unused with Self.
	SourceName string
	// TargetName names the Target or ClusterTarget in the source cluster.
	TargetName string

	// Namespace, when set, joins this one namespace (a Target and a
	// Source in it); otherwise the clusters are joined cluster-wide (a
	// ClusterTarget and a ClusterSource).
	Namespace string
	// FleetletNamespace is where fleetlet runs, in both clusters: the
	// kubeconfig Secret of a ClusterTarget and the ServiceAccount of a
	// ClusterSource live there. Empty means DefaultFleetletNamespace.
	FleetletNamespace string

	// Self makes the source cluster its own target (spec.self: true):
	// nothing is written in another cluster.
	Self bool

	// TargetServer is the target API server's URL as the source cluster's
	// fleetlet reaches it; empty means the one Target is configured with.
	TargetServer string

	// Timeout bounds each wait; zero means DefaultTimeout.
	Timeout time.Duration

	// Force (disconnect only) ends the Target's drain at once: what still
	// runs there for this source is left behind (an Event on the Target
	// says what).
	Force bool

	// SourceContext and TargetContext name the clusters in messages (the
	// kubeconfig contexts they came from); empty means "the source
	// cluster" and "the target cluster".
	SourceContext, TargetContext string
}

func (o *Options) defaults() {
	if o.FleetletNamespace == "" {
		o.FleetletNamespace = DefaultFleetletNamespace
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Source == nil {
		errs = append(errs, errors.New("no client configuration for the source cluster"))
	}
	if msgs := validation.IsDNS1123Subdomain(o.TargetName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("target name %q: %v", o.TargetName, msgs))
	}
	if o.Namespace != "" {
		if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("namespace %q: %v", o.Namespace, msgs))
		}
	}
	if msgs := validation.IsDNS1123Label(o.FleetletNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("fleetlet namespace %q: %v", o.FleetletNamespace, msgs))
	}
	if o.Self && o.Namespace != "" {
		errs = append(errs, errors.New("--self makes a ClusterTarget only: a namespaced Target may not use the manager's own credentials (drop --namespace)"))
	}
	if o.Self && o.SourceName != "" {
		if msgs := validation.IsDNS1123Label(o.SourceName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("source name %q: %v", o.SourceName, msgs))
		}
	}
	if !o.Self {
		if o.Target == nil {
			errs = append(errs, errors.New("no client configuration for the target cluster"))
		}
		// It is the value of the parent-cluster label on everything the
		// source creates in the target.
		if msgs := validation.IsDNS1123Label(o.SourceName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("source name %q (the Source's name in the target cluster, also a label value): %v", o.SourceName, msgs))
		}
	}
	return errors.Join(errs...)
}

func (o *Options) sourceCluster() string { return clusterName(o.SourceContext, "source") }
func (o *Options) targetCluster() string { return clusterName(o.TargetContext, "target") }

func clusterName(context, role string) string {
	if context == "" {
		return "the " + role + " cluster"
	}
	return fmt.Sprintf("cluster %q", context)
}

// Action is what connect or disconnect did to one object.
type Action string

// Actions.
const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
	Deleted   Action = "deleted"
	// Kept: the object exists but was not created by kubectl-fleetlet, so
	// it is used (connect) or left (disconnect) as it is.
	Kept Action = "kept (not created by kubectl-fleetlet)"
	// Absent: disconnect found nothing to delete.
	Absent Action = "not found"
)

// Change is one object written (or not) in one cluster.
type Change struct {
	// Cluster is how the options name the cluster (see SourceContext).
	Cluster   string
	Kind      string
	Namespace string
	Name      string
	Action    Action
}

func (c Change) String() string {
	name := c.Name
	if c.Namespace != "" {
		name = c.Namespace + "/" + c.Name
	}
	return fmt.Sprintf("%s %s %s in %s", c.Kind, name, c.Action, c.Cluster)
}

// Result lists what Connect or Disconnect did, in order.
type Result struct {
	Changes []Change
}

// Changed reports whether anything was written.
func (r *Result) Changed() bool {
	for _, c := range r.Changes {
		if c.Action == Created || c.Action == Updated || c.Action == Deleted {
			return true
		}
	}
	return false
}

func (r *Result) add(cluster string, obj client.Object, kind string, action Action) {
	r.Changes = append(r.Changes, Change{Cluster: cluster, Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Action: action})
}

// Scheme holds the types connect reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func newClient(cfg *rest.Config) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = ManagedBy
	return client.New(cfg, client.Options{Scheme: Scheme()})
}

// displayName is namespace/name, or the name of a cluster-scoped object.
func displayName(key types.NamespacedName) string {
	if key.Namespace == "" {
		return key.Name
	}
	return key.String()
}

func ours(obj client.Object) bool { return obj.GetLabels()[LabelManagedBy] == ManagedBy }

func ourLabels() map[string]string { return map[string]string{LabelManagedBy: ManagedBy} }

// Connect joins two clusters, or makes one its own target (Self). In the
// target cluster it creates the Source (Namespace set) or ClusterSource
// and waits until fleetlet there has provisioned its ServiceAccount, then
// creates a long-lived token Secret for it and waits for the token. In the
// source cluster it writes a kubeconfig holding that token to the Secret
// fleetlet-target-<TargetName> and creates the Target or ClusterTarget that
// points at it.
//
// Connect is idempotent: run again, it writes nothing that is already as
// wanted and keeps the token it made. Objects of the same names that it did
// not create are used as they are (a Source), or refused (a Target, a
// Secret).
func Connect(ctx context.Context, opts Options) (*Result, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	res := &Result{}
	src, err := newClient(opts.Source)
	if err != nil {
		return res, err
	}
	if opts.Self {
		// The chaperon controller creates a self target's delegates as a
		// Source's ServiceAccount too, so that the cluster's own RBAC,
		// quotas and Pod Security judge them like anyone else's.
		if opts.SourceName != "" {
			if _, err := ensureSource(ctx, src, &opts, res); err != nil {
				return res, err
			}
		}
		return res, ensureTarget(ctx, src, &opts, res, nil)
	}
	tgt, err := newClient(opts.Target)
	if err != nil {
		return res, err
	}
	server := opts.TargetServer
	if server == "" {
		if server, err = ServerURL(opts.Target); err != nil {
			return res, fmt.Errorf("%s: %w", opts.targetCluster(), err)
		}
	} else if err := checkServer(server); err != nil {
		return res, err
	}

	// Target cluster: who may send pods, and a credential for it.
	sa, err := ensureSource(ctx, tgt, &opts, res)
	if err != nil {
		return res, err
	}
	secret, err := ensureTokenSecret(ctx, tgt, &opts, sa, res)
	if err != nil {
		return res, err
	}
	ca, err := caBundle(secret.Data[corev1.ServiceAccountRootCAKey], opts.Target)
	if err != nil {
		return res, err
	}
	kubeconfig, err := Kubeconfig(KubeconfigInput{
		Name:      opts.TargetName,
		Server:    server,
		CAData:    ca,
		Token:     string(secret.Data[corev1.ServiceAccountTokenKey]),
		Namespace: sa.Namespace,
	})
	if err != nil {
		return res, err
	}

	// Source cluster: the credential and the Target that uses it.
	return res, ensureTarget(ctx, src, &opts, res, kubeconfig)
}

// ensureNamespace makes sure a namespace exists; only the fleetlet
// namespace is created, a user's namespace must exist.
func ensureNamespace(ctx context.Context, c client.Client, name, cluster string, create bool, res *Result) error {
	var ns corev1.Namespace
	err := c.Get(ctx, types.NamespacedName{Name: name}, &ns)
	if err == nil {
		if !ns.DeletionTimestamp.IsZero() {
			return fmt.Errorf("namespace %s is being deleted in %s", name, cluster)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s in %s: %w", name, cluster, err)
	}
	if !create {
		return fmt.Errorf("namespace %s does not exist in %s: create it first", name, cluster)
	}
	ns = corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ourLabels()}}
	if err := c.Create(ctx, &ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s in %s: %w", name, cluster, err)
	}
	res.add(cluster, &ns, "Namespace", Created)
	return nil
}

// ensureSource creates the Source or ClusterSource and waits until its
// ServiceAccount is provisioned; it returns that ServiceAccount.
func ensureSource(ctx context.Context, c client.Client, opts *Options, res *Result) (types.NamespacedName, error) {
	cluster := opts.targetCluster()
	var obj client.Object
	kind := access.KindSource
	if opts.Namespace != "" {
		if err := ensureNamespace(ctx, c, opts.Namespace, cluster, false, res); err != nil {
			return types.NamespacedName{}, err
		}
		obj = &v1alpha1.Source{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.SourceName, Labels: ourLabels()}}
	} else {
		kind = access.KindClusterSource
		if err := ensureNamespace(ctx, c, opts.FleetletNamespace, cluster, true, res); err != nil {
			return types.NamespacedName{}, err
		}
		obj = &v1alpha1.ClusterSource{
			ObjectMeta: metav1.ObjectMeta{Name: opts.SourceName, Labels: ourLabels()},
			Spec:       v1alpha1.ClusterSourceSpec{ServiceAccountNamespace: opts.FleetletNamespace},
		}
	}
	key := client.ObjectKeyFromObject(obj)
	got := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, key, got)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, obj); err != nil {
			return types.NamespacedName{}, fmt.Errorf("creating %s %s in %s: %w", kind, displayName(key), cluster, err)
		}
		res.add(cluster, obj, kind, Created)
	case err != nil:
		if meta.IsNoMatchError(err) {
			return types.NamespacedName{}, fmt.Errorf("%s has no %s API: is fleetlet installed there? %w", cluster, kind, err)
		}
		return types.NamespacedName{}, fmt.Errorf("reading %s %s in %s: %w", kind, displayName(key), cluster, err)
	case !got.GetDeletionTimestamp().IsZero():
		return types.NamespacedName{}, fmt.Errorf("%s %s is being deleted in %s: try again when it is gone", kind, displayName(key), cluster)
	case !ours(got):
		res.add(cluster, got, kind, Kept)
	default:
		action := Unchanged
		if cs, ok := got.(*v1alpha1.ClusterSource); ok && cs.Spec.ServiceAccountNamespace != opts.FleetletNamespace {
			cs.Spec.ServiceAccountNamespace = opts.FleetletNamespace
			if err := c.Update(ctx, cs); err != nil {
				return types.NamespacedName{}, fmt.Errorf("updating %s %s in %s: %w", kind, displayName(key), cluster, err)
			}
			action = Updated
		}
		res.add(cluster, got, kind, action)
	}
	return waitSourceReady(ctx, c, opts, key, kind)
}

// waitSourceReady waits until fleetlet in the target cluster reports the
// source Ready, for its current generation, with its ServiceAccount.
func waitSourceReady(ctx context.Context, c client.Client, opts *Options, key types.NamespacedName, kind string) (types.NamespacedName, error) {
	var sa types.NamespacedName
	var last string
	err := wait.PollUntilContextTimeout(ctx, pollInterval, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		var (
			conds      []metav1.Condition
			generation int64
		)
		if kind == access.KindSource {
			var s v1alpha1.Source
			if err := c.Get(ctx, key, &s); err != nil {
				// Every read error is worth another try until the
				// timeout, which then names the last one.
				last = err.Error()
				return false, nil
			}
			conds, generation = s.Status.Conditions, s.Generation
			sa = types.NamespacedName{Namespace: s.Namespace, Name: s.Status.ServiceAccountName}
		} else {
			var s v1alpha1.ClusterSource
			if err := c.Get(ctx, key, &s); err != nil {
				last = err.Error()
				return false, nil
			}
			conds, generation = s.Status.Conditions, s.Generation
			sa = types.NamespacedName{Namespace: s.Status.ServiceAccountNamespace, Name: s.Status.ServiceAccountName}
		}
		ready := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
		switch {
		case ready == nil:
			last = "it has no Ready condition yet"
			return false, nil
		case ready.ObservedGeneration != generation:
			last = fmt.Sprintf("its Ready condition is for generation %d, not %d", ready.ObservedGeneration, generation)
			return false, nil
		case ready.Status != metav1.ConditionTrue:
			last = fmt.Sprintf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
			return false, nil
		case sa.Name == "" || sa.Namespace == "":
			last = "it names no ServiceAccount yet"
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		return sa, nil
	}
	if ctx.Err() != nil {
		return sa, ctx.Err()
	}
	if wait.Interrupted(err) {
		return sa, fmt.Errorf("%s %s in %s did not become Ready within %s (%s): is fleetlet running in %s?",
			kind, displayName(key), opts.targetCluster(), opts.Timeout, last, opts.targetCluster())
	}
	return sa, fmt.Errorf("waiting for %s %s in %s: %w", kind, displayName(key), opts.targetCluster(), err)
}

// TokenSecretName is the name of the token Secret of a ServiceAccount.
func TokenSecretName(serviceAccount string) string { return serviceAccount + TokenSecretSuffix }

// ensureTokenSecret creates a kubernetes.io/service-account-token Secret
// for the ServiceAccount — a credential that lives as long as the Secret,
// unlike a TokenRequest's — and waits until the token controller has
// filled it. An existing one for the same ServiceAccount is kept, so that
// running connect again does not rotate the token.
func ensureTokenSecret(ctx context.Context, c client.Client, opts *Options, sa types.NamespacedName, res *Result) (*corev1.Secret, error) {
	cluster := opts.targetCluster()
	var account corev1.ServiceAccount
	if err := c.Get(ctx, sa, &account); err != nil {
		return nil, fmt.Errorf("reading ServiceAccount %s in %s: %w", sa, cluster, err)
	}
	key := types.NamespacedName{Namespace: sa.Namespace, Name: TokenSecretName(sa.Name)}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   key.Namespace,
			Name:        key.Name,
			Labels:      ourLabels(),
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa.Name},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	var got corev1.Secret
	err := c.Get(ctx, key, &got)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Secret %s in %s: %w", displayName(key), cluster, err)
	case err == nil && !ours(&got):
		return nil, fmt.Errorf("the Secret %s exists in %s and was not created by %s: delete it", displayName(key), cluster, ManagedBy)
	case err == nil && !got.DeletionTimestamp.IsZero():
		return nil, fmt.Errorf("the Secret %s is being deleted in %s: try again", displayName(key), cluster)
	case err == nil && tokenSecretFor(&got, &account):
		res.add(cluster, &got, "Secret", Unchanged)
	default:
		if err == nil {
			// Made for another ServiceAccount, or an earlier one of
			// the same name: replace it.
			uid := got.UID
			if err := c.Delete(ctx, &got, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("deleting stale Secret %s in %s: %w", displayName(key), cluster, err)
			}
			if err := waitGone(ctx, c, key, &corev1.Secret{}, opts.Timeout); err != nil {
				return nil, fmt.Errorf("deleting stale Secret %s in %s: %w", displayName(key), cluster, err)
			}
		}
		if err := c.Create(ctx, want); err != nil {
			return nil, fmt.Errorf("creating Secret %s in %s: %w", displayName(key), cluster, err)
		}
		res.add(cluster, want, "Secret", Created)
	}

	var filled corev1.Secret
	err = wait.PollUntilContextTimeout(ctx, pollInterval, opts.Timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &filled); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return len(filled.Data[corev1.ServiceAccountTokenKey]) > 0, nil
	})
	if err == nil {
		return &filled, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if wait.Interrupted(err) {
		return nil, fmt.Errorf("the token controller did not fill Secret %s in %s within %s: is kube-controller-manager running there?", displayName(key), cluster, opts.Timeout)
	}
	return nil, fmt.Errorf("waiting for Secret %s in %s: %w", displayName(key), cluster, err)
}

// tokenSecretFor reports whether s is a token Secret for account (the
// same ServiceAccount, not an earlier one of the same name).
func tokenSecretFor(s *corev1.Secret, account *corev1.ServiceAccount) bool {
	if s.Type != corev1.SecretTypeServiceAccountToken || s.Annotations[corev1.ServiceAccountNameKey] != account.Name {
		return false
	}
	uid := s.Annotations[corev1.ServiceAccountUIDKey]
	return uid == "" || uid == string(account.UID)
}

func waitGone(ctx context.Context, c client.Client, key types.NamespacedName, obj client.Object, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// secretKey is where the kubeconfig Secret is in the source
// cluster.
func (o *Options) secretKey() types.NamespacedName {
	ns := o.Namespace
	if ns == "" {
		ns = o.FleetletNamespace
	}
	return types.NamespacedName{Namespace: ns, Name: KubeconfigSecretPrefix + o.TargetName}
}

// ensureTarget writes the kubeconfig Secret (unless self) and the Target
// or ClusterTarget in the source cluster.
func ensureTarget(ctx context.Context, c client.Client, opts *Options, res *Result, kubeconfig []byte) error {
	cluster := opts.sourceCluster()
	if opts.Namespace != "" {
		if err := ensureNamespace(ctx, c, opts.Namespace, cluster, false, res); err != nil {
			return err
		}
	}
	spec := v1alpha1.TargetSpec{Self: true}
	if !opts.Self {
		if opts.Namespace == "" {
			if err := ensureNamespace(ctx, c, opts.FleetletNamespace, cluster, true, res); err != nil {
				return err
			}
		}
		key := opts.secretKey()
		if err := ensureKubeconfigSecret(ctx, c, cluster, key, kubeconfig, res); err != nil {
			return err
		}
		ref := &v1alpha1.KubeconfigSecretReference{Name: key.Name, Key: v1alpha1.DefaultKubeconfigKey}
		if opts.Namespace == "" {
			ref.Namespace = key.Namespace
		}
		spec = v1alpha1.TargetSpec{KubeconfigSecret: ref}
	}

	var obj client.Object
	kind := "Target"
	if opts.Namespace != "" {
		obj = &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.TargetName, Labels: ourLabels()}, Spec: spec}
	} else {
		kind = "ClusterTarget"
		obj = &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: opts.TargetName, Labels: ourLabels()}, Spec: spec}
	}
	key := client.ObjectKeyFromObject(obj)
	got := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, key, got)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s in %s: %w", kind, displayName(key), cluster, err)
		}
		res.add(cluster, obj, kind, Created)
		return nil
	case err != nil:
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("%s has no %s API: is fleetlet installed there? %w", cluster, kind, err)
		}
		return fmt.Errorf("reading %s %s in %s: %w", kind, displayName(key), cluster, err)
	case !ours(got):
		return fmt.Errorf("%s %s exists in %s and was not created by %s: delete it or choose another target name", kind, displayName(key), cluster, ManagedBy)
	}
	current := targetSpec(got)
	// Keep what the user may have set (excludedLabelsRegexp,
	// storageClasses, priority).
	spec.ExcludedLabelsRegexp = current.ExcludedLabelsRegexp
	spec.StorageClasses = current.StorageClasses
	spec.Priority = current.Priority
	if equality.Semantic.DeepEqual(*current, spec) {
		res.add(cluster, got, kind, Unchanged)
		return nil
	}
	*current = spec
	if err := c.Update(ctx, got); err != nil {
		return fmt.Errorf("updating %s %s in %s: %w", kind, displayName(key), cluster, err)
	}
	res.add(cluster, got, kind, Updated)
	return nil
}

func targetSpec(obj client.Object) *v1alpha1.TargetSpec {
	switch t := obj.(type) {
	case *v1alpha1.Target:
		return &t.Spec
	case *v1alpha1.ClusterTarget:
		return &t.Spec
	}
	panic(fmt.Sprintf("not a target: %T", obj))
}

func ensureKubeconfigSecret(ctx context.Context, c client.Client, cluster string, key types.NamespacedName, kubeconfig []byte, res *Result) error {
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: ourLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{v1alpha1.DefaultKubeconfigKey: kubeconfig},
	}
	var got corev1.Secret
	err := c.Get(ctx, key, &got)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil {
			return fmt.Errorf("creating Secret %s in %s: %w", displayName(key), cluster, err)
		}
		res.add(cluster, want, "Secret", Created)
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s in %s: %w", displayName(key), cluster, err)
	case !ours(&got):
		return fmt.Errorf("the Secret %s exists in %s and was not created by %s: delete it or choose another target name", displayName(key), cluster, ManagedBy)
	case equality.Semantic.DeepEqual(got.Data, want.Data):
		res.add(cluster, &got, "Secret", Unchanged)
		return nil
	}
	got.Data = want.Data
	if err := c.Update(ctx, &got); err != nil {
		return fmt.Errorf("updating Secret %s in %s: %w", displayName(key), cluster, err)
	}
	res.add(cluster, &got, "Secret", Updated)
	return nil
}
