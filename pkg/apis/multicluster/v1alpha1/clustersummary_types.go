package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterSummaryStatus is what a target cluster can run, summed over its
// schedulable real nodes: nodes that are not cordoned, not virtual nodes, and
// Ready.
type ClusterSummaryStatus struct {
	// conditions of the summary. Ready is True once the summary reflects a
	// complete view of the cluster's nodes and pods.
	// CandidateSchedulerRunning says whether the cluster's candidate
	// scheduler holds and renews its leader election Lease (absent when it
	// runs without leader election).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// nodeCount is the number of schedulable real nodes.
	// +optional
	NodeCount int32 `json:"nodeCount,omitempty"`

	// capacity is the sum of the nodes' capacity.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// allocatable is the sum of the nodes' allocatable resources.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`

	// requested is the sum of the resource requests of the pods bound to
	// those nodes that have not finished, with "pods" the number of such
	// pods: allocatable minus requested is what the cluster can still run.
	// +optional
	Requested corev1.ResourceList `json:"requested,omitempty"`

	// largestFree is, for each resource the schedulable nodes have
	// allocatable of, the most of it free on any one of them (the node's
	// allocatable minus the requests of its active pods, "pods" their
	// number): a pod asking for more of any resource fits on no node
	// however much the cluster has free in total. Each resource's figure
	// may come from a different node.
	// +optional
	LargestFree corev1.ResourceList `json:"largestFree,omitempty"`

	// requestedBySource is the part of requested (pods included) that comes
	// from the delegates of each source: pods labelled
	// multicluster.fleetlet.io/parent-cluster=<source>, keyed by source. A
	// source subtracts its own part, so that its own delegates are not
	// counted as other clusters' load.
	// +optional
	RequestedBySource map[string]corev1.ResourceList `json:"requestedBySource,omitempty"`

	// labels are the node labels (key and value) all schedulable real nodes
	// share.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// clusterID identifies the cluster: the UID of its kube-system
	// Namespace. A source refuses a second Target that reaches a cluster
	// with the same clusterID as one it already has.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ClusterID string `json:"clusterID,omitempty"`

	// observedTime is when fleetlet last confirmed this summary; it is
	// renewed at least every heartbeat interval (30 s by default) even
	// when nothing changed. A source that sees it stop moving knows the
	// target's fleetlet is down (its Targets get SummaryStale=True).
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`

	// devicesCounted is true when the cluster serves resource.k8s.io/v1
	// (Dynamic Resource Allocation) and fleetlet counts its devices:
	// deviceClasses then lists every DeviceClass it serves. False, a
	// source leaves device checks to the cluster's own scheduler.
	// +optional
	DevicesCounted bool `json:"devicesCounted,omitempty"`

	// deviceClasses counts, per DeviceClass the cluster serves, the
	// devices the class selects.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	DeviceClasses []DeviceClassSummary `json:"deviceClasses,omitempty"`
}

// DeviceClassSummary counts the devices one DeviceClass selects.
type DeviceClassSummary struct {
	// name of the DeviceClass.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// devices is how many published devices the class selects: those of
	// the ResourceSlices of schedulable nodes, and of slices not tied to
	// one node.
	// +kubebuilder:validation:Minimum=0
	Devices int32 `json:"devices"`

	// allocated is how many of those are allocated to ResourceClaims.
	// +kubebuilder:validation:Minimum=0
	Allocated int32 `json:"allocated"`
}

// Free is how many devices of the class are not allocated.
func (c DeviceClassSummary) Free() int32 { return max(c.Devices-c.Allocated, 0) }

// DeviceClass returns the named class's counts; false when the cluster
// does not serve it (or does not count its devices).
func (s *ClusterSummaryStatus) DeviceClass(name string) (DeviceClassSummary, bool) {
	for _, c := range s.DeviceClasses {
		if c.Name == name {
			return c, true
		}
	}
	return DeviceClassSummary{}, false
}

// ClusterSummary summarizes the resources and shared node labels of this
// (target) cluster for the sources that send it pods. There is one, named
// default, kept up to date by fleetlet's ClusterSummary controller.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=csum,categories=fleetlet
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="there is one ClusterSummary and it is named default"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodeCount`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.allocatable.cpu`
// +kubebuilder:printcolumn:name="CPU Requested",type=string,JSONPath=`.status.requested.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.allocatable.memory`
// +kubebuilder:printcolumn:name="Memory Requested",type=string,JSONPath=`.status.requested.memory`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.status.allocatable.pods`,priority=10
// +kubebuilder:printcolumn:name="Pods Requested",type=string,JSONPath=`.status.requested.pods`,priority=10
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterSummary struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the summary.
	// +optional
	Status ClusterSummaryStatus `json:"status,omitempty"`
}

// ClusterSummaryList is a list of ClusterSummaries.
//
// +kubebuilder:object:root=true
type ClusterSummaryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// items is the list of ClusterSummaries.
	Items []ClusterSummary `json:"items"`
}
