// Command bench measures fleetlet against the floor on a local sandbox: N
// pods created in an enabled namespace of cluster-1 (proxies: gated,
// elected, pinned, bound to a virtual node, Running once their delegates
// are), and the same N pods created directly in the targets, spread
// evenly, until Running; then the same paced (--rate pods a second for
// --paced-for); RUNS times, which path goes first alternating, the pods
// of each deleted before the next. It prints every run side by
// side, the medians of the ratios, the feedback lag (delegate seen Running
// → proxy seen Running), and what each path cost per pod: API requests
// each cluster answered by verb and resource (apiserver_request_total),
// requests fleetlet's own processes made (rest_client_requests_total) and
// CPU by process (/proc), and the source manager's workqueue depths
// (sampled every second); --out writes it as JSON too, and a PNG plot per
// mode of the pods Running over time beside it. With
// --global-service-pods it then times a global Service's EndpointSlices
// following new delegates. It reports; it asserts nothing. Run it with
// `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
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
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
)

// newLeaderReads is how long after the managers start to lead the bench
// waits before it measures: the chaperon controller's takeover margin (30 s)
// and some.
const newLeaderReads = 35 * time.Second

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", 1000, "pods per run")
	flag.IntVar(&o.runs, "runs", 3, "runs of both paths, alternating which goes first; the report gives each and the medians")
	flag.Float64Var(&o.rate, "rate", 10, "pods per second of the paced run after each burst (0: bursts only)")
	flag.DurationVar(&o.pacedFor, "paced-for", time.Minute, "how long the paced run creates pods")
	flag.IntVar(&o.clusters, "clusters", 3, "sandbox clusters (cluster-1 the source; every cluster a target)")
	flag.StringVar(&o.dir, "dir", "", "sandbox folder (default: a temporary one, removed afterwards)")
	flag.StringVar(&o.binDir, "bin-dir", "bin", "folder with the binaries")
	flag.StringVar(&o.out, "out", "", "write the results as JSON to this file too")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound on each run")
	flag.IntVar(&o.workers, "workers", 16, "parallel creators")
	flag.IntVar(&o.globalPods, "global-service-pods", 0, "after the runs, time N delegates of a global Service placed in the last cluster, from Ready there to listed in cluster-2's fleetlet EndpointSlice (the managers then run with --routable-pod-networks)")
	flag.IntVar(&o.placementPods, "placement-pods", 0, "after the runs, time the election of N proxies paced at --placement-rate without constraints, then with each kind of cluster-level constraint (spread, preferred cluster, pod affinity), and print the medians side by side")
	flag.Float64Var(&o.placementRate, "placement-rate", 2, "pods a second in the placement cases: slow enough that one election is timed, not a queue (on 2 cores, 5 a second already builds one)")
	flag.BoolVar(&o.fragment, "fragment", false, "make the last cluster fragmented before the runs: every node of it too small for one pod ("+fragmentedCPU+" of CPU each, the pods ask for 10m), the cluster empty, the others half full with another tenant's pods, so that the fragmented cluster has the fleet's highest free share; the direct path then spreads its pods over the other clusters. With --manager-arg=--candidate-targets=1 it shows how often the best-ranked target refuses")
	flag.Func("manager-arg", "one more argument for every fleetlet manager, to compare a setting (repeatable; e.g. --manager-arg=--candidate-targets=1)", func(v string) error {
		o.managerArgs = append(o.managerArgs, v)
		return nil
	})
	flag.Func("scheduler-arg", "one more argument for every candidate scheduler (repeatable; e.g. --scheduler-arg=--leader-elect-renew-deadline=40s, so that a scheduler starved of CPU by ten clusters on two cores does not lose its Lease and exit: the sandbox restarts no process)", func(v string) error {
		o.schedulerArgs = append(o.schedulerArgs, v)
		return nil
	})
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	pods, runs, clusters, workers int
	globalPods, placementPods     int
	fragment                      bool
	rate, placementRate           float64
	dir, binDir, out              string
	timeout, pacedFor             time.Duration
	managerArgs                   []string
	schedulerArgs                 []string
}

