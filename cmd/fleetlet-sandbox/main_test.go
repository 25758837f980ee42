package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlet/fleetlet/pkg/sandbox"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// The command-line path a user takes: `up` returns while the cluster keeps
// running without it, `env` points kubectl at it, `stop`/`start` take it down
// and back, and `down` leaves no process.
func TestCommandLine(t *testing.T) {
	bin := testenv.RequireBinaries(t, "fleetlet-sandbox", "kubectl", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), append(args, "--dir", dir)...)
		out, err := cmd.CombinedOutput()
		require.NoErrorf(t, err, "fleetlet-sandbox %v\n%s", args, out)
		return string(out)
	}
	t.Cleanup(func() {
		// Whatever happened, stop what `up` started.
		if st, err := sandbox.LoadState(dir); err == nil {
			_ = exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "down", "--dir", dir).Run()
			for _, p := range st.AllProcesses() {
				assert.Falsef(t, p.Alive(), "%s (pid %d) survived down", p.Component, p.PID)
			}
		}
	})

	out := run("up", "--clusters", "1", "--nodes", "1", "--fleetlet=false")
	assert.Falsef(t, !strings.Contains(out, "cluster-1 ready in") || !strings.Contains(out, "down --dir"), "up printed no timing or no way to stop it:\n%s", out)
	if out, err := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "up", "--clusters", "1", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "already running") {
		assert.Failf(t, "a second up on a running sandbox", "err=%v\n%s", err, out)
	}

	if out, err := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "uninstall", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "runs no fleetlet") {
		assert.Failf(t, "uninstall in a sandbox without fleetlet", "err=%v\n%s", err, out)
	}

	env := run("env", "cluster-1")
	kubeconfig := filepath.Join(dir, "cluster-1.kubeconfig")
	assert.Falsef(t, !strings.Contains(env, "export KUBECONFIG="+kubeconfig) || !strings.Contains(env, "export PATH="+bin), "env printed:\n%s", env)
	kubectl := func(args ...string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", env+`kubectl "$@"`, "sh")
		cmd.Args = append(cmd.Args, args...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := kubectl("get", "nodes", "-o", "name"); err != nil || strings.TrimSpace(out) != "node/cluster-1-node-1" {
		assert.Failf(t, "kubectl get nodes through env", "%v\n%s", err, out)
	}
	if out, err := kubectl("version", "-o", "json"); err != nil || !strings.Contains(out, `"gitVersion": "v1.37.2"`) {
		assert.Failf(t, "kubectl version", "%v\n%s", err, out)
	}

	run("stop", "cluster-1")
	if out, err := kubectl("get", "nodes", "--request-timeout=2s"); err == nil {
		assert.Failf(t, "cluster-1 answered after stop", "\n%s", out)
	}
	run("start", "cluster-1")
	if out, err := kubectl("get", "nodes", "-o", "name"); err != nil || !strings.Contains(out, "node/cluster-1-node-1") {
		assert.Failf(t, "cluster-1 after start", "%v\n%s", err, out)
	}

	data, err := os.ReadFile(filepath.Join(dir, sandbox.StateFile))
	require.NoError(t, err)
	var st sandbox.State
	require.NoError(t, json.Unmarshal(data, &st))
	procs := st.AllProcesses()
	// The control plane (etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kwok) and a furnished cluster's storage provisioner.
	require.Lenf(t, procs, 6, "sandbox.json records %d processes, want 6: %s", len(procs), data)
	for _, p := range procs {
		assert.Truef(t, p.Alive(), "%s (pid %d) not running after start, with the CLI gone", p.Component, p.PID)
	}
	run("down")
	for _, p := range procs {
		assert.Falsef(t, p.Alive(), "%s (pid %d) alive after down", p.Component, p.PID)
	}
	_, err = exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "stop", "cluster-7", "--dir", dir).CombinedOutput()
	assert.Error(t, err, "stop of a cluster that does not exist succeeded")
}
