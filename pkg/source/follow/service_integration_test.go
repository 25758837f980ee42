package follow_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
	"github.com/fleetlet/fleetlet/pkg/source/gc"
	"github.com/fleetlet/fleetlet/pkg/source/services"
)

func webService(typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// TestEnsureService: on real API servers, a copy of every Service type
// passes validation, takes its own cluster IP in the target, is updated
// without a write when nothing changed and with one when a port did, is
// recreated when it becomes headless, and is removed by RemoveService.
func TestEnsureService(t *testing.T) {
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
		t.Run(string(typ), func(t *testing.T) {
			f := setup(t)
			ctx := context.Background()
			fl := f.follower(t)
			src := webService(typ)
			f.create(t, f.source, src)
			f.occupy(t, src.Spec.ClusterIP)

			_, err := fl.EnsureService(ctx, f.target, "t1", src)
			require.NoError(t, err)
			var cp corev1.Service
			require.True(t, f.get(t, f.target, "web", &cp), "no copy in the target")
			assert.Equal(t, sourceName, cp.Labels[v1alpha1.LabelParentCluster], "copy labels %v: no parent-cluster %s", cp.Labels, sourceName)
			assert.Falsef(t, cp.Spec.ClusterIP == "" || cp.Spec.ClusterIP == src.Spec.ClusterIP,
				"copy cluster IP %q, source %q: the target allocates its own", cp.Spec.ClusterIP, src.Spec.ClusterIP)
			// NodePort and LoadBalancer become ClusterIP without the
			// operator's settings: no node port opens in the target.
			assert.Falsef(t, cp.Spec.Type != corev1.ServiceTypeClusterIP || cp.Spec.Ports[0].Port != 80 || cp.Spec.Ports[0].NodePort != 0 ||
				cp.Spec.Selector["app"] != "web" || cp.Spec.Selector[v1alpha1.LabelParentCluster] != sourceName,
				"copy spec %+v: want type ClusterIP, port 80 without a node port, selector app=web and parent-cluster %s", cp.Spec, sourceName)

			rv := cp.ResourceVersion
			_, err = fl.EnsureService(ctx, f.target, "t1", src)
			require.NoError(t, err)
			f.get(t, f.target, "web", &cp)
			assert.Equal(t, rv, cp.ResourceVersion, "an up-to-date copy was written again (resourceVersion)")

			src.Spec.Ports[0].Port = 81
			require.NoError(t, f.source.Update(ctx, src))
			_, err = fl.EnsureService(ctx, f.target, "t1", src)
			require.NoError(t, err)
			ip := cp.Spec.ClusterIP
			f.get(t, f.target, "web", &cp)
			assert.Falsef(t, cp.Spec.Ports[0].Port != 81 || cp.Spec.ClusterIP != ip,
				"after a port change: port %d cluster IP %s; want 81 and the same IP %s", cp.Spec.Ports[0].Port, cp.Spec.ClusterIP, ip)

			removed, err := fl.RemoveService(ctx, f.target, "t1", f.ns, "web")
			require.Falsef(t, err != nil || !removed, "RemoveService: removed %v, %v", removed, err)
			assert.False(t, f.get(t, f.target, "web", &corev1.Service{}), "the copy is still there")
		})
	}
}

// occupy takes ip in the target with a Service of its own, so that a
// copy's cluster IP equal to the source's can only mean the copy asked
// for it (the create is refused), never that the target's allocator
// happened on the same address: both envtest API servers allocate from
// the same range.
func (f *fixture) occupy(t *testing.T, ip string) {
	t.Helper()
	require.NotEmpty(t, ip, "the source Service has no cluster IP")
	taken := webService(corev1.ServiceTypeClusterIP)
	taken.Name, taken.Spec.ClusterIP, taken.Spec.Selector = "taken", ip, nil
	f.create(t, f.target, taken)
}

// TestEnsureServiceHeadless: a headless Service stays headless in the
// target, and a Service that becomes headless in the source (a new
// Service of the same name) has its copy recreated.
func TestEnsureServiceHeadless(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	src := webService(corev1.ServiceTypeClusterIP)
	f.create(t, f.source, src)
	_, err := fl.EnsureService(ctx, f.target, "t1", src)
	require.NoError(t, err)
	require.NoError(t, f.source.Delete(ctx, src))
	headless := webService(corev1.ServiceTypeClusterIP)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	f.create(t, f.source, headless)
	_, err = fl.EnsureService(ctx, f.target, "t1", headless)
	require.NoError(t, err)
	var cp corev1.Service
	found := f.get(t, f.target, "web", &cp)
	require.Falsef(t, !found || cp.Spec.ClusterIP != corev1.ClusterIPNone, "copy cluster IP %q, want None", cp.Spec.ClusterIP)
}

// TestServiceClash: a Service of the same name that this source did not
// create is refused (Clash) and left untouched, and RemoveService does not
// delete it.
func TestServiceClash(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	src := webService(corev1.ServiceTypeClusterIP)
	f.create(t, f.source, src)
	theirs := webService(corev1.ServiceTypeClusterIP)
	theirs.Spec.Ports[0].Port = 9000
	f.create(t, f.target, theirs)

	_, err := fl.EnsureService(ctx, f.target, "t1", src)
	assert.NotEmpty(t, refusal(t, err, follow.ReasonClash).Message, "the clash's refusal says nothing (its Event and condition would be empty)")
	removed, err := fl.RemoveService(ctx, f.target, "t1", f.ns, "web")
	require.Falsef(t, err != nil || removed, "RemoveService of a foreign Service: removed %v, %v", removed, err)
	var cur corev1.Service
	assert.True(t, f.get(t, f.target, "web", &cur) && cur.ResourceVersion == theirs.ResourceVersion, "the target's own Service was written or deleted")
}

