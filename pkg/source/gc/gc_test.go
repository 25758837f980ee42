package gc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/naming"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

type podBuilder struct{ corev1.Pod }

func proxy(ns, name string, uid types.UID) *podBuilder {
	return &podBuilder{corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: uid, Finalizers: []string{v1alpha1.FinalizerDelegate},
	}}}
}

func (b *podBuilder) finalizers(f ...string) *podBuilder { b.Finalizers = f; return b }
func (b *podBuilder) obj() *corev1.Pod                   { return b.DeepCopy() }

func TestJudge(t *testing.T) {
	parent := Parent{Namespace: "ns", Name: "web", UID: "uid-1"}
	tests := []struct {
		name   string
		parent Parent
		proxy  *corev1.Pod
		want   Reason
	}{
		{name: "live proxy", parent: parent, proxy: proxy("ns", "web", "uid-1").obj(), want: ""},
		{name: "live proxy being deleted keeps its chaperons for the proxy reconciler", parent: parent,
			proxy: func() *corev1.Pod {
				p := proxy("ns", "web", "uid-1").obj()
				p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				return p
			}(), want: ""},
		{name: "live proxy with other finalizers too", parent: parent,
			proxy: proxy("ns", "web", "uid-1").finalizers("a/b", v1alpha1.FinalizerDelegate).obj(), want: ""},
		{name: "no proxy", parent: parent, proxy: nil, want: ReasonProxyNotFound},
		{name: "proxy recreated under the same name", parent: parent, proxy: proxy("ns", "web", "uid-2").obj(), want: ReasonProxyReplaced},
		{name: "proxy without our finalizer", parent: parent, proxy: proxy("ns", "web", "uid-1").finalizers("a/b").obj(), want: ReasonProxyNotManaged},
		{name: "no parent uid", parent: Parent{Namespace: "ns", Name: "web"}, proxy: proxy("ns", "web", "uid-1").obj(), want: ReasonNoParent},
		{name: "no parent name", parent: Parent{Namespace: "ns", UID: "uid-1"}, proxy: nil, want: ReasonNoParent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Judge(tt.parent, tt.proxy)
			assert.Falsef(t, got != tt.want, "Judge() = %q, want %q", got, tt.want)
		})
	}
}

func TestParentOf(t *testing.T) {
	pc := &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{
		Namespace: "remote-ns", Name: "x",
		Labels: map[string]string{v1alpha1.LabelParentUID: "u"},
		Annotations: map[string]string{
			v1alpha1.AnnotationParentName: "web",
		},
	}}
	assert.Empty(t, cmp.Diff(Parent{Namespace: "remote-ns", Name: "web", UID: "u"}, ParentOf(pc)), "ParentOf without a namespace annotation (-want,+got)")
	pc.Annotations[v1alpha1.AnnotationParentNamespace] = "ns"
	assert.Equal(t, "ns", ParentOf(pc).Namespace, "ParentOf namespace: the annotation's")
}

type fakeTarget struct {
	key   proxypod.TargetKey
	c     client.Client
	ready bool
	self  bool
}

func (f fakeTarget) Key() proxypod.TargetKey { return f.key }
func (f fakeTarget) Client() client.Client   { return f.c }
func (f fakeTarget) Ready() bool             { return f.ready }
func (f fakeTarget) Self() bool              { return f.self }

type fakeTargets []Target

func (f fakeTargets) List() []Target { return f }

func chaperonOf(p *corev1.Pod, source string, created time.Time) *v1alpha1.PodChaperon {
	return &v1alpha1.PodChaperon{ObjectMeta: metav1.ObjectMeta{
		Namespace: p.Namespace, Name: naming.RemoteName(p.Name, p.UID),
		CreationTimestamp: metav1.NewTime(created),
		Labels:            map[string]string{v1alpha1.LabelParentUID: string(p.UID), v1alpha1.LabelParentCluster: source},
		Annotations:       map[string]string{v1alpha1.AnnotationParentName: p.Name, v1alpha1.AnnotationParentNamespace: p.Namespace},
	}}
}

