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
	// deleteIn is where its user deletes the path's pods (the proxies in
	// the source; the pods in each target), and goneIn where they and
	// their delegates must be gone before the deletion counts as done.
	deleteIn, goneIn []place
}

// place is a namespace of one cluster.
type place struct{ cluster, namespace string }

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
	// deleted is how long the path's pods took to go, from one
	// DeleteCollection per namespace to the last pod gone (delegates
	// included), and deletedPods how many there were.
	deleted     time.Duration
	deletedPods int
	// deletionCost is what deleting them cost, per pod.
	deletionCost cost
}

// deletionRate is pods deleted per second.
func (m measured) deletionRate() float64 {
	if m.deleted <= 0 {
		return 0
	}
	return float64(m.deletedPods) / m.deleted.Seconds()
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

// deleteTimed deletes the path's pods as its user would, with no grace
// period, and says how long until they and their delegates were gone. A
// proxy goes only once its delegate has: the time includes fleetlet's
// finalizing.
func (p path) deleteTimed(ctx context.Context, clients map[string]kubernetes.Interface, pods int) (time.Duration, error) {
	began := time.Now()
	for _, pl := range p.deleteIn {
		err := retry.OnError(cleanBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
			return clients[pl.cluster].CoreV1().Pods(pl.namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
		})
		if err != nil {
			return 0, fmt.Errorf("deleting the pods of %s in %s: %w", pl.namespace, pl.cluster, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, pl := range p.goneIn {
			list, err := clients[pl.cluster].CoreV1().Pods(pl.namespace).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil || len(list.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	took := time.Since(began)
	if err != nil {
		return took, fmt.Errorf("%s: the %d pods not gone after %s: %w", p.name, pods, took.Round(time.Second), err)
	}
	fmt.Fprintf(os.Stderr, "%s: %d pods deleted in %s\n", p.name, pods, took.Round(10*time.Millisecond))
	return took, nil
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
