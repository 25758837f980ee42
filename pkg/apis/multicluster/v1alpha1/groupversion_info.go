package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every fleetlet type.
const GroupName = "multicluster.fleetlet.io"

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource for an unqualified resource
// name, as API errors (apierrors.NewNotFound and friends) expect.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&Target{}, &TargetList{},
		&ClusterTarget{}, &ClusterTargetList{},
		&Source{}, &SourceList{},
		&ClusterSource{}, &ClusterSourceList{},
		&PodChaperon{}, &PodChaperonList{},
		&ClusterSummary{}, &ClusterSummaryList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
