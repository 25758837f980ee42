// daemonpods: a DaemonSet's pod on a virtual node is acknowledged, never run.

package vnode

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// DaemonSets that tolerate every taint (kube-proxy, CNI agents, log
// shippers: `operator: Exists`) want a pod on every node, virtual nodes
// included. A virtual node stands for a whole cluster whose own nodes run
// their own daemons, so such a pod has nothing to run and nowhere to run
// it. What a cluster admin expects is a DaemonSet that is available and
// that never disturbs a workload, so a virtual node, as the kubelet of its
// pods:
//   - acknowledges a DaemonSet's pod bound to it: phase Running, Ready=True
//     (the DaemonSet counts it available and its rollouts complete), its
//     containers waiting with reason NotRunOnVirtualNode (kubectl shows
//     0/1 NotRunOnVirtualNode), and the condition
//     multicluster.fleetlet.io/NotRun=True saying why, written once;
//   - counts a DaemonSet's pod headed to it (the DaemonSet controller pins
//     each pod to its node by a metadata.name node affinity) in its
//     allocatable before it is bound, as it counts a pinned proxy, so that
//     the source scheduler always finds room for it and never preempts a
//     proxy to make some.
// To keep a DaemonSet off virtual nodes altogether, give it the node
// affinity `type NotIn [virtual-kubelet]`.

// isDaemonPod reports whether pod is a DaemonSet's.
func isDaemonPod(pod *corev1.Pod) bool { return proxy.OwnedByDaemonSet(pod) }

// daemonNode is the node a DaemonSet's unbound pod is pinned to by the
// DaemonSet controller's node affinity (one metadata.name In term), "" for
// another pod.
func daemonNode(pod *corev1.Pod) string {
	if !isDaemonPod(pod) || pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		return ""
	}
	req := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) != 1 {
		return ""
	}
	for _, f := range req.NodeSelectorTerms[0].MatchFields {
		if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
			return f.Values[0]
		}
	}
	return ""
}

// acknowledged reports whether a virtual node has acknowledged the pod
// and it is still Ready: the node lifecycle controller marks every pod of
// a node that turns NotReady or Unknown not ready (a target outage, a
// fleetlet outage), and, as a kubelet would, the virtual node marks it
// Ready again once it is Ready itself.
func acknowledged(pod *corev1.Pod) bool {
	notRun, ready := false, false
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case v1alpha1.ConditionNotRun:
			notRun = c.Status == corev1.ConditionTrue
		case corev1.PodReady:
			ready = c.Status == corev1.ConditionTrue
		}
	}
	return notRun && ready
}

// nodeNotReadyRecheck is how often a DaemonSet's pod on a virtual node
// that is not Ready is looked at again, to be marked Ready once the node
// is.
const nodeNotReadyRecheck = 10 * time.Second

// needsAck reports whether obj, a pod bound to a virtual node, is a
// DaemonSet's not acknowledged yet.
func needsAck(obj any) (*corev1.Pod, bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil || !isDaemonPod(pod) || acknowledged(pod) {
		return nil, false
	}
	return pod, true
}

// ackStatus is the status a virtual node gives a DaemonSet's pod bound to
// it (see above), as a strategic merge patch of pods/status: conditions
// merge by type, so those of others stay.
func ackStatus(pod *corev1.Pod, node string, now time.Time) ([]byte, error) {
	t := metav1.NewTime(now)
	why := fmt.Sprintf("virtual node %s stands for a whole cluster, whose own nodes run their own daemons: a DaemonSet's pod is not run there, and is reported Ready so that its DaemonSet is available (give the DaemonSet the node affinity type NotIn [virtual-kubelet] to keep it off virtual nodes)", node)
	cond := func(typ corev1.PodConditionType, status corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: status, Reason: v1alpha1.ReasonNotRunOnVirtualNode, Message: why, LastTransitionTime: t}
	}
	waiting := func(cs []corev1.Container) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(cs))
		for _, c := range cs {
			out = append(out, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: v1alpha1.ReasonNotRunOnVirtualNode, Message: "not run: " + why}}})
		}
		return out
	}
	status := map[string]any{
		"phase":     corev1.PodRunning,
		"startTime": t,
		"conditions": []corev1.PodCondition{
			cond(v1alpha1.ConditionNotRun, corev1.ConditionTrue),
			cond(corev1.PodInitialized, corev1.ConditionTrue),
			cond(corev1.ContainersReady, corev1.ConditionFalse),
			cond(corev1.PodReady, corev1.ConditionTrue),
		},
		"containerStatuses": waiting(pod.Spec.Containers),
	}
	if len(pod.Spec.InitContainers) > 0 {
		status["initContainerStatuses"] = waiting(pod.Spec.InitContainers)
	}
	return json.Marshal(map[string]any{"status": status})
}

// daemonAcks writes the acknowledgement of DaemonSet pods bound to virtual
// nodes, one pod at a time, retried with backoff on failure.
type daemonAcks struct {
	c     *Controller
	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

func newDaemonAcks(c *Controller) *daemonAcks {
	return &daemonAcks{c: c, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "vnode-daemon-pods"})}
}

func (a *daemonAcks) add(pod *corev1.Pod) {
	a.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
}

// run works the queue until ctx ends.
func (a *daemonAcks) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for {
		key, quit := a.queue.Get()
		if quit {
			return
		}
		switch again, err := a.ack(ctx, key); {
		case err != nil:
			a.c.log.V(1).Info("Acknowledging a DaemonSet's pod on a virtual node; retrying", "pod", key.String(), "err", err.Error())
			a.queue.AddRateLimited(key)
		case again:
			a.queue.Forget(key)
			a.queue.AddAfter(key, nodeNotReadyRecheck)
		default:
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// ack reads the pod (the informers hold it stripped) and writes its
// acknowledgement, if it is still a DaemonSet's pod on a virtual node that
// this controller runs and is not acknowledged and Ready. again says to
// look once more later: the node is not Ready yet.
func (a *daemonAcks) ack(ctx context.Context, key types.NamespacedName) (again bool, err error) {
	pods := a.c.cfg.Client.CoreV1().Pods(key.Namespace)
	pod, err := pods.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, ok := needsAck(pod); !ok || !a.c.runsNode(pod.Spec.NodeName) {
		return false, nil
	}
	node, err := a.c.cfg.Client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, client404(err)
	}
	if !nodeReady(node) {
		return true, nil
	}
	patch, err := ackStatus(pod, pod.Spec.NodeName, a.c.cfg.Clock.Now())
	if err != nil {
		return false, err
	}
	a.c.log.Info("Acknowledging a DaemonSet's pod without running it", "pod", key.String(), "node", pod.Spec.NodeName)
	_, err = pods.Patch(ctx, key.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return false, client404(err)
}

// client404 is err, nil for NotFound.
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
