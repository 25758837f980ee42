package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Files and commands behind the fake nodes' kubelet API.
const (
	// ContainerLogFile, in a cluster's data folder, is what every
	// container of the cluster's pods logs (kubectl logs reads it; with
	// -f, lines appended show). It starts with ContainerLogLines lines.
	ContainerLogFile = "containers.log"
	// PortForwardCommand is the fleetlet-sandbox command every forwarded
	// port reaches: it answers one HTTP request on its stdin and stdout.
	PortForwardCommand = "http-stdio"
	// PortForwardReply starts the body of its answer, followed by the
	// request's method and path.
	PortForwardReply = "fleetlet-sandbox port-forward:"
)

// ContainerLogLines is how many lines ContainerLogFile starts with.
const ContainerLogLines = 5

// ContainerLogLine is one line of ContainerLogFile, in the CRI log format
// kwok reads (what a container runtime writes): kubectl logs shows msg,
// with --timestamps after t.
func ContainerLogLine(t time.Time, msg string) string {
	return fmt.Sprintf("%s stdout F %s\n", t.UTC().Format(time.RFC3339Nano), msg)
}

// ContainerLogMessage is the i-th (from 1) message ContainerLogFile of
// cluster starts with.
func ContainerLogMessage(cluster string, i int) string {
	return fmt.Sprintf("%s log line %d", cluster, i)
}

// containerLog is the first content of ContainerLogFile.
func containerLog(cluster string, t time.Time) string {
	var b strings.Builder
	for i := 1; i <= ContainerLogLines; i++ {
		b.WriteString(ContainerLogLine(t.Add(time.Duration(i)*time.Second), ContainerLogMessage(cluster, i)))
	}
	return b.String()
}

// kwokDebugging returns the kwok configurations that make the fake nodes
// serve a kubelet API for every pod: logs and attach from the cluster's
// ContainerLogFile, exec running the command on this machine, and
// port-forward of any port to `fleetlet-sandbox http-stdio`.
func kwokDebugging(c *ClusterState, binDir string) (string, error) {
	logFile := filepath.Join(c.DataDir, ContainerLogFile)
	follow := true
	docs := []map[string]any{
		{"kind": "ClusterLogs", "metadata": map[string]any{"name": "sandbox-logs"},
			"spec": map[string]any{"logs": []any{map[string]any{"logsFile": logFile, "follow": follow}}}},
		{"kind": "ClusterAttach", "metadata": map[string]any{"name": "sandbox-attach"},
			"spec": map[string]any{"attaches": []any{map[string]any{"logsFile": logFile}}}},
		{"kind": "ClusterExec", "metadata": map[string]any{"name": "sandbox-exec"},
			"spec": map[string]any{"execs": []any{map[string]any{"local": map[string]any{"workDir": c.DataDir}}}}},
		{"kind": "ClusterPortForward", "metadata": map[string]any{"name": "sandbox-port-forward"},
			"spec": map[string]any{"forwards": []any{map[string]any{
				"command": []string{filepath.Join(binDir, binSandbox), PortForwardCommand}}}}},
	}
	var out []string
	for _, d := range docs {
		d["apiVersion"] = "kwok.x-k8s.io/v1alpha1"
		b, err := yaml.Marshal(d)
		if err != nil {
			return "", err
		}
		out = append(out, string(b))
	}
	return strings.Join(out, "---\n"), nil
}

// writeContainerLog writes the first ContainerLogFile of c, once.
func writeContainerLog(c *ClusterState) error {
	p := filepath.Join(c.DataDir, ContainerLogFile)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return os.WriteFile(p, []byte(containerLog(c.Name, time.Now())), 0o644)
}

// ServeHTTPStdio answers one HTTP request read from r on w: 200 with
// PortForwardReply, the method and the path. It is what a forwarded port
// of a fake node's pod serves.
func ServeHTTPStdio(r io.Reader, w io.Writer) error {
	req, err := http.ReadRequest(bufio.NewReader(r))
	if err != nil {
		return fmt.Errorf("reading the forwarded request: %w", err)
	}
	body := fmt.Sprintf("%s %s %s\n", PortForwardReply, req.Method, req.URL.Path)
	resp := &http.Response{
		StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Close:         true,
	}
	return resp.Write(w)
}
