package elector

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// rankedResources are compared when ranking targets.
var rankedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// FreeShareAfter is the share of a target's allocatable left free once the
// pod runs there: the smallest, over cpu and memory, of (allocatable −
// requested − pod) / allocatable. Shares compare across clusters of any
// size. A target without a summary yet, or without a resource the pod asks
// for, gets −1.
func FreeShareAfter(summary *v1alpha1.ClusterSummaryStatus, pod corev1.ResourceList) float64 {
	if summary == nil {
		return -1
	}
	share := math.Inf(1)
	for _, name := range rankedResources {
		alloc := summary.Allocatable[name]
		if alloc.IsZero() {
			if q := pod[name]; !q.IsZero() {
				return -1
			}
			continue
		}
		free := alloc.AsApproximateFloat64()
		if q, ok := summary.Requested[name]; ok {
			free -= q.AsApproximateFloat64()
		}
		if q, ok := pod[name]; ok {
			free -= q.AsApproximateFloat64()
		}
		share = math.Min(share, free/alloc.AsApproximateFloat64())
	}
	if math.IsInf(share, 1) {
		return 0
	}
	return share
}

// Offer is one target's answer for a proxy: a candidate reserved there, with
// the share of the target left free after the pod.
type Offer struct {
	// Target is the target's key (namespace/name or name).
	Target string
	// Score is the weight of the pod's preferred terms the target meets
	// at the cluster level (placement.Placement.Score).
	Score int64
	// Crowding is how many of the pod's peers its soft spread constraints
	// over clusters find in the target's domain.
	Crowding int64
	// FreeShare is FreeShareAfter for the pod.
	FreeShare float64
	// Short: the target's summary says it cannot run the pod now: fewer
	// free devices than the pod's resource claims ask for, or no node with
	// room for its requests (largestFree). The target's scheduler has the
	// last word; a short target is only asked last.
	Short bool
	// Priority is the target's spec.priority.
	Priority int32
}

// Rank orders offers best first: those not short (Offer.Short), then the targets' priority, then the highest score of the
// pod's preferences, then the fewest peers its soft spread over clusters counts
// there, then the most free share after the pod, ties broken by
// hash(pod UID, target), so that equal clusters share the load. A
// preferred cluster thus gets the pod while it can run it; once it cannot
// (no offer from it), the next one does.
func Rank(uid types.UID, offers []Offer) []Offer {
	out := append([]Offer(nil), offers...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Short != out[j].Short {
			return out[j].Short
		}
		if out[i].Priority != out[j].Priority {
			return out[i].Priority > out[j].Priority
		}
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		if out[i].Crowding != out[j].Crowding {
			return out[i].Crowding < out[j].Crowding
		}
		if out[i].FreeShare != out[j].FreeShare {
			return out[i].FreeShare > out[j].FreeShare
		}
		return tieBreak(uid, out[i].Target) < tieBreak(uid, out[j].Target)
	})
	return out
}

func tieBreak(uid types.UID, target string) uint64 {
	sum := sha256.Sum256([]byte(string(uid) + "/" + target))
	return binary.BigEndian.Uint64(sum[:8])
}

// ranksAbove tells that a target of priority and score a ranks above one
// of b's, whatever their room.
func ranksAbove(a, b Offer) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Score > b.Score
}
