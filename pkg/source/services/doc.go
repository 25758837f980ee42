// Package services runs, in the source cluster, the controller that makes
// the source's Services reach the delegates of the proxies they select
// (docs/design.md, "Services").
//
// It decides; package follow writes. For each Service whose selector
// selects proxies, the Controller works out which targets hold a delegate
// of one of them (the target each proxy's election record names), and has
// the Follower copy the Service there (follow.ServiceCopy: the source's
// ports and selector, the target's own cluster IP), keep it in sync, and
// remove it once no selected delegate is left in that target or the
// Service is gone. A global Service (multicluster.fleetlet.io/global, or a
// ServiceExport of the Multi-Cluster Services API, and only with
// --routable-pod-networks) also gets, in every target, EndpointSlices of
// the ready proxies elsewhere (GlobalSlices), so that its endpoints span
// the clusters.
//
// What the controller knows a target holds of each Service is kept in
// memory (heldCopies): a target is read only where a copy is needed or may
// be, and every target is looked at once per Service after a start.
package services
