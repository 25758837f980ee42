package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

func sealedPod(t *testing.T) *corev1.Pod {
	t.Helper()
	res, err := Mutate(makePod("ns", "p").pvc("data", "d").mount("app", "data", "/data").nodeSelector("zone", "a").obj(), Options{Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
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
	if err := json.Unmarshal([]byte(value), &w); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, value)
	}
	if w.V != 1 || !strings.HasPrefix(value, `{"v":1,"mac":"`) {
		t.Errorf("format: %s", value)
	}
	if mac, err := base64.RawURLEncoding.DecodeString(w.MAC); err != nil || len(mac) != 32 {
		t.Errorf("mac %q: %d bytes, %v; want an HMAC-SHA-256", w.MAC, len(mac), err)
	}
	if !strings.Contains(string(w.Spec), `"nodeSelector":{"zone":"a"}`) {
		t.Errorf("spec does not read as the user's: %s", w.Spec)
	}
}

// No change of any one byte of a sealed annotation is trusted.
func TestOpenRefusesEveryAlteredByte(t *testing.T) {
	pod := sealedPod(t)
	value := pod.Annotations[v1alpha1.AnnotationSourceSpec]
	if _, err := Open(pod, testKey); err != nil {
		t.Fatalf("the sealed pod does not open: %v", err)
	}
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
			if _, err := Open(p, testKey); err == nil {
				t.Fatalf("byte %d replaced by %q was trusted", i, repl)
			}
		}
		p := pod.DeepCopy()
		p.Annotations[v1alpha1.AnnotationSourceSpec] = value[:i] + value[i+1:]
		if _, err := Open(p, testKey); err == nil {
			t.Fatalf("byte %d removed was trusted", i)
		}
	}
}

func TestOpenRefusesForgeries(t *testing.T) {
	pod := sealedPod(t)
	value := pod.Annotations[v1alpha1.AnnotationSourceSpec]
	var w sealed
	if err := json.Unmarshal([]byte(value), &w); err != nil {
		t.Fatal(err)
	}
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
			s, err := Open(p, tc.key)
			if !errors.Is(err, ErrUntrusted) || s != nil {
				t.Errorf("Open = %v, %v; want nil, ErrUntrusted", s, err)
			}
		})
	}

	delete(pod.Annotations, v1alpha1.AnnotationSourceSpec)
	if _, err := Open(pod, testKey); !errors.Is(err, ErrNoSourceSpec) {
		t.Errorf("no annotation: err = %v, want ErrNoSourceSpec", err)
	}
}

// A sealed source spec copied onto a pod of the same namespace is a second
// pass for that pod; in another namespace it is ignored and overwritten.
func TestMutateOverwritesSealFromAnotherNamespace(t *testing.T) {
	sealed := sealedPod(t)
	pod := makePod("other", "p").gates(v1alpha1.SchedulingGateElection).
		annotate(v1alpha1.AnnotationSourceSpec, sealed.Annotations[v1alpha1.AnnotationSourceSpec]).obj()
	res, err := Mutate(pod, Options{Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != Mutated {
		t.Errorf("action = %s, want Mutated (a first pass)", res.Action)
	}
	s, err := Open(res.Pod, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Volumes) != 0 || s.NodeSelector != nil {
		t.Errorf("the copied spec was trusted: %+v", s)
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEnsureSealKey(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).Build()
	k1, err := EnsureSealKey(ctx, c, c, "fleetlet-system", DefaultSealKeySecretName)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) < MinKeyLength {
		t.Fatalf("key of %d bytes", len(k1))
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "fleetlet-system", Name: DefaultSealKeySecretName}, secret); err != nil {
		t.Fatal(err)
	}
	if secret.Immutable == nil || !*secret.Immutable {
		t.Error("the seal key Secret is not immutable")
	}
	k2, err := EnsureSealKey(ctx, c, c, "fleetlet-system", DefaultSealKeySecretName)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k1, k2); diff != "" {
		t.Errorf("a second replica got another key (-first,+second):\n%s", diff)
	}
}

// A replica that loses the race to create the Secret uses the winner's key.
func TestEnsureSealKeyLosesRace(t *testing.T) {
	ctx := context.Background()
	winner := []byte(strings.Repeat("w", MinKeyLength))
	existing := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleetlet-system", Name: "k"},
		Data:       map[string][]byte{SealKeyDataKey: winner},
	}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(existing).Build()
	gets := 0
	reader := interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			if gets == 1 { // not there yet when first read
				return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	got, err := EnsureSealKey(ctx, reader, c, "fleetlet-system", "k")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(winner, got); diff != "" {
		t.Errorf("key (-winner,+got):\n%s", diff)
	}
}

func TestEnsureSealKeyRefusesShortKey(t *testing.T) {
	short := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleetlet-system", Name: "k"},
		Data:       map[string][]byte{SealKeyDataKey: []byte("short")},
	}
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(short).Build()
	if _, err := EnsureSealKey(context.Background(), c, c, "fleetlet-system", "k"); err == nil || !strings.Contains(err.Error(), "fleetlet-system/k") {
		t.Errorf("err = %v, want one naming the Secret", err)
	}
}
