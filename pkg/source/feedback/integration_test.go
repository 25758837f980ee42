package feedback_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/feedback"
	"github.com/fleetlet/fleetlet/pkg/target/chaperon"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// Foreign marks: another controller's finalizers and a readiness gate's
// condition, which fleetlet must keep as they are.
const (
	finalizerFirst = "example.com/first"
	finalizerKeep  = "example.com/keep"
	conditionGate  = corev1.PodConditionType("example.com/gate")
)

// The virtual node's address (the proxies' hostIP) and the delegate's own
// addresses in the target.
const (
	virtualNodeIP = "10.0.0.7"
	delegateIP    = "10.244.1.7"
	targetNodeIP  = "192.168.5.5"
)

// proxy creates a proxy pod in the source, as the webhook leaves it once
// elected and ungated: our finalizer among others', no gates, two
// containers, no termination grace period (a bound pod with one would wait
// for a kubelet to confirm its deletion).
func (h *harness) proxy(t *testing.T, ns, name string, restart corev1.RestartPolicy, finalizers ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
		Spec: corev1.PodSpec{
			RestartPolicy:                 restart,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "app", Image: "busybox"}, {Name: "helper", Image: "busybox"}},
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: conditionGate}},
		},
	}
	require.NoError(t, h.source.Create(context.Background(), p))
	return p
}

// remote creates in the target what fleetlet and the chaperon controller
// would for an elected proxy: its chaperon and, unless noPod, the delegate
// pod the chaperon controls.
func (h *harness) remote(t *testing.T, p *corev1.Pod, noPod bool) (*v1alpha1.PodChaperon, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: sourceName}
	annotations := map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace}
	spec := p.Spec.DeepCopy()
	spec.ReadinessGates = nil
	spec.Hostname = p.Name
	spec.TerminationGracePeriodSeconds = nil // the user's, not the proxy's 0
	pc := &v1alpha1.PodChaperon{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID), Labels: labels, Annotations: annotations},
		Spec:       v1alpha1.PodChaperonSpec{Template: v1alpha1.PodChaperonTemplate{Spec: *spec}},
	}
	require.NoError(t, h.target.Create(ctx, pc))
	if noPod {
		return pc, nil
	}
	d := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pc.Namespace, Name: pc.Name, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "PodChaperon", Name: pc.Name, UID: pc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: *spec,
	}
	require.NoError(t, h.target.Create(ctx, d))
	return pc, d
}

// elect writes the election record on the proxy (as the elector does, with
// a foreign condition written before it) and binds the proxy to the
// target's virtual node through the binding subresource (as the source's
// scheduler does).
func (h *harness) elect(t *testing.T, p *corev1.Pod, key proxypod.TargetKey, pc *v1alpha1.PodChaperon) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, h.source.Get(ctx, client.ObjectKeyFromObject(p), p))
	now := metav1.Now()
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: conditionGate, Status: corev1.ConditionTrue, Reason: "Checked", LastTransitionTime: now},
		corev1.PodCondition{
			Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Reason: "Elected", LastTransitionTime: now,
			Message: fmt.Sprintf("target=%s chaperon=%s", key, pc.Name),
		})
	require.NoError(t, h.source.Status().Update(ctx, p))
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName(key)},
	}
	require.NoErrorf(t, h.source.SubResource("binding").Create(ctx, p, binding), "binding %s", p.Name)
	require.NoError(t, h.source.Get(ctx, client.ObjectKeyFromObject(p), p))
}

func nodeName(key proxypod.TargetKey) string {
	return proxypod.NodeName(key)
}

// virtualNode creates the target's virtual node with its InternalIP, as the
// virtual node controller would.
func (h *harness) virtualNode(t *testing.T, key proxypod.TargetKey) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(key), Labels: map[string]string{"type": "virtual-kubelet"}}}
	require.NoError(t, h.source.Create(ctx, n))
	t.Cleanup(func() {
		assert.NoError(t, client.IgnoreNotFound(h.source.Delete(context.Background(), n)))
	})
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}, {Type: corev1.NodeInternalIP, Address: virtualNodeIP}}
	require.NoError(t, h.source.Status().Update(ctx, n))
}

