package e2e

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// `make demo` on the sandbox: every cluster's nodes, then a Deployment
// whose replicas are elected across the clusters, each with its delegate,
// and kubectl logs of one of them through its virtual node.
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
	// It ends with kubectl logs of one replica through its virtual node:
	// the last lines its cluster's kwok serves.
	logs := regexp.MustCompile(`(?m)^\$ kubectl .* logs web-\S+ --tail=3 .*virtual node fleetlet-(cluster-\d+)\n`).FindStringSubmatch(text)
	if logs == nil {
		t.Fatal("the demo shows no kubectl logs through a virtual node")
	}
	if want := sandbox.ContainerLogMessage(logs[1], sandbox.ContainerLogLines); !strings.Contains(text, want) {
		t.Errorf("the demo's kubectl logs lack %q", want)
	}
}
