package follow

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func cmRef(name string) Ref     { return Ref{Kind: KindConfigMap, Name: name} }
func secretRef(name string) Ref { return Ref{Kind: KindSecret, Name: name} }
func saRef(name string) Ref     { return Ref{Kind: KindServiceAccount, Name: name} }
func optional(r Ref) Ref        { r.Optional = true; return r }
func annotated(kind, name string) Ref {
	return Ref{Kind: kind, Name: name, Annotated: true}
}

func cmVolume(name string, opt *bool) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: opt},
	}}
}

func secretVolume(name string, opt *bool) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: name, Optional: opt},
	}}
}

func envCM(name string, opt *bool) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k", Optional: opt}}}
}

func envSecret(name string, opt *bool) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k", Optional: opt}}}
}

func TestRefs(t *testing.T) {
	sa := saRef(DefaultServiceAccount)
	cases := []struct {
		name       string
		spec       corev1.PodSpec
		annotation *string
		want       RefSet
	}{
		{
			name: "nothing but the default ServiceAccount",
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
			want: RefSet{sa},
		},
		{
			name: "resource claim templates and shared claims",
			spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")},
				{Name: "gpu2", ResourceClaimTemplateName: ptr.To("one-gpu")},
				{Name: "shared", ResourceClaimName: ptr.To("team-gpus")},
			}},
			want: RefSet{{Kind: KindResourceClaim, Name: "team-gpus"}, {Kind: KindResourceClaimTemplate, Name: "one-gpu"}, sa},
		},
		{
			name: "named ServiceAccount",
			spec: corev1.PodSpec{ServiceAccountName: "builder"},
			want: RefSet{saRef("builder")},
		},
		{
			name: "deprecated serviceAccount field",
			spec: corev1.PodSpec{DeprecatedServiceAccount: "old"},
			want: RefSet{saRef("old")},
		},
		{
			name: "configMap and secret volumes, optional kept",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{
				cmVolume("cfg", nil), cmVolume("opt", ptr.To(true)), secretVolume("tls", ptr.To(false)), secretVolume("maybe", ptr.To(true)),
				{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}},
			want: RefSet{cmRef("cfg"), optional(cmRef("opt")), optional(secretRef("maybe")), secretRef("tls"), sa},
		},
		{
			name: "projected volume sources; token and downward API are not objects",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "pcm"}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "psec"}, Optional: ptr.To(true)}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{DownwardAPI: &corev1.DownwardAPIProjection{}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMap}}},
				},
			}}}}},
			want: RefSet{cmRef("pcm"), optional(secretRef("psec")), sa},
		},
		{
			name: "kube-root-ca.crt is never followed",
			spec: corev1.PodSpec{
				Volumes:    []corev1.Volume{cmVolume(RootCAConfigMap, nil)},
				Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{envCM(RootCAConfigMap, nil)}}},
			},
			want: RefSet{sa},
		},
		{
			name: "env valueFrom and envFrom (with prefixes) of every kind of container",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "i", Env: []corev1.EnvVar{envCM("init-cm", nil), {Name: "plain", Value: "x"}}}},
				Containers: []corev1.Container{{Name: "c",
					Env: []corev1.EnvVar{envSecret("app-secret", nil), {Name: "f", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					EnvFrom: []corev1.EnvFromSource{
						{Prefix: "A_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "from-cm"}}},
						{Prefix: "B_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "from-secret"}, Optional: ptr.To(true)}},
					},
				}},
				EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
					Env:     []corev1.EnvVar{envCM("debug-cm", ptr.To(true))},
					EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "debug-secret"}}}},
				}}},
			},
			want: RefSet{optional(cmRef("debug-cm")), cmRef("from-cm"), cmRef("init-cm"), secretRef("app-secret"), secretRef("debug-secret"), optional(secretRef("from-secret")), sa},
		},
		{
			name: "image pull secrets are optional",
			spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}, {Name: ""}}},
			want: RefSet{optional(secretRef("regcred")), sa},
		},
		{
			name: "a reference made optionally and not is not optional; duplicates once",
			spec: corev1.PodSpec{
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "shared"}},
				Volumes:          []corev1.Volume{secretVolume("shared", nil), cmVolume("cfg", ptr.To(true)), cmVolume("cfg", ptr.To(true))},
				Containers:       []corev1.Container{{Name: "c", Env: []corev1.EnvVar{envCM("cfg", ptr.To(true)), envSecret("shared", ptr.To(true))}}},
			},
			want: RefSet{optional(cmRef("cfg")), secretRef("shared"), sa},
		},
		{
			name: "volume plugins' secrets",
			spec: corev1.PodSpec{Volumes: []corev1.Volume{
				{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"}}}},
				{Name: "csi2", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}}},
				{Name: "az", VolumeSource: corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "az-creds"}}},
				{Name: "flex", VolumeSource: corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{SecretRef: &corev1.LocalObjectReference{Name: "flex-creds"}}}},
			}},
			want: RefSet{secretRef("az-creds"), secretRef("csi-creds"), secretRef("flex-creds"), sa},
		},
		{
			name:       "annotation, with blanks, an empty entry and kinds as written; duplicates by kind case",
			spec:       corev1.PodSpec{},
			annotation: ptr.To(" persistentvolumeclaim/data, configmap/extra,,ConfigMap/extra , secrets/creds,deployments.apps/web,"),
			want:       RefSet{sa, annotated("configmap", "extra"), annotated("deployments.apps", "web"), annotated("persistentvolumeclaim", "data"), annotated("secrets", "creds")},
		},
		{
			name:       "an annotated object referenced by the spec too is kept in both places (the Follower merges them)",
			spec:       corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("extra", nil)}},
			annotation: ptr.To("configmap/extra"),
			want:       RefSet{cmRef("extra"), sa, annotated("configmap", "extra")},
		},
		{
			name:       "empty annotation",
			annotation: ptr.To(""),
			want:       RefSet{sa},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
			if tc.annotation != nil {
				pod.Annotations = map[string]string{v1alpha1.AnnotationFollow: *tc.annotation}
			}
			got, err := Refs(pod, &tc.spec)
			require.NoError(t, err)
			assert.Empty(t, cmp.Diff(tc.want, got), "Refs (-want +got)")
		})
	}
}

func TestRefsMalformedAnnotation(t *testing.T) {
	for _, value := range []string{
		"configmap",
		"configmap/",
		"/name",
		"configmap/a/b",
		"config map/x",
		"configmap/Upper",
		"9lives/x",
		"configmap/extra,secret",
	} {
		t.Run(value, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationFollow: value}}}
			_, err := Refs(pod, &corev1.PodSpec{})
			var refusal *Refusal
			require.Truef(t, errors.As(err, &refusal), "got %v, want a *Refusal", err)
			assert.Equal(t, ReasonMalformed, refusal.Reason, "reason (%s)", refusal.Message)
		})
	}
}

// A claim the pod mounts is kept with the pod by package claims: the
// follow annotation's entry for it is left out, whatever its spelling; a
// claim it does not mount is still followed.
func TestRefsLeaveMountedClaims(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		v1alpha1.AnnotationFollow: "persistentvolumeclaim/data,PersistentVolumeClaims/logs,persistentvolumeclaim/other,configmap/extra",
	}}}
	spec := &corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		{Name: "l", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "logs"}}},
	}}
	got, err := Refs(pod, spec)
	require.NoError(t, err)
	want := RefSet{saRef("default"), annotated("configmap", "extra"), annotated("persistentvolumeclaim", "other")}
	assert.Empty(t, cmp.Diff(want, got), "Refs (-want +got)")
}
