package kubeletapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// summary is one scrape's usage as a kubelet's /stats/summary: the node's
// totals and, per proxy with a fresh sample, its delegate's CPU and
// working set. Filesystem, network and the node's system containers a
// virtual node does not have.
func summary(node string, started time.Time, u nodeUsage) statsv1alpha1.Summary {
	s := statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{
		NodeName:  node,
		StartTime: metav1.NewTime(started),
		CPU:       cpuStats(u.at, u.cpuCores, u.cpuSeconds),
		Memory:    memoryStats(u.at, u.memory),
	}}
	s.Pods = make([]statsv1alpha1.PodStats, 0, len(u.pods))
	for _, p := range u.pods {
		ps := statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: p.name, Namespace: p.namespace, UID: string(p.uid)},
			StartTime: metav1.NewTime(p.start),
			CPU:       cpuStats(p.at, p.cpuCores(), p.cpuSeconds()),
			Memory:    memoryStats(p.at, p.memory()),
		}
		for _, c := range p.containers {
			ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
				Name:      c.name,
				StartTime: metav1.NewTime(c.start),
				CPU:       cpuStats(p.at, c.cpuCores, c.cpuSeconds),
				Memory:    memoryStats(p.at, c.memory),
			})
		}
		s.Pods = append(s.Pods, ps)
	}
	return s
}

func cpuStats(at time.Time, cores, seconds float64) *statsv1alpha1.CPUStats {
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(at),
		UsageNanoCores: ptr.To(uint64(cores * 1e9)), UsageCoreNanoSeconds: ptr.To(uint64(seconds * 1e9))}
}

func memoryStats(at time.Time, workingSet uint64) *statsv1alpha1.MemoryStats {
	return &statsv1alpha1.MemoryStats{Time: metav1.NewTime(at), WorkingSetBytes: ptr.To(workingSet)}
}

// serveSummary answers /stats/summary. What could not be read is left
// out and logged, as for /metrics/resource; a kubelet answers the same
// way with the stats it has.
func (h *nodeHandlers) serveSummary(w http.ResponseWriter, r *http.Request) {
	u := h.usage(r.Context(), time.Now())
	if err := errors.Join(u.errs...); err != nil {
		ctrllog.FromContext(r.Context()).V(1).Info("Usage left out of /stats/summary", "error", err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(summary(h.node, h.started, u)); err != nil {
		ctrllog.FromContext(r.Context()).Error(err, "Writing /stats/summary")
	}
}
