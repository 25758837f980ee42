// reconciler: the elector's options, its reconciler and the dispatch of each pass to the step of the proxy's phase.

package elector

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetlet/fleetlet/pkg/podsums"
	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/source/follow"
)

// SpecOpener returns what the user asked for: the proxy's spec with its
// sealed multicluster.fleetlet.io/source-spec restored. It fails when the
// seal does not verify.
type SpecOpener func(proxy *corev1.Pod) (*corev1.PodSpec, error)

// Options configure the elector. Every timeout is a manager flag.
type Options struct {
	// SourceName is this cluster's name in its targets.
	SourceName string
	// Spec opens proxies' source-specs.
	Spec SpecOpener
	// ElectionDeadline is how long an election waits for the other
	// candidates after the first reservation.
	ElectionDeadline time.Duration
	// BindTimeout is how long an elected candidate may take to be bound in
	// its target before it is deleted and the election rerun.
	BindTimeout time.Duration
	// UnboundTimeout is how long a pinned, ungated proxy may stay unbound
	// before it is deleted (its controller makes a new one).
	UnboundTimeout time.Duration
	// ElectedTargetTimeout is how long the elected target of a proxy not
	// yet bound may stay NotReady before the election is rerun (a pinned
	// proxy is deleted instead).
	ElectedTargetTimeout time.Duration
	// RetryInterval is how often an election that no cluster can take
	// now is run again (target changes bring it back sooner).
	RetryInterval time.Duration
	// ResyncInterval is how long an election waits for its candidates'
	// answers before it looks again (their events usually bring it back
	// sooner: this covers a lost one).
	ResyncInterval time.Duration
	// Workers is how many proxies are reconciled at once.
	Workers int
	// PendingTargets is how many targets keep a pending candidate of a pod
	// that no cluster can run now (K; one cluster autoscaler scales up).
	PendingTargets int
	// CandidateTargets, when set, is how many of the best-ranked eligible
	// targets get a candidate first; the others get one only once every
	// one of those said no. 0: every eligible target at once (the
	// default, as the design says).
	CandidateTargets int
	// ElectionsInFlight is how many proxies may have an election in
	// flight in each target at once (admission.go); the others wait, oldest
	// first. 0: DefaultElectionsInFlight; below 0: no bound.
	ElectionsInFlight int
	// Follower takes the objects a pod references to its targets: nil
	// follows nothing.
	Follower *follow.Follower
	// Registry holds the live targets. Required.
	Registry *fleet.Registry
	// GroupTimeout is how long the members of a group hold reservations
	// while too few of them are reserved in one target; then they give
	// them up and try again after RetryInterval.
	GroupTimeout time.Duration
	// SourceAPI reads, uncached, the ResourceClaimTemplates and shared
	// ResourceClaims a pod's resource claims name (package devices): nil
	// leaves device checks to the targets' schedulers.
	SourceAPI client.Reader
}

// Defaults for Options.
const (
	DefaultElectionDeadline = 2 * time.Second
	DefaultBindTimeout      = 2 * time.Minute
	DefaultUnboundTimeout   = 5 * time.Minute
	// DefaultElectedTargetTimeout is shorter than a bound pod's default
	// not-ready toleration (300 s): an election in flight has no running
	// delegate to protect yet.
	DefaultElectedTargetTimeout = time.Minute
	DefaultPendingTargets       = 1
	DefaultRetryInterval        = time.Minute
	DefaultResyncInterval       = 30 * time.Second
	DefaultWorkers              = 64
	// DefaultElectionsInFlight keeps each target's candidate scheduler
	// and API server answering in a burst (docs/performance.md).
	DefaultElectionsInFlight = 100
)

// staleCacheRecheck is when a pass that read a proxy older than our last
// write of it looks again, should the write's event be lost.
const staleCacheRecheck = 2 * time.Second

// requeueSoon brings a proxy back at once, for the next step of its
// election, without counting as a failure.
const requeueSoon = 10 * time.Millisecond

// Event reasons.
const (
	EventNotSchedulable  = "NoClusterAvailable"
	EventInvalidSpec     = "InvalidSourceSpec"
	EventInvalidSelector = "InvalidClusterSelector"
	EventReelecting      = "Reelecting"
	EventUnboundDeleted  = "UnboundProxyDeleted"
	// EventPinnedProxyDeleted: a pinned proxy's election cannot be
	// completed on its target; the proxy is deleted (its controller makes
	// a new one) rather than pinned elsewhere.
	EventPinnedProxyDeleted = "PinnedProxyDeleted"
	// EventPreviousDelegateUnreachable: a re-elected proxy's previous
	// delegate cannot be confirmed gone (its target has not been Ready
	// for ElectedTargetTimeout); the proxy is deleted, as a pod on an
	// unreachable node is, so that its controller makes a new one.
	EventPreviousDelegateUnreachable = "PreviousDelegateUnreachable"
	EventFollowRefused               = follow.EventRefused
	reasonFollowRefused              = "FollowRefused"
	reasonElected                    = "Elected"
	reasonNoClusters                 = "NoClusterAvailable"
	reasonInvalidSpec                = "InvalidSourceSpec"
	reasonInvalidSelector            = "InvalidClusterSelector"
	reasonReelecting                 = "Reelecting"
)

