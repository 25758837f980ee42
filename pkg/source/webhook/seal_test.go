package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func sealedPod(t *testing.T) *corev1.Pod {
	t.Helper()
	res, err := Mutate(makePod("ns", "p").pvc("data", "d").mount("app", "data", "/data").nodeSelector("zone", "a").obj(), Options{Keys: testKeys})
	require.NoError(t, err)
	return res.Pod
}

// The annotation is readable JSON: {"v":1,"mac":…,"spec":{…}}.
func TestSealFormat(t *testing.T) {
	value := sealedPod(t).Annotations[v1alpha1.AnnotationSourceSpec]
	var w struct {
		V    int             `json:"v"`
		MAC  string          `json:"mac"`
		Spec json.RawMessage `json:"spec"`
	}
	require.NoError(t, json.Unmarshal([]byte(value), &w), "not JSON:\n%s", value)
	assert.Falsef(t, w.V != 1 || !strings.HasPrefix(value, `{"v":1,"mac":"`), "format: %s", value)
	mac, err := base64.RawURLEncoding.DecodeString(w.MAC)
	assert.Falsef(t, err != nil || len(mac) != 32, "mac %q: %d bytes, %v; want an HMAC-SHA-256", w.MAC, len(mac), err)
	assert.Containsf(t, string(w.Spec), `"nodeSelector":{"zone":"a"}`, "spec does not read as the user's: %s", w.Spec)
}

// No change of any one byte of a sealed annotation is trusted.
func TestOpenRefusesEveryAlteredByte(t *testing.T) {
	pod := sealedPod(t)
	value := pod.Annotations[v1alpha1.AnnotationSourceSpec]
	_, err := Open(pod, testKeys)
	require.NoError(t, err, "the sealed pod does not open")
	const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	macStart := len(`{"v":1,"mac":"`)
	macEnd := strings.Index(value, `","spec":`)
	for i := range len(value) {
		repls := []string{"A", "0", " ", "-", "_", `"`}
		if i >= macStart && i < macEnd {
			// Every other letter of the MAC's alphabet: the last one
			// carries bits a lax decoder ignores.
			repls = strings.Split(base64URL, "")
		}
		for _, repl := range repls {
			if value[i:i+1] == repl {
				continue
			}
			p := pod.DeepCopy()
			p.Annotations[v1alpha1.AnnotationSourceSpec] = value[:i] + repl + value[i+1:]
			_, err := Open(p, testKeys)
			require.Error(t, err, "byte %d replaced by %q was trusted", i, repl)
		}
		p := pod.DeepCopy()
		p.Annotations[v1alpha1.AnnotationSourceSpec] = value[:i] + value[i+1:]
		_, err := Open(p, testKeys)
		require.Error(t, err, "byte %d removed was trusted", i)
	}
}

func TestOpenRefusesForgeries(t *testing.T) {
	pod := sealedPod(t)
	value := pod.Annotations[v1alpha1.AnnotationSourceSpec]
	var w sealed
	require.NoError(t, json.Unmarshal([]byte(value), &w))
	forged := func(spec string) string {
		b, _ := json.Marshal(sealed{V: 1, MAC: w.MAC, Spec: json.RawMessage(spec)})
		return string(b)
	}
	cases := map[string]struct {
		namespace, value string
		key              []byte
	}{
		"another namespace":            {"other", value, testKey},
		"another key":                  {"ns", value, []byte(strings.Repeat("x", 32))},
		"a short key":                  {"ns", value, testKey[:16]},
		"the user's own spec":          {"ns", forged(`{"nodeSelector":{"zone":"b"}}`), testKey},
		"a spec with extra whitespace": {"ns", strings.Replace(value, `"spec":`, `"spec": `, 1), testKey},
		"fields reordered":             {"ns", `{"mac":"` + w.MAC + `","v":1,"spec":` + string(w.Spec) + `}`, testKey},
		"a duplicate field":            {"ns", strings.Replace(value, `{"v":1,`, `{"v":1,"v":1,`, 1), testKey},
		"an extra field":               {"ns", strings.Replace(value, `{"v":1,`, `{"x":1,"v":1,`, 1), testKey},
		"another version":              {"ns", strings.Replace(value, `{"v":1,`, `{"v":2,`, 1), testKey},
		"trailing data":                {"ns", value + "{}", testKey},
		"empty":                        {"ns", "", testKey},
		"not JSON":                     {"ns", "sealed", testKey},
		"no namespace":                 {"", value, testKey},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Namespace = tc.namespace
			p.Annotations[v1alpha1.AnnotationSourceSpec] = tc.value
			s, err := Open(p, Keys{Seal: tc.key})
			assert.Falsef(t, !errors.Is(err, ErrUntrusted) || s != nil, "Open = %v, %v; want nil, ErrUntrusted", s, err)
		})
	}

	delete(pod.Annotations, v1alpha1.AnnotationSourceSpec)
	_, err := Open(pod, testKeys)
	assert.Truef(t, errors.Is(err, ErrNoSourceSpec), "no annotation: err = %v, want ErrNoSourceSpec", err)
}

