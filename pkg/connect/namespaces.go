package connect

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// NamespaceStatus says, for one enabled namespace of the source, which
// targets can take its pods and why the others cannot.
type NamespaceStatus struct {
	Name string
	// Ready are the targets that can take its pods now, or that will
	// create the namespace for the first one (marked so).
	Ready []string
	// NotReady is why each other target cannot.
	NotReady map[string]string
}

// Namespaces reports, for every enabled namespace of the cluster cfg talks
// to, what each of its targets answers: whether the namespace exists there
// and admits the source, or whether the source may create it on demand (a
// dry run of the create the source would ask, with the Target's
// credentials). A ClusterTarget is asked about every namespace, a namespaced
// Target about its own, a self target always takes them.
func Namespaces(ctx context.Context, cfg *rest.Config) ([]NamespaceStatus, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	var nsList corev1.NamespaceList
	if err := c.List(ctx, &nsList, client.MatchingLabels{v1alpha1.LabelEnabled: v1alpha1.LabelEnabledValue}); err != nil {
		return nil, fmt.Errorf("listing enabled namespaces: %w", err)
	}
	probes, err := targetProbes(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []NamespaceStatus
	for i := range nsList.Items {
		src := &nsList.Items[i]
		st := NamespaceStatus{Name: src.Name, NotReady: map[string]string{}}
		for _, p := range probes {
			if p.namespace != "" && p.namespace != src.Name {
				continue
			}
			ready, why := p.answer(ctx, src)
			if ready {
				st.Ready = append(st.Ready, p.name+why)
			} else {
				st.NotReady[p.name] = why
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// targetProbe asks one target about namespaces.
type targetProbe struct {
	name      string
	namespace string // a namespaced Target's own
	self      bool
	client    client.Client
	source    string // this source's name there, from its identity
	err       error  // why the target cannot be asked
}

func targetProbes(ctx context.Context, c client.Client) ([]*targetProbe, error) {
	var cts v1alpha1.ClusterTargetList
	if err := c.List(ctx, &cts); err != nil {
		return nil, fmt.Errorf("listing ClusterTargets: %w", err)
	}
	var ts v1alpha1.TargetList
	if err := c.List(ctx, &ts); err != nil {
		return nil, fmt.Errorf("listing Targets: %w", err)
	}
	var out []*targetProbe
	for i := range cts.Items {
		t := &cts.Items[i]
		out = append(out, newProbe(ctx, c, t.Name, "", &t.Spec))
	}
	for i := range ts.Items {
		t := &ts.Items[i]
		out = append(out, newProbe(ctx, c, t.Namespace+"/"+t.Name, t.Namespace, &t.Spec))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func newProbe(ctx context.Context, c client.Client, name, namespace string, spec *v1alpha1.TargetSpec) *targetProbe {
	p := &targetProbe{name: name, namespace: namespace, self: spec.Self}
	if p.self || spec.KubeconfigSecret == nil {
		return p
	}
	ref := spec.KubeconfigSecret
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if namespace != "" {
		key.Namespace = namespace
	}
	var secret corev1.Secret
	if err := c.Get(ctx, key, &secret); err != nil {
		p.err = fmt.Errorf("reading its kubeconfig Secret %s: %w", key, err)
		return p
	}
	dataKey := ref.Key
	if dataKey == "" {
		dataKey = "config"
	}
	cfg, err := fleet.RESTConfigFromKubeconfig(secret.Data[dataKey], ref.Context)
	if err != nil {
		p.err = err
		return p
	}
	if p.client, err = newClient(cfg); err != nil {
		p.err = err
		return p
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := p.client.Create(ctx, review); err != nil {
		p.err = fmt.Errorf("unreachable: %w", err)
		return p
	}
	// A ClusterSource's default ServiceAccount is fleetlet-source-<source>.
	parts := strings.Split(review.Status.UserInfo.Username, ":")
	if len(parts) == 4 && strings.HasPrefix(parts[3], v1alpha1.SourceServiceAccountPrefix) {
		p.source = strings.TrimPrefix(parts[3], v1alpha1.SourceServiceAccountPrefix)
	}
	return p
}

// answer says whether this target can take the pods of src, with a note
// (ready) or why not.
func (p *targetProbe) answer(ctx context.Context, src *corev1.Namespace) (bool, string) {
	switch {
	case p.self:
		return true, " (self)"
	case p.err != nil:
		return false, p.err.Error()
	case p.client == nil:
		return false, "no kubeconfig Secret"
	}
	var ns corev1.Namespace
	err := p.client.Get(ctx, types.NamespacedName{Name: src.Name}, &ns)
	switch {
	case err == nil && ns.DeletionTimestamp != nil:
		return false, "the namespace is being deleted there"
	case err == nil:
		return p.admitted(ctx, src.Name)
	case !apierrors.IsNotFound(err):
		return false, fmt.Sprintf("reading the namespace: %v", err)
	case p.source == "":
		return false, "the namespace does not exist there"
	}
	want := fleet.OnDemandNamespace(src, p.source)
	err = p.client.Create(ctx, want, client.DryRunAll)
	switch {
	case err == nil:
		return true, " (namespace created for the first pod)"
	case apierrors.IsForbidden(err):
		return false, fmt.Sprintf("the namespace does not exist there, and this source may not create it: %v", err)
	default:
		return false, fmt.Sprintf("the namespace does not exist there; creating it (dry run): %v", err)
	}
}

// admitted asks whether the source may create candidates in ns.
func (p *targetProbe) admitted(ctx context.Context, ns string) (bool, string) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "create", Group: v1alpha1.GroupName, Resource: "podchaperons",
		},
	}}
	if err := p.client.Create(ctx, review); err != nil {
		return false, fmt.Sprintf("asking whether this source is admitted there: %v", err)
	}
	if !review.Status.Allowed {
		return false, "the namespace exists there but does not admit this source (its Source or ClusterSource does not select it)"
	}
	return true, ""
}

// WriteNamespaces prints, per enabled namespace, the targets that can take
// its pods and why the others cannot.
func WriteNamespaces(w io.Writer, rows []NamespaceStatus) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tTARGETS\tNOT THERE")
	for _, r := range rows {
		var not []string
		for t, why := range r.NotReady {
			not = append(not, t+": "+why)
		}
		sort.Strings(not)
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, dash(strings.Join(r.Ready, ", ")), dash(strings.Join(not, "; ")))
	}
	return tw.Flush()
}
