package chaperon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func TestBuildPod(t *testing.T) {
	ownerRef := metav1.OwnerReference{
		APIVersion:         "multicluster.fleetlet.io/v1alpha1",
		Kind:               "PodChaperon",
		Name:               "web-1a2b3c4d",
		UID:                "chaperon-uid",
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
	spec := corev1.PodSpec{
		Containers:        []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		SchedulerName:     v1alpha1.SchedulerNameCandidate,
		PriorityClassName: v1alpha1.PriorityClassCandidate,
		Hostname:          "web",
	}
	parents := map[string]string{
		v1alpha1.LabelParentUID:     "proxy-uid",
		v1alpha1.LabelParentCluster: "cluster-1",
	}
	parentAnnotations := map[string]string{
		v1alpha1.AnnotationParentName:      "web",
		v1alpha1.AnnotationParentNamespace: "shop",
	}

	tests := []struct {
		name     string
		chaperon *v1alpha1.PodChaperon
		want     *corev1.Pod
	}{
		{
			name: "template labels and annotations plus the chaperon's parent keys",
			chaperon: makeChaperon("shop", "web-1a2b3c4d").uid("chaperon-uid").
				labels(parents).annotations(parentAnnotations).
				annotation(v1alpha1.AnnotationReserved, "node-1").
				templateLabels(map[string]string{"app": "web", "tier": "front"}).
				templateAnnotations(map[string]string{"prometheus.io/scrape": "true"}).
				spec(spec).obj(),
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "shop",
					Name:      "web-1a2b3c4d",
					Labels: map[string]string{
						"app": "web", "tier": "front",
						v1alpha1.LabelParentUID: "proxy-uid", v1alpha1.LabelParentCluster: "cluster-1",
					},
					Annotations: map[string]string{
						"prometheus.io/scrape":             "true",
						v1alpha1.AnnotationParentName:      "web",
						v1alpha1.AnnotationParentNamespace: "shop",
					},
					OwnerReferences: []metav1.OwnerReference{ownerRef},
				},
				Spec: spec,
			},
		},
		{
			name: "the chaperon's parent labels and annotations win over the template's",
			chaperon: makeChaperon("shop", "web-1a2b3c4d").uid("chaperon-uid").
				labels(parents).annotations(parentAnnotations).
				templateLabels(map[string]string{
					"app":                       "web",
					v1alpha1.LabelParentUID:     "forged-uid",
					v1alpha1.LabelParentCluster: "another-cluster",
				}).
				templateAnnotations(map[string]string{
					v1alpha1.AnnotationParentName:      "someone-else",
					v1alpha1.AnnotationParentNamespace: "elsewhere",
				}).
				spec(spec).obj(),
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "shop",
					Name:      "web-1a2b3c4d",
					Labels: map[string]string{
						"app":                   "web",
						v1alpha1.LabelParentUID: "proxy-uid", v1alpha1.LabelParentCluster: "cluster-1",
					},
					Annotations:     parentAnnotations,
					OwnerReferences: []metav1.OwnerReference{ownerRef},
				},
				Spec: spec,
			},
		},
		{
			name: "a parent key the chaperon lacks is not taken from the template",
			chaperon: makeChaperon("shop", "web-1a2b3c4d").uid("chaperon-uid").
				labels(parents).annotations(nil).templateLabels(nil).
				templateAnnotations(map[string]string{v1alpha1.AnnotationParentName: "forged"}).
				spec(spec).obj(),
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace:       "shop",
					Name:            "web-1a2b3c4d",
					Labels:          parents,
					OwnerReferences: []metav1.OwnerReference{ownerRef},
				},
				Spec: spec,
			},
		},
		{
			name: "other labels of the chaperon stay on the chaperon",
			chaperon: makeChaperon("shop", "web-1a2b3c4d").uid("chaperon-uid").
				labels(parents).label("only-on-chaperon", "x").annotations(parentAnnotations).
				annotation(v1alpha1.AnnotationElected, "true").templateLabels(nil).
				spec(spec).obj(),
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Namespace:       "shop",
					Name:            "web-1a2b3c4d",
					Labels:          parents,
					Annotations:     parentAnnotations,
					OwnerReferences: []metav1.OwnerReference{ownerRef},
				},
				Spec: spec,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := tt.chaperon.DeepCopy()
			got := BuildPod(tt.chaperon)
			assert.Empty(t, cmp.Diff(tt.want, got), "BuildPod() (-want,+got)")
			assert.Empty(t, cmp.Diff(orig, tt.chaperon), "BuildPod changed the chaperon (-before,+after)")
			// The pod shares nothing with the chaperon.
			got.Labels["mutated"] = "x"
			got.Spec.Containers[0].Image = "mutated"
			assert.Empty(t, cmp.Diff(orig, tt.chaperon), "the pod aliases the chaperon (-before,+after)")
		})
	}
}

func TestCheckLabels(t *testing.T) {
	for _, tt := range []struct {
		name    string
		labels  map[string]string
		wantErr bool
	}{
		{"both", map[string]string{v1alpha1.LabelParentUID: "u", v1alpha1.LabelParentCluster: "c"}, false},
		{"no parent-uid", map[string]string{v1alpha1.LabelParentCluster: "c"}, true},
		{"no parent-cluster", map[string]string{v1alpha1.LabelParentUID: "u"}, true},
		{"empty parent-cluster", map[string]string{v1alpha1.LabelParentUID: "u", v1alpha1.LabelParentCluster: ""}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLabels(&v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}})
			assert.Equalf(t, tt.wantErr, err != nil, "checkLabels() = %v, want error %v", err, tt.wantErr)
		})
	}
}

// A pod that names the chaperon as its controller but carries another
// source's parent labels is not held: in a namespace two sources share,
// one source's user could create it before the chaperon controller does
// and have it adopted as the other's delegate. Before: the controller
// reference alone made it the delegate.
func TestIsHeldByNeedsTheParentLabels(t *testing.T) {
	ch := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1-abcd", UID: "chaperon-uid",
		Labels: map[string]string{v1alpha1.LabelParentUID: "proxy-uid", v1alpha1.LabelParentCluster: "east"}}}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{name: "built by the controller", labels: BuildPod(ch).Labels, want: true},
		{name: "another source's", labels: map[string]string{v1alpha1.LabelParentUID: "proxy-uid", v1alpha1.LabelParentCluster: "west"}},
		{name: "another proxy's", labels: map[string]string{v1alpha1.LabelParentUID: "other", v1alpha1.LabelParentCluster: "east"}},
		{name: "no labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := BuildPod(ch)
			p.Labels = tc.labels
			got := isHeldBy(p, ch)
			assert.Equal(t, tc.want, got, "isHeldBy")
		})
	}
	plain := BuildPod(ch)
	plain.OwnerReferences = nil
	assert.False(t, isHeldBy(plain, ch), "a pod without the controller reference is held")
}
