package placement

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Spread is a topology spread constraint over clusters: its topologyKey is
// a label only virtual nodes carry, so its domains are clusters (or groups
// of clusters sharing a label value).
type Spread struct {
	Key        string
	MaxSkew    int32
	MinDomains int32
	// Hard is whenUnsatisfiable: DoNotSchedule.
	Hard bool
	// Selector is the labelSelector with the matchLabelKeys' values of
	// the pod.
	Selector labels.Selector
}

// Apart is a required pod anti-affinity term over clusters: no two pods it
// selects in one domain of Key.
type Apart struct {
	Key      string
	Selector labels.Selector
}

// Together is a required pod affinity term over clusters: the pod goes to a
// domain of Key that holds a pod it selects. Self is whether the pod matches
// the term itself: then, as in kube-scheduler, it may start the group when
// no selected pod runs anywhere.
type Together struct {
	Key      string
	Selector labels.Selector
	Self     bool
}

// Peers counts, per domain (a value of key on the virtual nodes), this
// source's live proxies in the pod's namespace that sel selects and that
// run or are headed there.
type Peers func(key string, sel labels.Selector) map[string]int

// splitPeers takes the cluster-level spread constraints and required pod
// anti-affinity terms of a spec: those whose topologyKey is a cluster key
// and that count pods of the pod's own namespace only.
func (p *Placement) splitPeers(spec *corev1.PodSpec, podLabels map[string]string) {
	for _, c := range spec.TopologySpreadConstraints {
		if !IsClusterKey(c.TopologyKey) {
			continue
		}
		sel, err := selectorWithKeys(c.LabelSelector, c.MatchLabelKeys, podLabels)
		if err != nil {
			sel = labels.Nothing()
		}
		min := int32(1)
		if c.MinDomains != nil && *c.MinDomains > 0 {
			min = *c.MinDomains
		}
		p.spread = append(p.spread, Spread{Key: c.TopologyKey, MaxSkew: c.MaxSkew, MinDomains: min,
			Hard: c.WhenUnsatisfiable != corev1.ScheduleAnyway, Selector: sel})
	}
	if spec.Affinity == nil {
		return
	}
	if pa := spec.Affinity.PodAntiAffinity; pa != nil {
		for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			if overClusters(t) {
				p.apart = append(p.apart, Apart{Key: t.TopologyKey, Selector: termSelector(t, podLabels)})
			}
		}
	}
	if pa := spec.Affinity.PodAffinity; pa != nil {
		for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			if overClusters(t) {
				sel := termSelector(t, podLabels)
				p.together = append(p.together, Together{Key: t.TopologyKey, Selector: sel, Self: sel.Matches(labels.Set(podLabels))})
			}
		}
	}
}

// overClusters tells whether a pod (anti-)affinity term is cluster-level:
// its topologyKey is a cluster key and it counts pods of the pod's own
// namespace only (the proxies the election sees).
func overClusters(t corev1.PodAffinityTerm) bool {
	return IsClusterKey(t.TopologyKey) && len(t.Namespaces) == 0 && t.NamespaceSelector == nil
}

