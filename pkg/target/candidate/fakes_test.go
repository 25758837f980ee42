package candidate

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Builders of test objects.

type chaperonBuilder struct{ ch *metav1.PartialObjectMetadata }

func newChaperon(namespace, name string) *chaperonBuilder {
	return &chaperonBuilder{ch: &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: chaperonKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(name + "-uid")},
	}}
}

func (b *chaperonBuilder) uid(uid types.UID) *chaperonBuilder { b.ch.UID = uid; return b }

func (b *chaperonBuilder) annotation(k, v string) *chaperonBuilder {
	if b.ch.Annotations == nil {
		b.ch.Annotations = map[string]string{}
	}
	b.ch.Annotations[k] = v
	return b
}

func (b *chaperonBuilder) elected() *chaperonBuilder {
	return b.annotation(v1alpha1.AnnotationElected, "true")
}

func (b *chaperonBuilder) reserved(node string) *chaperonBuilder {
	return b.annotation(v1alpha1.AnnotationReserved, node)
}

func (b *chaperonBuilder) deleting() *chaperonBuilder {
	b.ch.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	b.ch.Finalizers = []string{"test/hold"}
	return b
}

func (b *chaperonBuilder) obj() *metav1.PartialObjectMetadata { return b.ch.DeepCopy() }

type podBuilder struct{ pod *corev1.Pod }

// newCandidate returns a candidate pod of the chaperon namespace/name (the
// chaperon's UID as newChaperon gives it).
func newCandidate(namespace, name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, UID: types.UID(name + "-pod-uid"),
			Labels: map[string]string{v1alpha1.LabelParentUID: "proxy-uid", v1alpha1.LabelParentCluster: "cluster-1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: chaperonKind, Name: name,
				UID: types.UID(name + "-uid"), Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			SchedulerName:     v1alpha1.SchedulerNameCandidate,
			PriorityClassName: v1alpha1.PriorityClassCandidate,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}}},
		},
	}}
}

func (b *podBuilder) schedulerName(n string) *podBuilder { b.pod.Spec.SchedulerName = n; return b }
func (b *podBuilder) noOwner() *podBuilder               { b.pod.OwnerReferences = nil; return b }
func (b *podBuilder) ownerKind(apiVersion, kind string) *podBuilder {
	b.pod.OwnerReferences[0].APIVersion, b.pod.OwnerReferences[0].Kind = apiVersion, kind
	return b
}
func (b *podBuilder) notController() *podBuilder {
	b.pod.OwnerReferences[0].Controller = nil
	return b
}
func (b *podBuilder) nodeName(n string) *podBuilder { b.pod.Spec.NodeName = n; return b }
func (b *podBuilder) obj() *corev1.Pod              { return b.pod.DeepCopy() }

// fakeChaperons is both the plugin's cache and its API server: objects in
// cache are what the watch delivered, objects in server what exists.
type fakeChaperons struct {
	mu         sync.Mutex
	cached     map[types.NamespacedName]*metav1.PartialObjectMetadata
	server     map[types.NamespacedName]*metav1.PartialObjectMetadata
	isSynced   bool
	gets       int
	patches    []patchCall
	patchErrs  []error        // returned by the next patches, in order
	getErr     error          // returned by every get
	patchBlock chan struct{}  // when set, patch waits for it to close
	patchStart chan patchCall // when set, receives every patch as it starts
}

type patchCall struct {
	key  types.NamespacedName
	pt   types.PatchType
	data string
}

func newFakeChaperons(objs ...*metav1.PartialObjectMetadata) *fakeChaperons {
	f := &fakeChaperons{cached: map[types.NamespacedName]*metav1.PartialObjectMetadata{}, server: map[types.NamespacedName]*metav1.PartialObjectMetadata{}, isSynced: true}
	for _, o := range objs {
		f.put(o)
	}
	return f
}

func keyOf(o *metav1.PartialObjectMetadata) types.NamespacedName {
	return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
}

// put stores the object on the server and in the cache.
func (f *fakeChaperons) put(o *metav1.PartialObjectMetadata) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.server[keyOf(o)] = o.DeepCopy()
	f.cached[keyOf(o)] = o.DeepCopy()
}

// del deletes the object from the server and the cache.
func (f *fakeChaperons) del(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.server, key)
	delete(f.cached, key)
}

func (f *fakeChaperons) get(key types.NamespacedName) *metav1.PartialObjectMetadata {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.cached[key]; o != nil {
		return o.DeepCopy()
	}
	return nil
}

func (f *fakeChaperons) synced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isSynced
}

func (f *fakeChaperons) apiGets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

func (f *fakeChaperons) patchCalls() []patchCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]patchCall(nil), f.patches...)
}

// fakeAPI adapts fakeChaperons to chaperonAPI (its get collides with the
// cache's).
type fakeAPI struct{ f *fakeChaperons }

