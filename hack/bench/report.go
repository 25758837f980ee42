package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// report prints, for each mode, every run of both paths, the medians of
// their ratios, the source manager's queue depths, and what each path
// cost per pod, averaged over the runs; with o.out, the same as JSON. It
// fails when a run did not complete.
func report(w io.Writer, runs []benchRun, modes []mode, o options) error {
	costs := map[string][2]cost{}
	for _, md := range modes {
		var these []benchRun
		for _, r := range runs {
			if r.Mode == md {
				these = append(these, r)
			}
		}
		fmt.Fprintf(w, "\n%s, %d pods:\n", md, md.Pods)
		if err := printRuns(w, these); err != nil {
			return err
		}
		fleetlet, direct := averageCost(these, true), averageCost(these, false)
		costs[md.Name] = [2]cost{fleetlet, direct}
		printCost(w, "fleetlet", fleetlet)
		printCost(w, "direct", direct)
		printDeletionCost(w, "fleetlet", averageDeletionCost(these, true))
		printDeletionCost(w, "direct", averageDeletionCost(these, false))
	}
	if o.out != "" {
		if err := writeJSON(o.out, runs, costs); err != nil {
			return err
		}
		fmt.Fprintf(w, "results written to %s\n", o.out)
		for _, md := range modes {
			file := plotFile(o.out, md)
			if err := plotRunning(file, runs, md); err != nil {
				return err
			}
			fmt.Fprintf(w, "pods Running over time, %s: %s\n", md, file)
		}
	}
	var incomplete []string
	for _, r := range runs {
		for _, m := range []measured{r.Fleetlet, r.Direct} {
			if m.incomplete == "" {
				continue
			}
			incomplete = append(incomplete, fmt.Sprintf("run %d %s %s", r.Index, r.Mode, m.name))
			fmt.Fprintf(w, "run %d %s %s incomplete: %s\n", r.Index, r.Mode, m.name, m.incomplete)
			for _, f := range m.failed[:min(3, len(m.failed))] {
				fmt.Fprintf(w, "  not created: %s\n", f)
			}
		}
	}
	if len(incomplete) > 0 {
		return fmt.Errorf("incomplete runs %v: the figures above count only the pods that ran", incomplete)
	}
	return nil
}

// printRuns prints the runs of one mode and the medians of their ratios.
func printRuns(w io.Writer, runs []benchRun) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tpath\tpods\ttotal\tpods/s\tp50\tp99\tRunning\tcreates retried\tnot created\tqueue depth max/mean\tdeleted in\tdeleted/s\t")
	var totals, p50s, p99s, lags []float64
	for _, r := range runs {
		for _, m := range []measured{r.Fleetlet, r.Direct} {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.1f\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%.1f\t\n", r.Index, m.name, m.pods, m.total.Round(10*time.Millisecond), m.throughput(),
				m.percentile(0.5).Round(time.Millisecond), m.percentile(0.99).Round(time.Millisecond), len(m.finished), m.retried, len(m.failed), m.queues.summary(),
				m.deleted.Round(10*time.Millisecond), m.deletionRate())
		}
		totals = append(totals, r.Fleetlet.total.Seconds()/r.Direct.total.Seconds())
		p50s = append(p50s, ratio(r.Fleetlet.percentile(0.5), r.Direct.percentile(0.5)))
		p99s = append(p99s, ratio(r.Fleetlet.percentile(0.99), r.Direct.percentile(0.99)))
		lags = append(lags, percentile(r.Fleetlet.lag, 0.5).Seconds())
	}
	fmt.Fprintf(tw, "median\tfleetlet / direct\t\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\n", median(totals), 1/median(totals), median(p50s), median(p99s))
	fmt.Fprintf(tw, "median\tfeedback lag p50 (delegate Running → proxy Running)\t\t\t\t%.3fs\t\n", median(lags))
	return tw.Flush()
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// averageCost is a path's cost per pod of creating its pods, averaged over
// the runs.
func averageCost(runs []benchRun, fleetlet bool) cost {
	return averageOf(runs, fleetlet, func(m measured) cost { return m.cost })
}

