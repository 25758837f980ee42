package chaperon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// A running pod gets what its source changes in the chaperon's template, as
// the source: labels and annotations (the keys the source lists as removed
// go, the ones this cluster added stay), images, activeDeadlineSeconds,
// added tolerations, an in-place resize and an ephemeral container; and
// status.observedGeneration says so.
func TestRunningPodGetsItsTemplateUpdates(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, nil)
	provisionSource(t, ns, "cluster-a")
	ch := runningChaperon(t, ns, "upd-0a1b2c3d", "node-u", "4")
	key := client.ObjectKeyFromObject(ch)
	// This cluster's own admission, say, labelled the pod.
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, key, &pod))
	orig := pod.DeepCopy()
	pod.Labels["injected"] = "by-the-target"
	require.NoError(t, k8sClient.Patch(ctx, &pod, client.MergeFrom(orig)))

	toleration := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	debug := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}}
	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) {
		c.Spec.Template.Metadata.Labels = map[string]string{"app": "web", "new": "2"}
		c.Spec.Template.Metadata.Annotations = map[string]string{"note": "b"}
		c.Annotations[v1alpha1.AnnotationRemovedLabels] = "old"
		c.Annotations[v1alpha1.AnnotationRemovedAnnotations] = "gone"
		s := &c.Spec.Template.Spec
		s.Containers[0].Image = "registry.example/app:2"
		s.Containers[0].Resources = resources("200m")
		s.ActiveDeadlineSeconds = ptrTo(int64(600))
		s.Tolerations = append(s.Tolerations, toleration)
		s.EphemeralContainers = []corev1.EphemeralContainer{debug}
	})

	got := waitChaperon(t, ch, "the pod at the template's generation", func(c *v1alpha1.PodChaperon) error {
		if c.Generation < 2 || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})
	require.NoError(t, k8sClient.Get(ctx, key, &pod))
	wantLabels := map[string]string{"app": "web", "new": "2", "injected": "by-the-target",
		v1alpha1.LabelParentUID: got.Labels[v1alpha1.LabelParentUID], v1alpha1.LabelParentCluster: "cluster-a"}
	assert.Empty(t, cmp.Diff(wantLabels, pod.Labels), "labels (-want,+got)")
	wantAnnotations := map[string]string{"note": "b",
		v1alpha1.AnnotationParentName: got.Annotations[v1alpha1.AnnotationParentName], v1alpha1.AnnotationParentNamespace: "source-ns"}
	assert.Empty(t, cmp.Diff(wantAnnotations, pod.Annotations), "annotations (-want,+got)")
	c := pod.Spec.Containers[0]
	assert.Falsef(t, c.Image != "registry.example/app:2" || c.Resources.Requests.Cpu().String() != "200m" || c.Resources.Limits.Cpu().String() != "200m", "container image %s, resources %v: want app:2 and 200m (resized); events: %s", c.Image, c.Resources, eventsOf(t, ch))
	d := pod.Spec.ActiveDeadlineSeconds
	assert.Falsef(t, d == nil || *d != 600, "activeDeadlineSeconds %v, want 600", d)
	assert.Truef(t, hasToleration(pod.Spec.Tolerations, toleration), "tolerations %v lack %v", pod.Spec.Tolerations, toleration)
	assert.Falsef(t, len(pod.Spec.EphemeralContainers) != 1 || pod.Spec.EphemeralContainers[0].Name != "debugger", "ephemeral containers %v, want the debugger", pod.Spec.EphemeralContainers)
}

// resources are requests equal to limits (Guaranteed).
func resources(cpu string) corev1.ResourceRequirements {
	q := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return corev1.ResourceRequirements{Requests: q, Limits: q}
}

// runningChaperon creates a chaperon of source cluster-a in ns, waits for
// its pod, and binds the pod to a node of that name with cpus of
// allocatable CPU, Running as a kubelet would have it.
func runningChaperon(t *testing.T, ns, name, nodeName, cpus string) *v1alpha1.PodChaperon {
	t.Helper()
	ctx := t.Context()
	ch := makeChaperon(ns, name).
		templateLabels(map[string]string{"app": "web", "old": "1"}).
		templateAnnotations(map[string]string{"note": "a", "gone": "x"}).
		spec(corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Resources: resources("100m")}}}).obj()
	create(t, ch)
	recorded(t, ch)
	// A resize is admitted against the pod's node.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	require.NoError(t, k8sClient.Create(ctx, node))
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), node) })
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpus), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Capacity, node.Status.Allocatable = room, room
	require.NoError(t, k8sClient.Status().Update(ctx, node))
	key := client.ObjectKeyFromObject(ch)
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, key, &pod))
	cs := kubernetes.NewForConfigOrDie(env.Config)
	require.NoError(t, cs.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
	}, metav1.CreateOptions{}))
	require.NoError(t, k8sClient.Get(ctx, key, &pod))
	pod.Status.Phase = corev1.PodRunning
	require.NoError(t, k8sClient.Status().Update(ctx, &pod))
	return ch
}

// A part of an update the target refuses (here a resize the node has no
// room for) is a Warning UpdateRejected Event with the API server's words;
// the rest is applied, and the chaperon says the pod is at its generation:
// nothing is retried until the template changes again.
func TestRefusedUpdateIsAnEventAndTheRestApplies(t *testing.T) {
	testenv.Need(t, env)
	ctx := t.Context()
	ns := newNamespace(t, nil)
	provisionSource(t, ns, "cluster-a")
	ch := runningChaperon(t, ns, "refused-0a1b2c3d", "node-small", "150m")
	patchChaperon(t, ch, func(c *v1alpha1.PodChaperon) {
		c.Spec.Template.Metadata.Labels["tier"] = "db"
		c.Spec.Template.Spec.Containers[0].Resources = resources("2")
	})
	waitChaperon(t, ch, "the pod at the template's generation", func(c *v1alpha1.PodChaperon) error {
		if c.Generation < 2 || c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("status.observedGeneration %d, generation %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})
	var pod corev1.Pod
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(ch), &pod))
	assert.Falsef(t, pod.Labels["tier"] != "db" || pod.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m", "labels %v, cpu %s: want tier=db applied and the resize refused", pod.Labels, pod.Spec.Containers[0].Resources.Requests.Cpu())
	testenv.Eventually(t, waitTimeout, "an UpdateRejected Event", func() error {
		if ev := eventsOf(t, ch); !strings.Contains(ev, "Warning "+ReasonUpdateRejected+": The target refused the resources") ||
			!strings.Contains(ev, "enough allocatable") {
			return fmt.Errorf("events:%s", ev)
		}
		return nil
	})
}

func hasToleration(list []corev1.Toleration, t corev1.Toleration) bool {
	for _, u := range list {
		if cmp.Equal(u, t) {
			return true
		}
	}
	return false
}

// eventsOf lists the Events about a chaperon, for a failure's message.
func eventsOf(t *testing.T, ch *v1alpha1.PodChaperon) string {
	var list eventsv1.EventList
	if err := k8sClient.List(t.Context(), &list, client.InNamespace(ch.Namespace)); err != nil {
		return err.Error()
	}
	out := ""
	for _, e := range list.Items {
		if e.Regarding.Name == ch.Name {
			out += fmt.Sprintf("\n  %s %s: %s", e.Type, e.Reason, e.Note)
		}
	}
	return out
}
