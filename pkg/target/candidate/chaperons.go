package candidate

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// chaperonKind is the kind of the owner of every candidate pod.
const chaperonKind = "PodChaperon"

// chaperonResource is the resource the plugin reads and patches. Only the
// chaperons' metadata is ever read: their pod templates can be large and the
// plugin needs none of them.
var chaperonResource = v1alpha1.GroupVersion.WithResource("podchaperons")

// chaperonRef names the PodChaperon that owns a candidate pod: its controller
// owner reference, UID included, so that a chaperon deleted and created again
// under the same name is never mistaken for the one the pod belongs to.
type chaperonRef struct {
	key types.NamespacedName
	uid types.UID
}

// chaperonOf returns the chaperon a pod is a candidate of. Only pods of the
// candidate scheduler (schedulerName fleetlet-candidate) whose controller is
// a PodChaperon are candidates; the plugin leaves every other pod alone.
func chaperonOf(pod *corev1.Pod) (chaperonRef, bool) {
	if pod.Spec.SchedulerName != v1alpha1.SchedulerNameCandidate {
		return chaperonRef{}, false
	}
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil || owner.Kind != chaperonKind || owner.Name == "" {
		return chaperonRef{}, false
	}
	if gv, err := schema.ParseGroupVersion(owner.APIVersion); err != nil || gv.Group != v1alpha1.GroupName {
		return chaperonRef{}, false
	}
	return chaperonRef{key: types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, uid: owner.UID}, true
}

// verdict is what a chaperon says about its candidate.
type verdict int

const (
	// verdictWait: the chaperon exists and is not elected (yet).
	verdictWait verdict = iota
	// verdictElected: the source elected this candidate.
	verdictElected
	// verdictGone: the chaperon is gone, replaced or being deleted: the
	// candidate lost.
	verdictGone
)

// Messages of a rejected candidate; the scheduler puts them in the pod's
// PodScheduled condition ("0/3 nodes are available: 1 <message>.").
const (
	msgChaperonGone     = "its PodChaperon is gone"
	msgChaperonReplaced = "its PodChaperon was replaced"
	msgChaperonDeleting = "its PodChaperon is being deleted"
	msgPodDeleting      = "it is being deleted"
)

// judge reads a chaperon's verdict on its candidate. ch is nil when the
// chaperon does not exist. confirm is true when the verdict rests on the
// chaperon's absence or on a different UID, which a lagging cache can also
// show: such a verdict must be checked against the API server.
func judge(ch *metav1.PartialObjectMetadata, ref chaperonRef) (v verdict, msg string, confirm bool) {
	switch {
	case ch == nil:
		return verdictGone, msgChaperonGone, true
	case ref.uid != "" && ch.UID != ref.uid:
		return verdictGone, msgChaperonReplaced, true
	case ch.DeletionTimestamp != nil:
		return verdictGone, msgChaperonDeleting, false
	case ch.Annotations[v1alpha1.AnnotationElected] == "true":
		return verdictElected, "", false
	default:
		return verdictWait, "", false
	}
}

// chaperonCache is the plugin's watch-fed view of the chaperons' metadata.
type chaperonCache interface {
	// get returns the cached chaperon, nil when the cache has none.
	get(key types.NamespacedName) *metav1.PartialObjectMetadata
	// synced reports whether the cache has listed every chaperon once.
	synced() bool
}

// chaperonAPI reads and patches chaperons on the API server.
type chaperonAPI interface {
	// get returns the chaperon's metadata; a NotFound error when it does
	// not exist.
	get(ctx context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error)
	// patch patches the chaperon's metadata.
	patch(ctx context.Context, key types.NamespacedName, pt types.PatchType, data []byte) error
}

// informerCache is a chaperonCache on a metadata informer.
type informerCache struct{ informer cache.SharedIndexInformer }

func (c informerCache) get(key types.NamespacedName) *metav1.PartialObjectMetadata {
	obj, exists, err := c.informer.GetStore().GetByKey(key.String())
	if err != nil || !exists {
		return nil
	}
	ch, _ := obj.(*metav1.PartialObjectMetadata)
	return ch
}

func (c informerCache) synced() bool { return c.informer.HasSynced() }

// metadataAPI is a chaperonAPI on the metadata client.
type metadataAPI struct{ client metadata.Interface }

func (a metadataAPI) get(ctx context.Context, key types.NamespacedName) (*metav1.PartialObjectMetadata, error) {
	return a.client.Resource(chaperonResource).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
}

func (a metadataAPI) patch(ctx context.Context, key types.NamespacedName, pt types.PatchType, data []byte) error {
	_, err := a.client.Resource(chaperonResource).Namespace(key.Namespace).Patch(ctx, key.Name, pt, data, metav1.PatchOptions{})
	return err
}

// chaperonFromEvent returns the chaperon an informer event is about,
// unwrapping the tombstone of a deletion the watch missed.
func chaperonFromEvent(obj any) (*metav1.PartialObjectMetadata, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ch, ok := obj.(*metav1.PartialObjectMetadata)
	return ch, ok && ch != nil
}

// stripManagedFields is the informer's transform: managed fields are never
// read, and dropping them keeps the cache small.
func stripManagedFields(obj any) (any, error) {
	if ch, ok := obj.(*metav1.PartialObjectMetadata); ok {
		ch.ManagedFields = nil
	}
	return obj, nil
}

// describe names a chaperon for errors.
func (r chaperonRef) String() string { return fmt.Sprintf("PodChaperon %s", r.key) }
