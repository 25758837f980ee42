package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// path is one way of running the pods: through fleetlet, or directly in
// the targets.
type path struct {
	name  string
	where func(i int) (kubernetes.Interface, string)
	// delegatesIn is the targets' namespace of the path's delegates, for
	// the feedback lag (empty: no delegates).
	delegatesIn string
}

// mode is how pods are created: a burst (as fast as the creators go) or
// paced (Rate pods per second).
type mode struct {
	Name string  `json:"name"`
	Pods int     `json:"pods"`
	Rate float64 `json:"rate,omitempty"`
}

func (m mode) String() string {
	if m.Rate > 0 {
		return fmt.Sprintf("%s at %g pods/s", m.Name, m.Rate)
	}
	return m.Name
}

// measured is one path's run: what it achieved and what it cost.
type measured struct {
	result
	cost cost
	// lag is, per pod, from its delegate seen Running to its proxy seen
	// Running.
	lag []time.Duration
	// queues are the source manager's workqueue depths, sampled every
	// second (fleetlet's path only).
	queues queueDepths
}

// measure runs the path once, with the clusters' counters read before and
// after.
func (p path) measure(ctx context.Context, sb *sandbox.Sandbox, clients map[string]kubernetes.Interface, o options, md mode) (measured, error) {
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	var delegates func() map[string]time.Time
	if p.delegatesIn != "" {
		delegates = watchDelegates(watchCtx, clients, p.delegatesIn)
	}
	var sampled func() queueDepths
	if p.delegatesIn != "" {
		sampled = sampleQueues(watchCtx, sb, []string{"proxy", "feedback"})
	}
	before := take(ctx, sb, clients)
	r, err := measure(ctx, p.name, md.Pods, o.workers, md.Rate, o.timeout, p.where, nil, running)
	if err != nil {
		return measured{}, err
	}
	m := measured{result: r, cost: costOf(before, take(ctx, sb, clients), len(r.finished))}
	if sampled != nil {
		m.queues = sampled()
	}
	if delegates != nil {
		running := delegates()
		for name, proxyRunning := range r.finished {
			if d, ok := running[name]; ok {
				m.lag = append(m.lag, max(0, proxyRunning.Sub(d)))
			}
		}
	}
	return m, nil
}

// cleanBackoff paces the tries of a deletion of a run's pods.
var cleanBackoff = wait.Backoff{Steps: 6, Duration: 2 * time.Second, Factor: 2}

// clean deletes the runs' pods in every cluster and waits until they are
// gone (proxies, delegates and direct pods), so that the next run starts
// on empty clusters.
func clean(ctx context.Context, clients map[string]kubernetes.Interface, namespaces []string) error {
	began := time.Now()
	for _, cs := range clients {
		for _, ns := range namespaces {
			// Thousands of pods in one call may outlast the API server's
			// request timeout: what it deleted stays deleted, and the
			// next try deletes the rest.
			err := retry.OnError(cleanBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
				return cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
			})
			if err != nil {
				return fmt.Errorf("deleting the pods of %s: %w", ns, err)
			}
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, cs := range clients {
			for _, ns := range namespaces {
				list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
				if err != nil || len(list.Items) > 0 {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the pods of the last run are still there after %s: %w", time.Since(began).Round(time.Second), err)
	}
	fmt.Fprintf(os.Stderr, "cleaned up in %s\n", time.Since(began).Round(time.Second))
	return nil
}

// benchRun is one run of both paths in one mode.
type benchRun struct {
	Index    int
	Mode     mode
	Fleetlet measured
	Direct   measured
}
