// Package connect joins two clusters, the way `kubectl fleetlet connect`,
// `disconnect` and `status` do, as a Go API that takes client
// configurations (the sandbox calls it in-process; the CLI only loads
// kubeconfig contexts).
//
// Credentials flow one way (docs/design.md, "Sources and targets talk one way"):
// only the source cluster ends up holding credentials for the target.
//
// Connect, in the target cluster B:
//
//  1. creates the Source S in the namespace (with Namespace) or the
//     ClusterSource S whose ServiceAccount lives in the fleetlet namespace
//     (created if missing), and waits until fleetlet in B reports it Ready
//     with its ServiceAccount — a clear error after the timeout asks whether
//     fleetlet runs in B;
//  2. creates a kubernetes.io/service-account-token Secret
//     (<ServiceAccount>-token) for that ServiceAccount — a long-lived
//     credential, revoked by deleting the Secret or the ServiceAccount,
//     rather than an hour-long TokenRequest — and waits until B's token
//     controller has filled it.
//
// Then in the source cluster A:
//
//  3. writes a kubeconfig — B's server URL, the CA from the Secret's ca.crt
//     (plus the CA of B's context when it differs), the token, and the
//     ServiceAccount's namespace as the context namespace, where the source
//     renews its heartbeat Lease — to the Secret fleetlet-target-<T> (key
//     "config") in the namespace, or in A's fleetlet namespace for a
//     ClusterTarget;
//  4. creates the Target T in the namespace, or the ClusterTarget T, whose
//     spec.kubeconfigSecret points at it.
//
// With Self, Connect only creates the Target or ClusterTarget T with
// spec.self: true.
//
// Everything Connect creates is labelled app.kubernetes.io/managed-by=
// kubectl-fleetlet; Disconnect deletes only what carries that label (never a
// namespace) and Connect refuses to take over a Target or Secret that does
// not. Both are idempotent: a second Connect keeps the token Secret and
// writes nothing that is already as wanted (Result.Changed reports it).
//
// Status lists a cluster's Targets and ClusterTargets with their Ready
// condition, their virtual node and its allocatable cpu, memory and pods.
package connect
