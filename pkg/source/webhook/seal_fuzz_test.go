package webhook

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// FuzzUnseal: the sealed source spec is untrusted input (any user who may
// create a pod writes annotations). Whatever the annotation and namespace,
// opening it never panics, and what it accepts is exactly what fleetlet
// itself would seal for that namespace with that key: nothing else opens.
func FuzzUnseal(f *testing.F) {
	key := bytes.Repeat([]byte("k"), MinKeyLength)
	grace := int64(30)
	good, err := seal(&SourceSpec{
		NodeSelector: map[string]string{"disk": "ssd"}, SchedulerName: "custom", TerminationGracePeriodSeconds: &grace,
		Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
	}, "team", key)
	require.NoError(f, err)
	for _, seed := range []struct{ value, namespace string }{
		{good, "team"},
		{good, "other"},
		{good + " ", "team"},
		{strings.Replace(good, `"v":1`, `"v":2`, 1), "team"},
		{strings.Replace(good, `"ssd"`, `"hdd"`, 1), "team"},
		{`{"v":1,"mac":"","spec":{}}`, "team"},
		{"{}", "team"},
		{"", ""},
	} {
		f.Add(seed.value, seed.namespace)
	}
	f.Fuzz(func(t *testing.T, value, namespace string) {
		s, err := unseal(value, namespace, [][]byte{key})
		if err != nil {
			require.Falsef(t, s != nil, "a spec returned with an error: %v", err)
			return
		}
		again, err := seal(s, namespace, key)
		require.NoError(t, err, "an opened spec does not seal again")
		require.Equal(t, value, again, "opened %q for namespace %q: fleetlet seals it otherwise", value, namespace)
	})
}
