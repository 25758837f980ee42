package follow

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func u(kind string, obj map[string]any) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: obj}
	out.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	return out
}

func objMeta(name string, labels, annotations map[string]any, extra map[string]any) map[string]any {
	m := map[string]any{"namespace": "ns", "name": name}
	if labels != nil {
		m["labels"] = labels
	}
	if annotations != nil {
		m["annotations"] = annotations
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func ourLabels(extra map[string]any) map[string]any {
	out := map[string]any{v1alpha1.LabelParentCluster: "src"}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func ourAnnotations(name string, extra map[string]any) map[string]any {
	out := map[string]any{v1alpha1.AnnotationParentName: name, v1alpha1.AnnotationParentNamespace: "ns"}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

var systemMeta = map[string]any{
	"uid": "1234", "resourceVersion": "42", "generation": int64(3), "creationTimestamp": "2024-01-01T00:00:00Z",
	"finalizers":      []any{"x/y"},
	"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "9"}},
	"managedFields":   []any{map[string]any{"manager": "kubectl"}},
}

func TestDesiredCopy(t *testing.T) {
	cases := []struct {
		name string
		src  *unstructured.Unstructured
		want *unstructured.Unstructured
	}{
		{
			name: "ConfigMap: data, binaryData, immutable, labels and annotations; fleetlet's and system metadata dropped",
			src: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg",
					map[string]any{"app": "web", v1alpha1.LabelParentCluster: "forged", "delegate." + v1alpha1.Prefix + "x": "y"},
					map[string]any{"note": "n", v1alpha1.AnnotationFollowers: "p/forged", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
					systemMeta),
				"data": map[string]any{"k": "v"}, "binaryData": map[string]any{"b": "AAE="}, "immutable": true,
			}),
			want: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(map[string]any{"app": "web"}), ourAnnotations("cfg", map[string]any{"note": "n"}), nil),
				"data":     map[string]any{"k": "v"}, "binaryData": map[string]any{"b": "AAE="}, "immutable": true,
			}),
		},
		{
			name: "Secret: type and data",
			src: u("Secret", map[string]any{
				"metadata": objMeta("tls", nil, nil, systemMeta),
				"type":     "kubernetes.io/tls", "data": map[string]any{"tls.crt": "Yw==", "tls.key": "aw=="},
			}),
			want: u("Secret", map[string]any{
				"metadata": objMeta("tls", ourLabels(nil), ourAnnotations("tls", nil), nil),
				"type":     "kubernetes.io/tls", "data": map[string]any{"tls.crt": "Yw==", "tls.key": "aw=="},
			}),
		},
		{
			name: "ServiceAccount: never its secrets, pull secrets or mountable-secrets enforcement",
			src: u("ServiceAccount", map[string]any{
				"metadata":                     objMeta("builder", map[string]any{"team": "a"}, map[string]any{"kubernetes.io/enforce-mountable-secrets": "true", "eks.amazonaws.com/role-arn": "arn"}, systemMeta),
				"secrets":                      []any{map[string]any{"name": "builder-token-abc"}},
				"imagePullSecrets":             []any{map[string]any{"name": "regcred"}},
				"automountServiceAccountToken": false,
			}),
			want: u("ServiceAccount", map[string]any{
				"metadata":                     objMeta("builder", ourLabels(map[string]any{"team": "a"}), ourAnnotations("builder", map[string]any{"eks.amazonaws.com/role-arn": "arn"}), nil),
				"automountServiceAccountToken": false,
			}),
		},
		{
			name: "PersistentVolumeClaim: no status, volumeName or binding annotations",
			src: u("PersistentVolumeClaim", map[string]any{
				"metadata": objMeta("data", nil, map[string]any{
					"pv.kubernetes.io/bind-completed": "yes", "volume.kubernetes.io/selected-node": "n1",
					"volume.beta.kubernetes.io/storage-provisioner": "p", "backup": "daily",
				}, systemMeta),
				"spec":   map[string]any{"accessModes": []any{"ReadWriteOnce"}, "volumeName": "pv-1", "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
				"status": map[string]any{"phase": "Bound"},
			}),
			want: u("PersistentVolumeClaim", map[string]any{
				"metadata": objMeta("data", ourLabels(nil), ourAnnotations("data", map[string]any{"backup": "daily"}), nil),
				"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := desiredCopy(tc.src, "src")
			assert.Empty(t, cmp.Diff(tc.want.Object, got.Object), "desiredCopy (-want +got)")
		})
	}
}

func TestMergeInto(t *testing.T) {
	cases := []struct {
		name              string
		existing, desired *unstructured.Unstructured
		want              *unstructured.Unstructured
		recreate          bool
	}{
		{
			name: "ConfigMap: data replaced exactly, labels the source's, followers and system metadata kept",
			existing: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(map[string]any{"old": "x"}), ourAnnotations("cfg", map[string]any{v1alpha1.AnnotationFollowers: "p/1", "gone": "x"}), map[string]any{"uid": "u", "resourceVersion": "7"}),
				"data":     map[string]any{"a": "1", "b": "2"}, "binaryData": map[string]any{"x": "AA=="},
			}),
			desired: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(map[string]any{"new": "y"}), ourAnnotations("cfg", nil), nil),
				"data":     map[string]any{"a": "3"},
			}),
			want: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(map[string]any{"new": "y"}), ourAnnotations("cfg", map[string]any{v1alpha1.AnnotationFollowers: "p/1"}), map[string]any{"uid": "u", "resourceVersion": "7"}),
				"data":     map[string]any{"a": "3"},
			}),
		},
		{
			name: "PersistentVolumeClaim: what the target added stays",
			existing: u("PersistentVolumeClaim", map[string]any{
				"metadata": objMeta("data", ourLabels(nil), ourAnnotations("data", map[string]any{"pv.kubernetes.io/bind-completed": "yes"}), nil),
				"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "volumeName": "pv-9", "storageClassName": "standard", "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
				"status":   map[string]any{"phase": "Bound"},
			}),
			desired: u("PersistentVolumeClaim", map[string]any{
				"metadata": objMeta("data", ourLabels(nil), ourAnnotations("data", map[string]any{"backup": "daily"}), nil),
				"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "2Gi"}}},
			}),
			want: u("PersistentVolumeClaim", map[string]any{
				"metadata": objMeta("data", ourLabels(nil), ourAnnotations("data", map[string]any{"pv.kubernetes.io/bind-completed": "yes", "backup": "daily"}), nil),
				"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "volumeName": "pv-9", "storageClassName": "standard", "resources": map[string]any{"requests": map[string]any{"storage": "2Gi"}}},
				"status":   map[string]any{"phase": "Bound"},
			}),
		},
		{
			name: "immutable ConfigMap whose data changed is recreated",
			existing: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(nil), ourAnnotations("cfg", nil), nil),
				"data":     map[string]any{"a": "1"}, "immutable": true,
			}),
			desired: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(nil), ourAnnotations("cfg", nil), nil),
				"data":     map[string]any{"a": "2"}, "immutable": true,
			}),
			want: u("ConfigMap", map[string]any{
				"metadata": objMeta("cfg", ourLabels(nil), ourAnnotations("cfg", nil), nil),
				"data":     map[string]any{"a": "2"}, "immutable": true,
			}),
			recreate: true,
		},
		{
			name: "Secret whose type changed is recreated",
			existing: u("Secret", map[string]any{
				"metadata": objMeta("s", ourLabels(nil), ourAnnotations("s", nil), nil),
				"type":     "Opaque", "data": map[string]any{"a": "MQ=="},
			}),
			desired: u("Secret", map[string]any{
				"metadata": objMeta("s", ourLabels(nil), ourAnnotations("s", nil), nil),
				"type":     "kubernetes.io/basic-auth", "data": map[string]any{"a": "MQ=="},
			}),
			want: u("Secret", map[string]any{
				"metadata": objMeta("s", ourLabels(nil), ourAnnotations("s", nil), nil),
				"type":     "kubernetes.io/basic-auth", "data": map[string]any{"a": "MQ=="},
			}),
			recreate: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeInto(tc.existing, tc.desired)
			assert.Empty(t, cmp.Diff(tc.want.Object, got.Object), "mergeInto (-want +got)")
			assert.Equal(t, tc.recreate, mustRecreate(tc.existing, got), "mustRecreate")
		})
	}
}

func TestFollowers(t *testing.T) {
	obj := &metav1.ObjectMeta{}
	setFollowers(obj, followers{"uid-b": "web-1", "uid-a": "web-0"})
	assert.Equal(t, "web-0/uid-a,web-1/uid-b", obj.Annotations[v1alpha1.AnnotationFollowers], "annotation")
	obj.Annotations[v1alpha1.AnnotationFollowers] += ",garbage,/x,y/, web-2/uid-c "
	want := followers{"uid-a": "web-0", "uid-b": "web-1", "uid-c": "web-2"}
	assert.Empty(t, cmp.Diff(want, followersOf(obj)), "followersOf (-want +got)")
	assert.Empty(t, cmp.Diff([]types.UID{"uid-a", "uid-b", "uid-c"}, followersOf(obj).uids()), "uids (-want +got)")
}
