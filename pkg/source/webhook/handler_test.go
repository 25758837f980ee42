package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func newTestHandler(t *testing.T, objs ...client.Object) *Handler {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).Build()
	h, err := NewHandler(StaticKeys(testKeys), c, nil)
	require.NoError(t, err)
	return h
}

func createRequest(t *testing.T, namespace string, raw []byte) admission.Request {
	t.Helper()
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// applyPatch applies a response's JSON patch to raw.
func applyPatch(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	require.NoError(t, err)
	patch, err := jsonpatch.DecodePatch(ops)
	require.NoError(t, err)
	out, err := patch.Apply(raw)
	require.NoError(t, err, "applying the patch")
	return out
}

func TestHandlerVirtualNodes(t *testing.T) {
	h := newTestHandler(t,
		node("fleetlet-c2", map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, v1alpha1.LabelCluster: "c2"}),
		node("fleetlet-long", map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}),
		node("vk-other", map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, v1alpha1.LabelCluster: "c3"}),
		node("aci-connector", map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet}),
		node("fleetlet-lookalike", map[string]string{"type": "real"}),
	)
	cases := map[string]bool{ // node → refused
		"fleetlet-c2":        true,
		"fleetlet-long":      true, // target name too long for the cluster label
		"vk-other":           true, // labelled with a target
		"aci-connector":      false,
		"fleetlet-lookalike": false,
		"no-such-node":       false,
	}
	for name, refused := range cases {
		t.Run(name, func(t *testing.T) {
			raw, _ := json.Marshal(makePod("ns", "p").nodeName(name).obj())
			resp := h.Handle(context.Background(), createRequest(t, "ns", raw))
			if refused {
				assert.Falsef(t, resp.Allowed || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, "virtual node"), "response = %+v, want refused (403) with the virtual-node message", resp.Result)
				return
			}
			assert.Falsef(t, !resp.Allowed || len(resp.Patches) > 0, "response = allowed %v, %d patches, %+v; want allowed, untouched", resp.Allowed, len(resp.Patches), resp.Result)
		})
	}
}

func TestHandlerPatch(t *testing.T) {
	h := newTestHandler(t)
	// A pod as a newer API server might send it: a field this fleetlet
	// does not know, which the patch must leave alone; no namespace in the
	// object (the request has it).
	pod := makePod("", "p").pvc("data", "d").mount("app", "data", "/data").port("app", 80, 8080).obj()
	raw, _ := json.Marshal(pod)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["spec"].(map[string]any)["futureField"] = map[string]any{"x": 1.0}
	raw, _ = json.Marshal(m)

	resp := h.Handle(context.Background(), createRequest(t, "ns", raw))
	require.Falsef(t, !resp.Allowed || len(resp.Patches) == 0, "response = %+v, want allowed with a patch", resp)
	out := applyPatch(t, raw, resp)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Empty(t, cmp.Diff(map[string]any{"x": 1.0}, got["spec"].(map[string]any)["futureField"]), "unknown field touched (-want,+got)")
	var gotPod corev1.Pod
	require.NoError(t, json.Unmarshal(out, &gotPod))
	gotPod.Namespace = "ns"
	want, err := Mutate(func() *corev1.Pod { p := pod.DeepCopy(); p.Namespace = "ns"; return p }(), Options{Keys: testKeys})
	require.NoError(t, err)
	assert.Empty(t, cmp.Diff(want.Pod, &gotPod), "patched pod (-want,+got)")

	// Reinvoked on its own output: nothing to patch.
	resp = h.Handle(context.Background(), createRequest(t, "ns", out))
	assert.Falsef(t, !resp.Allowed || len(resp.Patches) != 0, "second pass: allowed %v, %d patches; want allowed, none", resp.Allowed, len(resp.Patches))
}

// A pod whose hostPort its namespace's Pod Security level forbids is
// refused, saying so: the seal would hide that hostPort from the API
// server's PodSecurity admission, which sees only the proxy. The same pod
// in a namespace without a level, or at privileged, becomes a proxy.
// Before: it was admitted in a baseline namespace, and its delegates got
// the hostPort in every target.
func TestHandlerChecksPodSecurityOfWhatItSeals(t *testing.T) {
	ns := func(name, level string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if level != "" {
			n.Labels = map[string]string{"pod-security.kubernetes.io/enforce": level}
		}
		return n
	}
	h := newTestHandler(t, ns("base", "baseline"), ns("open", ""), ns("priv", "privileged"))
	for namespace, allowed := range map[string]bool{"base": false, "open": true, "priv": true} {
		raw, _ := json.Marshal(makePod(namespace, "p").port("app", 8080, 8080).obj())
		resp := h.Handle(context.Background(), createRequest(t, namespace, raw))
		if resp.Allowed != allowed {
			assert.Failf(t, "allowed or not", "%s: allowed %v, want %v: %+v", namespace, resp.Allowed, allowed, resp.Result)
			continue
		}
		if !allowed {
			assert.Falsef(t, !strings.Contains(resp.Result.Message, `violates PodSecurity "baseline:latest"`) || !strings.Contains(resp.Result.Message, "hostPort"),
				"%s: refused with %q, want the level and the hostPort named", namespace, resp.Result.Message)
		}
	}
	raw, _ := json.Marshal(makePod("base", "p").port("app", 8080, 0).obj())
	resp := h.Handle(context.Background(), createRequest(t, "base", raw))
	assert.Falsef(t, !resp.Allowed || len(resp.Patches) == 0, "a baseline pod in a baseline namespace: %+v, want a proxy", resp.Result)
}

func TestHandlerIgnoresOtherRequests(t *testing.T) {
	h := newTestHandler(t)
	raw, _ := json.Marshal(makePod("ns", "p").obj())
	req := createRequest(t, "ns", raw)
	req.Operation = admissionv1.Update
	resp := h.Handle(context.Background(), req)
	assert.Falsef(t, !resp.Allowed || len(resp.Patches) != 0, "UPDATE: %+v, want allowed untouched", resp)
	req = createRequest(t, "ns", []byte(`{"spec": 3}`))
	resp = h.Handle(context.Background(), req)
	assert.Falsef(t, resp.Allowed || resp.Result.Code != http.StatusBadRequest, "bad pod: %+v, want a 400", resp.Result)
}

func TestNewHandlerNeedsKey(t *testing.T) {
	_, err := NewHandler(nil, fake.NewClientBuilder().Build(), nil)
	assert.Error(t, err, "a short key was accepted")
}

// A node the cache does not know yet is looked up live.
func TestHandlerAsksLiveForUnknownNodes(t *testing.T) {
	empty := fake.NewClientBuilder().WithScheme(newScheme(t)).Build()
	live := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(
		node("fleetlet-new", map[string]string{v1alpha1.LabelNodeType: v1alpha1.NodeTypeVirtualKubelet, v1alpha1.LabelCluster: "new"})).Build()
	h, err := NewHandler(StaticKeys(testKeys), empty, live)
	require.NoError(t, err)
	raw, _ := json.Marshal(makePod("ns", "p").nodeName("fleetlet-new").obj())
	resp := h.Handle(context.Background(), createRequest(t, "ns", raw))
	assert.Falsef(t, resp.Allowed, "a pod on a virtual node only the API server knows was allowed: %+v", resp.Result)
}