// running is a delegate's status once both containers run and are ready.
func running(started metav1.Time) corev1.PodStatus {
	cs := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: name, Ready: true, Started: ptr.To(true), Image: "docker.io/library/busybox:latest",
			ImageID: "docker.io/library/busybox@sha256:0123", ContainerID: "containerd://" + name + "-1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	return corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: targetNodeIP, HostIPs: []corev1.HostIP{{IP: targetNodeIP}},
		PodIP: delegateIP, PodIPs: []corev1.PodIP{{IP: delegateIP}},
		StartTime: &started,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized), cond(corev1.PodReady),
			cond(corev1.ContainersReady), cond(corev1.PodScheduled),
		},
		ContainerStatuses: []corev1.ContainerStatus{cs("app"), cs("helper")},
		QOSClass:          corev1.PodQOSBestEffort,
	}
}

// succeeded is the delegate's status once both containers exited 0.
func succeeded(from corev1.PodStatus, finished metav1.Time) corev1.PodStatus {
	st := *from.DeepCopy()
	st.Phase = corev1.PodSucceeded
	for i := range st.ContainerStatuses {
		c := &st.ContainerStatuses[i]
		c.Ready, c.Started = false, ptr.To(false)
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: c.State.Running.StartedAt, FinishedAt: finished, ContainerID: c.ContainerID,
		}}
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady || c.Type == corev1.PodReadyToStartContainers {
			c.Status, c.Reason, c.LastTransitionTime = corev1.ConditionFalse, "PodCompleted", finished
		}
	}
	return st
}

// delegateStatus writes the delegate's status as its kubelet would, and
// the chaperon's mirror of it as the chaperon controller would.
func (h *harness) delegateStatus(t *testing.T, pc *v1alpha1.PodChaperon, d *corev1.Pod, st corev1.PodStatus) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, h.target.Get(ctx, client.ObjectKeyFromObject(d), d))
	d.Status = st
	require.NoError(t, h.target.Status().Update(ctx, d), "writing the delegate's status")
	h.chaperonStatus(t, pc, func(pc *v1alpha1.PodChaperon) {
		pc.Status.PodStatus = *d.Status.DeepCopy()
		meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPodCreated, Status: metav1.ConditionTrue, Reason: "PodCreated"})
	})
}

// chaperonStatus changes the chaperon's status as the chaperon controller
// would.
func (h *harness) chaperonStatus(t *testing.T, pc *v1alpha1.PodChaperon, change func(*v1alpha1.PodChaperon)) {
	t.Helper()
	ctx := context.Background()
	// The source may be changing the chaperon meanwhile (deleting it
	// Foreground once its proxy goes): write on the latest version, as the
	// chaperon controller does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := h.target.Get(ctx, client.ObjectKeyFromObject(pc), pc); err != nil {
			return err
		}
		change(pc)
		return h.target.Status().Update(ctx, pc)
	})
	require.NoError(t, err, "writing the chaperon's status")
}

// deleteDelegate deletes the delegate in the target, with the record the
// chaperon controller writes when its pod was deleted.
func (h *harness) deleteDelegate(t *testing.T, pc *v1alpha1.PodChaperon, d *corev1.Pod) {
	t.Helper()
	require.NoError(t, h.target.Delete(context.Background(), d, client.GracePeriodSeconds(0)))
	h.chaperonStatus(t, pc, func(pc *v1alpha1.PodChaperon) {
		meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionPodCreated, Status: metav1.ConditionFalse, Reason: chaperon.ReasonPodDeleted,
			Message: "the pod was deleted",
		})
	})
}

