// Package cleanup removes what fleetlet leaves on objects of one cluster once
// it is uninstalled: `fleetlet cleanup`, the Helm post-delete hook Job of
// every cluster, also run by hand. It uses that cluster's credentials only
// and reaches targets the way the manager does (the kubeconfig Secrets of the
// Targets that still exist, sanitised by fleet.RESTConfigFromKubeconfig).
//
// Source side, in this order:
//  1. every pod that still carries the multicluster.fleetlet.io/election gate
//     and the delegate finalizer (a proxy that was never elected) is deleted;
//     its gate is never removed, so it never runs anywhere;
//  2. for every pod carrying the delegate finalizer, its chaperon in each
//     Target and ClusterTarget that still exists (none when the CRDs are
//     gone) is deleted with Foreground propagation, and cleanup waits, up to
//     Timeout, until they are gone: the delegate goes first;
//  3. the delegate finalizer is removed, and only it (a JSON patch whose test
//     op names it at its index), from each pod whose chaperons are confirmed
//     gone; a pod whose target could not be reached keeps it;
//  4. the virtual nodes (labelled type=virtual-kubelet and
//     multicluster.fleetlet.io/cluster) are deleted, except one that still
//     has a pod carrying the finalizer bound to it.
//
// Target side: every PodChaperon of every source is deleted (the pods they
// hold go with them, by owner reference), the Source finalizer is removed
// once the ClusterRoleBinding it guards is deleted, and the cluster-scoped
// objects the manager creates itself (ClusterRoles fleetlet-source,
// fleetlet-source-reader and fleetlet-source-namespaces, PriorityClass
// fleetlet-candidate) are deleted when
// they carry app.kubernetes.io/managed-by=fleetlet.
//
// Missing CRDs are not an error. Cleanup is idempotent: a second run finds
// nothing to do. Whatever it could not do is returned as an error, with the
// Summary of what it did; DryRun only counts.
package cleanup