type result struct {
	name string
	pods int
	// begin is when the first pod was created; total, how long until the
	// last was done.
	begin     time.Time
	total     time.Duration
	latencies []time.Duration
	// finished is when each pod was seen done.
	finished map[string]time.Time
	// retried counts the creations tried again; failed, those given up.
	retried int
	failed  []string
	// incomplete says why not every pod was done, or is empty.
	incomplete string
}

// benchPod is one measured pod: tiny requests, no grace period.
func benchPod(name, ns, key, value string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{key: value}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}},
		},
	}
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

// throughput counts the pods that ran.
func (r result) throughput() float64 { return float64(len(r.finished)) / r.total.Seconds() }

func run(o options) error {
	ctx := context.Background()
	clusters, dir, binDir, timeout, workers := o.clusters, o.dir, o.binDir, o.timeout, o.workers
	if dir == "" {
		tmp, err := os.MkdirTemp("", "fleetlet-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	// The managers probe their targets (and renew their heartbeats) as
	// the chart does, not as the sandbox's fast e2e settings do (every
	// 3 s, 2 s to answer): a target
	// slowed by the burst is not called NotReady, and its proxies are not
	// evicted, for answering late. --manager-arg comes after, and wins.
	managerArgs := []string{
		"--target-probe-interval=" + fleet.DefaultProbeInterval.String(),
		"--target-probe-timeout=" + fleet.DefaultProbeTimeout.String(),
		"--source-heartbeat-duration=" + fleet.DefaultHeartbeatDuration.String(),
	}
	if o.globalPods > 0 {
		managerArgs = append(managerArgs, "--routable-pod-networks=true")
	}
	o.managerArgs = append(managerArgs, o.managerArgs...)
	// Both runs' pods stay until the end: the nodes take far more pods
	// than kubelet's default 250, so that neither run is refused for room.
	sb, err := sandbox.Up(ctx, sandbox.Options{Dir: dir, BinDir: binDir, Clusters: clusters, NodePods: "2000", DieWithParent: true, Out: os.Stderr, ManagerArgs: o.managerArgs, SchedulerArgs: o.schedulerArgs})
	if err != nil {
		return err
	}
	defer func() { _ = sb.Down(context.Background()) }()
	leading := time.Now() // the managers lead from about now

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
	warm, err := measure(ctx, "warm-up", len(names), workers, 0, timeout, func(i int) (kubernetes.Interface, string) {
		return clients[sandbox.SourceCluster], ns
	}, nil, running)
	if err != nil {
		return err
	}
	if warm.incomplete != "" {
		return fmt.Errorf("warm-up: %s", warm.incomplete)
	}
	// A chaperon controller that has just started to lead reads every
	// chaperon created in its first 30 s from the API server before it
	// creates the pod (a manager before it may have written it): steady
	// state starts after that.
	if wait := time.Until(leading.Add(newLeaderReads)); wait > 0 {
		fmt.Fprintf(os.Stderr, "waiting %s: the targets' new leaders' first 30 s past\n", wait.Round(time.Second))
		time.Sleep(wait)
	}
	// Where the direct path's pods go: every cluster, but a fragmented
	// one (no pod fits there).
	fits := names
	if o.fragment {
		last := names[len(names)-1]
		fmt.Fprintf(os.Stderr, "fragmenting %s (%d nodes of %s of CPU) and filling half of every other cluster\n", last, fragmentedNodes, fragmentedCPU)
		if err := fragmentFleet(ctx, clients, names, sandbox.SourceCluster); err != nil {
			return err
		}
		fits = names[:len(names)-1]
	}
	paths := []path{
		{name: "fleetlet (proxy Running)", where: func(int) (kubernetes.Interface, string) { return clients[sandbox.SourceCluster], ns }, delegatesIn: ns,
			deleteIn: []place{{sandbox.SourceCluster, ns}}, goneIn: append([]place{{sandbox.SourceCluster, ns}}, inEach(names, ns)...)},
		{name: "direct (pod Running)", where: func(i int) (kubernetes.Interface, string) { return clients[fits[i%len(fits)]], directNS },
			deleteIn: inEach(names, directNS), goneIn: inEach(names, directNS)},
	}
	modes := []mode{{Name: "burst", Pods: o.pods}}
	if o.rate > 0 {
		modes = append(modes, mode{Name: "paced", Pods: max(1, int(o.rate*o.pacedFor.Seconds())), Rate: o.rate})
	}
	var runs []benchRun
	var cleanErr error
measuring:
	for i := range o.runs {
		for _, md := range modes {
			// Alternated: neither path always runs on a cluster the
			// other just loaded.
			order := []int{0, 1}
			if i%2 == 1 {
				order = []int{1, 0}
			}
			run := benchRun{Index: i + 1, Mode: md}
			for _, k := range order {
				fmt.Fprintf(os.Stderr, "run %d of %d, %s: %s, %d pods\n", i+1, o.runs, md, paths[k].name, md.Pods)
				m, err := paths[k].measure(ctx, sb, clients, o, md)
				if err != nil {
					return err
				}
				m.deletedPods = len(m.finished)
				before := take(ctx, sb, clients)
				m.deleted, err = paths[k].deleteTimed(ctx, clients, m.deletedPods)
				m.deletionCost = costOf(before, take(ctx, sb, clients), m.deletedPods)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
				if k == 0 {
					run.Fleetlet = m
				} else {
					run.Direct = m
				}
				if err := clean(ctx, clients, []string{ns, directNS}); err != nil {
					// What was measured is reported, then why it stopped.
					cleanErr = err
					runs = append(runs, run)
					break measuring
				}
			}
			runs = append(runs, run)
		}
	}
	if err := report(os.Stdout, runs, modes, o); err != nil {
		return err
	}
	if cleanErr != nil {
		return fmt.Errorf("stopped after the run above: %w", cleanErr)
	}
	if o.placementPods > 0 {
		if err := measurePlacement(ctx, os.Stdout, clients, names, ns, o); err != nil {
			return err
		}
	}
	if o.globalPods > 0 {
		g, err := measureGlobalService(ctx, clients, names, ns, o.globalPods, timeout)
		fmt.Println(g)
		return err
	}
	return nil
}

// measure creates n pods with workers creators and records, per pod, the time
// from just before its create call to the watch event showing it done.
// shape, when not nil, adds to each bench pod (constraints, for instance).
func measure(ctx context.Context, name string, n, workers int, rate float64, timeout time.Duration,
	where func(i int) (kubernetes.Interface, string), shape func(*corev1.Pod), done func(*corev1.Pod) bool) (result, error) {
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
	// want is how many pods can still be done: n less those never created.
	want, retried := n, 0
	var failed []string
	checkDone := func() { // under mu
		if len(finished) >= want {
			closeOnce.Do(func() { close(allDone) })
		}
	}
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
		checkDone()
	}
	// Informers, not raw watches: they list again and resume when the API
	// server closes a watch, so no event is lost, and the observer adds no
	// periodic LIST to the API servers it measures.
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
	}

	begin := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cs, ns := where(i)
				podName := fmt.Sprintf("%s-%05d", strings.ToLower(strings.Fields(name)[0]), i)
				mu.Lock()
				started[podName] = time.Now()
				mu.Unlock()
				pod := benchPod(podName, ns, key, value)
				if shape != nil {
					shape(pod)
				}
				tries, err := create(ctx, cs, pod)
				mu.Lock()
				retried += tries - 1
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", podName, err))
					delete(started, podName)
					want--
					checkDone()
				}
				mu.Unlock()
			}
		}()
	}
	// A burst feeds the creators as fast as they take pods; a paced run
	// one pod every 1/rate seconds.
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
feed:
	for i := range n {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	total := time.Since(begin)
	mu.Lock()
	defer mu.Unlock()
	r := result{name: name, pods: n, begin: begin, total: total, finished: map[string]time.Time{}, retried: retried, failed: failed}
	for podName, end := range finished {
		if begun, ok := started[podName]; ok {
			r.finished[podName] = end
			r.latencies = append(r.latencies, end.Sub(begun))
		}
	}
	if len(finished) < n {
		r.incomplete = fmt.Sprintf("%d of %d pods Running after %s: %d not created (API server overloaded or refusing), %d created but not Running",
			len(finished), n, total.Round(time.Second), len(failed), want-len(finished))
	}
	return r, nil
}

// inEach is namespace ns in each of the clusters.
func inEach(clusters []string, ns string) []place {
	out := make([]place, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, place{c, ns})
	}
	return out
}
