package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// nameHashLen is how many hex digits of the key's hash end a name that had
// to be shortened or changed.
const nameHashLen = 8

// NodeName returns the name of the virtual node that stands for a target:
// fleetlet-<name> for a ClusterTarget, fleetlet-<namespace>-<name> for a
// Target.
//
// The name is always a valid DNS label (at most 63 characters of [a-z0-9-],
// starting and ending with a letter or digit), hence a valid node name and a
// valid value of the kubernetes.io/hostname label with which proxy pods are
// pinned. When the plain form is not one — too long, or with characters a
// DNS label refuses, such as the dots a target name may contain — the name
// is cut and ends with "-" and the first 8 hex digits of the SHA-256 of the
// key, so that two keys that differ only in the part cut or changed still
// get different names.
//
// A ClusterTarget "a-b" and a Target "b" in namespace "a" share a name; the
// source's virtual node controller refuses the second of them (package
// vnode, Controller.Upsert).
func NodeName(key TargetKey) string {
	plain := v1alpha1.VirtualNodeNamePrefix + key.Name
	if key.Namespace != "" {
		plain = v1alpha1.VirtualNodeNamePrefix + key.Namespace + "-" + key.Name
	}
	if len(validation.IsDNS1123Label(plain)) == 0 {
		return plain
	}
	sanitized := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		default:
			return '-'
		}
	}, plain)
	sum := sha256.Sum256([]byte(key.Namespace + "/" + key.Name))
	suffix := "-" + hex.EncodeToString(sum[:])[:nameHashLen]
	if limit := validation.DNS1123LabelMaxLength - len(suffix); len(sanitized) > limit {
		sanitized = sanitized[:limit]
	}
	// The prefix guarantees a letter first; what is left of the name must
	// not end with a dash before the suffix's own.
	return strings.TrimRight(sanitized, "-") + suffix
}

// HeadedTo is the virtual node an unbound proxy is headed to: the one it
// is pinned to, else the one its standing election record names ("" for
// neither). The virtual node's allocatable counts the proxy from the
// record on, so that the proxy fits it by the time its delegate is
// admitted, and the gate goes with the pin in one write.
func HeadedTo(pod *corev1.Pod) string {
	if n := PinnedNode(pod); n != "" {
		return n
	}
	if rec, ok := Elected(pod); ok {
		return NodeName(rec.Target())
	}
	return ""
}
