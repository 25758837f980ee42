package vnode

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// handoffTTL bounds how long a pod that left the unbound pods (it was bound,
// most likely) is still counted on its node while the node's bound pods have
// not shown it yet: the two watches deliver in no particular order, and a
// pinned proxy must never, even for a moment, stop fitting its node.
const handoffTTL = 30 * time.Second

// nonTerminal selects the pods that have not finished.
var nonTerminal = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// proxyTracker keeps what the proxies of each virtual node request: the
// source's unbound, non-terminal pods (one informer; those pinned or
// elected to a node count on it) and, per virtual node, its bound
// non-terminal pods (one informer each, scoped by spec.nodeName, as a
// kubelet's). Pods are stripped to what resource requests need before they
// are cached, and each node's sums are kept by the informers' events, so
// that reading a node's requests does not walk its pods: a burst changes
// the node once per pod event, and each change reads them.
type proxyTracker struct {
	client   kubernetes.Interface
	clock    clock.PassiveClock
	onChange func(nodeName string)
	// onDaemonPod is called with a DaemonSet's pod bound to a node that
	// has not acknowledged it yet (daemonpods.go).
	onDaemonPod func(*corev1.Pod)
	pinned      cache.SharedIndexInformer
	// pinnedSynced tells whether the pinned pods' handler has seen every
	// pod of the first list (the sums count them all).
	pinnedSynced cache.InformerSynced

	mu      sync.Mutex
	pins    *podsums.Sums[string] // the unbound pods, by the node they count on
	handoff map[types.UID]handoffPod
	bound   map[string]*boundPods // node name → its bound pods
}

// boundPods are the non-terminal pods bound to one virtual node.
type boundPods struct {
	informer cache.SharedIndexInformer
	// synced tells whether the handler has seen every pod of the first
	// list.
	synced cache.InformerSynced
	sums   *podsums.Sums[string]
}

type handoffPod struct {
	pod  *corev1.Pod
	node string
	at   time.Time
}

func newProxyTracker(client kubernetes.Interface, clk clock.PassiveClock, onChange func(nodeName string), onDaemonPod func(*corev1.Pod)) (*proxyTracker, error) {
	t := &proxyTracker{client: client, clock: clk, onChange: onChange, onDaemonPod: onDaemonPod,
		pins: podsums.New[string](), handoff: map[types.UID]handoffPod{}, bound: map[string]*boundPods{}}
	unbound := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", ""), nonTerminal)
	t.pinned = cache.NewSharedIndexInformerWithOptions(podListWatch(client, unbound), &corev1.Pod{},
		cache.SharedIndexInformerOptions{ObjectDescription: "unbound pods"})
	if err := t.pinned.SetTransform(stripPod); err != nil {
		return nil, err
	}
	reg, err := t.pinned.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.pinnedChanged(nil, obj) },
		UpdateFunc: t.pinnedChanged,
		DeleteFunc: t.unpinned,
	})
	if err != nil {
		return nil, err
	}
	t.pinnedSynced = reg.HasSynced
	return t, nil
}

// pinnedChanged handles an unbound pod added (oldObj nil) or changed: it
// counts on the node it is pinned or elected to, if any.
func (t *proxyTracker) pinnedChanged(oldObj, newObj any) {
	pod, ok := newObj.(*corev1.Pod)
	if !ok {
		return
	}
	node := pinnedNode(pod)
	t.mu.Lock()
	var before string
	if node == "" {
		before, _ = t.pins.Remove(pod.UID)
	} else {
		before, _ = t.pins.Set(pod.UID, node, podRequests(pod, false))
	}
	t.mu.Unlock()
	if oldObj != nil && samePod(oldObj, newObj) && before == node {
		return
	}
	t.notify(before)
	if node != before {
		t.notify(node)
	}
}

// newBound returns the non-terminal pods bound to the node (their informer
// not started), whose requests count from then on.
func (t *proxyTracker) newBound(nodeName string) (*boundPods, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", nodeName), nonTerminal)
	inf := cache.NewSharedIndexInformerWithOptions(podListWatch(t.client, sel), &corev1.Pod{},
		cache.SharedIndexInformerOptions{ObjectDescription: "pods bound to " + nodeName})
	if err := inf.SetTransform(stripPod); err != nil {
		return nil, err
	}
	b := &boundPods{informer: inf, sums: podsums.New[string]()}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			t.boundSet(nodeName, b, obj)
			t.daemonPod(obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			if !samePod(oldObj, newObj) {
				t.boundSet(nodeName, b, newObj)
			}
			t.daemonPod(newObj)
		},
		DeleteFunc: func(obj any) { t.boundGone(nodeName, b, obj) },
	})
	if err != nil {
		return nil, err
	}
	b.synced = reg.HasSynced
	t.mu.Lock()
	t.bound[nodeName] = b
	t.mu.Unlock()
	return b, nil
}

// unpinned handles a pod leaving the unbound pods. The event carries the
// pod as it was before: bound now, unless it was being deleted (or it
// finished while unbound). Unless the node's bound pods already count it,
// it is handed off: counted until they do, or until they drop it. (A pod
// bound and finished before this event arrives, or one that finished while
// unbound, counts until handoffTTL: too much for a while, never too
// little.)
func (t *proxyTracker) unpinned(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	before, _ := t.pins.Remove(pod.UID)
	node := pinnedNode(pod)
	if node != "" && pod.DeletionTimestamp == nil {
		if b := t.bound[node]; b == nil || !b.sums.Has(pod.UID, node) {
			t.handoff[pod.UID] = handoffPod{pod: pod, node: node, at: t.clock.Now()}
		}
	}
	t.mu.Unlock()
	t.notify(node)
	if before != node {
		t.notify(before)
	}
}

