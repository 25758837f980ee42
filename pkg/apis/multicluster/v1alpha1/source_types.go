package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SourceSpec says which identity a source cluster uses in this namespace.
type SourceSpec struct {
	// serviceAccountName is the ServiceAccount, in the Source's namespace,
	// that the source cluster authenticates as. When empty it is
	// fleetlet-source-<Source name>. The controller creates it (owned by the
	// Source) if it does not exist; an existing ServiceAccount that no other
	// Source or ClusterSource owns is used as it is and never modified or
	// deleted. The controller binds it to the
	// fleetlet-source ClusterRole with a RoleBinding in this namespace, and
	// the chaperon controller impersonates it to create the pods the source
	// sends.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// SourceStatus is the observed state of a Source.
type SourceStatus struct {
	// observedGeneration is the metadata.generation this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions of the source. Ready is True when the ServiceAccount and
	// its RoleBinding are in place.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// serviceAccountName is the ServiceAccount the source authenticates as,
	// in the Source's namespace: spec.serviceAccountName or the generated
	// default.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// Source admits a source cluster into one namespace of this (target) cluster:
// the source may create PodChaperons, and the objects its pods need, in the
// Source's namespace only.
//
// A Source is named after the source cluster it admits: its name is the value
// of the multicluster.fleetlet.io/parent-cluster label on everything that
// source creates here, so it must fit in a label value.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=src,categories=fleetlet
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a Source is named after its source cluster, which must fit in a label value: at most 63 characters"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Service Account",type=string,JSONPath=`.status.serviceAccountName`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Source struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the identity of the source in this namespace.
	// +optional
	Spec SourceSpec `json:"spec,omitempty"`

	// status is the observed state of the source.
	// +optional
	Status SourceStatus `json:"status,omitempty"`
}

// SourceList is a list of Sources.
//
// +kubebuilder:object:root=true
type SourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of Sources.
	Items []Source `json:"items"`
}
