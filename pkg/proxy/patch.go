package proxy

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// Op is one operation of a JSON patch (RFC 6902).
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// EscapeJSONPointer escapes one reference token of a JSON pointer (RFC
// 6901): "~" as "~0", "/" as "~1".
func EscapeJSONPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// RemoveFinalizerPatch removes one finalizer from the object of that UID,
// and only it: the test ops fail the patch (422 Invalid) if the
// finalizers moved since they were read, or if the object of that name is
// another one (a StatefulSet's pod made again under the same name while a
// pass still held its predecessor). ok is false when the finalizer is not
// there.
func RemoveFinalizerPatch(uid types.UID, finalizers []string, finalizer string) (patch []byte, ok bool) {
	i := FinalizerIndex(finalizers, finalizer)
	if i < 0 {
		return nil, false
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	return mustMarshal([]Op{testUID(uid), {Op: "test", Path: path, Value: finalizer}, {Op: "remove", Path: path}}), true
}

// testUID is the test op that holds a patch to the object read: a JSON
// patch goes by name, and a pod deleted and made again under the same
// name (a StatefulSet's) is another pod.
func testUID(uid types.UID) Op { return Op{Op: "test", Path: "/metadata/uid", Value: string(uid)} }

// RemoveGatePatch removes fleetlet's election gate, and only it: another
// controller's gates stay, and the test op fails the patch if the gates
// moved. ok is false when the pod is not gated by fleetlet.
func RemoveGatePatch(p *corev1.Pod) (patch []byte, ok bool) {
	ops, ok := removeGateOps(p)
	if !ok {
		return nil, false
	}
	return mustMarshal(ops), true
}

// PinAndUngatePatch adds kubernetes.io/hostname=<node> to the pod's
// nodeSelector and removes fleetlet's gate in one write. Kubernetes allows
// adding nodeSelector keys to a gated pod (it checks against the pod as it
// was) and refuses changing one, so a pod pinned elsewhere meanwhile is
// never re-pinned. ok is false when the gate is gone.
func PinAndUngatePatch(p *corev1.Pod, node string) (patch []byte, ok bool) {
	ops, ok := removeGateOps(p)
	if !ok {
		return nil, false
	}
	pin := Op{Op: "add", Path: "/spec/nodeSelector/" + EscapeJSONPointer(corev1.LabelHostname), Value: node}
	if p.Spec.NodeSelector == nil {
		pin = Op{Op: "add", Path: "/spec/nodeSelector", Value: map[string]string{corev1.LabelHostname: node}}
	}
	return mustMarshal(append([]Op{pin}, ops...)), true
}

func removeGateOps(p *corev1.Pod) ([]Op, bool) {
	i := GateIndex(p)
	if i < 0 {
		return nil, false
	}
	path := fmt.Sprintf("/spec/schedulingGates/%d", i)
	return []Op{testUID(p.UID), {Op: "test", Path: path + "/name", Value: v1alpha1.SchedulingGateElection}, {Op: "remove", Path: path}}, true
}

// mustMarshal marshals operations whose values are strings, string maps or
// nil: it cannot fail.
func mustMarshal(ops []Op) []byte {
	data, err := json.Marshal(ops)
	if err != nil {
		panic(fmt.Sprintf("proxy: marshalling a JSON patch: %v", err))
	}
	return data
}
