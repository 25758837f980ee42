package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The comparison judges each spec by the section docs/conformance.md lists
// it in: a spec that passes plain and not enabled must be a difference, one
// that fails plain must be failing in both, a listing that passes in both is
// stale, and an unsteady spec is shown whatever it did. Runs without a
// sandbox.
func TestConformanceComparisonJudgesEachListing(t *testing.T) {
	doc := "# x\n\n## Differences\n\n| spec | reason |\n|---|---|\n| `diff` | the pin |\n| `diff fixed` | was the pin |\n\n" +
		"## Unsteady on the sandbox\n\n| spec | why |\n|---|---|\n| `wobbly` | a probe |\n\n" +
		"## Failing in both\n\n| spec | why |\n|---|---|\n| `kwok` | no container runs |\n| `kwok as diff` | no container runs |\n"
	listed := parseConformanceDoc(doc)
	got := listed["wobbly"]
	require.Falsef(t, got.kind != unsteady || got.reason != "a probe", "wobbly is read as %+v, want unsteady with its reason", got)
	pass, fail := specResult{state: "passed"}, specResult{state: "failed", failure: "boom"}
	plain := map[string]specResult{
		"same": pass, "diff": pass, "diff fixed": pass, "wobbly": fail, "kwok": fail,
		"kwok as diff": pass, "unlisted diff": pass, "unlisted failure": fail,
	}
	enabled := map[string]specResult{
		"same": pass, "diff": fail, "diff fixed": pass, "wobbly": pass, "kwok": fail,
		"kwok as diff": fail, "unlisted diff": fail, "unlisted failure": fail,
	}
	table, problems := compareConformance(plain, enabled, listed)
	want := map[string]bool{`"diff fixed" passes in both now`: true, `"kwok as diff" passes plain`: true,
		`"unlisted diff" passes plain`: true, `"unlisted failure" is failed plain`: true}
	assert.Lenf(t, problems, len(want), "problems:\n%s\nwant one for each of %v", strings.Join(problems, "\n"), want)
	for _, p := range problems {
		ok := false
		for w := range want {
			ok = ok || strings.HasPrefix(p, w)
		}
		assert.Truef(t, ok, "unexpected problem: %s", p)
	}
	assert.Containsf(t, table, "| `wobbly` | failed | passed | a probe |", "table:\n%s", table)
	assert.Containsf(t, table, "8 specs: 5 pass plain, 2 of them pass enabled too", "table:\n%s", table)
}
