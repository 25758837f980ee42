package elector

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
)

// injectedToken is the volume the ServiceAccount admission plugin adds.
func injectedToken(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](420),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

// userToken is a user's own projected token, for another audience: kept.
func userToken(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault-token", Audience: "vault"}}},
	}}}
}

func TestCandidateSpec(t *testing.T) {
	proxy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "team", UID: "uid-1"}}
	sa := corev1.VolumeMount{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
	vault := corev1.VolumeMount{Name: "vault", MountPath: "/vault"}
	user := &corev1.PodSpec{
		Volumes:             []corev1.Volume{injectedToken("kube-api-access-x7k2p"), userToken("vault")},
		InitContainers:      []corev1.Container{{Name: "init", VolumeMounts: []corev1.VolumeMount{sa}}},
		Containers:          []corev1.Container{{Name: "main", VolumeMounts: []corev1.VolumeMount{sa, vault}}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", VolumeMounts: []corev1.VolumeMount{sa}}}},
		NodeSelector:        map[string]string{"topology.kubernetes.io/zone": "cluster-2-b"},
		Priority:            ptr.To[int32](1000),
		PreemptionPolicy:    ptr.To(corev1.PreemptLowerPriority),
		PriorityClassName:   "high",
		SchedulingGates:     []corev1.PodSchedulingGate{{Name: v1alpha1.SchedulingGateElection}},
		NodeName:            "fleetlet-cluster-2",
	}
	got := CandidateSpec(proxy, user)

	assert.Empty(t, cmp.Diff([]corev1.Volume{userToken("vault")}, got.Volumes), "volumes (-want,+got)")
	assert.Falsef(t, len(got.InitContainers[0].VolumeMounts) != 0 || len(got.EphemeralContainers[0].VolumeMounts) != 0, "the injected token is still mounted: init %v, ephemeral %v", got.InitContainers[0].VolumeMounts, got.EphemeralContainers[0].VolumeMounts)
	assert.Empty(t, cmp.Diff([]corev1.VolumeMount{vault}, got.Containers[0].VolumeMounts), "main mounts (-want,+got)")
	assert.Falsef(t, got.PriorityClassName != "fleetlet-candidate" || got.Priority != nil || got.PreemptionPolicy != nil, "priority = %q %v %v, want fleetlet-candidate with priority and policy unset", got.PriorityClassName, got.Priority, got.PreemptionPolicy)
	assert.Falsef(t, got.SchedulerName != "fleetlet-candidate" || got.NodeName != "" || got.SchedulingGates != nil || got.Hostname != "web-abc", "scheduler %q node %q gates %v hostname %q", got.SchedulerName, got.NodeName, got.SchedulingGates, got.Hostname)
	assert.Falsef(t, got.NodeSelector["topology.kubernetes.io/zone"] != "cluster-2-b", "the user's nodeSelector was lost: %v", got.NodeSelector)
	wantTerms := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "type", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"virtual-kubelet"}}}}}
	assert.Empty(t, cmp.Diff(wantTerms, got.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms), "node affinity (-want,+got)")
	// The user's spec is not changed.
	assert.False(t, len(user.Volumes) != 2 || user.Affinity != nil || user.PriorityClassName != "high", "CandidateSpec changed its input")
}

func TestCandidateSpecAddsExclusionToEveryTerm(t *testing.T) {
	user := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "a", Operator: corev1.NodeSelectorOpExists}}},
			{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}},
		}},
	}}}
	got := CandidateSpec(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, user)
	for i, term := range got.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		last := term.MatchExpressions[len(term.MatchExpressions)-1]
		assert.Falsef(t, last.Key != "type" || last.Operator != corev1.NodeSelectorOpNotIn, "term %d lacks the virtual-node exclusion: %+v", i, term)
	}
}

func TestChaperon(t *testing.T) {
	proxy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web-abc", Namespace: "team", UID: "uid-1",
		Labels:      map[string]string{"app": "web", "app.kubernetes.io/name": "web"},
		Annotations: map[string]string{"note": "x", v1alpha1.AnnotationSourceSpec: "sealed"},
	}}
	c := Chaperon(CandidateInput{Proxy: proxy, Spec: &corev1.PodSpec{}, SourceName: "cluster-1"})
	assert.Falsef(t, c.Name != naming.RemoteName("web-abc", "uid-1") || c.Namespace != "team", "chaperon %s/%s", c.Namespace, c.Name)
	assert.Falsef(t, c.Labels[v1alpha1.LabelParentUID] != "uid-1" || c.Labels[v1alpha1.LabelParentCluster] != "cluster-1", "parent labels = %v", c.Labels)
	assert.Empty(t, cmp.Diff(map[string]string{"app": "web", "app.kubernetes.io/name": "web"}, c.Spec.Template.Metadata.Labels), "candidate labels (-want,+got)")
	assert.Empty(t, cmp.Diff(map[string]string{"note": "x"}, c.Spec.Template.Metadata.Annotations), "candidate annotations must drop fleetlet's own (-want,+got)")
	self := Chaperon(CandidateInput{Proxy: proxy, Spec: &corev1.PodSpec{}, SourceName: "cluster-1", Self: true})
	want := map[string]string{
		"delegate.multicluster.fleetlet.io/app":                    "web",
		"delegate.multicluster.fleetlet.io/app.kubernetes.io.name": "web",
	}
	assert.Empty(t, cmp.Diff(want, self.Spec.Template.Metadata.Labels), "self-target labels (-want,+got)")
}
