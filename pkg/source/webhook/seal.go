package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// MinKeyLength is the shortest seal key accepted, in bytes (HMAC-SHA-256
// wants a key as long as its output).
const MinKeyLength = 32

// SealKeyDataKey is the key of the seal key in its Secret.
const SealKeyDataKey = "key"

// sealVersion is the version of the sealed annotation's format.
const sealVersion = 1

// macContext separates the MACs of source specs from anything else the key
// might ever sign.
const macContext = "multicluster.fleetlet.io/source-spec/v1"

var (
	// ErrNoSourceSpec: the pod has no source-spec annotation.
	ErrNoSourceSpec = errors.New("the pod has no " + v1alpha1.AnnotationSourceSpec + " annotation")
	// ErrUntrusted: the source-spec annotation is not one fleetlet sealed
	// for the pod's namespace (forged, altered, copied from another
	// namespace or sealed with another key).
	ErrUntrusted = errors.New("the " + v1alpha1.AnnotationSourceSpec + " annotation is not sealed by fleetlet for this pod's namespace")
	// ErrUnverifiedPass: a pod that carries fleetlet's election gate and a
	// source-spec annotation this replica cannot open. On a webhook's
	// second pass (reinvocation) during a seal key rotation, another
	// replica may have sealed it with a key this one does not hold yet;
	// stripping the pod again would lose what the user asked for, so it
	// is refused and the client tries again. A pod a user made that way
	// (a proxy's YAML copied) is refused for good until the marks go.
	ErrUnverifiedPass = errors.New("the pod carries fleetlet's " + v1alpha1.SchedulingGateElection + " scheduling gate and a " + v1alpha1.AnnotationSourceSpec + " annotation that this fleetlet cannot verify (a seal key rotation in progress: retry; or the marks of a copied proxy pod: remove both)")
)

// sealed is the annotation's format:
//
//	{"v":1,"mac":"<base64url HMAC-SHA-256>","spec":<SourceSpec as JSON>}
//
// exactly as json.Marshal writes it (compact, fields in this order). The
// MAC covers macContext, the pod's namespace and the spec's bytes.
type sealed struct {
	V    int             `json:"v"`
	MAC  string          `json:"mac"`
	Spec json.RawMessage `json:"spec"`
}

// seal returns the annotation value of s, sealed for namespace.
func seal(s *SourceSpec, namespace string, key []byte) (string, error) {
	spec, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encoding the source spec: %w", err)
	}
	out, err := json.Marshal(sealed{V: sealVersion, MAC: base64.RawURLEncoding.EncodeToString(sum(key, namespace, spec)), Spec: spec})
	if err != nil {
		return "", fmt.Errorf("encoding the source spec: %w", err)
	}
	return string(out), nil
}

func sum(key []byte, namespace string, spec []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(macContext))
	m.Write([]byte{0})
	m.Write([]byte(namespace))
	m.Write([]byte{0})
	m.Write(spec)
	return m.Sum(nil)
}

// Open returns the source spec the webhook recorded on a proxy pod, after
// checking its seal: the annotation must be byte for byte what fleetlet
// wrote, with key, for the pod's namespace. It fails with ErrNoSourceSpec
// when the pod has no annotation and ErrUntrusted when the annotation is
// forged, altered or sealed for another namespace or with another key;
// nothing from an annotation that fails is returned.
func Open(pod *corev1.Pod, keys Keys) (*SourceSpec, error) {
	value, ok := pod.Annotations[v1alpha1.AnnotationSourceSpec]
	if !ok {
		return nil, ErrNoSourceSpec
	}
	return unseal(value, pod.Namespace, keys.openers())
}

// unseal checks value's MAC against each key in turn.
func unseal(value, namespace string, keys [][]byte) (*SourceSpec, error) {
	if namespace == "" {
		return nil, ErrUntrusted
	}
	var w sealed
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil || dec.More() || w.V != sealVersion || len(w.Spec) == 0 {
		return nil, ErrUntrusted
	}
	// Only the exact bytes fleetlet writes verify: no whitespace, field
	// order or escape changes, no duplicate fields.
	canonical, err := json.Marshal(w)
	if err != nil || !bytes.Equal(canonical, []byte(value)) {
		return nil, ErrUntrusted
	}
	mac, err := base64.RawURLEncoding.Strict().DecodeString(w.MAC)
	if err != nil || !anyKeyVerifies(mac, keys, namespace, w.Spec) {
		return nil, ErrUntrusted
	}
	var s SourceSpec
	dec = json.NewDecoder(bytes.NewReader(w.Spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// Sealed by fleetlet, but not a spec this version can read.
		return nil, fmt.Errorf("decoding the sealed %s annotation: %w", v1alpha1.AnnotationSourceSpec, err)
	}
	return &s, nil
}

// anyKeyVerifies tells whether one key of at least MinKeyLength bytes
// made mac.
func anyKeyVerifies(mac []byte, keys [][]byte, namespace string, spec []byte) bool {
	for _, k := range keys {
		if len(k) >= MinKeyLength && hmac.Equal(mac, sum(k, namespace, spec)) {
			return true
		}
	}
	return false
}