// A sealed source spec copied onto a pod of another namespace is never
// trusted: with fleetlet's gate the pod is refused (its spec may be a
// proxy's already, whose user values only a seal holds); without it, the
// copy is ignored and overwritten by a first pass.
func TestMutateOverwritesSealFromAnotherNamespace(t *testing.T) {
	sealed := sealedPod(t)
	gated := makePod("other", "p").gates(v1alpha1.SchedulingGateElection).
		annotate(v1alpha1.AnnotationSourceSpec, sealed.Annotations[v1alpha1.AnnotationSourceSpec]).obj()
	if res, err := Mutate(gated, Options{Keys: testKeys}); !errors.Is(err, ErrUnverifiedPass) {
		require.FailNowf(t, "not ErrUnverifiedPass", "a gated pod with another namespace's seal: %s, %v; want ErrUnverifiedPass", res.Action, err)
	}
	pod := makePod("other", "p").annotate(v1alpha1.AnnotationSourceSpec, sealed.Annotations[v1alpha1.AnnotationSourceSpec]).obj()
	res, err := Mutate(pod, Options{Keys: testKeys})
	require.NoError(t, err)
	assert.Equal(t, Mutated, res.Action, "action, want Mutated (a first pass)")
	s, err := Open(res.Pod, testKeys)
	require.NoError(t, err)
	assert.Falsef(t, len(s.Volumes) != 0 || s.NodeSelector != nil, "the copied spec was trusted: %+v", s)
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	return s
}

// A rotation keeps the earlier key among the openers: what it sealed still
// opens, what the new key seals opens, a key never in the set does not.
func TestKeySetRotation(t *testing.T) {
	old := Keys{Seal: testKey}
	res, err := Mutate(makePod("ns", "p").obj(), Options{Keys: old})
	require.NoError(t, err)
	newKey := []byte(strings.Repeat("n", MinKeyLength))
	rotated := Keys{Seal: newKey, Previous: [][]byte{testKey}}
	_, err = Open(res.Pod, rotated)
	assert.NoError(t, err, "sealed before the rotation")
	_, err = Open(res.Pod, Keys{Seal: newKey})
	assert.Truef(t, errors.Is(err, ErrUntrusted), "without the earlier key: %v, want ErrUntrusted", err)
	after, err := Mutate(makePod("ns", "q").obj(), Options{Keys: rotated})
	require.NoError(t, err)
	_, err = Open(after.Pod, Keys{Seal: newKey})
	assert.NoError(t, err, "sealed after the rotation, opened with the new key")
	_, err = Open(after.Pod, old)
	assert.Truef(t, errors.Is(err, ErrUntrusted), "sealed with the new key, opened with the old one only: %v, want ErrUntrusted", err)
}

