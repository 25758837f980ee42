package follow

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Reason says why an object cannot be followed to a target.
type Reason string

// Reasons of a Refusal; they are CamelCase, fit for an Event reason.
const (
	// ReasonNotAllowed: the follow annotation names a kind that is not in
	// the allow-list, or one the source's API server does not know.
	ReasonNotAllowed Reason = "NotAllowed"
	// ReasonNotFound: the object does not exist in the source (and the
	// reference is not optional).
	ReasonNotFound Reason = "NotFound"
	// ReasonClash: the target already has an object of that name that this
	// source did not create.
	ReasonClash Reason = "Clash"
	// ReasonClusterScoped: the follow annotation names a cluster-scoped
	// kind; those are never followed.
	ReasonClusterScoped Reason = "ClusterScoped"
	// ReasonForbidden: the target does not let this source read or write
	// that kind in the namespace (an allowed kind its fleetlet-source role
	// does not grant), or does not serve the kind; or the source does not
	// let fleetlet read the object (Secrets outside --secret-namespaces).
	ReasonForbidden Reason = "Forbidden"
	// ReasonMalformed: the follow annotation cannot be parsed, or names a
	// kind ambiguously; refused for every target.
	ReasonMalformed Reason = "Malformed"
)

// Refusal is the error of Refs and Ensure when what a pod needs cannot be
// placed in a target: the target is filtered for that pod, and the proxy
// gets an Event and the Elected condition saying which object and why.
// Test for it with errors.As.
type Refusal struct {
	// Object names the object: "ConfigMap app-config" for a reference
	// found in the spec, the annotation's own "kind/name" for one listed
	// there.
	Object string
	Reason Reason
	// Message is a sentence for the condition and the Event.
	Message string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("cannot follow %s: %s", r.Object, r.Message)
}

// SourceGone is the error of Sync when the source object no longer exists
// while delegates in the target still use its copy: the copy is kept until
// they are gone, and the caller reports it with an Event.
type SourceGone struct {
	// Kind, Namespace and Name name the source object.
	Kind, Namespace, Name string
	// Followers are the UIDs of the proxy pods whose copies still need it.
	Followers []types.UID
}

func (e *SourceGone) Error() string {
	uids := make([]string, len(e.Followers))
	for i, u := range e.Followers {
		uids[i] = string(u)
	}
	return fmt.Sprintf("%s %s/%s was deleted in the source; its copy is kept while proxy pods %s use it",
		e.Kind, e.Namespace, e.Name, strings.Join(uids, ", "))
}
