package naming

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestRemoteName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name, uid string
		want      string
	}{
		{"web-7d9f-abcde", "uid-1", "web-7d9f-abcde-" + UIDHash("uid-1")},
		{long, "uid-1", strings.Repeat("a", 54) + "-" + UIDHash("uid-1")},
		// Truncation never leaves a dash or dot before the hash.
		{strings.Repeat("a", 53) + "-b", "u", strings.Repeat("a", 53) + "-" + UIDHash("u")},
	}
	for _, tc := range tests {
		got := RemoteName(tc.name, types.UID(tc.uid))
		assert.Equal(t, tc.want, got, "RemoteName(%q, %q)", tc.name, tc.uid)
		assert.Empty(t, validation.IsDNS1123Label(got), "RemoteName(%q) = %q is not a DNS label", tc.name, got)
	}
	// Same name, another pod (a StatefulSet pod recreated): another name.
	assert.NotEqual(t, RemoteName("db-0", "uid-a"), RemoteName("db-0", "uid-b"), "two pods with the same name but different UIDs share a remote name")
	// Stable: the same pod always gets the same name.
	first, again := RemoteName("db-0", "uid-a"), RemoteName("db-0", types.UID("uid-a"))
	assert.Equal(t, first, again, "RemoteName is not deterministic")
	assert.Len(t, UIDHash("x"), 8, "UIDHash length")
}