// boundSet counts a pod added to or changed in a node's bound pods: its
// handoff, if any, is over.
func (t *proxyTracker) boundSet(node string, b *boundPods, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	b.sums.Set(pod.UID, node, podRequests(pod, true))
	delete(t.handoff, pod.UID)
	t.mu.Unlock()
	t.notify(node)
}

// boundGone stops counting a pod deleted from a node's bound pods (it
// finished, or it is gone): its handoff, if any, is over.
func (t *proxyTracker) boundGone(node string, b *boundPods, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		t.mu.Lock()
		b.sums.Remove(pod.UID)
		delete(t.handoff, pod.UID)
		t.mu.Unlock()
	}
	t.notify(node)
}

// daemonPod hands a DaemonSet's pod bound to the node that has not been
// acknowledged yet to onDaemonPod.
func (t *proxyTracker) daemonPod(obj any) {
	if pod, ok := needsAck(obj); ok && t.onDaemonPod != nil {
		t.onDaemonPod(pod)
	}
}

func (t *proxyTracker) notify(node string) {
	if node != "" {
		t.onChange(node)
	}
}

// requests returns what the proxies bound or pinned to the node request
// together, pods counted: the sums kept by the events, and the pods handed
// off to the node that its bound pods do not count yet.
func (t *proxyTracker) requests(node string) corev1.ResourceList {
	var handedOff []*corev1.Pod
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bound[node]
	for uid, h := range t.handoff {
		switch {
		case now.Sub(h.at) > handoffTTL:
			delete(t.handoff, uid)
		case h.node == node && (b == nil || !b.sums.Has(uid, node)):
			handedOff = append(handedOff, h.pod)
		}
	}
	pinned := AddResources(t.pins.Of(node).Requests, ProxyRequests(handedOff, false))
	if b == nil {
		return pinned
	}
	return AddResources(pinned, b.sums.Of(node).Requests)
}

// forget drops what is held for a node that is gone, whose bound pods
// were b (a node of the same name may be back already).
func (t *proxyTracker) forget(node string, b *boundPods) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bound[node] != b {
		return
	}
	delete(t.bound, node)
	for uid, h := range t.handoff {
		if h.node == node {
			delete(t.handoff, uid)
		}
	}
}

func podListWatch(client kubernetes.Interface, sel fields.Selector) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel.String()
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel.String()
			return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
		},
	}
}

// pinnedNode returns the virtual node an unbound pod counts on: for a pod
// that carries fleetlet's delegate finalizer (a proxy pod), proxy.HeadedTo; for
// a DaemonSet's pod, the node the DaemonSet controller pinned it to
// (daemonpods.go), so that it always finds room there.
func pinnedNode(obj any) string {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != "" {
		return ""
	}
	if proxy.IsManaged(pod) {
		return proxy.HeadedTo(pod)
	}
	return daemonNode(pod)
}

// samePod tells whether two versions of a stripped pod request the same on
// the same node.
func samePod(oldObj, newObj any) bool {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return false
	}
	oc, nc := *o, *n // the structs only: nothing below is written but their versions
	oc.ResourceVersion, nc.ResourceVersion = "", ""
	return apiequality.Semantic.DeepEqual(&oc, &nc)
}

// stripPod keeps of a pod what its resource requests, its node (pinned,
// elected or bound) and its finalizers need: annotations (a proxy's
// source-spec can be large), managed fields, volumes, environment and most
// of the status go.
func stripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
			Finalizers:        pod.Finalizers,
		},
		Spec: corev1.PodSpec{
			NodeName:  pod.Spec.NodeName,
			Overhead:  pod.Spec.Overhead,
			Resources: pod.Spec.Resources,
		},
		Status: corev1.PodStatus{
			Phase:              pod.Status.Phase,
			Resources:          pod.Status.Resources,
			AllocatedResources: pod.Status.AllocatedResources,
		},
	}
	if h, ok := pod.Spec.NodeSelector[v1alpha1.LabelHostname]; ok {
		out.Spec.NodeSelector = map[string]string{v1alpha1.LabelHostname: h}
	}
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range pod.Spec.InitContainers {
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy})
	}
	if isDaemonPod(pod) {
		// What daemonpods.go reads: the controller, the node it is
		// pinned to, and whether it was acknowledged.
		out.OwnerReferences = []metav1.OwnerReference{*metav1.GetControllerOf(pod)}
		out.Spec.Affinity = pod.Spec.Affinity
	}
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case v1alpha1.ConditionNotRun:
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
		case corev1.PodReady:
			if isDaemonPod(pod) {
				out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
			}
		case corev1.PodResizePending, corev1.PodResizeInProgress:
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		case v1alpha1.ConditionElected:
			// The election record: the node an elected proxy counts on.
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Message: c.Message})
		}
	}
	out.Status.ContainerStatuses = stripStatuses(pod.Status.ContainerStatuses)
	out.Status.InitContainerStatuses = stripStatuses(pod.Status.InitContainerStatuses)
	return out, nil
}

func stripStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, s := range in {
		if s.Resources == nil && s.AllocatedResources == nil {
			continue
		}
		out = append(out, corev1.ContainerStatus{Name: s.Name, Resources: s.Resources, AllocatedResources: s.AllocatedResources})
	}
	return out
}

// podRequests is what one pod adds to its node (ProxyRequests of it alone:
// its requests, and 1 under "pods").
func podRequests(pod *corev1.Pod, bound bool) corev1.ResourceList {
	return ProxyRequests([]*corev1.Pod{pod}, bound)
}
