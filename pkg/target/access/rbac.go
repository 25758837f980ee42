package access

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

var (
	readOnly  = []string{"get", "list", "watch"}
	readWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
)

// SourceRules are the rules of ClusterRoleSource: what a source does in a
// namespace it may act in, and nothing more. They are bound per namespace
// (RoleBinding), never cluster-wide.
func SourceRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// A source asks for pods by creating PodChaperons: one per
		// candidate, annotated when elected, deleted (Foreground) when
		// the proxy goes or another candidate wins; its garbage
		// collection deletes leftovers by label.
		{
			APIGroups: []string{v1alpha1.GroupName},
			Resources: []string{"podchaperons"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		},
		// The chaperon controller of the target writes the mirrored pod
		// status; the source only reads it.
		{
			APIGroups: []string{v1alpha1.GroupName},
			Resources: []string{"podchaperons/status"},
			Verbs:     []string{"get"},
		},
		// The chaperon controller sets blockOwnerDeletion on the pods it
		// creates for the source, which OwnerReferencesPermissionEnforcement
		// (where enabled) checks against the identity creating them.
		{
			APIGroups: []string{v1alpha1.GroupName},
			Resources: []string{"podchaperons/finalizers"},
			Verbs:     []string{"update"},
		},
		// The chaperon controller creates the pods impersonating the
		// source's ServiceAccount, so that the target's RBAC, quotas and
		// Pod Security judge what a source runs: the identity needs
		// create; and it passes what a user changes on a running proxy
		// (labels, images, a resize, ephemeral containers) the same way:
		// patch on pods and on their resize and ephemeralcontainers
		// subresources. That grants no authority a chaperon does not
		// already give, and the fleetlet-source-pod-updates admission
		// policy keeps those patches to the source's own delegates;
		// never delete (the garbage collector removes a chaperon's pod,
		// and the source must not delete the target's own pods). The
		// source watches its delegates (feedback, deletion of a proxy
		// when its delegate is deleted).
		{
			APIGroups: []string{""},
			Resources: []string{"pods"},
			Verbs:     []string{"get", "list", "watch", "create", "patch"},
		},
		{
			APIGroups: []string{""},
			Resources: []string{"pods/resize", "pods/ephemeralcontainers"},
			Verbs:     []string{"patch"},
		},
		// The source's kubelet API serves `kubectl logs` of a proxy pod by
		// reading its delegate's log.
		{
			APIGroups: []string{""},
			Resources: []string{"pods/log"},
			Verbs:     []string{"get"},
		},
		// ... its /metrics/resource and /stats/summary (for metrics-server,
		// `kubectl top` and autoscaling) from the delegates' PodMetrics:
		// their usage, and nothing of the target's nodes.
		{
			APIGroups: []string{"metrics.k8s.io"},
			Resources: []string{"pods"},
			Verbs:     []string{"get", "list"},
		},
		// ... and `kubectl exec`, `attach` and `port-forward` by opening
		// the same stream to the delegate: create for SPDY (a POST), get
		// and create for a WebSocket (a GET, which the API server also
		// authorizes as create since 1.35).
		{
			APIGroups: []string{""},
			Resources: []string{"pods/exec", "pods/attach", "pods/portforward"},
			Verbs:     []string{"get", "create"},
		},
		// Events about delegates are mirrored to proxy pods (read), and
		// the source records Events on the objects it creates here.
		{
			APIGroups: []string{"", "events.k8s.io"},
			Resources: []string{"events"},
			Verbs:     []string{"get", "list", "watch", "create", "patch"},
		},
		// Followed objects: the ConfigMaps, Secrets and ServiceAccounts a
		// delegate needs are copied, kept in sync and removed by the
		// source (only those labelled as its own; RBAC cannot say that,
		// the source's code does).
		{
			APIGroups: []string{""},
			Resources: []string{"configmaps", "secrets", "serviceaccounts"},
			Verbs:     readWrite,
		},
		// Followed Services: a Service that selects delegates here is
		// copied where they run, and removed when none is left; a global
		// one gets EndpointSlices of its delegates in other clusters.
		{
			APIGroups: []string{""},
			Resources: []string{"services"},
			Verbs:     readWrite,
		},
		{
			APIGroups: []string{"discovery.k8s.io"},
			Resources: []string{"endpointslices"},
			Verbs:     readWrite,
		},
		// Claims kept with their pods (package claims): the source
		// creates its copy of a claim where the pod is elected, deletes
		// a copy of an earlier claim of the same name, adopts (patch) a
		// copy an earlier fleetlet made through the follow annotation, and
		// its garbage collector lists its copies to delete those whose
		// source claim is gone.
		{
			APIGroups: []string{""},
			Resources: []string{"persistentvolumeclaims"},
			Verbs:     []string{"get", "list", "create", "patch", "delete"},
		},
		// Followed ResourceClaimTemplates (package follow): copied where
		// a pod's candidates go, so that this cluster's resource claim
		// controller makes the claim and its scheduler allocates devices;
		// updated with their followers, listed to release them, deleted
		// with their last follower (only those labelled as its own).
		{
			APIGroups: []string{"resource.k8s.io"},
			Resources: []string{"resourceclaimtemplates"},
			Verbs:     []string{"get", "list", "create", "update", "delete"},
		},
		// ResourceClaims that pods share are followed as templates are;
		// a delegate's claims are read once, to name the devices they
		// were allocated on its proxy (package feedback).
		{
			APIGroups: []string{"resource.k8s.io"},
			Resources: []string{"resourceclaims"},
			Verbs:     []string{"get", "list", "create", "update", "delete"},
		},
	}
}

