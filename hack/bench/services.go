package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// globalService is what measureGlobalService found: per delegate, from
// its being seen Ready in its cluster to its address being seen in
// another target's fleetlet EndpointSlice of the Service.
type globalService struct {
	pods, listed int
	in, observer string
	latencies    []time.Duration // sorted
}

func (g globalService) String() string {
	return fmt.Sprintf("global Service, %d delegates in %s: %d listed in %s's fleetlet EndpointSlice; delegate Ready → listed there p50 %s, p99 %s",
		g.pods, g.in, g.listed, g.observer, percentile(g.latencies, 0.5).Round(time.Millisecond), percentile(g.latencies, 0.99).Round(time.Millisecond))
}

// measureGlobalService creates, in namespace ns of the source, a Service
// annotated global and n proxies it selects, all placed in the last
// cluster, and watches their delegates there and the Service's fleetlet
// EndpointSlices in cluster-2 (the managers must run with
// --routable-pod-networks). The pods are deleted at the end.
func measureGlobalService(ctx context.Context, clients map[string]kubernetes.Interface, names []string, ns string, n int, timeout time.Duration) (globalService, error) {
	if len(names) < 3 {
		return globalService{}, fmt.Errorf("a global Service needs two targets besides the source: run with --clusters 3 or more")
	}
	in, observer := names[len(names)-1], names[1]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	src := clients[sandbox.SourceCluster]
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-global", Annotations: map[string]string{v1alpha1.AnnotationGlobal: "true"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"bench-global": "true"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := src.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return globalService{}, err
	}
	var mu sync.Mutex
	ready, listed := map[string]time.Time{}, map[string]time.Time{}
	watch := func(cs kubernetes.Interface, selector string, inf func(informers.SharedInformerFactory) toolscache.SharedIndexInformer, record func(obj any)) {
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
		i := inf(factory)
		_, _ = i.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
		factory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
	}
	watch(clients[in], v1alpha1.LabelParentCluster+"="+sandbox.SourceCluster+",bench-global=true",
		func(f informers.SharedInformerFactory) toolscache.SharedIndexInformer {
			return f.Core().V1().Pods().Informer()
		},
		func(obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Status.PodIP == "" || !podReady(p) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if _, ok := ready[p.Status.PodIP]; !ok {
				ready[p.Status.PodIP] = time.Now()
			}
		})
	watch(clients[observer], discoveryv1.LabelServiceName+"=bench-global,"+discoveryv1.LabelManagedBy+"="+v1alpha1.EndpointSliceManagedBy,
		func(f informers.SharedInformerFactory) toolscache.SharedIndexInformer {
			return f.Discovery().V1().EndpointSlices().Informer()
		},
		func(obj any) {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok {
				return
			}
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if _, ok := listed[a]; !ok && e.Conditions.Ready != nil && *e.Conditions.Ready {
						listed[a] = now
					}
				}
			}
		})
	// The observer holds the Service's copy, hence its slices, only with
	// a delegate of its own: one first, and its copy there, before the
	// measured pods.
	anchor := benchPod("global-anchor", ns, "bench-global", "true")
	anchor.Annotations = map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + observer}
	if _, err := create(ctx, src, anchor); err != nil {
		return globalService{}, err
	}
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := clients[observer].CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return globalService{}, fmt.Errorf("no copy of the global Service in %s: %w", observer, err)
	}
	fmt.Fprintf(os.Stderr, "global Service: %d delegates in %s, watched from %s\n", n, in, observer)
	for i := range n {
		p := benchPod(fmt.Sprintf("global-%03d", i), ns, "bench-global", "true")
		p.Annotations = map[string]string{v1alpha1.AnnotationClusterSelector: "topology.kubernetes.io/region=" + in}
		if _, err := create(ctx, src, p); err != nil {
			return globalService{}, err
		}
	}
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for ip := range ready {
			if _, ok := listed[ip]; ok {
				done++
			}
		}
		return done >= n, nil
	})
	mu.Lock()
	defer mu.Unlock()
	g := globalService{pods: n, in: in, observer: observer}
	for ip, r := range ready {
		if l, ok := listed[ip]; ok {
			g.latencies = append(g.latencies, max(0, l.Sub(r)))
		}
	}
	sort.Slice(g.latencies, func(i, j int) bool { return g.latencies[i] < g.latencies[j] })
	g.listed = len(g.latencies)
	if err != nil {
		return g, fmt.Errorf("%d of %d delegates listed after %s: %w", g.listed, n, timeout, err)
	}
	return g, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