// TestServiceCollector: a copy whose Service is gone from the source (the
// manager was not running when it was deleted) is collected; a copy whose
// Service exists stays, as does another source's Service.
func TestServiceCollector(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	kept, deleted := webService(corev1.ServiceTypeClusterIP), webService(corev1.ServiceTypeClusterIP)
	deleted.Name = "old"
	for _, s := range []*corev1.Service{kept, deleted} {
		f.create(t, f.source, s)
		_, err := fl.EnsureService(ctx, f.target, "gc-t", s)
		require.NoError(t, err)
	}
	others := webService(corev1.ServiceTypeClusterIP)
	others.Name, others.Labels = "others", map[string]string{v1alpha1.LabelParentCluster: "other-source"}
	f.create(t, f.target, others)
	require.NoError(t, f.source.Delete(ctx, deleted))
	g, err := gc.New(gc.Options{
		SourceName: sourceName,
		Targets:    testTargets{testTarget{key: proxy.TargetKey{Name: "gc-t"}, c: f.target}},
		Reader:     f.source, APIReader: f.source,
		MinAge:     time.Minute,
		Collectors: []gc.Collector{fl.ServiceCollector()},
	})
	require.NoError(t, err)
	rep, err := g.Collect(ctx)
	require.NoError(t, err)
	assert.Falsef(t, len(rep.Deleted) != 1 || rep.Deleted[0].Name != "old" || rep.Deleted[0].Reason != gc.ReasonSourceGone,
		"deleted %v, want the copy of old (SourceGone)", rep.Deleted)
	// Deleted in the foreground: without a garbage collector in this
	// control plane, it stays with its deletion timestamp.
	for name, want := range map[string]bool{"web": true, "old": false, "others": true} {
		var svc corev1.Service
		assert.Equal(t, want, f.get(t, f.target, name, &svc) && svc.DeletionTimestamp == nil, "Service %s exists and is not being deleted after a pass", name)
	}
	assert.Equal(t, 1.0, objects(t, "gc-t", "Service"), "fleetlet_follow_objects{gc-t,Service}")
}

// TestEnsureSlices: on a real API server, a global Service's slices are
// created owned by the copy, updated when a delegate goes, and deleted when
// none is left elsewhere; an EndpointSlice of the same name that is not
// this source's is a clash and is left untouched.
func TestEnsureSlices(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	fl := f.follower(t)
	src := webService(corev1.ServiceTypeClusterIP)
	f.create(t, f.source, src)
	cp, err := fl.EnsureService(ctx, f.target, "t1", src)
	require.NoError(t, err)
	here := proxy.TargetKey{Name: "t1"}
	elsewhere := func(name, ip string) corev1.Pod {
		rec := proxyRecord("t2", name)
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{"app": "web"}, Finalizers: []string{v1alpha1.FinalizerDelegate}},
			Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Conditions: []corev1.PodCondition{
				{Type: v1alpha1.ConditionElected, Status: corev1.ConditionTrue, Message: rec},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			}},
		}
	}
	two := []corev1.Pod{elsewhere("web-0", "10.9.0.1"), elsewhere("web-1", "10.9.0.2")}
	listed := func() []string {
		var list discoveryv1.EndpointSliceList
		require.NoError(t, f.target.List(ctx, &list, client.InNamespace(f.ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}))
		var out []string
		for _, s := range list.Items {
			assert.Falsef(t, len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != cp.UID,
				"slice %s owners %v, want the copy %s", s.Name, s.OwnerReferences, cp.UID)
			for _, e := range s.Endpoints {
				out = append(out, e.Addresses...)
			}
		}
		sort.Strings(out)
		return out
	}
	require.NoError(t, fl.EnsureSlices(ctx, f.target, "t1", cp, services.GlobalSlices(src, two, here, sourceName)))
	require.Equal(t, "10.9.0.1,10.9.0.2", strings.Join(listed(), ","), "slices list: want both delegates elsewhere")
	require.NoError(t, fl.EnsureSlices(ctx, f.target, "t1", cp, services.GlobalSlices(src, two[1:], here, sourceName)))
	require.Equal(t, "10.9.0.2", strings.Join(listed(), ","), "after one went, slices list")
	require.NoError(t, fl.EnsureSlices(ctx, f.target, "t1", cp, nil))
	require.Empty(t, listed(), "with no delegate elsewhere, slices list")

	want := services.GlobalSlices(src, two, here, sourceName)
	theirs := want[0].DeepCopy()
	theirs.Labels = map[string]string{discoveryv1.LabelServiceName: "web"}
	f.create(t, f.target, theirs)
	assert.NotEmpty(t, refusal(t, fl.EnsureSlices(ctx, f.target, "t1", cp, want), follow.ReasonClash).Message, "the clash's refusal says nothing (its Event would be empty)")
	var cur discoveryv1.EndpointSlice
	assert.True(t, f.get(t, f.target, theirs.Name, &cur) && cur.ResourceVersion == theirs.ResourceVersion, "the target's own EndpointSlice was written or deleted")
}

// proxyRecord is the Elected condition's message naming a ClusterTarget
// and a chaperon.
func proxyRecord(targetName, chaperon string) string {
	return proxy.Record{TargetName: targetName, Chaperon: chaperon}.Message()
}
