package proxy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// What a user changes on a running proxy is taken into its delegate's
// template; nothing else is, and an unchanged proxy changes nothing.
func TestUpdatedTemplate(t *testing.T) {
	cpu := func(v string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}}
	}
	userToleration := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tmpl := &v1alpha1.PodChaperonTemplate{
		Metadata: v1alpha1.PodChaperonTemplateMetadata{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "a"}},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"disk": "ssd"},
			InitContainers: []corev1.Container{{Name: "init", Image: "init:1", Command: []string{"setup"}}},
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: cpu("100m"),
				Env: []corev1.EnvVar{{Name: "MODE", Value: "web"}}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
			Tolerations: []corev1.Toleration{userToleration},
			Volumes:     []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	running := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{"note": "a", v1alpha1.AnnotationSourceSpec: "sealed"}},
			Spec: corev1.PodSpec{
				NodeSelector:   map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet},
				InitContainers: []corev1.Container{{Name: "init", Image: "init:1"}},
				Containers:     []corev1.Container{{Name: "app", Image: "app:1", Resources: cpu("100m")}},
				Tolerations:    append([]corev1.Toleration{userToleration}, Tolerations()...),
			},
		}
	}
	added := corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
	debugger := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
		VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x", MountPath: "/var/run/secrets"}, {Name: "data", MountPath: "/data"}}}}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		self   bool
		want   func(s *v1alpha1.PodChaperonTemplate)
		what   []string
	}{
		{name: "unchanged", change: func(*corev1.Pod) {}},
		{name: "labels", change: func(p *corev1.Pod) { p.Labels = map[string]string{"app": "debug", v1alpha1.LabelParentUID: "x"} },
			want: func(s *v1alpha1.PodChaperonTemplate) { s.Metadata.Labels = map[string]string{"app": "debug"} }, what: []string{"labels"}},
		{name: "labels in a self target", self: true, change: func(p *corev1.Pod) { p.Labels["tier"] = "1" },
			want: func(s *v1alpha1.PodChaperonTemplate) {
				s.Metadata.Labels = map[string]string{SelfLabelKey("app"): "web", SelfLabelKey("tier"): "1"}
			}, what: []string{"labels"}},
		{name: "annotations", change: func(p *corev1.Pod) { delete(p.Annotations, "note") },
			want: func(s *v1alpha1.PodChaperonTemplate) { s.Metadata.Annotations = nil }, what: []string{"annotations"}},
		{name: "images", change: func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2"; p.Spec.InitContainers[0].Image = "init:2" },
			want: func(s *v1alpha1.PodChaperonTemplate) {
				s.Spec.Containers[0].Image = "app:2"
				s.Spec.InitContainers[0].Image = "init:2"
			}, what: []string{"images"}},
		{name: "a resize", change: func(p *corev1.Pod) { p.Spec.Containers[0].Resources = cpu("250m") },
			want: func(s *v1alpha1.PodChaperonTemplate) { s.Spec.Containers[0].Resources = cpu("250m") }, what: []string{"resources"}},
		{name: "a deadline", change: func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](30) },
			want: func(s *v1alpha1.PodChaperonTemplate) { s.Spec.ActiveDeadlineSeconds = ptr.To[int64](30) }, what: []string{"activeDeadlineSeconds"}},
		{name: "a toleration added", change: func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, added) },
			want: func(s *v1alpha1.PodChaperonTemplate) { s.Spec.Tolerations = append(s.Spec.Tolerations, added) }, what: []string{"tolerations"}},
		{name: "an ephemeral container, without the source's token", change: func(p *corev1.Pod) { p.Spec.EphemeralContainers = []corev1.EphemeralContainer{debugger} },
			want: func(s *v1alpha1.PodChaperonTemplate) {
				d := *debugger.DeepCopy()
				d.VolumeMounts = d.VolumeMounts[1:]
				s.Spec.EphemeralContainers = []corev1.EphemeralContainer{d}
			}, what: []string{"ephemeral containers"}},
		{name: "the proxy's own placement is not the delegate's", change: func(p *corev1.Pod) { p.Spec.NodeSelector[corev1.LabelHostname] = "cluster-2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := running()
			base := tmpl.DeepCopy()
			if tc.self {
				base.Metadata.Labels = map[string]string{SelfLabelKey("app"): "web"}
			}
			tc.change(p)
			want := base.DeepCopy()
			if tc.want != nil {
				tc.want(want)
			}
			asRead := TemplateAsRead(base)
			got, what := UpdatedTemplate(base, p, tc.self)
			assert.Empty(t, cmp.Diff(want, got), "template (-want,+got)")
			assert.Empty(t, cmp.Diff(tc.what, what), "what changed (-want,+got)")
			// A source's caches keep the template as read: it names the
			// same changes.
			_, whatRead := UpdatedTemplate(&asRead, p, tc.self)
			assert.Empty(t, cmp.Diff(tc.what, whatRead), "what changed on the template as read (-want,+got)")
		})
	}
}

// TestTemplateAsRead: what a source's caches keep of a template is what it
// reads, and nothing else: no command, environment, ports, volume sources,
// placement, ephemeral container beyond its name.
func TestTemplateAsRead(t *testing.T) {
	grace := ptr.To[int64](45)
	claims := []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
	tmpl := &v1alpha1.PodChaperonTemplate{
		Metadata: v1alpha1.PodChaperonTemplateMetadata{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"disk": "ssd"},
			Affinity:     &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Command: []string{"serve"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			EphemeralContainers:           []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}},
			TerminationGracePeriodSeconds: grace,
			ActiveDeadlineSeconds:         ptr.To[int64](60),
			ResourceClaims:                claims,
			SchedulerName:                 v1alpha1.SchedulerNameCandidate,
		},
	}
	want := v1alpha1.PodChaperonTemplate{
		Metadata: tmpl.Metadata,
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: "app:1", Resources: tmpl.Spec.Containers[0].Resources}},
			Volumes:                       []corev1.Volume{{Name: "data"}},
			EphemeralContainers:           []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}}},
			TerminationGracePeriodSeconds: grace,
			ActiveDeadlineSeconds:         ptr.To[int64](60),
			ResourceClaims:                claims,
		},
	}
	assert.Empty(t, cmp.Diff(want, TemplateAsRead(tmpl)), "template as read (-want,+got)")
}

// A delegate's resource claims (resources.claims) are not on its proxy: the
// webhook keeps them for candidates. An update never drops them from the
// template, and an unchanged proxy is not a resize.
func TestUpdatedTemplateKeepsResourceClaims(t *testing.T) {
	withClaims := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
		}
	}
	tmpl := &v1alpha1.PodChaperonTemplate{Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}},
		Containers:     []corev1.Container{{Name: "app", Image: "app:1", Resources: withClaims("1")}},
	}}
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}

	got, what := UpdatedTemplate(tmpl, p, false)
	assert.Empty(t, what, "an unchanged proxy changed %v", what)
	assert.Empty(t, cmp.Diff(tmpl, got), "template (-want,+got)")

	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
	got, what = UpdatedTemplate(tmpl, p, false)
	assert.Empty(t, cmp.Diff([]string{"resources"}, what), "what changed (-want,+got)")
	assert.Empty(t, cmp.Diff(withClaims("2"), got.Spec.Containers[0].Resources), "resized resources (-want,+got)")
}
