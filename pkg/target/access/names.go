package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Names of the cluster-wide RBAC objects every source is bound to.
const (
	// ClusterRoleSource is bound, per namespace, to the ServiceAccount of
	// every Source and ClusterSource: what a source does in a namespace it
	// may act in.
	ClusterRoleSource = v1alpha1.ClusterRoleSource

	// ClusterRoleSourceReader is bound cluster-wide to the ServiceAccount of
	// every Source and ClusterSource: read access to Namespaces and the
	// ClusterSummary, which every source needs.
	ClusterRoleSourceReader = "fleetlet-source-reader"

	// ClusterRoleSourceNamespaces is bound cluster-wide to the
	// ServiceAccount of a ClusterSource whose spec.namespaces lets its
	// source create namespaces: create and delete on namespaces, which the
	// fleetlet-source-namespaces admission policy holds to that policy.
	ClusterRoleSourceNamespaces = "fleetlet-source-namespaces"
)

// Labels on the objects this package creates, so that it finds them again
// and never touches an object it did not create.
const (
	// LabelManagedBy is the well-known label of the tool that manages an
	// object; ManagedBy is its value on what the Source controller creates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "fleetlet"

	// LabelSourceKind is Source or ClusterSource: the kind of the object
	// an RBAC object or ServiceAccount was created for.
	LabelSourceKind = v1alpha1.Prefix + "source-kind"

	// LabelSourceName is the name of that Source or ClusterSource.
	LabelSourceName = v1alpha1.Prefix + "source-name"

	// LabelSourceNamespace is the namespace of that Source (absent for a
	// ClusterSource).
	LabelSourceNamespace = v1alpha1.Prefix + "source-namespace"

	// FinalizerClusterRoleBinding keeps a (namespaced) Source until the
	// ClusterRoleBinding created for it is deleted: a namespaced owner
	// cannot own a cluster-scoped object, so the garbage collector cannot
	// do it.
	FinalizerClusterRoleBinding = v1alpha1.Prefix + "source-cluster-role-binding"

	// KindSource and KindClusterSource are the values of LabelSourceKind.
	KindSource        = "Source"
	KindClusterSource = "ClusterSource"
)

// maxReadableName bounds the names this package derives from two user
// names, so that they stay readable in `kubectl get` and fit a label value.
const maxReadableName = 63

// DefaultServiceAccountName is the ServiceAccount of a Source or
// ClusterSource whose spec names none: fleetlet-source-<name>.
func DefaultServiceAccountName(sourceName string) string {
	return v1alpha1.SourceServiceAccountPrefix + sourceName
}

// ServiceAccountNameFor is spec.serviceAccountName, or the default.
func ServiceAccountNameFor(sourceName, specName string) string {
	if specName != "" {
		return specName
	}
	return DefaultServiceAccountName(sourceName)
}

// HeartbeatLeaseName is the Lease a source renews, in the namespace of its
// ServiceAccount, so that the target can tell when the source is gone. The
// source side (pkg/source/fleet) uses the same name; the heartbeat Role grants
// access to this Lease only.
func HeartbeatLeaseName(sourceName string) string {
	return "fleetlet-source-" + sourceName
}

// SourceRoleBindingName is the RoleBinding, in a Source's namespace, that
// binds its ServiceAccount to ClusterRoleSource.
func SourceRoleBindingName(sourceName string) string {
	return "fleetlet-source-" + sourceName
}

// ClusterSourceRoleBindingName is the RoleBinding, in every namespace a
// ClusterSource selects, that binds its ServiceAccount to
// ClusterRoleSource.
func ClusterSourceRoleBindingName(sourceName string) string {
	return "fleetlet-clustersource-" + sourceName
}

// HeartbeatRoleName is the Role, and the RoleBinding to it, in the
// namespace of a source's ServiceAccount, that lets the source renew its
// heartbeat Lease there and touch no other Lease. A Source and a
// ClusterSource of the same name whose ServiceAccounts share a namespace
// would share the Lease too, so they share this name.
func HeartbeatRoleName(sourceName string) string {
	return "fleetlet-heartbeat-" + sourceName
}

// ClusterSourceClusterRoleBindingName is the ClusterRoleBinding of a
// ClusterSource's ServiceAccount to ClusterRoleSourceReader.
func ClusterSourceClusterRoleBindingName(sourceName string) string {
	return "fleetlet-clustersource-" + sourceName
}

// ClusterSourceNamespacesBindingName is the ClusterRoleBinding of a
// ClusterSource's ServiceAccount to ClusterRoleSourceNamespaces. Its prefix
// is no other binding's, so no source name can make two of them collide.
func ClusterSourceNamespacesBindingName(sourceName string) string {
	return "fleetlet-namespaces-" + sourceName
}

// SourceClusterRoleBindingName is the ClusterRoleBinding of a Source's
// ServiceAccount to ClusterRoleSourceReader:
// fleetlet-source-<namespace>-<name>-<hash>, shortened to 63 characters.
// The hash of namespace/name keeps ("a-b", "c") and ("a", "b-c") apart and
// keeps shortened names unique.
func SourceClusterRoleBindingName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:])[:8]
	base := "fleetlet-source-" + namespace + "-" + name
	if len(base)+len(suffix) > maxReadableName {
		base = strings.TrimRight(base[:maxReadableName-len(suffix)], "-.")
	}
	return base + suffix
}

// sourceLabels are the labels of what is created for a Source.
func sourceLabels(namespace, name string) map[string]string {
	return map[string]string{
		LabelManagedBy:       ManagedBy,
		LabelSourceKind:      KindSource,
		LabelSourceName:      name,
		LabelSourceNamespace: namespace,
	}
}

// clusterSourceLabels are the labels of what is created for a
// ClusterSource.
func clusterSourceLabels(name string) map[string]string {
	return map[string]string{
		LabelManagedBy:  ManagedBy,
		LabelSourceKind: KindClusterSource,
		LabelSourceName: name,
	}
}

// DefaultNamespaceLabel is the label that selects a namespace for a
// ClusterSource without a namespaceSelector:
// source.multicluster.fleetlet.io/<name>, with value "true".
func DefaultNamespaceLabel(sourceName string) string {
	return v1alpha1.SourceLabelPrefix + sourceName
}

// hasLabels reports whether obj's labels include every one of want.
func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
