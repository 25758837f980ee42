package follow_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// callCounter counts a client's calls by verb.
type callCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *callCounter) add(verb string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[verb]++
}

func (c *callCounter) take() (total int, by string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for v, n := range c.calls {
		total += n
		parts = append(parts, v+"="+itoa(n))
	}
	sort.Strings(parts)
	c.calls = map[string]int{}
	return total, strings.Join(parts, " ")
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

func counting(c client.WithWatch, n *callCounter) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			n.add("get")
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			n.add("list")
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n.add("create")
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			n.add("update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			n.add("patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			n.add("delete")
			return c.Delete(ctx, obj, opts...)
		},
	})
}

// What a pod with three references (a ConfigMap, a Secret, its own
// ServiceAccount) costs in API calls to one target over its life: copies
// before the candidate, the Secret once elected, a second pod of the same
// workload, and the releases. The bounds are the design's, so that a change
// that makes following chattier fails here; the figures are logged.
func TestAPICallsPerTarget(t *testing.T) {
	f := setup(t)
	f.sourceObjects(t)
	fl := f.follower(t)
	ctx := context.Background()
	wc, err := client.NewWithWatch(targetEnv.Config, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	n := &callCounter{calls: map[string]int{}}
	tc := counting(wc, n)

	step := func(name string, max int, do func() error) {
		t.Helper()
		require.NoError(t, do(), name)
		total, by := n.take()
		t.Logf("%-40s %2d calls to the target (%s)", name, total, by)
		assert.LessOrEqual(t, total, max, "%s: calls to the target", name)
	}
	p1 := f.proxy(t, "p1", nil)
	p2 := f.proxy(t, "p2", nil)
	refs := refsOf(t, p1, userSpec())
	step("first candidate (creates 2 copies)", 7, func() error {
		return fl.Ensure(ctx, tc, "t1", p1, refs, follow.StageCandidate)
	})
	step("elected (creates the Secret copy)", 7, func() error {
		return fl.Ensure(ctx, tc, "t1", p1, refs, follow.StageDelegate)
	})
	step("second pod's candidate (adds a follower)", 7, func() error {
		return fl.Ensure(ctx, tc, "t1", p2, refsOf(t, p2, userSpec()), follow.StageCandidate)
	})
	step("first pod released (keeps the copies)", 8, func() error {
		return fl.Release(ctx, tc, "t1", p1)
	})
	step("second pod released (deletes them)", 8, func() error {
		return fl.Release(ctx, tc, "t1", p2)
	})
}

// Release reads by name the copies Ensure wrote for the proxy, and asks
// the target nothing for a proxy nothing was copied for (the usual pod, a
// loser whose candidate needed no copy); a Follower that may not have seen
// the proxy from its start (a restarted manager, a new leader) lists the
// copies instead. Before: every Release listed every followed kind of the
// namespace in the target, three LISTs per loser and per target at each
// deletion, for a pod with nothing to follow too.
func TestReleaseReadsWhatEnsureWrote(t *testing.T) {
	f := setup(t)
	f.sourceObjects(t)
	fl := f.follower(t)
	follow.KnowProxiesFromNow(fl)
	ctx := context.Background()
	wc, err := client.NewWithWatch(targetEnv.Config, client.Options{Scheme: testenv.Scheme()})
	require.NoError(t, err)
	n := &callCounter{calls: map[string]int{}}
	tc := counting(wc, n)
	copies := map[string]client.Object{"cfg": &corev1.ConfigMap{}, "creds": &corev1.Secret{}, "builder": &corev1.ServiceAccount{}}

	p1 := f.proxy(t, "p1", nil)
	none := f.proxy(t, "none", nil)
	require.NoError(t, fl.Ensure(ctx, tc, "t1", p1, refsOf(t, p1, userSpec()), follow.StageDelegate))
	for name, obj := range copies {
		require.Truef(t, f.get(t, f.target, name, obj), "Ensure made no copy of %s", name)
	}
	// A candidate of another pod: it follows the ConfigMap and the
	// ServiceAccount too (a candidate gets no Secret).
	shared := f.proxy(t, "shared", nil)
	require.NoError(t, fl.Ensure(ctx, tc, "t1", shared, refsOf(t, shared, userSpec()), follow.StageCandidate))
	n.take()

	require.NoError(t, fl.Release(ctx, tc, "t1", none))
	total, by := n.take()
	assert.Zerof(t, total, "releasing a proxy nothing was copied for: calls to the target (%s)", by)

	require.NoError(t, fl.Release(ctx, tc, "t1", p1))
	_, by = n.take()
	assert.NotContains(t, by, "list", "releasing a proxy the Follower copied for listed the copies")
	assert.False(t, f.get(t, f.target, "creds", &corev1.Secret{}), "the Secret's copy, which only the released proxy followed, is still there")
	for _, name := range []string{"cfg", "builder"} {
		obj := copies[name]
		if assert.Truef(t, f.get(t, f.target, name, obj), "the copy of %s, which another proxy follows, is gone", name) {
			assert.Equalf(t, entries(shared), followersOf(obj), "the followers of %s", name)
		}
	}
	require.NoError(t, fl.Release(ctx, tc, "t1", shared))
	for name, obj := range copies {
		assert.Falsef(t, f.get(t, f.target, name, obj), "the copy of %s, after its last follower was released, is still there", name)
	}
	n.take()

	p2 := f.proxy(t, "p2", nil)
	require.NoError(t, fl.Ensure(ctx, tc, "t1", p2, refsOf(t, p2, userSpec()), follow.StageDelegate))
	restarted := f.follower(t) // first used below: p2 is older than it
	n.take()
	require.NoError(t, restarted.Release(ctx, tc, "t1", p2))
	_, by = n.take()
	assert.Contains(t, by, "list", "a Follower that did not see the proxy from its start did not list the copies")
	for name, obj := range copies {
		assert.Falsef(t, f.get(t, f.target, name, obj), "the copy of %s, after a restarted Follower released its only follower, is still there", name)
	}
}
