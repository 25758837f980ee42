package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRemovedKeys(t *testing.T) {
	for _, tc := range []struct {
		name, prev string
		old, now   map[string]string
		want       string
	}{
		{name: "nothing removed", old: map[string]string{"a": "1"}, now: map[string]string{"a": "2"}, want: ""},
		{name: "one removed", old: map[string]string{"a": "1", "b": "1"}, now: map[string]string{"a": "1"}, want: "b"},
		{name: "kept from an earlier update", prev: "c", old: map[string]string{"a": "1", "b": "1"}, now: map[string]string{"a": "1"}, want: "b,c"},
		{name: "set again", prev: "b,c", old: map[string]string{"a": "1"}, now: map[string]string{"a": "1", "c": "x"}, want: "b"},
		{name: "blanks ignored", prev: " ,b,", old: nil, now: nil, want: "b"},
	} {
		assert.Equal(t, tc.want, RemovedKeys(tc.prev, tc.old, tc.now), "%s: RemovedKeys(%q)", tc.name, tc.prev)
	}
}