// get reads an object from the API server; false when it is gone.
func get(t *testing.T, c client.Client, o client.Object) bool {
	t.Helper()
	err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o)
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// waitCached waits for the manager's cache to hold the proxy as cond says:
// the reconcilers called directly below must read what the test wrote.
func (h *harness) waitCached(t *testing.T, p *corev1.Pod, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	testenv.EventuallyTrue(t, waitTimeout, "the manager's cache to see "+what, func(ctx context.Context) bool {
		var cur corev1.Pod
		return h.cached.Get(ctx, client.ObjectKeyFromObject(p), &cur) == nil && cond(&cur)
	})
}

// waitForegroundDeleted waits for the elector to have deleted the chaperon
// in the target with Foreground propagation: with no garbage collector
// there, it stays, marked deleted, with the foregroundDeletion finalizer.
func (h *harness) waitForegroundDeleted(t *testing.T, pc *v1alpha1.PodChaperon) {
	t.Helper()
	var cur v1alpha1.PodChaperon
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon to be deleted with Foreground propagation", func(ctx context.Context) bool {
		if err := h.target.Get(ctx, client.ObjectKeyFromObject(pc), &cur); err != nil {
			return false
		}
		return cur.DeletionTimestamp != nil
	}, func() string { return fmt.Sprintf("chaperon: %+v", cur.ObjectMeta) })
	require.Truef(t, slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents), "chaperon finalizers %v: want %s, the mark of a Foreground deletion", cur.Finalizers, metav1.FinalizerDeleteDependents)
}

// finishForeground plays the target's garbage collector: the chaperon's
// dependents are gone, so its foregroundDeletion finalizer goes and so does
// the chaperon.
func (h *harness) finishForeground(t *testing.T, pc *v1alpha1.PodChaperon) {
	t.Helper()
	ctx := context.Background()
	var cur v1alpha1.PodChaperon
	if !get(t, h.target, pc.DeepCopy()) {
		return
	}
	require.NoError(t, h.target.Get(ctx, client.ObjectKeyFromObject(pc), &cur))
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == metav1.FinalizerDeleteDependents })
	require.NoError(t, h.target.Patch(ctx, &cur, patch))
	testenv.EventuallyTrue(t, waitTimeout, "the chaperon to be gone", func(context.Context) bool { return !get(t, h.target, pc.DeepCopy()) })
}

// finalizeNow runs one pass of the proxy reconciler on p and checks that it
// keeps the proxy, asking to look again later.
func (h *harness) finalizeNow(t *testing.T, p *corev1.Pod) {
	t.Helper()
	res, err := h.proxies.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
	require.NoError(t, err, "finalize")
	assert.Falsef(t, res.RequeueAfter <= 0, "finalize returned %+v: a proxy whose chaperon is not confirmed gone must be looked at again", res)
}