// termSelector is a term's labelSelector with its matchLabelKeys; a
// malformed one selects nothing.
func termSelector(t corev1.PodAffinityTerm, podLabels map[string]string) labels.Selector {
	sel, err := selectorWithKeys(t.LabelSelector, t.MatchLabelKeys, podLabels)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

func selectorWithKeys(ls *metav1.LabelSelector, keys []string, podLabels map[string]string) (labels.Selector, error) {
	if ls == nil {
		return labels.Nothing(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		v, ok := podLabels[k]
		if !ok {
			continue
		}
		r, err := labels.NewRequirement(k, "=", []string{v})
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	return sel, nil
}

// CountsPeers tells whether the pod has a constraint over clusters that
// counts other pods (spread, affinity, anti-affinity): its election must
// see the decisions made just before it.
func (p Placement) CountsPeers() bool {
	return len(p.spread) > 0 || len(p.apart) > 0 || len(p.together) > 0
}

// Fits tells whether the pod may go to the target whose virtual node has
// these labels, given the domains of the targets that may take it (per
// key, their values) and its peers: every hard spread constraint keeps
// its skew, every anti-affinity term finds its domain empty, every
// affinity term finds a selected pod there (or none anywhere, when the pod
// selects itself). If not, it says which.
func (p Placement) Fits(node map[string]string, domains map[string][]string, peers Peers) (bool, string) {
	for _, a := range p.apart {
		d, ok := node[a.Key]
		if !ok {
			continue
		}
		if n := peers(a.Key, a.Selector)[d]; n > 0 {
			return false, fmt.Sprintf("pod anti-affinity over %s: %d pod(s) matching %s already in %s", a.Key, n, a.Selector, d)
		}
	}
	for _, t := range p.together {
		if ok, why := t.fits(node, peers); !ok {
			return false, why
		}
	}
	for _, s := range p.spread {
		if !s.Hard {
			continue
		}
		d, ok := node[s.Key]
		if !ok {
			return false, fmt.Sprintf("topology spread over %s: the cluster has no %s label", s.Key, s.Key)
		}
		counts := peers(s.Key, s.Selector)
		min, least := leastDomain(counts, domains[s.Key], s.MinDomains)
		if skew := int32(counts[d]+1) - int32(min); skew > s.MaxSkew {
			than := fmt.Sprintf("fewer domains than minDomains %d count the least as 0", s.MinDomains)
			if least != "" {
				// Named: a domain that cannot take the pod yet holds
				// the others back, and the user must see which.
				than = fmt.Sprintf("%s has %d", least, min)
			}
			return false, fmt.Sprintf("topology spread over %s: %s would have %d pod(s) matching %s, %d more than the least (%s; maxSkew %d)",
				s.Key, d, counts[d]+1, s.Selector, skew, than, s.MaxSkew)
		}
	}
	return true, ""
}

func (t Together) fits(node map[string]string, peers Peers) (bool, string) {
	counts := peers(t.Key, t.Selector)
	d, ok := node[t.Key]
	if ok && counts[d] > 0 {
		return true, ""
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 && t.Self {
		return true, ""
	}
	if !ok {
		return false, fmt.Sprintf("pod affinity over %s: the cluster has no %s label", t.Key, t.Key)
	}
	return false, fmt.Sprintf("pod affinity over %s: no pod matching %s in %s (%d elsewhere)", t.Key, t.Selector, d, total)
}

// Crowding is how many matching pods the soft (ScheduleAnyway) spread
// constraints find in the target's domain: fewer ranks first.
func (p Placement) Crowding(node map[string]string, peers Peers) int64 {
	var n int64
	for _, s := range p.spread {
		if s.Hard {
			continue
		}
		n += int64(peers(s.Key, s.Selector)[node[s.Key]])
	}
	return n
}

// leastDomain is the fewest matching pods in a domain, and that domain
// (the first in order of those as few); 0 and no domain when there are
// fewer domains than minDomains (the domains missing count as empty).
func leastDomain(counts map[string]int, domains []string, minDomains int32) (int, string) {
	if int32(len(domains)) < minDomains || len(domains) == 0 {
		return 0, ""
	}
	min, least := -1, ""
	for _, d := range domains {
		if n := counts[d]; min < 0 || n < min {
			min, least = n, d
		}
	}
	return min, least
}

// Keys are the topology keys the pod's peer constraints use, sorted.
func (p Placement) Keys() []string {
	seen := map[string]bool{}
	for _, s := range p.spread {
		seen[s.Key] = true
	}
	for _, a := range p.apart {
		seen[a.Key] = true
	}
	for _, t := range p.together {
		seen[t.Key] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dropPeers removes the cluster-level spread constraints and required pod
// (anti-)affinity terms from a candidate's spec: they were evaluated over
// the clusters.
func dropPeers(spec *corev1.PodSpec) {
	var keep []corev1.TopologySpreadConstraint
	for _, c := range spec.TopologySpreadConstraints {
		if !IsClusterKey(c.TopologyKey) {
			keep = append(keep, c)
		}
	}
	spec.TopologySpreadConstraints = keep
	a := spec.Affinity
	if a == nil {
		return
	}
	if pa := a.PodAntiAffinity; pa != nil {
		pa.RequiredDuringSchedulingIgnoredDuringExecution = nodeLevelTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
		if len(pa.RequiredDuringSchedulingIgnoredDuringExecution) == 0 && len(pa.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			a.PodAntiAffinity = nil
		}
	}
	if pa := a.PodAffinity; pa != nil {
		pa.RequiredDuringSchedulingIgnoredDuringExecution = nodeLevelTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution)
		if len(pa.RequiredDuringSchedulingIgnoredDuringExecution) == 0 && len(pa.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			a.PodAffinity = nil
		}
	}
}

func nodeLevelTerms(terms []corev1.PodAffinityTerm) []corev1.PodAffinityTerm {
	var keep []corev1.PodAffinityTerm
	for _, t := range terms {
		if !overClusters(t) {
			keep = append(keep, t)
		}
	}
	return keep
}
