package follow

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Kinds a pod spec references.
const (
	KindConfigMap      = "ConfigMap"
	KindSecret         = "Secret"
	KindServiceAccount = "ServiceAccount"
	// KindResourceClaimTemplate (resource.k8s.io) is what a pod's
	// spec.resourceClaims names for claims made per pod: each target's
	// resource claim controller makes the claim from the copy, and its
	// scheduler allocates that target's devices.
	KindResourceClaimTemplate = "ResourceClaimTemplate"
	// KindResourceClaim (resource.k8s.io) is a claim pods share
	// (spec.resourceClaims[].resourceClaimName): its copy is allocated once
	// in its target, and every pod that shares it runs there (package
	// devices places it).
	KindResourceClaim = "ResourceClaim"
)

// resourceV1 is the API group and version of followed DRA objects.
var resourceV1 = schema.GroupVersion{Group: "resource.k8s.io", Version: "v1"}

// specGVK is the group, version and kind of a reference found in a spec.
func specGVK(kind string) schema.GroupVersionKind {
	if kind == KindResourceClaimTemplate || kind == KindResourceClaim {
		return resourceV1.WithKind(kind)
	}
	return corev1.SchemeGroupVersion.WithKind(kind)
}

// RootCAConfigMap is the ConfigMap every namespace gets from its own
// cluster: never followed.
const RootCAConfigMap = "kube-root-ca.crt"

// DefaultServiceAccount is the ServiceAccount of a pod that names none.
const DefaultServiceAccount = "default"

// Ref is one object a proxy pod needs in its target's namespace.
type Ref struct {
	// Kind is ConfigMap, Secret or ServiceAccount for a reference found in
	// the spec. For one listed in the follow annotation it is the kind as
	// the pod wrote it (a Kind or resource name, singular or plural, any
	// case, optionally qualified with its group: "PersistentVolumeClaim",
	// "deployments.apps"; short names such as "pvc" are not understood);
	// the Follower resolves it through its RESTMapper.
	Kind string
	// Name of the object, in the pod's namespace.
	Name string
	// Optional references (optional: true, image pull secrets) are
	// skipped when the object does not exist; others are refused.
	Optional bool
	// Annotated is true for a reference listed in the follow annotation:
	// only kinds of the allow-list are taken.
	Annotated bool
}

func (r Ref) String() string {
	if r.Annotated {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + " " + r.Name
}

func (r Ref) key() string {
	if r.Annotated {
		return "a/" + strings.ToLower(r.Kind) + "/" + r.Name
	}
	return "s/" + r.Kind + "/" + r.Name
}

// RefSet is what a pod needs, each reference once, sorted (spec references
// first, by kind then name; then the annotation's, in the same order).
type RefSet []Ref

// Refs lists what the pod references in spec — the user's spec: the proxy's
// with the sealed source spec restored — and what its follow annotation
// asks for. It reads nothing. A reference made both optionally and not is
// not optional. kube-root-ca.crt is left out (every namespace has its
// own); the ServiceAccount is "default" when the spec names none.
//
// The annotation is "kind/name" pairs separated by commas (blanks around
// them and empty entries are ignored). A malformed annotation is a
// *Refusal with ReasonMalformed: it is refused for every target.
func Refs(pod *corev1.Pod, spec *corev1.PodSpec) (RefSet, error) {
	b := refBuilder{seen: map[string]int{}, mounted: map[string]bool{}}
	if spec != nil {
		b.spec(spec)
	}
	if pod != nil {
		if err := b.annotation(pod.Annotations[v1alpha1.AnnotationFollow]); err != nil {
			return nil, err
		}
	}
	sort.Slice(b.refs, func(i, j int) bool {
		a, c := b.refs[i], b.refs[j]
		if a.Annotated != c.Annotated {
			return !a.Annotated
		}
		if ka, kc := strings.ToLower(a.Kind), strings.ToLower(c.Kind); ka != kc {
			return ka < kc
		}
		return a.Name < c.Name
	})
	return RefSet(b.refs), nil
}

type refBuilder struct {
	refs []Ref
	seen map[string]int
	// mounted are the claims the spec mounts.
	mounted map[string]bool
}

func (b *refBuilder) add(r Ref) {
	if r.Name == "" {
		return
	}
	if i, ok := b.seen[r.key()]; ok {
		b.refs[i].Optional = b.refs[i].Optional && r.Optional
		return
	}
	b.seen[r.key()] = len(b.refs)
	b.refs = append(b.refs, r)
}

func (b *refBuilder) configMap(name string, optional *bool) {
	if name == RootCAConfigMap {
		return
	}
	b.add(Ref{Kind: KindConfigMap, Name: name, Optional: optional != nil && *optional})
}

func (b *refBuilder) secret(name string, optional *bool) {
	b.add(Ref{Kind: KindSecret, Name: name, Optional: optional != nil && *optional})
}

func (b *refBuilder) secretRef(ref *corev1.LocalObjectReference) {
	if ref != nil {
		b.secret(ref.Name, nil)
	}
}

func (b *refBuilder) spec(spec *corev1.PodSpec) {
	sa := spec.ServiceAccountName
	if sa == "" {
		// The API server still honours the deprecated field alone.
		sa = spec.DeprecatedServiceAccount
	}
	if sa == "" {
		sa = DefaultServiceAccount
	}
	b.add(Ref{Kind: KindServiceAccount, Name: sa})
	// The kubelet pulls without a pull secret it cannot find.
	optional := true
	for _, s := range spec.ImagePullSecrets {
		b.secret(s.Name, &optional)
	}
	for i := range spec.InitContainers {
		b.env(spec.InitContainers[i].Env, spec.InitContainers[i].EnvFrom)
	}
	for i := range spec.Containers {
		b.env(spec.Containers[i].Env, spec.Containers[i].EnvFrom)
	}
	for i := range spec.EphemeralContainers {
		b.env(spec.EphemeralContainers[i].Env, spec.EphemeralContainers[i].EnvFrom)
	}
	for i := range spec.Volumes {
		b.volume(&spec.Volumes[i].VolumeSource)
	}
	for _, c := range spec.ResourceClaims {
		if c.ResourceClaimTemplateName != nil {
			b.add(Ref{Kind: KindResourceClaimTemplate, Name: *c.ResourceClaimTemplateName})
		}
		if c.ResourceClaimName != nil {
			b.add(Ref{Kind: KindResourceClaim, Name: *c.ResourceClaimName})
		}
	}
}

func (b *refBuilder) env(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) {
	for _, e := range env {
		if e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			b.configMap(r.Name, r.Optional)
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			b.secret(r.Name, r.Optional)
		}
	}
	for _, e := range envFrom {
		if r := e.ConfigMapRef; r != nil {
			b.configMap(r.Name, r.Optional)
		}
		if r := e.SecretRef; r != nil {
			b.secret(r.Name, r.Optional)
		}
	}
}

