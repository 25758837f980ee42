package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
		if err != nil {
			t.Fatalf("fleetlet-sandbox %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		// Whatever happened, stop what `up` started.
		if st, err := sandbox.LoadState(dir); err == nil {
			_ = exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "down", "--dir", dir).Run()
			for _, p := range st.AllProcesses() {
				if p.Alive() {
					t.Errorf("%s (pid %d) survived down", p.Component, p.PID)
				}
			}
		}
	})

	out := run("up", "--clusters", "1", "--nodes", "1", "--fleetlet=false")
	if !strings.Contains(out, "cluster-1 ready in") || !strings.Contains(out, "down --dir") {
		t.Errorf("up printed no timing or no way to stop it:\n%s", out)
	}
	if out, err := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "up", "--clusters", "1", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "already running") {
		t.Errorf("a second up on a running sandbox: err=%v\n%s", err, out)
	}

	if out, err := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "uninstall", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "runs no fleetlet") {
		t.Errorf("uninstall in a sandbox without fleetlet: err=%v\n%s", err, out)
	}

	env := run("env", "cluster-1")
	kubeconfig := filepath.Join(dir, "cluster-1.kubeconfig")
	if !strings.Contains(env, "export KUBECONFIG="+kubeconfig) || !strings.Contains(env, "export PATH="+bin) {
		t.Errorf("env printed:\n%s", env)
	}
	kubectl := func(args ...string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", env+`kubectl "$@"`, "sh")
		cmd.Args = append(cmd.Args, args...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := kubectl("get", "nodes", "-o", "name"); err != nil || strings.TrimSpace(out) != "node/cluster-1-node-1" {
		t.Errorf("kubectl get nodes through env: %v\n%s", err, out)
	}
	if out, err := kubectl("version", "-o", "json"); err != nil || !strings.Contains(out, `"gitVersion": "v1.37.2"`) {
		t.Errorf("kubectl version: %v\n%s", err, out)
	}

	run("stop", "cluster-1")
	if out, err := kubectl("get", "nodes", "--request-timeout=2s"); err == nil {
		t.Errorf("cluster-1 answered after stop:\n%s", out)
	}
	run("start", "cluster-1")
	if out, err := kubectl("get", "nodes", "-o", "name"); err != nil || !strings.Contains(out, "node/cluster-1-node-1") {
		t.Errorf("cluster-1 after start: %v\n%s", err, out)
	}

	data, err := os.ReadFile(filepath.Join(dir, sandbox.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st sandbox.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	procs := st.AllProcesses()
	// The control plane (etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kwok) and a furnished cluster's storage provisioner.
	if len(procs) != 6 {
		t.Fatalf("sandbox.json records %d processes, want 6: %s", len(procs), data)
	}
	for _, p := range procs {
		if !p.Alive() {
			t.Errorf("%s (pid %d) not running after start, with the CLI gone", p.Component, p.PID)
		}
	}
	run("down")
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) alive after down", p.Component, p.PID)
		}
	}
	if _, err := exec.Command(filepath.Join(bin, "fleetlet-sandbox"), "stop", "cluster-7", "--dir", dir).CombinedOutput(); err == nil {
		t.Error("stop of a cluster that does not exist succeeded")
	}
}
