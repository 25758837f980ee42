// Package v1alpha1 is the v1alpha1 version of the multicluster.fleetlet.io
// API: the objects through which clusters are joined and through which a
// source cluster hands pods to a target cluster.
//
// # Source side
//
// A cluster where users create pods (a source) lists the clusters it may run
// them in as [Target] (namespaced: serves only the proxy pods of its own
// namespace) or [ClusterTarget] (cluster-scoped: serves every enabled
// namespace) objects. Both share [TargetSpec]: either `self: true` (the source
// cluster itself is a target) or a `kubeconfigSecret` holding credentials for
// the target cluster. The target registry reports in the `Ready` condition
// whether the target answers, whether the credentials are authorized and
// whether fleetlet runs there, and names the virtual node that stands for the
// target in `status.virtualNodeName`.
//
// # Target side
//
// A cluster that runs pods for others (a target) says who may send them with
// [Source] (namespaced: the source may act in that namespace only) and
// [ClusterSource] (cluster-scoped: the source may act in the namespaces
// selected for it). A Source is named after the source cluster it admits:
// that name is the value of the `multicluster.fleetlet.io/parent-cluster`
// label on everything that source creates here. The Source controller creates
// the ServiceAccount the source authenticates as and binds it to the
// least-privilege `fleetlet-source` ClusterRole.
//
// A source asks a target to run a pod by creating a [PodChaperon]: a pod
// template (labels, annotations and a full PodSpec) that the chaperon
// controller turns into a pod, impersonating the Source's ServiceAccount so
// that the target's RBAC and Pod Security apply. The chaperon mirrors the
// pod's status and the candidate scheduler's reservation back, where the
// source can read them.
//
// Each target publishes one [ClusterSummary], named `default`: the capacity,
// allocatable and requested resources of its schedulable real nodes and the
// labels all of them share. Sources use it to size virtual nodes and to match
// `multicluster.fleetlet.io/cluster-selector` annotations.
//
// Label, annotation, finalizer, scheduling gate and condition names shared by
// the components are constants in names.go.
//
// +kubebuilder:object:generate=true
// +groupName=multicluster.fleetlet.io
package v1alpha1