func TestKeysFromSecret(t *testing.T) {
	k := func(c string) []byte { return []byte(strings.Repeat(c, MinKeyLength)) }
	got, err := keysFromSecret(&corev1.Secret{Data: map[string][]byte{SealKeyDataKey: k("a"), "previous-2": k("c"), "previous-1": k("b"), "other": []byte("x")}})
	require.NoError(t, err)
	want := Keys{Seal: k("a"), Previous: [][]byte{k("b"), k("c")}}
	assert.Truef(t, got.equal(want), "keys = %q, want %q", got, want)
	for name, data := range map[string]map[string][]byte{
		"no key":         {"previous-1": k("b")},
		"short key":      {SealKeyDataKey: []byte("short")},
		"short previous": {SealKeyDataKey: k("a"), "previous-1": []byte("short")},
	} {
		_, err := keysFromSecret(&corev1.Secret{Data: data})
		assert.Truef(t, errors.Is(err, ErrNoSealKey), "%s: %v, want ErrNoSealKey", name, err)
	}
}

// A missing Secret is no key, never a new one; the keys come back with the
// Secret, and every change is announced.
func TestSecretKeysFailClosed(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	changes := 0
	keys := NewSecretKeys(c, "fleetlet-system", DefaultSealKeySecretName, func() { changes++ })
	err := keys.Load(ctx)
	require.Falsef(t, !errors.Is(err, ErrNoSealKey) || !strings.Contains(err.Error(), "missing"), "Load without the Secret: %v, want ErrNoSealKey naming it missing", err)
	_, err = keys.Keys()
	assert.Truef(t, errors.Is(err, ErrNoSealKey), "Keys without the Secret: %v", err)
	secrets := &corev1.SecretList{}
	err = c.List(ctx, secrets)
	assert.Falsef(t, err != nil || len(secrets.Items) != 0, "a Secret was made: %v %v", secrets.Items, err)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleetlet-system", Name: DefaultSealKeySecretName},
		Data: map[string][]byte{SealKeyDataKey: testKey}}
	require.NoError(t, c.Create(ctx, secret))
	require.NoError(t, keys.Load(ctx))
	got, err := keys.Keys()
	assert.Falsef(t, err != nil || !got.equal(testKeys), "Keys = %q, %v", got, err)
	err = keys.Load(ctx)
	assert.Falsef(t, err != nil || changes != 1, "an unchanged Secret: %v, %d changes, want 1 (the Secret appearing)", err, changes)
	require.NoError(t, c.Delete(ctx, secret))
	err = keys.Load(ctx)
	assert.Falsef(t, !errors.Is(err, ErrNoSealKey) || changes != 2, "Secret deleted: %v, %d changes", err, changes)
}

// Without a key, a pod that would become a proxy is refused with the
// reason; a pod fleetlet leaves alone is still allowed.
func TestHandlerFailsClosedWithoutKey(t *testing.T) {
	noKey := NewSecretKeys(fake.NewClientBuilder().Build(), "fleetlet-system", DefaultSealKeySecretName, nil)
	_ = noKey.Load(context.Background())
	h, err := NewHandler(noKey, fake.NewClientBuilder().Build(), nil)
	require.NoError(t, err)
	podRequest := func(t *testing.T, p *corev1.Pod) admission.Request {
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		return createRequest(t, p.Namespace, raw)
	}
	resp := h.Handle(context.Background(), podRequest(t, makePod("ns", "p").obj()))
	assert.Falsef(t, resp.Allowed || !strings.Contains(resp.Result.Message, "seal key Secret fleetlet-system/fleetlet-seal-key is missing"), "a proxy pod without a seal key: allowed=%t %q", resp.Allowed, resp.Result.Message)
	optOut := makePod("ns", "q").annotate(v1alpha1.AnnotationElect, v1alpha1.AnnotationElectDisabled).obj()
	if resp := h.Handle(context.Background(), podRequest(t, optOut)); !resp.Allowed {
		assert.Failf(t, "refused", "a pod that opts out was refused: %q", resp.Result.Message)
	}
}
