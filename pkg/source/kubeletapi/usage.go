package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// staleAfter is the age past which a delegate's sample is not reported:
// a metrics-server that stopped scraping must not keep a proxy's last
// usage alive.
const staleAfter = 2 * time.Minute

// usageTimeout bounds the reads of one scrape in the target.
const usageTimeout = 5 * time.Second

// containerUsage is one container of a proxy as its delegate's sample
// gives it; cpuSeconds is this node's cumulative count for it.
type containerUsage struct {
	name       string
	cpuCores   float64
	cpuSeconds float64
	memory     uint64
	start      time.Time
}

// podUsage is a proxy with its delegate's usage, sampled at at.
type podUsage struct {
	namespace, name string
	uid             types.UID
	start           time.Time
	at              time.Time
	containers      []containerUsage
}

func (p podUsage) cpuCores() (n float64) {
	for _, c := range p.containers {
		n += c.cpuCores
	}
	return n
}

func (p podUsage) cpuSeconds() (n float64) {
	for _, c := range p.containers {
		n += c.cpuSeconds
	}
	return n
}

func (p podUsage) memory() (n uint64) {
	for _, c := range p.containers {
		n += c.memory
	}
	return n
}

// nodeUsage is what a scrape of a virtual node found: its proxies with a
// fresh sample, the node's totals, and the errors that left proxies out.
type nodeUsage struct {
	pods       []podUsage
	at         time.Time
	cpuCores   float64
	cpuSeconds float64
	memory     uint64
	errs       []error
}

// counters turn the delegates' CPU rates (metrics.k8s.io gives cores
// averaged over a window) into the cumulative seconds a kubelet reports,
// per proxy container and for the node. A count never goes backwards: not
// when a delegate is replaced (the key is the proxy's), not for an older
// sample.
type counters struct {
	mu sync.Mutex
	m  map[counterKey]*counter
}

type counterKey struct {
	uid       types.UID
	container string
}

// nodeKey is the node's own counter.
var nodeKey = counterKey{}

type counter struct {
	seconds float64
	at      time.Time
}

// add integrates rate cores from the counter's last sample to at and
// returns the count. A first sample counts its window.
func (c *counters) add(k counterKey, rate float64, at time.Time, window time.Duration) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[counterKey]*counter{}
	}
	s, ok := c.m[k]
	if !ok {
		s = &counter{seconds: rate * window.Seconds(), at: at}
		c.m[k] = s
		return s.seconds
	}
	if at.After(s.at) {
		s.seconds += rate * at.Sub(s.at).Seconds()
		s.at = at
	}
	return s.seconds
}

// keep forgets the counters of proxies no longer on the node.
func (c *counters) keep(uids map[types.UID]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k != nodeKey && !uids[k.uid] {
			delete(c.m, k)
		}
	}
}

// podMetricsLister lists the PodMetrics of a namespace in a target.
type podMetricsLister func(ctx context.Context, d delegate, namespace string) ([]metricsv1beta1.PodMetrics, error)

// listPodMetrics reads the target's metrics.k8s.io with the Source's
// identity there (pods.metrics.k8s.io, get and list).
func listPodMetrics(ctx context.Context, d delegate, namespace string) ([]metricsv1beta1.PodMetrics, error) {
	cs, err := metricsclient.NewForConfig(d.config)
	if err != nil {
		return nil, err
	}
	l, err := cs.MetricsV1beta1().PodMetricses(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// usage reads the usage of the proxies bound to the node from their
// delegates' PodMetrics in the target, one list per target and namespace.
// A proxy whose target cannot be read or is not connected, or whose
// delegate has no fresh sample, is left out; the first two are errors.
func (h *nodeHandlers) usage(ctx context.Context, now time.Time) nodeUsage {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	var out nodeUsage
	pods, err := h.pods(ctx)
	if err != nil {
		out.errs = append(out.errs, fmt.Errorf("listing the node's pods: %w", err))
		return out
	}
	type group struct {
		d       delegate
		proxies []*corev1.Pod
	}
	groups := map[string]*group{}
	uids := map[types.UID]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		uids[p.UID] = true
		d, err := h.delegateOf(ctx, p.Namespace, p.Name)
		var unreachable *unreachableError
		if errors.As(err, &unreachable) {
			out.errs = append(out.errs, err)
			continue
		}
		if err != nil {
			continue // no delegate yet: nothing to report
		}
		k := d.target + "/" + p.Namespace
		if groups[k] == nil {
			groups[k] = &group{d: d}
		}
		groups[k].proxies = append(groups[k].proxies, p)
	}
	h.counters.keep(uids)
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := groups[k]
		ns := g.proxies[0].Namespace
		list, err := h.podMetrics(ctx, g.d, ns)
		if err != nil {
			out.errs = append(out.errs, fmt.Errorf("reading the usage of %d pod(s) of namespace %s in target %s: %w", len(g.proxies), ns, g.d.target, err))
			continue
		}
		byName := map[string]*metricsv1beta1.PodMetrics{}
		for i := range list {
			byName[list[i].Name] = &list[i]
		}
		for _, p := range g.proxies {
			rec, _ := proxy.Elected(p)
			m := byName[rec.Chaperon]
			if m == nil || now.Sub(m.Timestamp.Time) > staleAfter {
				continue
			}
			out.pods = append(out.pods, h.podUsageOf(p, m))
		}
	}
	sort.Slice(out.pods, func(i, j int) bool {
		a, b := out.pods[i], out.pods[j]
		return a.namespace < b.namespace || a.namespace == b.namespace && a.name < b.name
	})
	for _, p := range out.pods {
		out.cpuCores += p.cpuCores()
		out.memory += p.memory()
		if p.at.After(out.at) {
			out.at = p.at
		}
	}
	if out.at.IsZero() {
		out.at = now
	}
	out.cpuSeconds = h.counters.add(nodeKey, out.cpuCores, out.at, 0)
	return out
}

// podUsageOf is the proxy's usage from its delegate's sample; the start
// times are the proxy's, which the feedback copies from the delegate.
func (h *nodeHandlers) podUsageOf(p *corev1.Pod, m *metricsv1beta1.PodMetrics) podUsage {
	u := podUsage{namespace: p.Namespace, name: p.Name, uid: p.UID, at: m.Timestamp.Time}
	if p.Status.StartTime != nil {
		u.start = p.Status.StartTime.Time
	}
	started := map[string]time.Time{}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil {
			started[s.Name] = s.State.Running.StartedAt.Time
		}
	}
	for _, c := range m.Containers {
		cores := float64(c.Usage.Cpu().MilliValue()) / 1000
		if n := c.Usage.Cpu().ScaledValue(-9); n > 0 {
			cores = float64(n) / 1e9
		}
		u.containers = append(u.containers, containerUsage{
			name:       c.Name,
			cpuCores:   cores,
			cpuSeconds: h.counters.add(counterKey{uid: p.UID, container: c.Name}, cores, m.Timestamp.Time, m.Window.Duration),
			memory:     uint64(max(0, c.Usage.Memory().Value())),
			start:      started[c.Name],
		})
	}
	sort.Slice(u.containers, func(i, j int) bool { return u.containers[i].name < u.containers[j].name })
	return u
}