func (b *refBuilder) volume(v *corev1.VolumeSource) {
	switch {
	case v.PersistentVolumeClaim != nil:
		b.mounted[v.PersistentVolumeClaim.ClaimName] = true
	case v.ConfigMap != nil:
		b.configMap(v.ConfigMap.Name, v.ConfigMap.Optional)
	case v.Secret != nil:
		b.secret(v.Secret.SecretName, v.Secret.Optional)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			if s.ConfigMap != nil {
				b.configMap(s.ConfigMap.Name, s.ConfigMap.Optional)
			}
			if s.Secret != nil {
				b.secret(s.Secret.Name, s.Secret.Optional)
			}
		}
	// Volume plugins that read their credentials from a Secret of the
	// pod's namespace.
	case v.CSI != nil:
		b.secretRef(v.CSI.NodePublishSecretRef)
	case v.AzureFile != nil:
		b.secret(v.AzureFile.SecretName, nil)
	case v.CephFS != nil:
		b.secretRef(v.CephFS.SecretRef)
	case v.FlexVolume != nil:
		b.secretRef(v.FlexVolume.SecretRef)
	case v.ISCSI != nil:
		b.secretRef(v.ISCSI.SecretRef)
	case v.RBD != nil:
		b.secretRef(v.RBD.SecretRef)
	case v.ScaleIO != nil:
		b.secretRef(v.ScaleIO.SecretRef)
	case v.StorageOS != nil:
		b.secretRef(v.StorageOS.SecretRef)
	}
}

// kindWord is a kind as a pod may write it: a Kind or resource name,
// optionally followed by its group.
var kindWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(\.[a-z0-9]([a-z0-9.-]*[a-z0-9])?)?$`)

func (b *refBuilder) annotation(value string) error {
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kind, name, ok := strings.Cut(entry, "/")
		kind, name = strings.TrimSpace(kind), strings.TrimSpace(name)
		var problem string
		switch {
		case !ok || kind == "" || name == "":
			problem = "is not kind/name"
		case !kindWord.MatchString(kind):
			problem = fmt.Sprintf("has no valid kind: %q", kind)
		default:
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				problem = fmt.Sprintf("has no valid name: %s", strings.Join(errs, "; "))
			}
		}
		if problem != "" {
			return &Refusal{
				Object:  entry,
				Reason:  ReasonMalformed,
				Message: fmt.Sprintf("%s: %q %s (want kind/name pairs separated by commas, such as configmap/extra,persistentvolumeclaim/data)", v1alpha1.AnnotationFollow, entry, problem),
			}
		}
		if b.mounted[name] && isClaimKind(kind) {
			// A claim the pod mounts is kept with the pod in one
			// target (package claims), never followed.
			continue
		}
		b.add(Ref{Kind: kind, Name: name, Annotated: true})
	}
	return nil
}

// isClaimKind tells the ways a pod may write PersistentVolumeClaim.
func isClaimKind(kind string) bool {
	k := strings.TrimSuffix(strings.ToLower(kind), ".")
	return k == "persistentvolumeclaim" || k == "persistentvolumeclaims"
}