// averageDeletionCost is a path's cost per pod of deleting its pods,
// averaged over the runs.
func averageDeletionCost(runs []benchRun, fleetlet bool) cost {
	return averageOf(runs, fleetlet, func(m measured) cost { return m.deletionCost })
}

func averageOf(runs []benchRun, fleetlet bool, of func(measured) cost) cost {
	out := newCost()
	n := float64(max(len(runs), 1))
	for _, r := range runs {
		c := of(r.Direct)
		if fleetlet {
			c = of(r.Fleetlet)
		}
		for cluster, m := range c.Requests {
			if out.Requests[cluster] == nil {
				out.Requests[cluster] = map[string]float64{}
			}
			for k, v := range m {
				out.Requests[cluster][k] += v / n
			}
		}
		for k, v := range c.Fleetlet {
			out.Fleetlet[k] += v / n
		}
		for k, v := range c.CPU {
			out.CPU[k] += v / n
		}
		for k, v := range c.Requeues {
			out.Requeues[k] += v / n
		}
		for k, v := range c.Passes {
			out.Passes[k] += v / n
		}
		for k, v := range c.Found {
			out.Found[k] += v / n
		}
		out.Fallbacks += c.Fallbacks / n
		for k, v := range c.RSS {
			out.RSS[k] += v / n
		}
		for k, v := range c.PeakRSS {
			out.PeakRSS[k] = max(out.PeakRSS[k], v)
		}
	}
	return out
}

// printCost prints what a path cost per pod: API requests answered by each
// cluster (every client; the six largest by verb and resource), requests
// made by fleetlet's processes, and CPU by process.
func printCost(w io.Writer, name string, c cost) {
	fmt.Fprintf(w, "\n%s, per pod:\n", name)
	clusters := make([]string, 0, len(c.Requests))
	all := 0.0
	for cluster := range c.Requests {
		clusters = append(clusters, cluster)
		all += total(c.Requests[cluster])
	}
	sort.Strings(clusters)
	fmt.Fprintf(w, "  API requests answered, all clients: %.1f\n", all)
	for _, cluster := range clusters {
		fmt.Fprintf(w, "    %s %.1f: %s\n", cluster, total(c.Requests[cluster]), strings.Join(top(c.Requests[cluster], 6, "%.1f"), ", "))
	}
	if len(c.Fleetlet) > 0 {
		fmt.Fprintf(w, "  requests made by fleetlet's managers and candidate schedulers (to every cluster): %.1f: %s\n",
			total(c.Fleetlet), strings.Join(top(c.Fleetlet, len(c.Fleetlet), "%.1f"), ", "))
	}
	if len(c.Requeues) > 0 {
		fmt.Fprintf(w, "  elector passes not caused by the proxy's own events (fleetlet_elector_requeues_total): %.2f: %s\n",
			total(c.Requeues), strings.Join(top(c.Requeues, len(c.Requeues), "%.2f"), ", "))
	}
	if len(c.Passes) > 0 && name == "fleetlet" {
		fmt.Fprintf(w, "  reconcile passes by controller, every manager (controller_runtime_reconcile_total): %s\n",
			strings.Join(top(c.Passes, 6, "%.2f"), ", "))
	}
	if len(c.Found) > 0 && name == "fleetlet" {
		fmt.Fprintf(w, "  elector passes by the phase they found the proxy in (fleetlet_elector_passes_total): %s\n",
			strings.Join(top(c.Found, len(c.Found), "%.2f"), ", "))
	}
	if name == "fleetlet" {
		fmt.Fprintf(w, "  pods whose --candidate-targets best-ranked targets all said no, so that the others got a candidate (fleetlet_candidate_fallbacks_total; none without the setting): %.1f %%\n", 100*c.Fallbacks)
	}
	fmt.Fprintf(w, "  CPU-milliseconds, all processes: %.0f: %s\n", total(c.CPU), strings.Join(top(c.CPU, 8, "%.0f"), ", "))
	fmt.Fprintf(w, "  resident MiB at the end (peak since start), largest: %s\n", strings.Join(rssTop(c, 6), ", "))
}

