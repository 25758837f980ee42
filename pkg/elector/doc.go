// Package elector runs, on the source side, the life of every proxy pod up
// to its binding and after its deletion: candidates in every eligible
// target, the election, the pin and the ungate, and the finalizer.
//
// Each Reconcile derives the proxy's phase from what the API shows — its
// deletionTimestamp, its gates, its multicluster.fleetlet.io/Elected
// record (package proxy), its hostname pin, and the chaperons in the
// targets — never from memory, and takes one idempotent step:
//
//	phase        what shows it                        step (and the invariant it guards)
//	finalizing   deletionTimestamp                    delete the chaperons Foreground everywhere; remove our
//	                                                  finalizer once none is left (no delegate outlives its proxy)
//	held         another controller's gate too        nothing until it is lifted (a quota system decides first)
//	electing     our gate, no Elected=True            a candidate in every eligible target, never a Terminating
//	                                                  chaperon; rank the reserved ones; write the record first
//	                                                  (at most one delegate: only the record counts after a crash)
//	elected      Elected=True, not yet bound there    mark the winner, copy its Secrets, delete the losers, wait
//	                                                  for the binding; not bound in time or refused: clear the
//	                                                  record (a pinned proxy is deleted instead)
//	pinned       hostname pin, still gated            lift our gate only when the virtual node has room, pods
//	                                                  counted (never preempt); no room past UnboundTimeout, or
//	                                                  no election standing any more: delete it with an Event
//	                                                  (once pinned, never pinned elsewhere)
//	ungated      no gate of ours                      delete losers seen late; unbound past UnboundTimeout:
//	                                                  delete it (a pinned proxy is bound or deleted)
//
// The targets' caches call OnChaperon on every change of a chaperon or its
// pod, which requeues the proxy; OnTargetChange requeues the proxies still
// in election; the virtual nodes' cordon, taints and allocatable requeue
// those that may now go there.
package elector