// The cache and the API server disagree, and the clock decides youth: a
// pass deletes only orphans old enough and confirmed by the API server.
func TestCollectGuards(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	old, young := now.Add(-10*time.Minute), now.Add(-10*time.Second)
	s := testenv.Scheme()
	enabled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{v1alpha1.LabelEnabled: "true"}}}

	live := proxy("ns", "live", "u-live").obj()
	unseen := proxy("ns", "unseen", "u-unseen").obj() // in the API, not yet in the cache
	gone := proxy("ns", "gone", "u-gone").obj()
	fresh := proxy("ns", "fresh", "u-fresh").obj()
	foreign := proxy("ns", "foreign", "u-foreign").obj() // another source's, gone
	// A proxy in a namespace that is not enabled (any more) stays managed.
	elsewhere := proxy("other", "elsewhere", "u-else").obj()
	goneElsewhere := proxy("other", "gone2", "u-gone2").obj()

	cache := fake.NewClientBuilder().WithScheme(s).WithObjects(enabled, live, elsewhere).Build()
	api := fake.NewClientBuilder().WithScheme(s).WithObjects(enabled, live, unseen, elsewhere).Build()
	remote := fake.NewClientBuilder().WithScheme(s).WithObjects(
		chaperonOf(live, "src", old),
		chaperonOf(unseen, "src", old),
		chaperonOf(gone, "src", old),
		chaperonOf(fresh, "src", young),
		chaperonOf(foreign, "other-source", old),
		chaperonOf(elsewhere, "src", old),
		chaperonOf(goneElsewhere, "src", old),
	).Build()
	notReady := fake.NewClientBuilder().WithScheme(s).WithObjects(chaperonOf(gone, "src", old)).Build()

	g, err := New(Options{
		SourceName: "src",
		Targets: fakeTargets{
			fakeTarget{key: proxypod.TargetKey{Name: "t1"}, c: remote, ready: true},
			fakeTarget{key: proxypod.TargetKey{Name: "t2"}, c: notReady, ready: false},
		},
		Reader: cache, APIReader: api,
		MinAge: time.Minute,
		Clock:  clocktesting.NewFakeClock(now),
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	report, err := g.Collect(context.Background())
	require.NoError(t, err)
	names := func(fs []Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Namespace+"/"+f.Parent.Name+":"+string(f.Reason))
		}
		return out
	}
	assert.Empty(t, cmp.Diff([]string{"ns/gone:ProxyNotFound", "other/gone2:ProxyNotFound"}, names(report.Deleted)), "deleted (-want,+got)")
	assert.Empty(t, cmp.Diff([]string{"ns/fresh:ProxyNotFound"}, names(report.Young)), "young (-want,+got)")
	assert.Empty(t, cmp.Diff([]string{"t2"}, report.SkippedTargets), "skipped targets (-want,+got)")
	assert.Equal(t, 6, report.Checked, "chaperons checked") // the other source's chaperon is not even listed
	var left v1alpha1.PodChaperonList
	require.NoError(t, remote.List(context.Background(), &left))
	var kept []string
	for _, pc := range left.Items {
		kept = append(kept, pc.Labels[v1alpha1.LabelParentCluster]+":"+pc.Annotations[v1alpha1.AnnotationParentName])
	}
	want := []string{"other-source:foreign", "src:elsewhere", "src:fresh", "src:live", "src:unseen"}
	assert.Empty(t, cmp.Diff(want, sorted(kept)), "chaperons left (-want,+got)")
	assert.NoError(t, notReady.Get(context.Background(), client.ObjectKeyFromObject(chaperonOf(gone, "src", old)), &v1alpha1.PodChaperon{}), "the chaperon in a target that is not Ready was touched")
}

// A namespaced Target is only ever asked about its own namespace.
func TestCollectNamespacedTarget(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s := testenv.Scheme()
	enabled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{v1alpha1.LabelEnabled: "true"}}}
	gone := proxy("ns", "gone", "u1").obj()
	goneThere := proxy("team", "gone", "u2").obj()
	src := fake.NewClientBuilder().WithScheme(s).WithObjects(enabled).Build()
	remote := fake.NewClientBuilder().WithScheme(s).WithObjects(
		chaperonOf(gone, "src", now.Add(-time.Hour)),
		chaperonOf(goneThere, "src", now.Add(-time.Hour)),
	).Build()
	g, err := New(Options{
		SourceName: "src",
		Targets:    fakeTargets{fakeTarget{key: proxypod.TargetKey{Namespace: "team", Name: "t"}, c: remote, ready: true}},
		Reader:     src, APIReader: src,
		Clock: clocktesting.NewFakeClock(now), Logger: testr.New(t),
	})
	require.NoError(t, err)
	report, err := g.Collect(context.Background())
	require.NoError(t, err)
	assert.Falsef(t, len(report.Deleted) != 1 || report.Deleted[0].Namespace != "team" || report.Deleted[0].Target != "team/t", "deleted %v, want only the chaperon in namespace team", report.Deleted)
}

func TestNewValidates(t *testing.T) {
	_, err := New(Options{})
	assert.Error(t, err, "New without source name or targets succeeded")
	_, err = New(Options{SourceName: "s", Targets: fakeTargets{}, MinAge: -time.Second})
	assert.Error(t, err, "New with a negative minimum age succeeded")
	g, err := New(Options{SourceName: "s", Targets: fakeTargets{}})
	require.NoError(t, err)
	assert.Falsef(t, g.opts.Interval != DefaultInterval || g.opts.MinAge != DefaultMinAge || g.opts.InitialDelay != DefaultInitialDelay, "defaults not applied: %+v", g.opts)
	assert.True(t, g.NeedLeaderElection(), "the collector must run on the leader only")
	_, err = g.Collect(context.Background())
	assert.Error(t, err, "Collect without readers succeeded")
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestJudgeChaperon(t *testing.T) {
	parent := Parent{Namespace: "ns", Name: "web", UID: "uid-1"}
	withRecord := func(status corev1.ConditionStatus, target string) *corev1.Pod {
		p := proxy("ns", "web", "uid-1").obj()
		p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionElected, Status: status,
			Message: proxypod.Record{TargetNamespace: "team", TargetName: target, Chaperon: "web-1234"}.Message()}}
		return p
	}
	for _, tc := range []struct {
		name  string
		proxy *corev1.Pod
		want  Reason
	}{
		{"no record: candidates or pending ones stay", proxy("ns", "web", "uid-1").obj(), ""},
		{"record names this target", withRecord(corev1.ConditionTrue, "t1"), ""},
		{"record names another target", withRecord(corev1.ConditionTrue, "t2"), ReasonLostElection},
		{"record dropped, re-electing", withRecord(corev1.ConditionFalse, "t2"), ""},
		{"proxy gone", nil, ReasonProxyNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, JudgeChaperon(parent, tc.proxy, "team/t1"))
		})
	}
}