// SourceReaderRules are the rules of ClusterRoleSourceReader, bound
// cluster-wide: a source filters out targets where a pod's namespace does
// not exist, and sizes its virtual node from the ClusterSummary.
func SourceReaderRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{
			APIGroups: []string{""},
			Resources: []string{"namespaces"},
			Verbs:     readOnly,
		},
		{
			APIGroups: []string{v1alpha1.GroupName},
			Resources: []string{"clustersummaries"},
			Verbs:     readOnly,
		},
	}
}

// SourceNamespacesRules are the rules of ClusterRoleSourceNamespaces, bound
// cluster-wide to the sources whose ClusterSource sets spec.namespaces: the
// elector creates a namespace a pod needs where it is missing, and the
// garbage collector deletes it once the source's own is gone. RBAC cannot
// narrow these to names; the fleetlet-source-namespaces admission policy
// holds them to the ClusterSource's policy and to namespaces the source
// created.
func SourceNamespacesRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{
			APIGroups: []string{""},
			Resources: []string{"namespaces"},
			Verbs:     []string{"create", "delete"},
		},
	}
}

// HeartbeatRules are the rules of a source's heartbeat Role, in the
// namespace of its ServiceAccount: it may create its Lease (RBAC cannot
// limit create to a name) and read and renew that Lease only, so that it
// can never touch another Lease there, such as a leader election's.
func HeartbeatRules(sourceName string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"create"},
		},
		{
			APIGroups:     []string{"coordination.k8s.io"},
			Resources:     []string{"leases"},
			ResourceNames: []string{HeartbeatLeaseName(sourceName)},
			Verbs:         []string{"get", "update"},
		},
	}
}

// ClusterRoles returns the ClusterRoles every Source and ClusterSource is
// bound to, as EnsureClusterRoles writes them.
func ClusterRoles() []*rbacv1.ClusterRole {
	labels := func() map[string]string { return map[string]string{LabelManagedBy: ManagedBy} }
	return []*rbacv1.ClusterRole{
		{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleSource, Labels: labels()},
			Rules:      SourceRules(),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleSourceReader, Labels: labels()},
			Rules:      SourceReaderRules(),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleSourceNamespaces, Labels: labels()},
			Rules:      SourceNamespacesRules(),
		},
	}
}

// EnsureClusterRoles creates the ClusterRoles of ClusterRoles, or brings
// their rules and labels up to date; it writes nothing when they are.
// Other labels and annotations (a Helm chart's, say) are kept.
func EnsureClusterRoles(ctx context.Context, c client.Client) error {
	for _, want := range ClusterRoles() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var got rbacv1.ClusterRole
			err := c.Get(ctx, client.ObjectKeyFromObject(want), &got)
			if apierrors.IsNotFound(err) {
				return c.Create(ctx, want.DeepCopy())
			}
			if err != nil {
				return err
			}
			if hasLabels(got.Labels, want.Labels) && equality.Semantic.DeepEqual(got.Rules, want.Rules) && got.AggregationRule == nil {
				return nil
			}
			if got.Labels == nil {
				got.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				got.Labels[k] = v
			}
			got.Rules = want.Rules
			got.AggregationRule = nil
			return c.Update(ctx, &got)
		})
		if err != nil {
			return fmt.Errorf("ensuring ClusterRole %s: %w", want.Name, err)
		}
	}
	return nil
}
