package e2e

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// `make demo` on the sandbox: every cluster's nodes, then a Deployment
// whose replicas are elected across the clusters, each with its delegate,
// and kubectl logs of one of them through its virtual node.
func TestDemo(t *testing.T) {
	need(t)
	var out bytes.Buffer
	err := sb.Demo(context.Background(), &out)
	require.NoErrorf(t, err, "Demo\n%s", out.String())
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{"fleetlet-cluster-1", "fleetlet-cluster-2", "fleetlet-cluster-3", "REPLICA", "DELEGATE"} {
		assert.Containsf(t, text, want, "the demo output lacks %q", want)
	}
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "web-") && strings.Contains(line, "fleetlet-cluster-") && !strings.Contains(line, " - ") {
			rows++
		}
	}
	assert.Equal(t, 6, rows, "the demo's replicas with a virtual node and a delegate")
	// It ends with kubectl logs of one replica through its virtual node:
	// the last lines its cluster's kwok serves.
	logs := regexp.MustCompile(`(?m)^\$ kubectl .* logs web-\S+ --tail=3 .*virtual node fleetlet-(cluster-\d+)\n`).FindStringSubmatch(text)
	require.NotNil(t, logs, "the demo shows no kubectl logs through a virtual node")
	want := sandbox.ContainerLogMessage(logs[1], sandbox.ContainerLogLines)
	assert.Containsf(t, text, want, "the demo's kubectl logs lack %q", want)
}
