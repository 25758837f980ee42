// Package gc is the source side's garbage collector of remote objects: the
// PodChaperons (and, through them, the delegates and candidates) this source
// created in its targets and whose proxy pod is gone.
//
// The proxy reconciler (package elector) deletes a proxy's chaperons itself
// while the proxy is being deleted; the collector catches what that misses:
// a finalizer removed by hand, a proxy force-deleted, a target that was
// unreachable when its proxy went, a crash between creating a candidate and
// recording it. Sources and targets talk one way, so the source, which sees
// both sides, runs it.
//
// It runs on the leader only, once shortly after start and then every
// Interval. Each pass, for every Ready target, lists this source's
// chaperons (label multicluster.fleetlet.io/parent-cluster=<source>, read
// uncached with the target's credentials) in every namespace that matters:
// namespaces labelled multicluster.fleetlet.io/enabled=true in the source and
// namespaces of any pod that carries the delegate finalizer (a namespaced
// Target: its own namespace only). A namespace the target refuses or does not
// have is skipped quietly.
//
// A chaperon is an orphan when its proxy (parent-namespace/parent-name) does
// not exist in the source, has another UID, or no longer carries the delegate
// finalizer. Two guards keep a chaperon created a moment ago, for a proxy the
// source's cache has not seen yet: a chaperon younger than MinAge is never
// deleted, and an orphan found in the cache is confirmed by reading the proxy
// from the API server before it is deleted. Orphans are deleted with
// Foreground propagation (the delegate goes first) and a UID precondition.
// Nothing without this source's parent-cluster label is ever touched.
//
// Each deletion is logged at Info with what and why and counted in
// fleetlet_gc_deleted_total{cluster,kind}. Other kinds of remote objects (the
// copies of followed objects) plug into the same pass as Collectors.
package gc
