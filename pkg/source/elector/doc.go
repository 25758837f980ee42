// Package elector runs, on the source side, the life of every proxy pod up
// to its binding and after its deletion: candidates in every eligible
// target, the election, the pin and the ungate, and the finalizer.
//
// Each Reconcile derives the proxy's Phase (phase.go) from what the API
// shows — its deletionTimestamp, its gates, its
// multicluster.fleetlet.io/Elected record (package proxy), its hostname pin
// — and the chaperons in the targets, never from memory, and takes one
// idempotent step; each step is written to the API before the next one
// starts:
//
//	phase        what shows it                  step (file)                          invariant it guards
//	Electing     our gate, no record standing   a slot in every eligible target      a burst never buries a target
//	                                            (--elections-in-flight; else wait
//	                                            in line: admission.go); then a
//	                                            candidate in every eligible          at most one delegate: only the
//	                                            target, never a Terminating one;     record counts after a crash
//	                                            rank the reserved; write the record
//	                                            first (candidates.go, election.go)
//	             every candidate unschedulable  keep pending candidates in the       one autoscaler scales up, not
//	                                            PendingTargets best targets; none    every one
//	                                            anew there for RetryInterval
//	                                            (pending.go)
//	Elected      the record, no pin             mark the winner once a previous      never two delegates at once;
//	                                            delegate is confirmed gone; delete   never preempt
//	                                            the losers, best-effort; wait until
//	                                            the kubelet there admitted the
//	                                            delegate; once the virtual node has
//	                                            room (it counts the proxy from the
//	                                            record on), pin and lift our gate
//	                                            in one patch (completion.go)
//	             refused, not admitted within   delete the candidate, drop the       the proxy never sees a failure
//	             BindTimeout, candidate gone,   record, remembering the delegate it  before it is pinned
//	             Target deleted, NotReady past  may have made (reelection.go)
//	             ElectedTargetTimeout
//	Pinned       the hostname pin, still gated  (an older manager pinned first) lift never preempt; once pinned,
//	                                            our gate only when the virtual node  never pinned elsewhere: bound
//	                                            has room, pods counted; no room      or deleted
//	                                            past UnboundTimeout, or no record
//	                                            standing: delete the proxy with an
//	                                            Event (completion.go)
//	Ungated      no gate of ours                delete losers seen late; unbound     a proxy is bound or deleted
//	                                            past UnboundTimeout: delete it
//	                                            (ungated.go); bound: pass what the
//	                                            user changed to the delegate's
//	                                            chaperon (updates.go)
//	Held         another controller's gate too  nothing until it is lifted           a quota system decides first
//	Finalizing   deletionTimestamp              delete the chaperons, each after     no delegate outlives its proxy
//	                                            its pod (delegate-pod finalizer)
//	                                            everywhere; remove our finalizer
//	                                            once none is left (finalize.go)
//
// The target registry's ChaperonSource requeues a proxy on every change of
// one of its chaperons or their pods; its TargetChangeSource requeues, at
// low priority, the proxies still in election that a target's change
// concerns (proxiesAffectedBy); the virtual nodes' cordon, taints and
// allocatable requeue those that may now go there (setup.go).
package elector
