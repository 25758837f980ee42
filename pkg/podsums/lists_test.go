package podsums

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func requests(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
}

// TestPodsOfOneTemplateShareTheirList: a thousand pods that request the
// same hold one list between them, under one key or several; a list goes
// with its last pod; the caller's list is never kept (changing it after
// Set changes no sum).
func TestPodsOfOneTemplateShareTheirList(t *testing.T) {
	s := New[string]()
	for i := range 1000 {
		req := requests("100m", "64Mi")
		if i%2 == 1 {
			req = requests("0.1", "67108864") // the same amounts, written otherwise
		}
		s.Set(types.UID(fmt.Sprint(i)), fmt.Sprint("node-", i%3), req)
		req[corev1.ResourceCPU] = resource.MustParse("7") // the caller's, after Set
	}
	s.Set("big", "node-0", requests("2", "1Gi"))
	// "0.1" is "100m" in canonical form; "67108864" is not "64Mi": two
	// lists for the thousand, one for the big pod.
	assert.Len(t, s.lists, 3, "distinct lists held: %v", keysOf(s.lists))
	cpu := s.Of("node-0").Requests[corev1.ResourceCPU]
	assert.Equal(t, "35400m", cpu.String(), "node-0's CPU: 334 pods of 100m and one of 2")

	for i := range 1000 {
		s.Remove(types.UID(fmt.Sprint(i)))
	}
	assert.Len(t, s.lists, 1, "lists held after their pods went: %v", keysOf(s.lists))
	s.Set("big", "node-1", requests("2", "1Gi"))
	require.Len(t, s.lists, 1)
	assert.Equal(t, 1, s.lists[listID(requests("2", "1Gi"))].pods, "a pod moved to another key counts once")
	s.Remove("big")
	assert.Empty(t, s.lists)
}

func keysOf(ls lists) []string {
	var out []string
	for id := range ls {
		out = append(out, id)
	}
	return out
}
