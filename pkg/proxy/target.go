package proxy

import corev1 "k8s.io/api/core/v1"

// TargetKey names a Target (Namespace set) or a ClusterTarget (Namespace
// empty): the one key of a target, whether the source's registry, a
// virtual node or an election record names it.
type TargetKey struct {
	Namespace string
	Name      string
}

// String is namespace/name for a Target and the name for a ClusterTarget.
func (k TargetKey) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Kind is Target or ClusterTarget.
func (k TargetKey) Kind() string {
	if k.Namespace == "" {
		return "ClusterTarget"
	}
	return "Target"
}

// Target is the target an election record names (its String is how the
// record's message writes it).
func (r Record) Target() TargetKey {
	return TargetKey{Namespace: r.TargetNamespace, Name: r.TargetName}
}

// ElectedTarget reads a proxy's election record: the elected target and the
// chaperon there. ok is false while no election stands (no record, or
// Elected is not True, or the record cannot be read).
func ElectedTarget(p *corev1.Pod) (key TargetKey, chaperon string, ok bool) {
	r, ok := Elected(p)
	return r.Target(), r.Chaperon, ok
}
