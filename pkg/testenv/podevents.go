package testenv

import (
	toolscache "k8s.io/client-go/tools/cache"
)

// PodEvents stands for a pod informer: it hands the events a test gives it
// (OnAdd, OnUpdate, OnDelete) to the handler registered, and says it has
// synced when the test sets Synced. For what a pod informer's events keep
// (podsums.Sums.Watch), driven without an API server.
type PodEvents struct {
	toolscache.ResourceEventHandler
	Synced bool
}

// AddEventHandler registers the one handler the events go to.
func (e *PodEvents) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	e.ResourceEventHandler = h
	return podEventsRegistration{e}, nil
}

type podEventsRegistration struct{ e *PodEvents }

func (r podEventsRegistration) HasSynced() bool { return r.e.Synced }

// HasSyncedChecker is not used by the sums; PodEvents offers none.
func (r podEventsRegistration) HasSyncedChecker() toolscache.DoneChecker { return nil }
