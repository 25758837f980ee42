package proxy

import (
	"slices"
	"strings"
)

// ParseKeys reads a comma-separated list of label or annotation keys (which
// never hold a comma) as a set.
func ParseKeys(s string) map[string]bool {
	set := map[string]bool{}
	for k := range strings.SplitSeq(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			set[k] = true
		}
	}
	return set
}

// FormatKeys writes a set of keys as ParseKeys reads it, sorted.
func FormatKeys(set map[string]bool) string {
	keys := make([]string, 0, len(set))
	for k, in := range set {
		if in {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// RemovedKeys is the set of keys removed from a map over its updates: prev
// (an earlier RemovedKeys, as FormatKeys wrote it), plus the keys of old
// that now lacks, minus those now has again.
func RemovedKeys(prev string, old, now map[string]string) string {
	set := ParseKeys(prev)
	for k := range old {
		if _, ok := now[k]; !ok {
			set[k] = true
		}
	}
	for k := range now {
		delete(set, k)
	}
	return FormatKeys(set)
}
