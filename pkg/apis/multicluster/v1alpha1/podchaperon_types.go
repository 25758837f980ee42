package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodChaperonSpec holds the pod a source asks this cluster to run.
type PodChaperonSpec struct {
	// template is the pod the chaperon controller creates, with the
	// chaperon's name and namespace.
	// +required
	Template PodChaperonTemplate `json:"template"`
}

// PodChaperonTemplate is the part of a pod a source decides: labels,
// annotations and the pod spec. Everything else in the pod's metadata (name,
// namespace, owner reference, the parent labels) is set by the chaperon
// controller.
type PodChaperonTemplate struct {
	// metadata of the pod.
	// +optional
	Metadata PodChaperonTemplateMetadata `json:"metadata,omitempty"`

	// spec of the pod: a full core/v1 PodSpec. The CRD schema does not
	// describe it (it would make the CRD too large) and keeps it as it
	// is; the API server validates it when the chaperon controller creates
	// the pod, and any error shows in the chaperon's conditions.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Spec corev1.PodSpec `json:"spec"`
}

// PodChaperonTemplateMetadata is the metadata a source gives the pod.
type PodChaperonTemplateMetadata struct {
	// labels of the pod.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations of the pod.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodChaperonStatus is the observed state of the pod a chaperon holds.
type PodChaperonStatus struct {
	// observedGeneration is the metadata.generation this status was
	// computed from, and whose template the running pod was brought up to
	// (the updates a source passes on: labels, annotations, images,
	// resources, activeDeadlineSeconds, tolerations, ephemeral
	// containers). It lags metadata.generation while an update is in
	// progress.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions of the chaperon itself, such as PodCreated (False with
	// the admission error when the target refuses the pod). The pod's own
	// conditions are in podStatus.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// nodeName is the node the pod runs on, once bound (a pod deleted
	// keeps the last one). The node a candidate is reserved on before it
	// binds is the annotation multicluster.fleetlet.io/reserved.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// podStatus mirrors the status of the pod: a full core/v1 PodStatus,
	// kept as it is like spec.template.spec.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	PodStatus corev1.PodStatus `json:"podStatus,omitempty"`
}

// PodChaperon holds one pod on behalf of a source cluster: a candidate while
// the source elects where a proxy pod runs, then the delegate. The chaperon
// controller creates the pod (owned by the chaperon) impersonating the
// Source's ServiceAccount, so that this cluster's RBAC and Pod Security apply
// to what the source runs, and mirrors the pod's status back. The candidate
// scheduler writes its reservation in the multicluster.fleetlet.io/reserved
// annotation; the source marks the winner with
// multicluster.fleetlet.io/elected.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pch,categories=fleetlet
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.podStatus.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Reserved",type=string,JSONPath=`.metadata.annotations.multicluster\.fleetlet\.io/reserved`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.metadata.labels.multicluster\.fleetlet\.io/parent-cluster`
// +kubebuilder:printcolumn:name="Elected",type=string,JSONPath=`.metadata.annotations.multicluster\.fleetlet\.io/elected`,priority=10
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.metadata.annotations.multicluster\.fleetlet\.io/parent-name`,priority=10
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="PodCreated")].reason`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodChaperon struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the pod to run.
	// +required
	Spec PodChaperonSpec `json:"spec"`

	// status is the observed state of the pod.
	// +optional
	Status PodChaperonStatus `json:"status,omitempty"`
}

// PodChaperonList is a list of PodChaperons.
//
// +kubebuilder:object:root=true
type PodChaperonList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of PodChaperons.
	Items []PodChaperon `json:"items"`
}
