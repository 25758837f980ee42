package chaperon

import (
	"time"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

const (
	// ControllerName names the controller (logs, metrics).
	ControllerName = "podchaperon"

	// FieldOwner is the field manager of the pods this controller creates
	// and of its writes to chaperons' status.
	FieldOwner = "fleetlet-chaperon"

	// EventSource is the reporting controller of this package's Events.
	EventSource = "fleetlet-chaperon"

	// KindPodChaperon is the kind a pod's owner reference names.
	KindPodChaperon = "PodChaperon"
)

// Reasons of the PodCreated condition, besides v1alpha1.ReasonPodCreated
// (True: the pod exists and is this chaperon's) and
// v1alpha1.ReasonPodRejected (False: the target refused to create it). They
// double as the reasons of the Events that report them.
const (
	// ReasonInvalidChaperon: the chaperon lacks the parent-uid or
	// parent-cluster label, so no pod is created for it (a pod without
	// parent-uid would be taken for a proxy pod in a self target).
	ReasonInvalidChaperon = "InvalidChaperon"

	// ReasonSourceNotFound: there is neither a Source named after the
	// chaperon's parent-cluster label in its namespace nor a ClusterSource
	// of that name.
	ReasonSourceNotFound = "SourceNotFound"

	// ReasonSourceNotReady: the Source or ClusterSource exists but its
	// identity is not provisioned (not Ready for its current generation,
	// or being deleted).
	ReasonSourceNotReady = "SourceNotReady"

	// ReasonNamespaceNotSelected: the ClusterSource does not select the
	// chaperon's namespace.
	ReasonNamespaceNotSelected = "NamespaceNotSelected"

	// ReasonPodNotOwned: a pod of the chaperon's name exists that the
	// chaperon does not own; it is left alone.
	ReasonPodNotOwned = "PodNotOwned"

	// ReasonPodDeleted: the pod was created and has since been deleted.
	// It is final: the pod is never created again for this chaperon.
	ReasonPodDeleted = v1alpha1.ReasonPodDeleted
)

// ReasonPodCreated and ReasonPodRejected, from the API package, for
// readers of this package's reasons.
const (
	ReasonPodCreated  = v1alpha1.ReasonPodCreated
	ReasonPodRejected = v1alpha1.ReasonPodRejected
)

// Defaults of the reconciler's settings.
const (
	// DefaultRetryInterval is how often a chaperon that waits is checked
	// again when no event wakes it up: for its Source or ClusterSource (a
	// namespace relabelled for a ClusterSource whose status does not
	// change, say), or for a pod of its name that it does not own to go.
	DefaultRetryInterval = time.Minute

	// DefaultRejectedBackoffInitial and DefaultRejectedBackoffMax bound the
	// exponential backoff between attempts to create a pod the target
	// refused (quota, RBAC, admission).
	DefaultRejectedBackoffInitial = time.Second
	DefaultRejectedBackoffMax     = 5 * time.Minute

	// DefaultMaxConcurrentReconciles is how many chaperons are reconciled
	// at once: each creation is one API round trip, and every candidate of
	// an election waits for one.
	DefaultMaxConcurrentReconciles = 8
)
