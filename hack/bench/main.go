// Command bench measures fleetlet against the floor on a local sandbox: N
// pods created in an enabled namespace of cluster-1 (proxies: gated,
// elected, pinned, bound to a virtual node, Running once their delegates
// are), then the same N pods created directly in the targets, spread
// evenly, until Running. It prints both side by side with the ratios, and
// the feedback lag (delegate seen Running → proxy seen Running). It
// reports; it asserts nothing. Run it with `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

func main() {
	var (
		pods     = flag.Int("pods", 1000, "pods per run")
		clusters = flag.Int("clusters", 3, "sandbox clusters (cluster-1 the source; every cluster a target)")
		dir      = flag.String("dir", "", "sandbox folder (default: a temporary one, removed afterwards)")
		binDir   = flag.String("bin-dir", "bin", "folder with the binaries")
		timeout  = flag.Duration("timeout", 20*time.Minute, "bound on each run")
		workers  = flag.Int("workers", 16, "parallel creators")
	)
	flag.Parse()
	if err := run(*pods, *clusters, *dir, *binDir, *timeout, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type result struct {
	name      string
	pods      int
	total     time.Duration
	latencies []time.Duration
	// finished is when each pod was seen done.
	finished map[string]time.Time
}

func (r result) percentile(p float64) time.Duration { return percentile(r.latencies, p) }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	l := append([]time.Duration(nil), d...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	i := int(p * float64(len(l)-1))
	return l[i]
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// watchDelegates records when each delegate of the source in namespace ns
// of the targets is first seen Running, by its proxy's name.
func watchDelegates(ctx context.Context, clients map[string]kubernetes.Interface, ns string) func() map[string]time.Time {
	var mu sync.Mutex
	seen := map[string]time.Time{}
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !running(p) {
			return
		}
		now := time.Now()
		name := p.Annotations[v1alpha1.AnnotationParentName]
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[name]; !ok && name != "" {
			seen[name] = now
		}
	}
	for _, cs := range clients {
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = v1alpha1.LabelParentCluster + "=" + sandbox.SourceCluster
			}))
		inf := factory.Core().V1().Pods().Informer()
		_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
		factory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
	}
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]time.Time, len(seen))
		for k, v := range seen {
			out[k] = v
		}
		return out
	}
}

func (r result) throughput() float64 { return float64(r.pods) / r.total.Seconds() }

func run(n, clusters int, dir, binDir string, timeout time.Duration, workers int) error {
	ctx := context.Background()
	if dir == "" {
		tmp, err := os.MkdirTemp("", "fleetlet-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	// Both runs' pods stay until the end: the nodes take far more pods
	// than kubelet's default 250, so that neither run is refused for room.
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, BinDir: binDir, Clusters: clusters, NodePods: "2000", DieWithParent: true, Out: os.Stderr})
	if err != nil {
		return err
	}
	defer func() { _ = sb.Down(context.Background()) }()

	names := sb.ClusterNames()
	clients := map[string]kubernetes.Interface{}
	for _, c := range names {
		cfg, err := sb.RESTConfig(c)
		if err != nil {
			return err
		}
		cfg.QPS, cfg.Burst = 500, 1000
		if clients[c], err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	}
	const ns = "bench"
	for _, c := range names {
		labels := map[string]string{"source.multicluster.fleetlet.io/" + sandbox.SourceCluster: "true"}
		if c == sandbox.SourceCluster {
			labels[v1alpha1.LabelEnabled] = "true"
		}
		if _, err := clients[c].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// The same namespace without fleetlet, for the floor.
	const directNS = "bench-direct"
	for _, c := range names {
		if _, err := clients[c].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: directNS}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}

	// Warm up once (informers, first watches of the namespace in every
	// target, the garbage collector learning the CRDs): steady state is
	// what is measured.
	fmt.Fprintln(os.Stderr, "warming up")
	if _, err := measure(ctx, "warm-up", len(names), workers, timeout, func(i int) (kubernetes.Interface, string) {
		return clients[sandbox.SourceCluster], ns
	}, running); err != nil {
		return err
	}
	delegates := watchDelegates(ctx, clients, ns)
	fmt.Fprintf(os.Stderr, "fleetlet: %d pods in %s/%s\n", n, sandbox.SourceCluster, ns)
	proxied, err := measure(ctx, "fleetlet (proxy Running)", n, workers, timeout, func(i int) (kubernetes.Interface, string) {
		return clients[sandbox.SourceCluster], ns
	}, running)
	if err != nil {
		return err
	}
	// Feedback lag: from the delegate seen Running in its target to its
	// proxy seen Running in the source (same observer, same clock).
	var lag []time.Duration
	delegateRunning := delegates()
	for name, proxyRunning := range proxied.finished {
		if d, ok := delegateRunning[name]; ok {
			lag = append(lag, max(0, proxyRunning.Sub(d)))
		}
	}
	fmt.Fprintf(os.Stderr, "direct: %d pods spread over %v\n", n, names)
	direct, err := measure(ctx, "direct (pod Running)", n, workers, timeout, func(i int) (kubernetes.Interface, string) {
		return clients[names[i%len(names)]], directNS
	}, running)
	if err != nil {
		return err
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tpods\ttotal\tpods/s\tp50\tp99\t")
	for _, r := range []result{proxied, direct} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%s\t%s\t\n", r.name, r.pods, r.total.Round(10*time.Millisecond), r.throughput(),
			r.percentile(0.5).Round(time.Millisecond), r.percentile(0.99).Round(time.Millisecond))
	}
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2fx", a.Seconds()/b.Seconds()) }
	fmt.Fprintf(tw, "fleetlet / direct\t\t%s\t%.2fx\t%s\t%s\t\n", ratio(proxied.total, direct.total), proxied.throughput()/direct.throughput(),
		ratio(proxied.percentile(0.5), direct.percentile(0.5)), ratio(proxied.percentile(0.99), direct.percentile(0.99)))
	fmt.Fprintf(tw, "feedback lag (delegate Running → proxy Running)\t%d\t\t\t%s\t%s\t\n", len(lag),
		percentile(lag, 0.5).Round(time.Millisecond), percentile(lag, 0.99).Round(time.Millisecond))
	return tw.Flush()
}