// Reconciler runs the life of every proxy pod on the source side: elect,
// pin, ungate (and, until the lifecycle controller exists, delete).
type Reconciler struct {
	opts     Options
	client   client.Client
	registry *fleet.Registry
	recorder events.EventRecorder
	clock    clock.Clock

	mu sync.Mutex
	// firstReservation is when an election first saw a reservation.
	firstReservation map[types.UID]time.Time
	// trimmed is, per proxy, the targets a round that no cluster could
	// take left out (pending.go).
	trimmed map[types.UID]trimmedRound
	// awaitingRoom are the proxies admitted in their target that wait for
	// their virtual node to have room (completion.go): the only ones a
	// growing allocatable brings back.
	awaitingRoom map[types.UID]struct{}
	// usage is what each node's active pods request; inflightSums, what
	// the elections decided for each target and not carried out yet do
	// (usage.go, inflight.go).
	usage, inflightSums *podsums.Sums[string]
	// deletingLosers are the losers being deleted now (candidateKey);
	// deletedLosers, by chaperon UID, when each was deleted; created,
	// when each candidate was created (both under mu).
	deletingLosers sync.Map
	deletedLosers  map[types.UID]time.Time
	created        map[candidateKey]time.Time
	// writes are the proxy versions our writes replaced: a pass that reads
	// one of them from the cache waits for the cache instead of writing
	// again.
	writes proxy.Writes
	// chaperonWrites are the elected chaperons' versions our marks
	// replaced.
	chaperonWrites proxy.Writes
	// timers are the proxies' pending timed requeues (requeue.go).
	timers timers
	// peers serializes and remembers the choices of pods whose spread or
	// anti-affinity is over clusters (peers.go).
	peers peerLedger
	// namespaces are the last namespace creates asked of each target
	// (namespaces.go).
	namespaces namespaceTries
	// groups are the targets chosen for groups, and their waits
	// (groups.go).
	groups groupLedger
	// admission bounds the elections in flight per target (admission.go).
	admission *admission
}

// New returns the elector.
func New(opts Options) (*Reconciler, error) {
	if opts.SourceName == "" || opts.Spec == nil || opts.Registry == nil {
		return nil, errors.New("elector: the source name, a source-spec opener and the target registry are required")
	}
	if opts.ElectionDeadline == 0 {
		opts.ElectionDeadline = DefaultElectionDeadline
	}
	if opts.BindTimeout == 0 {
		opts.BindTimeout = DefaultBindTimeout
	}
	if opts.UnboundTimeout == 0 {
		opts.UnboundTimeout = DefaultUnboundTimeout
	}
	if opts.ElectedTargetTimeout == 0 {
		opts.ElectedTargetTimeout = DefaultElectedTargetTimeout
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = DefaultResyncInterval
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PendingTargets == 0 {
		opts.PendingTargets = DefaultPendingTargets
	}
	if opts.GroupTimeout == 0 {
		opts.GroupTimeout = DefaultGroupTimeout
	}
	if opts.ElectionsInFlight == 0 {
		opts.ElectionsInFlight = DefaultElectionsInFlight
	}
	r := &Reconciler{
		opts:             opts,
		registry:         opts.Registry,
		clock:            clock.RealClock{},
		firstReservation: map[types.UID]time.Time{},
		trimmed:          map[types.UID]trimmedRound{},
		awaitingRoom:     map[types.UID]struct{}{},
		usage:            podsums.New[string](),
		inflightSums:     podsums.New[string](),
		deletedLosers:    map[types.UID]time.Time{},
		created:          map[candidateKey]time.Time{},
		admission:        newAdmission(opts.ElectionsInFlight),
	}
	r.groups.init()
	return r, nil
}

// Reconcile runs one step of a proxy's life: the step of the phase the API
// shows it in. Each pass is counted by what it found
// (fleetlet_elector_passes_total).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.passStarts(req.NamespacedName)
	found := passGone
	defer func() { passesTotal.WithLabelValues(found).Inc() }()
	var pod corev1.Pod
	if err := r.client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.admission.release(req.NamespacedName)
		} else {
			found = passUnread
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.writes.Stale(pod.UID, pod.ResourceVersion) {
		// The cache has not seen our last write yet: that write's event
		// brings the proxy back (the requeue covers a lost one).
		found = passCacheBehind
		return r.requeueAfter(&pod, requeueStaleCache, staleCacheRecheck), nil
	}
	phase := PhaseOf(&pod)
	found = passPhase(phase)
	if phase != PhaseElecting {
		// No election in flight any more (or not yet, while held).
		r.admission.release(req.NamespacedName)
	}
	switch phase {
	case PhaseNotProxy, PhaseHeld:
		// Not ours, or another controller's gate keeps the pod out of
		// every cluster until it is lifted.
		return reconcile.Result{}, nil
	case PhaseFinalizing:
		return r.finalize(ctx, &pod)
	case PhaseUngated:
		return r.watchdog(ctx, &pod)
	case PhaseElected, PhasePinned:
		if c := proxy.ElectedCondition(&pod); c != nil && c.Status == corev1.ConditionTrue {
			return r.finishElection(ctx, &pod, c)
		}
		// Pinned, and no election stands: it can only be completed on
		// that node's target, and nothing there is elected any more.
		return reconcile.Result{}, r.deletePinned(ctx, &pod, "no election stands for it")
	}
	return r.elect(ctx, &pod)
}
