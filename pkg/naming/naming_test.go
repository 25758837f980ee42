package naming

import (
	"strings"
	"testing"

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
		if got != tc.want {
			t.Errorf("RemoteName(%q, %q) = %q, want %q", tc.name, tc.uid, got, tc.want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("RemoteName(%q) = %q is not a DNS label: %v", tc.name, got, errs)
		}
	}
	// Same name, another pod (a StatefulSet pod recreated): another name.
	if RemoteName("db-0", "uid-a") == RemoteName("db-0", "uid-b") {
		t.Error("two pods with the same name but different UIDs share a remote name")
	}
	// Stable: the same pod always gets the same name.
	first, again := RemoteName("db-0", "uid-a"), RemoteName("db-0", types.UID("uid-a"))
	if first != again {
		t.Error("RemoteName is not deterministic")
	}
	if len(UIDHash("x")) != 8 {
		t.Errorf("UIDHash length = %d", len(UIDHash("x")))
	}
}