// measure creates n pods with workers creators and records, per pod, the time
// from just before its create call to the watch event showing it done.
func measure(ctx context.Context, name string, n, workers int, timeout time.Duration,
	where func(i int) (kubernetes.Interface, string), done func(*corev1.Pod) bool) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	started := map[string]time.Time{}
	finished := map[string]time.Time{}
	label := fmt.Sprintf("bench-run=%d", time.Now().UnixNano())
	key, value, _ := strings.Cut(label, "=")

	// One watch per cluster-namespace used.
	seen := map[kubernetes.Interface]string{}
	for i := 0; i < n && len(seen) < n; i++ {
		cs, ns := where(i)
		seen[cs] = ns
	}
	allDone := make(chan struct{})
	var closeOnce sync.Once
	record := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !done(p) {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, ok := finished[p.Name]; !ok {
			finished[p.Name] = now
		}
		if len(finished) == n {
			closeOnce.Do(func() { close(allDone) })
		}
	}
	// Informers, not raw watches: they list again and resume when the API
	// server closes a watch, so no event is lost.
	for cs, ns := range seen {
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = label }))
		inf := factory.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    record,
			UpdateFunc: func(_, obj any) { record(obj) },
		}); err != nil {
			return result{}, err
		}
		factory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
		// A safety net: a periodic list records what an event may not
		// have shown (at the time of the list, so never too early).
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-allDone:
					return
				case <-tick.C:
				}
				list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: label, ResourceVersion: "0"})
				if err != nil {
					continue
				}
				for i := range list.Items {
					record(&list.Items[i])
				}
			}
		}()
	}

	begin := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cs, ns := where(i)
				podName := fmt.Sprintf("%s-%05d", strings.ToLower(strings.Fields(name)[0]), i)
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns, Labels: map[string]string{key: value}},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: ptr.To[int64](0),
						Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}},
					},
				}
				mu.Lock()
				started[podName] = time.Now()
				mu.Unlock()
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating %s: %w", podName, err)
					return
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return result{}, err
	default:
	}
	select {
	case <-allDone:
	case <-ctx.Done():
		mu.Lock()
		got := len(finished)
		mu.Unlock()
		return result{}, fmt.Errorf("%s: only %d of %d pods done after %s", name, got, n, timeout)
	}
	total := time.Since(begin)
	r := result{name: name, pods: n, total: total, finished: map[string]time.Time{}}
	mu.Lock()
	for podName, end := range finished {
		r.finished[podName] = end
		r.latencies = append(r.latencies, end.Sub(started[podName]))
	}
	mu.Unlock()
	return r, nil
}
