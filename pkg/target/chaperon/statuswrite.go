// statuswrite: how a chaperon's status is written without losing a record
// and without failing on what others write to the chaperon's metadata.

package chaperon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// errStatusMoved is a status write refused because the status is no longer
// the one it was computed from.
var errStatusMoved = errors.New("the chaperon's status changed since it was read")

// patchStatus writes want's status over ch's, read from the cache, on
// condition that the status still holds what ch's does of the records
// (its conditions: whether the pod was created, and deleted).
//
// Not a lock on the whole object: the candidate scheduler's reservation
// and the source's marks change a chaperon's metadata between our read and
// our write for most candidates, and a resourceVersion lock made about one
// status write in three fail (a conflict, a read from the API server and
// the write again). A JSON patch tests the conditions instead, then sets
// the status: only this controller writes status, and what it mirrors of
// the pod comes from the pod's cache, which only moves forward.
//
// A status that has no conditions but is not empty (no pass writes one),
// and one tested absent that is there but empty, are written with the
// resourceVersion lock as before.
func (r *PodChaperonReconciler) patchStatus(ctx context.Context, ch, want *v1alpha1.PodChaperon) error {
	test, ok := statusTest(ch)
	if !ok {
		return r.patchStatusLocked(ctx, ch, want)
	}
	patch, err := json.Marshal([]map[string]any{test, {"op": "add", "path": "/status", "value": want.Status}})
	if err != nil {
		return fmt.Errorf("encoding the status patch: %w", err)
	}
	err = r.Client.Status().Patch(ctx, want, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldOwner))
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return err
	case len(ch.Status.Conditions) == 0:
		// No status was tested absent, but one may be there and empty
		// (written so by a client that sent an empty status): the lock
		// decides.
		return r.patchStatusLocked(ctx, ch, want)
	case apierrors.IsInvalid(err):
		// The test failed (or the status is invalid, which a pass on the
		// API server's version reports again).
		return errors.Join(errStatusMoved, err)
	}
	return err
}

// patchStatusLocked writes want's status over ch's with a lock on ch's
// resourceVersion.
func (r *PodChaperonReconciler) patchStatusLocked(ctx context.Context, ch, want *v1alpha1.PodChaperon) error {
	err := r.Client.Status().Patch(ctx, want, client.MergeFromWithOptions(ch, client.MergeFromWithOptimisticLock{}),
		client.FieldOwner(FieldOwner))
	if apierrors.IsConflict(err) {
		return errors.Join(errStatusMoved, err)
	}
	return err
}

// statusTest is the JSON patch operation that checks that the status still
// holds ch's records: its conditions, or no status at all for a chaperon
// whose status was never written (the API server drops status on create).
func statusTest(ch *v1alpha1.PodChaperon) (map[string]any, bool) {
	switch {
	case len(ch.Status.Conditions) > 0:
		return map[string]any{"op": "test", "path": "/status/conditions", "value": ch.Status.Conditions}, true
	case equality.Semantic.DeepEqual(ch.Status, v1alpha1.PodChaperonStatus{}):
		return map[string]any{"op": "test", "path": "/status", "value": nil}, true
	}
	return nil, false
}
