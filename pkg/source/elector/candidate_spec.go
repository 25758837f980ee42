package elector

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// CandidateInput is what a candidate is built from.
type CandidateInput struct {
	// Proxy is the proxy pod.
	Proxy *corev1.Pod
	// Spec is the proxy's spec with the sealed source-spec restored: what
	// the user asked for.
	Spec *corev1.PodSpec
	// SourceName is this source's name in the target.
	SourceName string
	// Self is true when the target is the source cluster itself: proxy and
	// candidate then share a namespace, and the candidate's labels move
	// under delegate.multicluster.fleetlet.io/ so that the source's own
	// Services, PodDisruptionBudgets and affinities never count a pod twice.
	Self bool
	// Probe makes a candidate that places the pod's claims: an emptyDir
	// stands for each claim, and it is never elected (see claims.go).
	Probe bool
}

// Chaperon builds the PodChaperon of a proxy for one target: the same name
// in every target (naming.RemoteName), owned through the parent labels.
func Chaperon(in CandidateInput) *v1alpha1.PodChaperon {
	p := in.Proxy
	spec := CandidateSpec(p, in.Spec)
	annotations := map[string]string{
		v1alpha1.AnnotationParentName:      p.Name,
		v1alpha1.AnnotationParentNamespace: p.Namespace,
	}
	if in.Probe {
		claimsAsEmptyDirs(&spec)
		annotations[v1alpha1.AnnotationProbe] = "true"
	}
	return &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{
			Name:      naming.RemoteName(p.Name, p.UID),
			Namespace: p.Namespace,
			Labels: map[string]string{
				v1alpha1.LabelParentUID:     string(p.UID),
				v1alpha1.LabelParentCluster: in.SourceName,
			},
			Annotations: annotations,
		},
		Spec: v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{
			Metadata: v1alpha1.PodChaperonTemplateMetadata{
				Labels:      proxy.CandidateLabels(p.Labels, in.Self),
				Annotations: proxy.CandidateAnnotations(p.Annotations),
			},
			Spec: spec,
		}},
	}
}

// CandidateSpec builds a candidate's pod spec from the user's spec (the
// proxy's with the source-spec restored), as docs/design.md step 2 says: the source's
// injected service-account token volume and its mounts removed (the target
// injects its own); priorityClassName fleetlet-candidate with priority and
// preemptionPolicy unset (the target's Priority admission fills them from
// the class); scheduler fleetlet-candidate; virtual nodes excluded by node
// affinity; the proxy's name as hostname; no node, no gates.
func CandidateSpec(proxy *corev1.Pod, userSpec *corev1.PodSpec) corev1.PodSpec {
	spec := *userSpec.DeepCopy()
	stripInjectedToken(&spec)
	spec.PriorityClassName = v1alpha1.PriorityClassCandidate
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.SchedulerName = v1alpha1.SchedulerNameCandidate
	spec.NodeName = ""
	spec.SchedulingGates = nil
	if spec.Hostname == "" {
		spec.Hostname = hostname(proxy.Name)
	}
	excludeVirtualNodes(&spec)
	return spec
}

// claimsAsEmptyDirs puts an emptyDir of the same name in place of each
// persistentVolumeClaim volume: a probe is scheduled as the pod, but for
// the claims, which no target has yet.
func claimsAsEmptyDirs(spec *corev1.PodSpec) {
	for i, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			spec.Volumes[i].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
}

// hostname is the proxy's name as a host name: a DNS label of at most 63
// characters.
func hostname(name string) string {
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-.")
	}
	return strings.ReplaceAll(name, ".", "-")
}

// excludeVirtualNodes adds `type NotIn (virtual-kubelet)` to every required
// node selector term (terms are ORed, so each needs it), or one term with it.
func excludeVirtualNodes(spec *corev1.PodSpec) {
	req := corev1.NodeSelectorRequirement{Key: v1alpha1.LabelNodeType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{v1alpha1.NodeTypeVirtualKubelet}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		terms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}

// stripInjectedToken removes the service-account token volume the source's
// ServiceAccount admission plugin injected, recognised by its content (a
// projected volume of exactly a serviceAccountToken, the kube-root-ca.crt
// ConfigMap and the namespace from the downward API), and every mount of it
// in containers, init containers and ephemeral containers. A user's own
// projected volumes are kept.
func stripInjectedToken(spec *corev1.PodSpec) {
	injected := map[string]bool{}
	kept := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if isInjectedToken(v) {
			injected[v.Name] = true
			continue
		}
		kept = append(kept, v)
	}
	if len(injected) == 0 {
		return
	}
	spec.Volumes = kept
	strip := func(mounts []corev1.VolumeMount) []corev1.VolumeMount {
		out := mounts[:0]
		for _, m := range mounts {
			if !injected[m.Name] {
				out = append(out, m)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	for i := range spec.Containers {
		spec.Containers[i].VolumeMounts = strip(spec.Containers[i].VolumeMounts)
	}
	for i := range spec.InitContainers {
		spec.InitContainers[i].VolumeMounts = strip(spec.InitContainers[i].VolumeMounts)
	}
	for i := range spec.EphemeralContainers {
		spec.EphemeralContainers[i].VolumeMounts = strip(spec.EphemeralContainers[i].VolumeMounts)
	}
}

func isInjectedToken(v corev1.Volume) bool {
	p := v.Projected
	if p == nil || len(p.Sources) != 3 {
		return false
	}
	var token, ca, ns bool
	for _, s := range p.Sources {
		switch {
		case s.ServiceAccountToken != nil && s.ServiceAccountToken.Path == "token" && s.ServiceAccountToken.Audience == "":
			token = true
		case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
			ca = true
		case s.DownwardAPI != nil && len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].FieldRef != nil &&
			s.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace":
			ns = true
		}
	}
	return token && ca && ns
}
