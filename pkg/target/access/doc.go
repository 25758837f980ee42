// Package access is the target side of joining clusters: it turns a Source
// or ClusterSource — "this source cluster may send pods here" — into the
// identity the source authenticates as and the least privilege it needs.
//
// # What it owns
//
// For a Source (namespaced, named after the source cluster) the
// SourceReconciler ensures, in the Source's namespace:
//
//   - the ServiceAccount spec.serviceAccountName, or fleetlet-source-<name>:
//     created and owned by the Source when missing; an existing one that no
//     other Source or ClusterSource owns is used as it is and never changed;
//     one that another owns makes the Source Ready=False with reason
//     ServiceAccountNotOwned;
//   - the RoleBinding fleetlet-source-<name> to the ClusterRole
//     fleetlet-source (what a source does in a namespace);
//   - the Role and RoleBinding fleetlet-heartbeat-<name>, which let the
//     source create its heartbeat Lease (fleetlet-source-<name>) and read and
//     renew that Lease only;
//   - and, cluster-wide, the ClusterRoleBinding
//     fleetlet-source-<namespace>-<name>-<hash> to fleetlet-source-reader
//     (read Namespaces and the ClusterSummary).
//
// Everything in the namespace is owned by the Source (ownerReference) and
// goes with it. The ClusterRoleBinding cannot be: the garbage collector
// treats a namespaced owner of a cluster-scoped object as unresolvable. A
// finalizer on the Source (multicluster.fleetlet.io/source-cluster-role-binding)
// deletes it instead.
//
// For a ClusterSource the ClusterSourceReconciler ensures the ServiceAccount
// and heartbeat Role in spec.serviceAccountNamespace (which must exist), the
// reader ClusterRoleBinding fleetlet-clustersource-<name>, and the
// RoleBinding fleetlet-clustersource-<name> to fleetlet-source in every
// namespace spec.namespaceSelector selects — or, without one, every
// namespace labelled source.multicluster.fleetlet.io/<name>=true. It watches
// Namespaces and follows their labels: a namespace that stops being selected
// (or is being deleted) loses its RoleBinding. The ClusterSource owns all of
// these (a cluster-scoped owner may own namespaced objects), so the garbage
// collector removes them with it; it needs no finalizer.
//
// Both report status.serviceAccountName (and, for a ClusterSource,
// serviceAccountNamespace and namespaceCount) and a Ready condition with
// observedGeneration: Provisioned when everything is in place, otherwise
// ServiceAccountNotOwned, BindingNotOwned, ServiceAccountNamespaceNotFound,
// InvalidSpec or ProvisioningFailed with a message that says what to do.
//
// # Whose objects it touches
//
// Every object it creates carries app.kubernetes.io/managed-by=fleetlet and
// multicluster.fleetlet.io/source-kind, -name (and -namespace for a Source).
// It updates or deletes only objects that carry the labels of the source
// being reconciled; an object of the same name without them is left alone
// and reported (BindingNotOwned). ServiceAccounts are read from the API
// server, not cached (only their metadata is watched).
//
// # The ClusterRoles
//
// EnsureClusterRoles writes fleetlet-source, fleetlet-source-reader and
// fleetlet-source-namespaces (bound only to a ClusterSource whose
// spec.namespaces lets its source create namespaces);
// the controllers call it once per process, before the first binding.
// SourceRules, SourceReaderRules and HeartbeatRules document each rule. The
// manager's own RBAC needs, besides managing ServiceAccounts, Roles,
// RoleBindings and ClusterRoleBindings: create/update on those three
// ClusterRoles (or the chart installs them), and `bind` on them and
// `escalate` on roles (for the heartbeat Role) — or simply every
// permission it grants, which Kubernetes' RBAC escalation check accepts
// too.
//
// What a source is allowed is deliberately narrow: PodChaperons (the pods
// themselves are created by the chaperon controller, impersonating the
// source's ServiceAccount, so the identity may create pods, and patch its own
// delegates (an admission policy holds it to those) — never delete them),
// read access to pods, their logs and streams, Events, and the
// ConfigMaps, Secrets, ServiceAccounts and Services it follows — never
// serviceaccounts/token, never anything outside
// the namespaces it was admitted to except reading Namespaces and the
// ClusterSummary.
package access
