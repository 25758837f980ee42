package candidate

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// What a candidate that loses the election costs the target: its pod, its
// scheduling cycle and its reservation, which the design pays for, and
// nothing the candidate scheduler would otherwise write about it on top.
// kube-scheduler writes two things about every pod it holds at Permit or
// rejects there, and a loser is both:
//
//   - NominatedNodeNameForExpectation (beta, on by default) patches the
//     pod's status.nominatedNodeName before it waits at Permit, to tell a
//     cluster autoscaler that the pod is about to bind there. Every
//     candidate waits at Permit, so that was one status write per candidate,
//     and one more on its chaperon when the target manager mirrored it.
//     The candidate scheduler runs with the gate off unless --feature-gates
//     names it; the reservation is on the chaperon already.
//   - A rejection is a scheduling failure: a FailedScheduling Event, a
//     PodScheduled=False status patch, and the pod back in the queue. A
//     loser's chaperon is gone or being deleted, so its pod is about to be
//     deleted too: QuietLosses drops it from the queue without the Event or
//     the patch. A candidate that fits nowhere still gets both, since that
//     answer is what the source reads.

// SchedulerFeatureDefaults are the feature gates the candidate scheduler
// runs with unless --feature-gates sets them.
var SchedulerFeatureDefaults = map[featuregate.Feature]bool{
	features.NominatedNodeNameForExpectation: false,
}

// ApplySchedulerFeatureDefaults sets SchedulerFeatureDefaults on fg, except
// the gates named in given, the --feature-gates value the user passed.
func ApplySchedulerFeatureDefaults(fg featuregate.MutableFeatureGate, given string) error {
	set := map[string]bool{}
	for gate, on := range SchedulerFeatureDefaults {
		if !strings.Contains(given, string(gate)+"=") {
			set[string(gate)] = on
		}
	}
	return fg.SetFromMap(set)
}

// Lost reports whether a scheduling failure is the candidate plugin's
// rejection of a candidate that lost the election: its chaperon is gone,
// replaced or being deleted. A rejection while the candidate waited comes
// as the plugin's own status; one at Permit itself comes wrapped in a
// FitError for the one node the candidate was reserved on.
func Lost(s *fwk.Status) bool {
	if lostStatus(s) {
		return true
	}
	var fitErr *framework.FitError
	if s == nil || !s.IsRejected() || !errors.As(s.AsError(), &fitErr) || fitErr.NumAllNodes != 1 || fitErr.Diagnosis.NodeToStatus.Len() != 1 {
		return false
	}
	lost := false
	fitErr.Diagnosis.NodeToStatus.ForEachExplicitNode(func(_ string, ns *fwk.Status) { lost = lostStatus(ns) })
	return lost
}

func lostStatus(s *fwk.Status) bool {
	if s == nil || !s.IsRejected() || s.Plugin() != Name {
		return false
	}
	switch s.Message() {
	case msgChaperonGone, msgChaperonReplaced, msgChaperonDeleting:
		return true
	}
	return false
}

// QuietLosses makes sched drop a candidate that lost the election (Lost)
// from its queue without an Event or a status write, and hands every other
// failure to the handler it had.
func QuietLosses(sched *scheduler.Scheduler) {
	next := sched.FailureHandler
	sched.FailureHandler = func(ctx context.Context, f framework.Framework, podInfo *framework.QueuedPodInfo, status *fwk.Status, nominating *fwk.NominatingInfo, start time.Time) {
		if !Lost(status) {
			next(ctx, f, podInfo, status, nominating, start)
			return
		}
		logger := klog.FromContext(ctx)
		logger.V(2).Info("Candidate lost the election: dropped from the queue", "pod", klog.KObj(podInfo.Pod), "reason", status.Message())
		// As the default handler would: a nomination it had is cleared.
		sched.SchedulingQueue.AddNominatedPod(logger, podInfo.DeepCopy().PodInfo, nominating)
		sched.SchedulingQueue.Done(podInfo.Pod.UID)
	}
}