// TestFinalize covers step 7 from the source: deleting a proxy deletes its
// chaperon Foreground, and fleetlet's finalizer — only it — goes once the
// chaperon is gone.
func TestFinalize(t *testing.T) {
	h := start(t)
	ctx := context.Background()

	t.Run("the chaperon is deleted Foreground and only our finalizer goes once it is gone", func(t *testing.T) {
		ns := h.namespace(t, "finalize-")
		h.connect(t, ns, "t", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
		p := h.proxy(t, ns, "web-0", corev1.RestartPolicyAlways, finalizerFirst, v1alpha1.FinalizerDelegate, finalizerKeep)
		pc, _ := h.remote(t, p, true)
		// Another source's chaperon of the same name in the target is
		// not ours to delete: it lives in another namespace here.
		other := h.namespace(t, "finalize-other-")
		foreign := pc.DeepCopy()
		foreign.ObjectMeta = metav1.ObjectMeta{Namespace: other, Name: pc.Name, Labels: pc.Labels, Annotations: pc.Annotations}
		require.NoError(t, h.target.Create(ctx, foreign))

		require.NoError(t, h.source.Delete(ctx, p))
		h.waitForegroundDeleted(t, pc)

		// While the chaperon exists, the proxy stays Terminating with
		// every finalizer.
		h.waitCached(t, p, "the proxy deleted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		h.finalizeNow(t, p)
		require.True(t, get(t, h.source, p), "the proxy is gone while its chaperon still exists")
		assert.Equal(t, []string{finalizerFirst, v1alpha1.FinalizerDelegate, finalizerKeep}, p.Finalizers, "finalizers while the chaperon exists")

		h.finishForeground(t, pc)
		var cur corev1.Pod
		testenv.EventuallyTrue(t, waitTimeout, "our finalizer to go", func(ctx context.Context) bool {
			return h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur) == nil && !slices.Contains(cur.Finalizers, v1alpha1.FinalizerDelegate)
		}, func() string { return fmt.Sprintf("finalizers %v", cur.Finalizers) })
		assert.Equal(t, []string{finalizerFirst, finalizerKeep}, cur.Finalizers, "finalizers after (only ours removed, order kept)")
		assert.False(t, cur.DeletionTimestamp == nil, "the proxy lost its deletion timestamp")
		var untouched v1alpha1.PodChaperon
		err := h.target.Get(ctx, client.ObjectKeyFromObject(foreign), &untouched)
		assert.Falsef(t, err != nil || untouched.DeletionTimestamp != nil, "the chaperon in another namespace was touched: %v, %+v", err, untouched.ObjectMeta)
	})

	t.Run("an unreachable target keeps the proxy Terminating until it answers", func(t *testing.T) {
		ns := h.namespace(t, "finalize-down-")
		key := h.connect(t, ns, "down", unreachable, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
		_, ok := h.registry.Get(key)
		require.True(t, ok, "the registry holds no cluster for the unreachable target")
		p := h.proxy(t, ns, "db-0", corev1.RestartPolicyAlways, v1alpha1.FinalizerDelegate, finalizerKeep)
		// The chaperon exists in the cluster the Target stands for; the
		// Target just cannot reach it.
		pc, _ := h.remote(t, p, true)

		require.NoError(t, h.source.Delete(ctx, p))
		h.waitCached(t, p, "the proxy deleted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		h.finalizeNow(t, p)
		require.True(t, get(t, h.source, p), "the proxy is gone although its target cannot confirm its delegate gone")
		assert.Equal(t, []string{v1alpha1.FinalizerDelegate, finalizerKeep}, p.Finalizers, "finalizers with the target unreachable")
		require.Falsef(t, !get(t, h.target, pc) || pc.DeletionTimestamp != nil, "the chaperon changed although nothing could reach it: %+v", pc.ObjectMeta)

		// The target answers again: the chaperon goes Foreground, then
		// our finalizer.
		h.putSecret(t, ns, "down-kubeconfig", testenv.Kubeconfig(t, targetEnv.Config, ns, ""))
		h.waitTarget(t, ns, "down", metav1.ConditionTrue, v1alpha1.ReasonConnected)
		h.waitForegroundDeleted(t, pc)
		require.Falsef(t, !get(t, h.source, p) || !slices.Contains(p.Finalizers, v1alpha1.FinalizerDelegate), "the proxy lost our finalizer before its chaperon was gone: %v", p.Finalizers)
		h.finishForeground(t, pc)
		var cur corev1.Pod
		testenv.EventuallyTrue(t, waitTimeout, "our finalizer to go", func(ctx context.Context) bool {
			return h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur) == nil && !slices.Contains(cur.Finalizers, v1alpha1.FinalizerDelegate)
		})
		assert.Equal(t, []string{finalizerKeep}, cur.Finalizers, "finalizers after")
	})
}

// nonKubelet is the conditions of a pod that no kubelet owns, in order.
func nonKubelet(conds []corev1.PodCondition) []corev1.PodCondition {
	return slices.DeleteFunc(slices.Clone(conds), func(c corev1.PodCondition) bool {
		switch c.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
			return true
		}
		return false
	})
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// waitProxy waits for the proxy's status to satisfy cond.
func (h *harness) waitProxy(t *testing.T, p *corev1.Pod, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	var cur corev1.Pod
	testenv.EventuallyTrue(t, waitTimeout, "the proxy "+what, func(ctx context.Context) bool {
		return h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur) == nil && cond(&cur)
	}, func() string { return fmt.Sprintf("proxy status: %+v", cur.Status) })
	*p = cur
}

// runningProxy makes a bound proxy whose delegate runs, and waits for the
// proxy to say so.
func (h *harness) runningProxy(t *testing.T, ns, name string, key proxypod.TargetKey, restart corev1.RestartPolicy) (*corev1.Pod, *v1alpha1.PodChaperon, *corev1.Pod) {
	t.Helper()
	p := h.proxy(t, ns, name, restart, v1alpha1.FinalizerDelegate)
	pc, d := h.remote(t, p, false)
	h.elect(t, p, key, pc)
	h.delegateStatus(t, pc, d, running(metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))))
	h.waitProxy(t, p, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	return p, pc, d
}