func (a fakeAPI) get(_ context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if f.getErr != nil {
		return nil, f.getErr
	}
	if o := f.server[key]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1alpha1.Resource("podchaperons"), key.Name)
}

func (a fakeAPI) patch(ctx context.Context, key types.NamespacedName, pt types.PatchType, data []byte) error {
	f := a.f
	call := patchCall{key: key, pt: pt, data: string(data)}
	if f.patchStart != nil {
		f.patchStart <- call
	}
	if f.patchBlock != nil {
		select {
		case <-f.patchBlock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches = append(f.patches, call)
	if len(f.patchErrs) > 0 {
		err := f.patchErrs[0]
		f.patchErrs = f.patchErrs[1:]
		if err != nil {
			return err
		}
	}
	o := f.server[key]
	if o == nil {
		return apierrors.NewNotFound(v1alpha1.Resource("podchaperons"), key.Name)
	}
	// Apply what the plugin sends: a merge patch setting the annotation,
	// or a JSON patch testing and removing it.
	switch pt {
	case types.MergePatchType:
		var p struct {
			Metadata struct {
				UID         types.UID         `json:"uid"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(data, &p); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		if p.Metadata.UID != "" && p.Metadata.UID != o.UID {
			return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind(chaperonKind).GroupKind(), key.Name, nil)
		}
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		for k, v := range p.Metadata.Annotations {
			o.Annotations[k] = v
		}
	case types.JSONPatchType:
		var ops []struct {
			Op, Path string
			Value    any
		}
		if err := json.Unmarshal(data, &ops); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		for _, op := range ops {
			if op.Op != "test" {
				continue
			}
			var got any = o.Annotations[v1alpha1.AnnotationReserved]
			if op.Path == "/metadata/uid" {
				got = string(o.UID)
			}
			if got != op.Value {
				return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind(chaperonKind).GroupKind(), key.Name, nil)
			}
		}
		delete(o.Annotations, v1alpha1.AnnotationReserved)
	}
	return nil
}

// fakeHandle is the framework handle: waiting pods and activations.
type fakeHandle struct {
	mu        sync.Mutex
	waiting   map[types.UID]*fakeWaitingPod
	activated []string
}

func newFakeHandle() *fakeHandle { return &fakeHandle{waiting: map[types.UID]*fakeWaitingPod{}} }

func (h *fakeHandle) GetWaitingPod(uid types.UID) fwk.WaitingPod {
	h.mu.Lock()
	defer h.mu.Unlock()
	if wp, ok := h.waiting[uid]; ok {
		return wp
	}
	return nil
}

func (h *fakeHandle) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}

// wait registers pod as waiting at Permit, as the framework does after
// Permit answers Wait.
func (h *fakeHandle) wait(pod *corev1.Pod) *fakeWaitingPod {
	h.mu.Lock()
	defer h.mu.Unlock()
	wp := &fakeWaitingPod{pod: pod}
	h.waiting[pod.UID] = wp
	return wp
}

func (h *fakeHandle) activations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.activated...)
}

type fakeWaitingPod struct {
	mu       sync.Mutex
	pod      *corev1.Pod
	allowed  []string
	rejected []string // messages
}

func (w *fakeWaitingPod) GetPod() *corev1.Pod             { return w.pod }
func (w *fakeWaitingPod) GetPendingPlugins() []string     { return []string{Name} }
func (w *fakeWaitingPod) Preempt(_ string, _ string) bool { return true }
func (w *fakeWaitingPod) Allow(plugin string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.allowed = append(w.allowed, plugin)
}
func (w *fakeWaitingPod) Reject(_ string, msg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rejected = append(w.rejected, msg)
	return true
}

func (w *fakeWaitingPod) result() (allowed, rejected []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.allowed...), append([]string(nil), w.rejected...)
}

// testPlugin is a plugin on fakes, with a fake clock, not started: tests
// drive its workers one step at a time (processNext, decideNext).
type testPlugin struct {
	*Plugin
	chaperons *fakeChaperons
	handle    *fakeHandle
	clock     *testingclock.FakeClock
	pods      map[types.NamespacedName]*corev1.Pod
}

func newTestPlugin(t *testing.T, chaperons *fakeChaperons, pods ...*corev1.Pod) *testPlugin {
	t.Helper()
	args, err := DecodeArgs(nil)
	require.NoError(t, err)
	tp := &testPlugin{chaperons: chaperons, handle: newFakeHandle(), clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
		pods: map[types.NamespacedName]*corev1.Pod{}}
	for _, p := range pods {
		tp.pods[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	getPod := func(namespace, name string) (*corev1.Pod, error) {
		if p, ok := tp.pods[types.NamespacedName{Namespace: namespace, Name: name}]; ok {
			return p, nil
		}
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	tp.Plugin = newPlugin(args, tp.handle, fakeAPI{chaperons}, chaperons, getPod, tp.clock)
	t.Cleanup(func() {
		tp.reservations.queue.ShutDown()
		tp.decisions.ShutDown()
	})
	return tp
}
