package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetSpec says how to reach a target cluster. It is shared by Target and
// ClusterTarget. Exactly one of Self (true) and KubeconfigSecret is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.kubeconfigSecret) != (has(self.self) && self.self)",message="exactly one of self (true) and kubeconfigSecret must be set"
type TargetSpec struct {
	// self makes the source cluster itself a target: pods are delegated to
	// real nodes of this same cluster, with fleetlet's own credentials.
	// +optional
	Self bool `json:"self,omitempty"`

	// kubeconfigSecret references the Secret holding a kubeconfig for the
	// target cluster. The kubeconfig is untrusted input: only a server URL
	// with inline credentials and CA data is accepted; exec and
	// auth-provider plugins, token or certificate file paths and proxy
	// settings make the target Ready=False and are never used.
	// +optional
	KubeconfigSecret *KubeconfigSecretReference `json:"kubeconfigSecret,omitempty"`

	// excludedLabelsRegexp is a Go (RE2) regular expression matched against
	// the keys of the labels the target's schedulable nodes share; matching
	// labels are not copied to the virtual node (under
	// target.multicluster.fleetlet.io/) and cannot be selected with the
	// multicluster.fleetlet.io/cluster-selector annotation. Empty excludes
	// nothing. An invalid expression makes the target Ready=False.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ExcludedLabelsRegexp string `json:"excludedLabelsRegexp,omitempty"`

	// storageClasses maps the storage class of a claim in the source to
	// the one its copy gets in this target, where the names differ
	// ({fast: gp3}). A class not listed keeps its name; one mapped to ""
	// names no class there, so the target's default class applies. A copy
	// made already keeps its class (a claim's class cannot change).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 253 && self[k].size() <= 253)",message="storage class names are at most 253 characters"
	StorageClasses map[string]string `json:"storageClasses,omitempty"`

	// priority orders the source's targets: a pod goes to the
	// highest-priority target that can run it, and spills over to a lower
	// one only when those above have no room for it (their candidates are
	// unschedulable) or do not answer within five election deadlines.
	// Targets of equal priority are ranked by the pod's preferences and
	// free room, as without it. Default 0; a negative priority ranks below
	// the targets that set none.
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// KubeconfigSecretReference locates a kubeconfig in a Secret.
type KubeconfigSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// namespace of the Secret. Required in a ClusterTarget; not allowed in
	// a Target, whose Secret is always in the Target's own namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// key of the Secret's data that holds the kubeconfig.
	// +optional
	// +kubebuilder:default=config
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`

	// context of the kubeconfig to use. Empty means its current-context.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Context string `json:"context,omitempty"`
}

// TargetStatus is the observed state of a Target or ClusterTarget.
type TargetStatus struct {
	// observedGeneration is the metadata.generation this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions of the target. Ready is True when the target answers, the
	// credentials are authorized and fleetlet runs there (reason
	// Connected); otherwise it is False with a reason a user can act on
	// (BadKubeconfig, KubeconfigSecretNotFound, Unreachable, Forbidden,
	// FleetletMissing, InvalidSpec, DuplicateCluster, NodeNameTaken).
	// SummaryStale is True while the target's ClusterSummary is not
	// renewed (its fleetlet is down): no new election goes there.
	// CandidateSchedulerRunning, copied from the ClusterSummary, is False
	// while the target's candidate scheduler does not run: no new
	// election goes there either.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// virtualNodeName is the name of the virtual node that stands for this
	// target in the source cluster.
	// +optional
	VirtualNodeName string `json:"virtualNodeName,omitempty"`
}

// Target is a cluster that runs the proxy pods of its own namespace: their
// delegates are created in the namespace of the same name in the target
// cluster. In the target, its credentials need write access in that
// namespace only, plus read access to Namespaces and the ClusterSummary.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tgt,categories=fleetlet
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.virtualNodeName`
// +kubebuilder:printcolumn:name="Self",type=boolean,JSONPath=`.spec.self`,priority=10
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.kubeconfigSecret.name`,priority=10
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Target struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says how to reach the target. The kubeconfig Secret must be in
	// the Target's namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.kubeconfigSecret) || !has(self.kubeconfigSecret.__namespace__)",message="kubeconfigSecret.namespace is not allowed in a Target: the Secret must be in the Target's namespace",fieldPath=`.kubeconfigSecret.namespace`
	// +kubebuilder:validation:XValidation:rule="!has(self.self) || !self.self",message="self is allowed on ClusterTargets only: a Target with self would act in its namespace with the manager's own credentials",fieldPath=`.self`
	Spec TargetSpec `json:"spec"`

	// status is the observed state of the target.
	// +optional
	Status TargetStatus `json:"status,omitempty"`
}

// TargetList is a list of Targets.
//
// +kubebuilder:object:root=true
type TargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of Targets.
	Items []Target `json:"items"`
}
