// Package proxy holds the rules of a proxy pod that every package of the
// source side reads the same way: whether fleetlet manages a pod (it carries
// the multicluster.fleetlet.io/delegate finalizer, whatever its namespace's
// label says now), where fleetlet's scheduling gate is, the election record
// (condition multicluster.fleetlet.io/Elected, written and read as a
// Record), and the JSON patches fleetlet uses to change a proxy — each with
// a test op, so that it removes or adds only what it owns: its gate, its
// finalizer, the hostname pin. It also says what of a proxy a chaperon
// template carries (its labels and annotations as a candidate gets them,
// and, once it runs, what its user changed: UpdatedTemplate), which the
// elector writes and feedback checks, and the tolerations and removed keys
// that go with it.
//
// It is a leaf: it imports only the Kubernetes API types and fleetlet's
// own, and holds no client, so the elector, feedback, gc, cleanup, follow,
// vnode and webhook packages share it without importing each other.
package proxy