// TestFeedback covers step 6 and the target's side of step 7: a bound,
// elected proxy tells its delegate's status, keeps its final status, and
// goes when its delegate is deleted before finishing.
func TestFeedback(t *testing.T) {
	h := start(t)
	ctx := context.Background()
	ns := h.namespace(t, "feedback-")
	key := h.connect(t, ns, "t", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	h.virtualNode(t, key)

	t.Run("the delegate's status reaches the proxy; a finished proxy outlives its delegate", func(t *testing.T) {
		p := h.proxy(t, ns, "job-1", corev1.RestartPolicyNever, v1alpha1.FinalizerDelegate)
		pc, d := h.remote(t, p, false)
		h.elect(t, p, key, pc)
		bound := p.DeepCopy() // the conditions the source wrote: gate, Elected, PodScheduled
		require.Falsef(t, condition(bound, corev1.PodScheduled) == nil, "binding wrote no PodScheduled condition: %+v", bound.Status.Conditions)

		started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
		h.delegateStatus(t, pc, d, running(started))
		h.waitProxy(t, p, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

		assert.Falsef(t, p.Status.PodIP != delegateIP || !slices.Equal(p.Status.PodIPs, []corev1.PodIP{{IP: delegateIP}}), "podIP %q podIPs %v, want the delegate's %s", p.Status.PodIP, p.Status.PodIPs, delegateIP)
		assert.Falsef(t, p.Status.HostIP != virtualNodeIP || !slices.Equal(p.Status.HostIPs, []corev1.HostIP{{IP: virtualNodeIP}}), "hostIP %q hostIPs %v, want the virtual node's InternalIP %s", p.Status.HostIP, p.Status.HostIPs, virtualNodeIP)
		assert.Falsef(t, p.Status.StartTime == nil || !p.Status.StartTime.Equal(&started), "startTime %v, want %v", p.Status.StartTime, started)
		var names []string
		for _, c := range p.Status.ContainerStatuses {
			names = append(names, c.Name)
			assert.Falsef(t, !c.Ready || c.State.Running == nil || c.ContainerID != "containerd://"+c.Name+"-1", "container status %+v, want the delegate's: ready, running", c)
		}
		assert.Truef(t, slices.Equal(names, []string{"app", "helper"}), "container statuses for %v, want app, helper", names)
		if c := condition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
			assert.Failf(t, "the proxy is not Ready", "Ready condition %+v, want True from the delegate", c)
		}
		// Conditions are merged: the source's own (the readiness gate's,
		// Elected, PodScheduled) stay as they were, in their order.
		assert.Empty(t, cmp.Diff(nonKubelet(bound.Status.Conditions), nonKubelet(p.Status.Conditions)), "conditions not owned by a kubelet changed (-before,+after)")

		// The delegate finishes.
		h.delegateStatus(t, pc, d, succeeded(d.Status, metav1.NewTime(time.Now().Truncate(time.Second))))
		h.waitProxy(t, p, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		for _, c := range p.Status.ContainerStatuses {
			assert.Falsef(t, c.State.Terminated == nil || c.State.Terminated.ExitCode != 0, "container status %+v, want terminated with exit code 0", c)
		}
		final := p.Status.DeepCopy()

		// Its delegate is deleted afterwards (a TTL, a cleanup): the
		// proxy keeps its final status and is not deleted.
		h.deleteDelegate(t, pc, d)
		cl, ok := h.registry.Get(key)
		require.True(t, ok, "no cluster for the target")
		testenv.EventuallyTrue(t, waitTimeout, "the registry's cache to see the delegate gone", func(ctx context.Context) bool {
			var pod corev1.Pod
			var cur v1alpha1.PodChaperon
			err := cl.Chaperons(ns).Get(ctx, client.ObjectKeyFromObject(d), &pod)
			return apierrors.IsNotFound(err) && cl.Chaperons(ns).Get(ctx, client.ObjectKeyFromObject(pc), &cur) == nil &&
				meta.IsStatusConditionFalse(cur.Status.Conditions, v1alpha1.ConditionPodCreated)
		})
		h.waitCached(t, p, "the proxy Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		_, err := h.feedback.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		require.NoError(t, err, "feedback")
		require.Falsef(t, !get(t, h.source, p) || p.DeletionTimestamp != nil, "the finished proxy was deleted with its delegate: %+v", p.ObjectMeta)
		assert.Empty(t, cmp.Diff(final, &p.Status), "the finished proxy's status changed (-final,+now)")
	})

	// Deleting a running delegate or its chaperon in the target deletes the
	// proxy (its controller makes a new one), with an Event; then the
	// proxy's own deletion runs: chaperon Foreground, then the finalizer.
	for i, tc := range []struct {
		name   string
		delete func(t *testing.T, pc *v1alpha1.PodChaperon, d *corev1.Pod)
		// chaperonLeft: the chaperon still exists when the proxy is
		// deleted, so the proxy's finalizer waits for it.
		chaperonLeft bool
	}{
		{
			name:         "the delegate is deleted",
			delete:       h.deleteDelegate,
			chaperonLeft: true,
		},
		{
			name: "the delegate is being deleted",
			delete: func(t *testing.T, _ *v1alpha1.PodChaperon, d *corev1.Pod) {
				// Terminating: held by another controller's finalizer (a
				// bound pod waiting for its kubelet is the usual case, but
				// the API server decides "bound" on its watch cache, which
				// may not have the binding yet: the pod would go at once).
				patch := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers","value":["example.com/hold"]}]`))
				require.NoError(t, h.target.Patch(ctx, d, patch))
				t.Cleanup(func() {
					release := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))
					assert.NoError(t, client.IgnoreNotFound(h.target.Patch(context.Background(), d, release)), "releasing the delegate")
				})
				require.NoError(t, h.target.Delete(ctx, d))
				require.Falsef(t, !get(t, h.target, d) || d.DeletionTimestamp == nil, "the delegate is not Terminating: %+v", d.ObjectMeta)
			},
			chaperonLeft: true,
		},
		{
			name: "the chaperon is deleted",
			delete: func(t *testing.T, pc *v1alpha1.PodChaperon, _ *corev1.Pod) {
				require.NoError(t, h.target.Delete(ctx, pc))
			},
		},
	} {
		t.Run(tc.name+": the proxy is deleted", func(t *testing.T) {
			p, pc, d := h.runningProxy(t, ns, fmt.Sprintf("web-%d", i), key, corev1.RestartPolicyAlways)
			tc.delete(t, pc, d)
			// Deleted: marked so, or already gone when nothing was left
			// to wait for.
			testenv.EventuallyTrue(t, waitTimeout, "the proxy to be deleted", func(ctx context.Context) bool {
				var cur corev1.Pod
				err := h.source.Get(ctx, client.ObjectKeyFromObject(p), &cur)
				return apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil)
			})
			h.waitEvent(t, p, feedback.EventDelegateDeleted)

			if tc.chaperonLeft {
				h.waitForegroundDeleted(t, pc)
				require.Falsef(t, !get(t, h.source, p) || !slices.Contains(p.Finalizers, v1alpha1.FinalizerDelegate), "the proxy went before its chaperon: %+v", p.ObjectMeta)
				assert.Falsef(t, p.Status.Phase != corev1.PodRunning || p.Status.PodIP != delegateIP, "phase %s podIP %q: a proxy deleted with its delegate keeps its last status", p.Status.Phase, p.Status.PodIP)
				h.finishForeground(t, pc)
			}
			if get(t, h.target, d.DeepCopy()) {
				// Its chaperon gone, the delegate's pod is not yet (its
				// grace period, or the target's garbage collector): the
				// proxy waits for it, so that a StatefulSet never runs
				// its pod twice. Then the pod goes.
				assert.Never(t, func() bool { return !get(t, h.source, p.DeepCopy()) }, 2*time.Second, 100*time.Millisecond,
					"the proxy went while its delegate's pod was still in the target")
				release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
				require.NoError(t, client.IgnoreNotFound(h.target.Patch(ctx, d, release)))
				require.NoError(t, client.IgnoreNotFound(h.target.Delete(ctx, d, client.GracePeriodSeconds(0))))
			}
			testenv.EventuallyTrue(t, waitTimeout, "the proxy to be gone", func(context.Context) bool { return !get(t, h.source, p.DeepCopy()) })
		})
	}

	t.Run("a target that does not answer changes nothing; once it answers, a delegate deleted meanwhile deletes the proxy", func(t *testing.T) {
		ns := h.namespace(t, "feedback-flaky-")
		key := h.connect(t, ns, "flaky", "", metav1.ConditionTrue, v1alpha1.ReasonConnected)
		h.virtualNode(t, key)
		p, pc, d := h.runningProxy(t, ns, "api-0", key, corev1.RestartPolicyAlways)

		h.putSecret(t, ns, "flaky-kubeconfig", testenv.Kubeconfig(t, targetEnv.Config, ns, unreachable))
		h.waitTarget(t, ns, "flaky", metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
		h.deleteDelegate(t, pc, d)
		_, err := h.feedback.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		require.NoError(t, err, "feedback")
		require.Falsef(t, !get(t, h.source, p) || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning, "the proxy changed while its target could not be read: %+v, %s", p.ObjectMeta, p.Status.Phase)

		h.putSecret(t, ns, "flaky-kubeconfig", testenv.Kubeconfig(t, targetEnv.Config, ns, ""))
		h.waitTarget(t, ns, "flaky", metav1.ConditionTrue, v1alpha1.ReasonConnected)
		h.waitForegroundDeleted(t, pc) // the proxy was deleted, and is finalizing
		h.waitEvent(t, p, feedback.EventDelegateDeleted)
		h.finishForeground(t, pc)
		testenv.EventuallyTrue(t, waitTimeout, "the proxy to be gone", func(context.Context) bool { return !get(t, h.source, p.DeepCopy()) })
	})
}

// waitEvent waits for an Event with reason about the proxy.
func (h *harness) waitEvent(t *testing.T, p *corev1.Pod, reason string) {
	t.Helper()
	var seen []string
	testenv.EventuallyTrue(t, waitTimeout, "an Event "+reason+" on the proxy", func(ctx context.Context) bool {
		var list eventsv1.EventList
		if err := h.source.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
			return false
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.Regarding.UID != p.UID {
				continue
			}
			seen = append(seen, e.Reason)
			if e.Reason == reason {
				assert.Falsef(t, e.Type != corev1.EventTypeWarning, "Event %s is %s, want Warning", reason, e.Type)
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("events about the proxy: %v", seen) })
}