// printDeletionCost prints what deleting a path's pods cost per pod, from
// one DeleteCollection to the last delegate gone: API requests answered by
// each cluster (every client, the bench's own polls of what is left
// included) and CPU by process.
func printDeletionCost(w io.Writer, name string, c cost) {
	all := 0.0
	clusters := make([]string, 0, len(c.Requests))
	for cluster := range c.Requests {
		clusters = append(clusters, cluster)
		all += total(c.Requests[cluster])
	}
	sort.Strings(clusters)
	fmt.Fprintf(w, "\n%s, deleting, per pod: API requests answered, all clients: %.1f; CPU-milliseconds: %.0f\n", name, all, total(c.CPU))
	for _, cluster := range clusters {
		fmt.Fprintf(w, "    %s %.1f: %s\n", cluster, total(c.Requests[cluster]), strings.Join(top(c.Requests[cluster], 6, "%.1f"), ", "))
	}
}

// rssTop is the n processes holding the most memory at the runs' end,
// "process MiB (peak MiB)".
func rssTop(c cost, n int) []string {
	var out []string
	for _, kv := range top(c.RSS, n, "%.0f") {
		name, _, _ := strings.Cut(kv, " ")
		out = append(out, fmt.Sprintf("%s (%.0f)", kv, c.PeakRSS[name]))
	}
	return out
}

// jsonPath is one path's run as written to the JSON file.
type jsonPath struct {
	Pods          int     `json:"pods"`
	TotalSeconds  float64 `json:"totalSeconds"`
	PodsPerSecond float64 `json:"podsPerSecond"`
	P50Seconds    float64 `json:"p50Seconds"`
	P99Seconds    float64 `json:"p99Seconds"`
	Running       int     `json:"running"`
	Retried       int     `json:"createsRetried"`
	NotCreated    int     `json:"notCreated"`
	Incomplete    string  `json:"incomplete,omitempty"`
	LagP50Seconds float64 `json:"feedbackLagP50Seconds,omitempty"`
	Cost          cost    `json:"cost"`
	// DeletedSeconds is how long the pods took to go (delegates
	// included) after one DeleteCollection per namespace.
	DeletedSeconds       float64 `json:"deletedSeconds"`
	DeletedPodsPerSecond float64 `json:"deletedPodsPerSecond"`
	DeletionCost         cost    `json:"deletionCost"`
}

func toJSON(m measured) jsonPath {
	return jsonPath{Pods: m.pods, TotalSeconds: m.total.Seconds(), PodsPerSecond: m.throughput(), P50Seconds: m.percentile(0.5).Seconds(),
		P99Seconds: m.percentile(0.99).Seconds(), Running: len(m.finished), Retried: m.retried, NotCreated: len(m.failed),
		Incomplete: m.incomplete, LagP50Seconds: percentile(m.lag, 0.5).Seconds(), Cost: m.cost,
		DeletedSeconds: m.deleted.Seconds(), DeletedPodsPerSecond: m.deletionRate(), DeletionCost: m.deletionCost}
}

func writeJSON(file string, runs []benchRun, costs map[string][2]cost) error {
	type jsonRun struct {
		Run      int      `json:"run"`
		Mode     mode     `json:"mode"`
		Fleetlet jsonPath `json:"fleetlet"`
		Direct   jsonPath `json:"direct"`
		// Queues are the source manager's workqueue depths, a sample a
		// second, during fleetlet's run.
		Queues queueDepths `json:"queueDepths,omitempty"`
	}
	type jsonCost struct {
		Fleetlet cost `json:"fleetlet"`
		Direct   cost `json:"direct"`
	}
	out := struct {
		Commit string              `json:"commit,omitempty"`
		Runs   []jsonRun           `json:"runs"`
		Costs  map[string]jsonCost `json:"costPerPodByMode"`
	}{Commit: os.Getenv("COMMIT"), Costs: map[string]jsonCost{}}
	for _, r := range runs {
		out.Runs = append(out.Runs, jsonRun{Run: r.Index, Mode: r.Mode, Fleetlet: toJSON(r.Fleetlet), Direct: toJSON(r.Direct), Queues: r.Fleetlet.queues})
	}
	for name, c := range costs {
		out.Costs[name] = jsonCost{Fleetlet: c[0], Direct: c[1]}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}
