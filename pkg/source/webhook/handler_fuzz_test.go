package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
)

// FuzzHandle checks the handler's answer as the API server would use it.
// The API server sends the pod as its own types encode it, which may hold
// fields fleetlet's types do not know (a newer server): the body here is
// any pod, so encoded, with such fields added when unknown is set. A patch
// always applies to the very bytes sent, leaves the unknown fields as they
// were, and gives, decoded as the API server decodes, the pod Mutate
// makes; a second pass over the patched pod patches nothing; a pod is
// never answered with a 500. A body that is no pod gets a 400, never a
// patch.
//
// `go test` runs the seed corpus; `go test -fuzz=FuzzHandle` explores.
func FuzzHandle(f *testing.F) {
	for _, p := range fuzzSeedPods() {
		b, err := json.Marshal(p)
		require.NoError(f, err)
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Add([]byte(`{"spec":{"containers":[{"name":"a"},{"name":"a"}],"tolerations":[],"nodeSelector":null}}`), true)
	f.Add([]byte(`not json`), false)
	f.Fuzz(func(t *testing.T, body []byte, unknown bool) {
		h := newTestHandler(t, node("fleetlet-c2", map[string]string{"type": "virtual-kubelet"}))
		var pod corev1.Pod
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &pod); err != nil {
			resp := h.Handle(context.Background(), createRequest(t, "ns", body))
			require.Falsef(t, resp.Allowed && len(resp.Patches) > 0, "patched a body that is not a pod: %+v", resp)
			return
		}
		raw, err := json.Marshal(&pod)
		if err != nil {
			return // not a pod the API server could encode
		}
		if unknown {
			raw = withUnknownFields(raw)
		}
		require.NoError(t, sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &pod))
		resp := h.Handle(context.Background(), createRequest(t, "ns", raw))
		if !resp.Allowed {
			require.NotEqualf(t, int32(http.StatusInternalServerError), resp.Result.Code, "500 for a pod: %s", resp.Result.Message)
			return
		}
		if len(resp.Patches) == 0 {
			return
		}
		out := applyPatch(t, raw, resp)
		require.Empty(t, cmp.Diff(unknownFields(t, raw), unknownFields(t, out)), "fields fleetlet does not know were changed (-before,+after)")
		var got corev1.Pod
		require.NoError(t, sigsjson.UnmarshalCaseSensitivePreserveInts(out, &got), "the patched pod does not decode")
		if pod.Namespace == "" {
			pod.Namespace, got.Namespace = "ns", "ns"
		}
		res, err := Mutate(&pod, Options{Keys: testKeys, IsVirtualNode: virtualNodes("fleetlet-c2")})
		require.NoError(t, err, "the handler patched a pod Mutate refuses")
		require.Empty(t, cmp.Diff(roundTrip(t, res.Pod), roundTrip(t, &got)), "the patched pod is not Mutate's (-want,+got)")
		again := h.Handle(context.Background(), createRequest(t, "ns", out))
		require.Falsef(t, !again.Allowed || len(again.Patches) != 0, "second pass: allowed %v, patches %v", again.Allowed, again.Patches)
	})
}

// withUnknownFields adds fields a newer API server might send: at the
// top, in the spec, and in every container.
func withUnknownFields(raw []byte) []byte {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	m["futureTopLevel"] = []any{"x"}
	if spec, ok := m["spec"].(map[string]any); ok {
		spec["futureField"] = map[string]any{"x": 1.0}
		for _, list := range []string{"initContainers", "containers"} {
			cs, _ := spec[list].([]any)
			for _, c := range cs {
				if c, ok := c.(map[string]any); ok {
					c["futureContainerField"] = "y"
				}
			}
		}
	}
	b, _ := json.Marshal(m)
	return b
}

// unknownFields returns, of a pod's JSON, the fields the Pod type does not
// know at the top level and in the spec.
func unknownFields(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "not a JSON object")
	out := map[string]any{}
	for k, v := range m {
		switch k {
		case "apiVersion", "kind", "metadata", "spec", "status":
		default:
			out[k] = v
		}
	}
	spec, _ := m["spec"].(map[string]any)
	for k, v := range spec {
		if !specFieldKnown(k) {
			out["spec."+k] = v
		}
	}
	for _, list := range []string{"initContainers", "containers"} {
		cs, _ := spec[list].([]any)
		for i, c := range cs {
			if c, ok := c.(map[string]any); ok && c["futureContainerField"] != nil {
				out[fmt.Sprintf("spec.%s[%d].futureContainerField", list, i)] = c["futureContainerField"]
			}
		}
	}
	return out
}

// specFieldKnown reports whether the PodSpec type has a field of that JSON
// name (case-sensitive, as the API server decodes).
func specFieldKnown(name string) bool {
	b, _ := json.Marshal(map[string]any{name: nil})
	strict, err := sigsjson.UnmarshalStrict(b, &corev1.PodSpec{})
	return err == nil && len(strict) == 0
}

func roundTrip(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	b, err := json.Marshal(p)
	require.NoError(t, err)
	out := &corev1.Pod{}
	require.NoError(t, sigsjson.UnmarshalCaseSensitivePreserveInts(b, out))
	return out
}
