package connect

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// TargetStatus is one row of Status: a Target or ClusterTarget of the
// source cluster and its virtual node.
type TargetStatus struct {
	// Kind is Target or ClusterTarget; Namespace is empty for the latter.
	Kind      string
	Namespace string
	Name      string
	Self      bool

	// Ready, Reason and Message are the Ready condition's; Ready is
	// "Unknown" when there is none yet.
	Ready   string
	Reason  string
	Message string

	// Node is status.virtualNodeName; NodeFound says whether that node
	// exists, and Allocatable is its status.allocatable.
	Node        string
	NodeFound   bool
	Allocatable corev1.ResourceList
}

// Status lists the Targets and ClusterTargets of the cluster cfg talks to,
// ClusterTargets first, each sorted by namespace and name.
func Status(ctx context.Context, cfg *rest.Config) ([]TargetStatus, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	var clusterTargets v1alpha1.ClusterTargetList
	if err := c.List(ctx, &clusterTargets); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the cluster has no ClusterTarget API: is fleetlet installed? %w", err)
		}
		return nil, fmt.Errorf("listing ClusterTargets: %w", err)
	}
	var targets v1alpha1.TargetList
	if err := c.List(ctx, &targets); err != nil {
		return nil, fmt.Errorf("listing Targets: %w", err)
	}
	var rows []TargetStatus
	for i := range clusterTargets.Items {
		t := &clusterTargets.Items[i]
		rows = append(rows, row("ClusterTarget", "", t.Name, &t.Spec, &t.Status))
	}
	for i := range targets.Items {
		t := &targets.Items[i]
		rows = append(rows, row("Target", t.Namespace, t.Name, &t.Spec, &t.Status))
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Kind != b.Kind {
			return a.Kind == "ClusterTarget"
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	for i := range rows {
		if rows[i].Node == "" {
			continue
		}
		var node corev1.Node
		err := c.Get(ctx, types.NamespacedName{Name: rows[i].Node}, &node)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return rows, fmt.Errorf("reading node %s: %w", rows[i].Node, err)
		default:
			rows[i].NodeFound = true
			rows[i].Allocatable = node.Status.Allocatable
		}
	}
	return rows, nil
}

func row(kind, namespace, name string, spec *v1alpha1.TargetSpec, status *v1alpha1.TargetStatus) TargetStatus {
	r := TargetStatus{Kind: kind, Namespace: namespace, Name: name, Self: spec.Self, Ready: "Unknown", Node: status.VirtualNodeName}
	if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); c != nil {
		r.Ready, r.Reason, r.Message = string(c.Status), c.Reason, c.Message
	}
	return r
}

// WriteStatus prints rows as a table, as `kubectl fleetlet status` shows
// them.
func WriteStatus(w io.Writer, rows []TargetStatus) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tREADY\tREASON\tNODE\tCPU\tMEMORY\tPODS\tMESSAGE")
	for _, r := range rows {
		cpu, mem, pods := "-", "-", "-"
		if r.NodeFound {
			cpu, mem, pods = quantity(r.Allocatable, corev1.ResourceCPU), quantity(r.Allocatable, corev1.ResourceMemory), quantity(r.Allocatable, corev1.ResourcePods)
		}
		name := r.Name
		if r.Self {
			name += " (self)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Kind, dash(r.Namespace), name, r.Ready, dash(r.Reason), dash(nodeName(r)), cpu, mem, pods, r.Message)
	}
	return tw.Flush()
}

func nodeName(r TargetStatus) string {
	if r.Node != "" && !r.NodeFound {
		return r.Node + " (missing)"
	}
	return r.Node
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "-"
	}
	return q.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
