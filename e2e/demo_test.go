package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// `make demo` on the sandbox: every cluster's nodes, then a Deployment
// whose replicas are elected across the clusters, each with its delegate.
func TestDemo(t *testing.T) {
	need(t)
	var out bytes.Buffer
	if err := sb.Demo(context.Background(), &out); err != nil {
		t.Fatalf("Demo: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{"fleetlet-cluster-1", "fleetlet-cluster-2", "fleetlet-cluster-3", "REPLICA", "DELEGATE"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo output lacks %q", want)
		}
	}
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "web-") && strings.Contains(line, "fleetlet-cluster-") && !strings.Contains(line, " - ") {
			rows++
		}
	}
	if rows != 6 {
		t.Errorf("the demo shows %d replicas with a virtual node and a delegate, want 6", rows)
	}
}
