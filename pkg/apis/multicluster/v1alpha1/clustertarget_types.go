package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterTarget is a cluster that runs the proxy pods of every enabled
// namespace of the source: each delegate is created in the namespace of the
// same name in the target cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ctgt,categories=fleetlet
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.virtualNodeName`
// +kubebuilder:printcolumn:name="Self",type=boolean,JSONPath=`.spec.self`,priority=10
// +kubebuilder:printcolumn:name="Secret Namespace",type=string,JSONPath=`.spec.kubeconfigSecret.namespace`,priority=10
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.kubeconfigSecret.name`,priority=10
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says how to reach the target. A kubeconfig Secret must name its
	// namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.kubeconfigSecret) || has(self.kubeconfigSecret.__namespace__)",message="kubeconfigSecret.namespace is required in a ClusterTarget",fieldPath=`.kubeconfigSecret`
	Spec TargetSpec `json:"spec"`

	// status is the observed state of the target.
	// +optional
	Status TargetStatus `json:"status,omitempty"`
}

// ClusterTargetList is a list of ClusterTargets.
//
// +kubebuilder:object:root=true
type ClusterTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of ClusterTargets.
	Items []ClusterTarget `json:"items"`
}
