package proxy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Record is the election record a proxy carries in its
// multicluster.fleetlet.io/Elected condition while Elected is True: the
// target elected and the name of the candidate's PodChaperon there. Only
// this record counts after a crash or a leader change.
type Record struct {
	// TargetNamespace is the namespace of a Target, empty for a
	// ClusterTarget.
	TargetNamespace string
	// TargetName is the Target's or ClusterTarget's name.
	TargetName string
	// Chaperon is the elected candidate's PodChaperon, in the proxy's
	// namespace of that target.
	Chaperon string
}

// The record's fields, in the condition's message, in this order.
const (
	fieldTarget   = "target"
	fieldChaperon = "chaperon"
)

// Message is the record as the condition's message: readable in `kubectl
// describe` ("target=cluster-2 chaperon=web-7f9c-4a1b2c3d") and exact to
// parse back.
func (r Record) Message() string {
	return fmt.Sprintf("%s=%s %s=%s", fieldTarget, r.Target(), fieldChaperon, r.Chaperon)
}

// Validate checks that every name is one Kubernetes would accept.
func (r Record) Validate() error {
	if r.TargetNamespace != "" {
		if errs := validation.IsDNS1123Label(r.TargetNamespace); len(errs) > 0 {
			return fmt.Errorf("target namespace %q: %s", r.TargetNamespace, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Subdomain(r.TargetName); len(errs) > 0 {
		return fmt.Errorf("target name %q: %s", r.TargetName, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(r.Chaperon); len(errs) > 0 {
		return fmt.Errorf("chaperon name %q: %s", r.Chaperon, strings.Join(errs, "; "))
	}
	return nil
}

// ParseRecord reads a record back from a condition message: what Message
// writes for a valid record, optionally followed by more " key=value"
// fields, which it ignores. Later versions may add fields that way, and
// only that way (never reordering or changing the two first), so that a
// version rolled back to still reads the record and never takes a proxy
// with a standing election for one without (docs/upgrades.md).
func ParseRecord(msg string) (Record, error) {
	fields := strings.Split(msg, " ")
	if len(fields) < 2 {
		return Record{}, fmt.Errorf("election record %q: want %q", msg, fieldTarget+"=<target> "+fieldChaperon+"=<chaperon>")
	}
	target, ok1 := strings.CutPrefix(fields[0], fieldTarget+"=")
	chaperon, ok2 := strings.CutPrefix(fields[1], fieldChaperon+"=")
	if !ok1 || !ok2 {
		return Record{}, fmt.Errorf("election record %q: want %q", msg, fieldTarget+"=<target> "+fieldChaperon+"=<chaperon>")
	}
	for _, f := range fields[2:] {
		if key, _, ok := strings.Cut(f, "="); !ok || !laterField(key) {
			return Record{}, fmt.Errorf("election record %q: field %q is not key=value", msg, f)
		}
	}
	r := Record{TargetName: target, Chaperon: chaperon}
	if ns, name, namespaced := strings.Cut(target, "/"); namespaced {
		if ns == "" {
			return Record{}, fmt.Errorf("election record %q: a Target's namespace is empty", msg)
		}
		r.TargetNamespace, r.TargetName = ns, name
	}
	if err := r.Validate(); err != nil {
		return Record{}, fmt.Errorf("election record %q: %w", msg, err)
	}
	return r, nil
}

// laterField reports whether key may name a field a later version appends
// to a record: lower-case letters and dashes, not one of the first two.
func laterField(key string) bool {
	if key == "" || key == fieldTarget || key == fieldChaperon {
		return false
	}
	for _, c := range key {
		if (c < 'a' || c > 'z') && c != '-' {
			return false
		}
	}
	return true
}

// ElectedCondition is the proxy's multicluster.fleetlet.io/Elected
// condition, or nil.
func ElectedCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1alpha1.ConditionElected {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// Elected reads the proxy's election record. ok is false while no election
// stands: no condition, Elected not True, or a record that cannot be read.
func Elected(p *corev1.Pod) (r Record, ok bool) {
	c := ElectedCondition(p)
	if c == nil || c.Status != corev1.ConditionTrue {
		return Record{}, false
	}
	r, err := ParseRecord(c.Message)
	return r, err == nil
}
