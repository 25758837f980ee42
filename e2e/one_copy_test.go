package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// sampleInterval is how often watchOneCopy looks.
const sampleInterval = 500 * time.Millisecond

// copies is what watchOneCopy saw.
type copies struct {
	mu      sync.Mutex
	samples int
	// doubled are the samples in which a pod ran twice: "db-0: cluster-1,
	// cluster-2".
	doubled []string
}

// watchOneCopy samples, every half second until the scenario ends, the
// pods that run for ns's proxies in every cluster: a pod bound to a node
// and not finished (Terminating ones included: they still run) is a copy,
// and no proxy name may have two at once, whichever proxy object they
// stand for (a StatefulSet's db-0 recreated is the same name). The
// scenario's end fails it if any sample saw two; the returned func tells
// how many samples were taken so far.
func watchOneCopy(t *testing.T, ns string) func() int {
	t.Helper()
	seen := &copies{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(sampleInterval)
		defer tick.Stop()
		for {
			seen.sample(ctx, ns)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		seen.mu.Lock()
		defer seen.mu.Unlock()
		t.Logf("one copy per pod: %d samples every %s, %d saw a pod running twice", seen.samples, sampleInterval, len(seen.doubled))
		for i, d := range seen.doubled {
			if i == 10 {
				assert.Failf(t, "a pod ran twice", "… and %d more", len(seen.doubled)-10)
				break
			}
			assert.Failf(t, "a pod ran twice", "%s", d)
		}
	})
	return func() int {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return seen.samples
	}
}

// sample takes one look; a cluster that does not answer (an outage
// scenario) is left out of that sample.
func (c *copies) sample(ctx context.Context, ns string) {
	running := map[string][]string{} // proxy name → clusters
	for _, cluster := range sb.ClusterNames() {
		cs, err := sb.Client(cluster)
		if err != nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pods, err := cs.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelParentCluster + "=" + sandbox.SourceCluster})
		cancel()
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			if runs(&p) {
				name := p.Annotations[v1alpha1.AnnotationParentName]
				running[name] = append(running[name], cluster)
			}
		}
	}
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples++
	var twice []string
	for name, clusters := range running {
		if len(clusters) > 1 {
			twice = append(twice, fmt.Sprintf("%s in %s", name, strings.Join(clusters, ", ")))
		}
	}
	if len(twice) > 0 {
		sort.Strings(twice)
		c.doubled = append(c.doubled, time.Now().Format("15:04:05.0")+": "+strings.Join(twice, "; "))
	}
}

// runs reports whether a pod in a target is a running copy: bound to a
// node and not finished.
func runs(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
