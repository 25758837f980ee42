package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterSourceSpec says which identity a source cluster uses and in which
// namespaces it may act.
type ClusterSourceSpec struct {
	// serviceAccountName is the ServiceAccount the source cluster
	// authenticates as. When empty it is fleetlet-source-<ClusterSource
	// name>. The controller creates it (owned by the ClusterSource) if it
	// does not exist; an existing ServiceAccount that no other Source or
	// ClusterSource owns is used as it is and never modified or deleted.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// serviceAccountNamespace is the namespace of the ServiceAccount,
	// usually the one fleetlet is installed in. The source needs no rights
	// there beyond what it gets in the selected namespaces.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ServiceAccountNamespace string `json:"serviceAccountNamespace"`

	// namespaceSelector selects the namespaces the source may act in: the
	// controller binds the ServiceAccount to the fleetlet-source ClusterRole
	// with one RoleBinding in each selected namespace (plus the cluster-wide
	// read access to Namespaces and the ClusterSummary every source needs),
	// and follows namespaces as their labels change. When omitted, the
	// namespaces labelled source.multicluster.fleetlet.io/<ClusterSource
	// name>: "true" are selected. An empty selector is refused: a
	// ClusterSource only ever acts in namespaces labelled for it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="namespaceSelector must not be empty: omit it to select the namespaces labelled source.multicluster.fleetlet.io/<name>=true"
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// namespaces lets the source create here the namespaces its pods
	// need, on demand, within these limits. When omitted (the default) the
	// source may create none: a namespace its pods need must be made and
	// labelled here by hand, and until it is, this cluster is not a
	// candidate for them. A namespace the source creates carries the label
	// multicluster.fleetlet.io/created-by-source=<name>, is selected for
	// the source whatever namespaceSelector says (also once namespaces is
	// removed: removing the label takes it back), and is deleted by the
	// source only once its namespace in the source is gone and nothing but
	// the source's own objects is left in it.
	// +optional
	Namespaces *NamespacePolicy `json:"namespaces,omitempty"`
}

// NamespacePolicy says which namespaces a source may create in a target,
// and what it may set on them. An admission policy (fleetlet-source-namespaces)
// holds the source to it.
// +kubebuilder:validation:XValidation:rule="(has(self.names) && size(self.names) > 0) || (has(self.prefixes) && size(self.prefixes) > 0)",message="namespaces must name at least one name or prefix"
type NamespacePolicy struct {
	// names the source may create, exactly.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Names []string `json:"names,omitempty"`

	// prefixes: the source may create any namespace whose name starts
	// with one of them (team-, say).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=62
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9][-a-z0-9]*$`
	Prefixes []string `json:"prefixes,omitempty"`

	// labels the source may set on a namespace it creates, by key; a key
	// ending in / allows every key with that prefix. The source copies
	// these from its own namespace: the Pod Security labels always
	// (pod-security.kubernetes.io/), and the keys its namespace lists in
	// the multicluster.fleetlet.io/target-labels annotation. A Pod
	// Security label of level restricted or baseline, and a version label,
	// need no entry here (they only tighten what runs there); a level of
	// privileged is never allowed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	Labels []string `json:"labels,omitempty"`

	// annotations the source may set on a namespace it creates, by key (a
	// key ending in / allows that prefix). The source copies the keys its
	// namespace lists in the multicluster.fleetlet.io/target-annotations
	// annotation.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	Annotations []string `json:"annotations,omitempty"`
}

// ClusterSourceStatus is the observed state of a ClusterSource.
type ClusterSourceStatus struct {
	// observedGeneration is the metadata.generation this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions of the source. Ready is True when the ServiceAccount and
	// its bindings are in place.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// serviceAccountName is the ServiceAccount the source authenticates as:
	// spec.serviceAccountName or the generated default.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// serviceAccountNamespace is the namespace of that ServiceAccount.
	// +optional
	ServiceAccountNamespace string `json:"serviceAccountNamespace,omitempty"`

	// namespaceCount is the number of namespaces the source may act in now.
	// +optional
	NamespaceCount int32 `json:"namespaceCount,omitempty"`
}

// ClusterSource admits a source cluster into the namespaces of this (target)
// cluster that are selected for it.
//
// A ClusterSource is named after the source cluster it admits: its name is
// the value of the multicluster.fleetlet.io/parent-cluster label on
// everything that source creates here, so it must fit in a label value.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=csrc,categories=fleetlet
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a ClusterSource is named after its source cluster, which must fit in a label value: at most 63 characters"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaceCount`
// +kubebuilder:printcolumn:name="Service Account Namespace",type=string,JSONPath=`.status.serviceAccountNamespace`,priority=10
// +kubebuilder:printcolumn:name="Service Account",type=string,JSONPath=`.status.serviceAccountName`,priority=10
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the identity of the source and the namespaces it may act in.
	// +required
	Spec ClusterSourceSpec `json:"spec"`

	// status is the observed state of the source.
	// +optional
	Status ClusterSourceStatus `json:"status,omitempty"`
}

// ClusterSourceList is a list of ClusterSources.
//
// +kubebuilder:object:root=true
type ClusterSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of ClusterSources.
	Items []ClusterSource `json:"items"`
}
