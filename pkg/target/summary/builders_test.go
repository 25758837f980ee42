package summary

import (
	"strconv"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// quantityEqual compares quantities by value: "1" equals "1000m".
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// resources builds a ResourceList from name, quantity pairs.
func resources(pairs ...string) corev1.ResourceList {
	if len(pairs)%2 != 0 {
		panic("resources: odd number of arguments")
	}
	list := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		list[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return list
}

// nodeWrapper builds test nodes: Ready, schedulable, real, with no
// resources unless given.
type nodeWrapper struct{ corev1.Node }

func makeNode(name string) *nodeWrapper {
	return &nodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}}
}

// capacity sets the capacity, as name, quantity pairs, and the allocatable
// to the same unless allocatable was set first.
func (w *nodeWrapper) capacity(pairs ...string) *nodeWrapper {
	w.Status.Capacity = resources(pairs...)
	if w.Status.Allocatable == nil {
		w.Status.Allocatable = resources(pairs...)
	}
	return w
}

func (w *nodeWrapper) allocatable(pairs ...string) *nodeWrapper {
	w.Status.Allocatable = resources(pairs...)
	return w
}

func (w *nodeWrapper) label(key, value string) *nodeWrapper {
	w.Labels[key] = value
	return w
}

func (w *nodeWrapper) noLabels() *nodeWrapper {
	w.Labels = nil
	return w
}

func (w *nodeWrapper) cordoned() *nodeWrapper {
	w.Spec.Unschedulable = true
	return w
}

func (w *nodeWrapper) ready(status corev1.ConditionStatus) *nodeWrapper {
	w.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test"}}
	return w
}

func (w *nodeWrapper) noConditions() *nodeWrapper {
	w.Status.Conditions = nil
	return w
}

func (w *nodeWrapper) virtual() *nodeWrapper {
	return w.label(v1alpha1.LabelNodeType, v1alpha1.NodeTypeVirtualKubelet)
}

func (w *nodeWrapper) obj() *corev1.Node { return w.DeepCopy() }

// podWrapper builds test pods: bound to a node (unless "" is given), Running,
// with no containers unless added.
type podWrapper struct{ corev1.Pod }

func makePod(name, nodeName string) *podWrapper {
	return &podWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func container(name string, requestPairs ...string) corev1.Container {
	return corev1.Container{
		Name:      name,
		Image:     "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: resources(requestPairs...)},
	}
}

// container adds a regular container with the given requests.
func (w *podWrapper) container(requestPairs ...string) *podWrapper {
	w.Spec.Containers = append(w.Spec.Containers, container("c"+strconv.Itoa(len(w.Spec.Containers)), requestPairs...))
	return w
}

// init adds a regular init container.
func (w *podWrapper) init(requestPairs ...string) *podWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, container("i"+strconv.Itoa(len(w.Spec.InitContainers)), requestPairs...))
	return w
}

// sidecar adds a restartable init container.
func (w *podWrapper) sidecar(requestPairs ...string) *podWrapper {
	c := container("s"+strconv.Itoa(len(w.Spec.InitContainers)), requestPairs...)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	w.Spec.InitContainers = append(w.Spec.InitContainers, c)
	return w
}

func (w *podWrapper) overhead(pairs ...string) *podWrapper {
	w.Spec.Overhead = resources(pairs...)
	return w
}

func (w *podWrapper) podLevel(requestPairs ...string) *podWrapper {
	w.Spec.Resources = &corev1.ResourceRequirements{Requests: resources(requestPairs...)}
	return w
}

func (w *podWrapper) phase(p corev1.PodPhase) *podWrapper {
	w.Status.Phase = p
	return w
}

func (w *podWrapper) source(name string) *podWrapper {
	w.Labels[v1alpha1.LabelParentCluster] = name
	return w
}

func (w *podWrapper) label(key, value string) *podWrapper {
	w.Labels[key] = value
	return w
}

func (w *podWrapper) obj() *corev1.Pod { return w.DeepCopy() }
