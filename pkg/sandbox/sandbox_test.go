package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// fakeBinDir returns a folder with an executable script for every binary the
// sandbox needs; each runs body.
func fakeBinDir(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range append(requiredBinaries, binFleetlet, binHelm) {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOptionsDefaultedAndValidate(t *testing.T) {
	bin := fakeBinDir(t, "exit 0")
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{name: "defaults are valid", opts: Options{Dir: "d", BinDir: bin}},
		{name: "no dir", opts: Options{BinDir: bin}, wantErr: []string{"dir must be set"}},
		{name: "too many clusters", opts: Options{Dir: "d", BinDir: bin, Clusters: MaxClusters + 1}, wantErr: []string{"clusters must be between"}},
		{name: "negative clusters", opts: Options{Dir: "d", BinDir: bin, Clusters: -1}, wantErr: []string{"clusters must be between"}},
		{name: "bad quantity", opts: Options{Dir: "d", BinDir: bin, NodeMemory: "lots"}, wantErr: []string{"node memory"}},
		{name: "zero cpu", opts: Options{Dir: "d", BinDir: bin, NodeCPU: "0"}, wantErr: []string{"node cpu: must be positive"}},
		{name: "negative toleration", opts: Options{Dir: "d", BinDir: bin, TolerationSeconds: -5}, wantErr: []string{"toleration seconds"}},
		{name: "missing binaries", opts: Options{Dir: "d", BinDir: t.TempDir()}, wantErr: []string{"binary etcd not found", "binary kwok not found", "make build"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Defaulted().Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to mention %q", err, want)
				}
			}
		})
	}
}

func TestDefaulted(t *testing.T) {
	got := Options{Dir: "d", BinDir: "b"}.Defaulted()
	if got.Clusters != 3 || got.Nodes != 3 || got.NodeCPU != "32" || got.NodeMemory != "128Gi" || got.NodePods != "250" ||
		got.TolerationSeconds != 60 || got.CompleteAfter != 5*time.Second || got.Out == nil {
		t.Errorf("Defaulted() = %+v", got)
	}
	kept := Options{Dir: "d", BinDir: "b", Clusters: 2, Nodes: 1, TolerationSeconds: 7}.Defaulted()
	if kept.Clusters != 2 || kept.Nodes != 1 || kept.TolerationSeconds != 7 {
		t.Errorf("Defaulted() overwrote set fields: %+v", kept)
	}
}

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := freePorts(3 * portsPerCluster)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		// Below the ephemeral range: no outgoing connection nor listener
		// on port 0 takes it while a cluster restarts.
		if p < portFloor || p >= ephemeralLow() {
			t.Errorf("port %d outside [%d, %d)", p, portFloor, ephemeralLow())
		}
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free after freePorts returned: %v", p, err)
			continue
		}
		l.Close()
	}
	got := portsFrom(ports[:portsPerCluster])
	want := Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], ControllerManager: ports[3], Scheduler: ports[4],
		FleetletMetrics: ports[5], FleetletHealth: ports[6], KwokServer: ports[7], FleetletWebhook: ports[8], FleetletScheduler: ports[9],
		StandbyMetrics: ports[10], StandbyHealth: ports[11], KueueWebhook: ports[12], KueueMetrics: ports[13], KueueHealth: ports[14],
		MetricsServer: ports[15]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("portsFrom (-want,+got):\n%s", diff)
	}
}

func testCluster(t *testing.T) (Options, *ClusterState) {
	t.Helper()
	return testClusterWith(t, func(*Options) {})
}

// testClusterWith prepares cluster-2 with the options edit changed.
func testClusterWith(t *testing.T, edit func(*Options)) (Options, *ClusterState) {
	t.Helper()
	dir := t.TempDir()
	o := Options{Dir: dir, BinDir: fakeBinDir(t, "exit 0")}.Defaulted()
	edit(&o)
	c := &ClusterState{
		Name: "cluster-2", Index: 2,
		APIServerURL: "https://127.0.0.1:6443",
		Kubeconfig:   filepath.Join(dir, "cluster-2.kubeconfig"),
		DataDir:      filepath.Join(dir, "cluster-2"),
		LogDir:       filepath.Join(dir, "logs", "cluster-2"),
		Ports:        Ports{EtcdClient: 1, EtcdPeer: 2, APIServer: 6443, ControllerManager: 4, Scheduler: 5},
		PodCIDR:      "10.102.0.1/16",
	}
	if err := prepareCluster(o, c); err != nil {
		t.Fatal(err)
	}
	return o, c
}

func TestPrepareClusterKubeconfigs(t *testing.T) {
	_, c := testCluster(t)
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "cluster-2" {
		t.Errorf("current context = %q, want cluster-2", cfg.CurrentContext)
	}
	cl := cfg.Clusters["cluster-2"]
	if cl == nil || cl.Server != "https://127.0.0.1:6443" {
		t.Fatalf("cluster entry = %+v, want server https://127.0.0.1:6443", cl)
	}
	if len(cl.CertificateAuthorityData) == 0 || cl.CertificateAuthority != "" || cl.InsecureSkipTLSVerify {
		t.Errorf("cluster entry must carry inline CA data and verify TLS: %+v", cl)
	}
	user := cfg.AuthInfos["cluster-2"]
	if user == nil || len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 || user.ClientCertificate != "" || user.Token != "" || user.Exec != nil {
		t.Fatalf("user entry must carry only inline client certificate and key: %+v", user)
	}
	ca := parseCert(t, cl.CertificateAuthorityData)
	admin := parseCert(t, user.ClientCertificateData)
	if err := admin.CheckSignatureFrom(ca); err != nil {
		t.Errorf("admin certificate is not signed by the cluster CA: %v", err)
	}
	if diff := cmp.Diff([]string{"system:masters"}, admin.Subject.Organization); diff != "" {
		t.Errorf("admin organization (-want,+got):\n%s", diff)
	}

	// Components authenticate with their well-known identities.
	for component, wantCN := range map[string]string{
		binControllerManager: "system:kube-controller-manager",
		binScheduler:         "system:kube-scheduler",
		binKwok:              "kwok",
	} {
		cfg, err := clientcmd.LoadFromFile(c.componentKubeconfig(component))
		if err != nil {
			t.Fatal(err)
		}
		if got := parseCert(t, cfg.AuthInfos["cluster-2"].ClientCertificateData).Subject.CommonName; got != wantCN {
			t.Errorf("%s client CN = %q, want %q", component, got, wantCN)
		}
	}

	// The apiserver's serving certificate is valid for loopback and the
	// in-cluster names.
	data, err := os.ReadFile(c.pki("apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	serving := parseCert(t, data)
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", serviceIP} {
		if err := serving.VerifyHostname(host); err != nil {
			t.Errorf("apiserver certificate not valid for %s: %v", host, err)
		}
	}
	if info, err := os.Stat(c.pki("ca.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("ca.key must be private (0600): %v %v", info.Mode(), err)
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestComponentArgs(t *testing.T) {
	o, c := testCluster(t)
	o.TolerationSeconds = 42
	args := map[string]string{}
	for _, comp := range components {
		args[comp.name] = strings.Join(comp.args(o, c), " ")
	}
	for component, want := range map[string][]string{
		binEtcd:              {"--listen-client-urls=http://127.0.0.1:1", "--listen-peer-urls=http://127.0.0.1:2"},
		binAPIServer:         {"--bind-address=127.0.0.1", "--secure-port=6443", "--etcd-servers=http://127.0.0.1:1", "--endpoint-reconciler-type=none", "--default-not-ready-toleration-seconds=42", "--default-unreachable-toleration-seconds=42", "--authorization-mode=Node,RBAC"},
		binControllerManager: {"--bind-address=127.0.0.1", "--secure-port=4", "--controllers=*,-node-ipam-controller", "--node-monitor-grace-period=30s"},
		binScheduler:         {"--bind-address=127.0.0.1", "--secure-port=5"},
		binKwok:              {"--manage-nodes-with-label-selector=type=kwok", "--cidr=10.102.0.1/16"},
	} {
		for _, w := range want {
			if !strings.Contains(args[component], w) {
				t.Errorf("%s args %q lack %q", component, args[component], w)
			}
		}
	}
	for component, a := range args {
		if strings.Contains(a, "0.0.0.0") {
			t.Errorf("%s listens beyond loopback: %s", component, a)
		}
	}
}

func TestKwokStages(t *testing.T) {
	docs := strings.Split(kwokStages(7*time.Second), "---\n")
	var names []string
	var succeeded map[string]any
	for _, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("stage does not parse: %v\n%s", err, d)
		}
		if obj["kind"] != "Stage" {
			t.Errorf("kind = %v, want Stage", obj["kind"])
		}
		name := obj["metadata"].(map[string]any)["name"].(string)
		names = append(names, name)
		if name == "sandbox-pod-succeeded" {
			succeeded = obj
		}
	}
	want := []string{"sandbox-node-ready", "sandbox-node-heartbeat", "sandbox-pod-running", "sandbox-pod-updated", "sandbox-pod-succeeded", "sandbox-pod-gone"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("stages (-want,+got):\n%s", diff)
	}
	spec := succeeded["spec"].(map[string]any)
	if got := spec["delay"].(map[string]any)["durationMilliseconds"]; got != float64(7000) {
		t.Errorf("succeeded delay = %v, want 7000", got)
	}
	if !strings.Contains(mustJSON(t, spec["selector"]), `"Never","OnFailure"`) {
		t.Errorf("succeeded stage must select restartPolicy Never and OnFailure only: %s", mustJSON(t, spec["selector"]))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(j)
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, BinDir: "/b", Nodes: 2, CompleteAfter: 3 * time.Second}.Defaulted()
	st := &State{Version: stateVersion, Dir: dir, BinDir: "/b", Settings: settingsFrom(o), Clusters: []ClusterState{{
		Name: "cluster-1", Index: 1, Ports: Ports{APIServer: 1234},
		Processes: []Process{{Component: "etcd", PID: 42, StartTime: 7, Log: "/l"}},
	}}}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, got); diff != "" {
		t.Errorf("LoadState (-want,+got):\n%s", diff)
	}
	back, err := got.options(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Nodes != 2 || back.CompleteAfter != 3*time.Second || back.Clusters != 1 || back.BinDir != "/b" {
		t.Errorf("options from state = %+v", back)
	}
	if _, err := got.Cluster("cluster-9"); err == nil || !strings.Contains(err.Error(), "cluster-1") {
		t.Errorf("Cluster(cluster-9) = %v, want an error listing the clusters", err)
	}

	st.Version = 99
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("LoadState of another version = %v, want a version error", err)
	}
	if _, err := LoadState(t.TempDir()); err == nil || !strings.Contains(err.Error(), "fleetlet-sandbox up") {
		t.Errorf("LoadState of an empty folder = %v, want a hint to run up", err)
	}
}

func TestLockDirExcludesASecondCommand(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil {
		t.Fatal("a second lock on the same folder succeeded")
	}
	unlock()
	unlock2, err := lockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestProcessLifecycle(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	r, err := startProcess(processSpec{component: "sleeper", binary: "/bin/sh", args: []string{"-c", "echo hello; exec sleep 60"}, log: log, dieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Alive() {
		t.Fatal("started process is not alive")
	}
	if r.StartTime == 0 {
		t.Error("start time not recorded")
	}
	// The same PID with another start time is another process: never alive,
	// never signalled.
	impostor := r.Process
	impostor.StartTime++
	if impostor.Alive() {
		t.Error("a process with another start time counts as alive")
	}
	if err := stopProcess(impostor, time.Second); err != nil {
		t.Fatal(err)
	}
	if !r.Alive() {
		t.Fatal("stopProcess signalled a process whose start time differs")
	}

	if err := stopProcess(r.Process, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	<-r.done
	if r.Alive() {
		t.Error("process alive after stopProcess")
	}
	if err := stopProcess(r.Process, time.Second); err != nil {
		t.Errorf("stopping a stopped process: %v", err)
	}
	waitForText(t, log, "hello")
}

func TestStopProcessKillsWhatIgnoresSIGTERM(t *testing.T) {
	r, err := startProcess(processSpec{component: "stubborn", binary: "/bin/sh", args: []string{"-c", "trap '' TERM; while true; do sleep 0.1; done"}, log: filepath.Join(t.TempDir(), "l"), dieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	start := time.Now()
	if err := stopProcess(r.Process, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	<-r.done
	if r.Alive() {
		t.Error("process alive after SIGKILL")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("SIGKILL came after %s, before the grace period", d)
	}
}

func waitForText(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(path); strings.Contains(string(data), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s never contained %q", path, want)
}

// A component that fails to start is named in the error with the end of its
// log, and nothing is left running.
func TestUpFailureNamesComponentAndShowsLog(t *testing.T) {
	bin := fakeBinDir(t, `echo "fatal: the disk is on fire" >&2; exit 3`)
	dir := t.TempDir()
	_, err := Up(context.Background(), Options{Dir: dir, BinDir: bin, Clusters: 2, DieWithParent: true, ReadyTimeout: 20 * time.Second})
	if err == nil {
		t.Fatal("Up succeeded with binaries that exit at once")
	}
	for _, want := range []string{"etcd exited", "exit status 3", "the disk is on fire", "etcd.log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up error %q does not mention %q", err, want)
		}
	}
	st, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.AllProcesses() {
		if p.Alive() {
			t.Errorf("%s (pid %d) left running after a failed Up", p.Component, p.PID)
		}
	}
}

// A component that never becomes ready times out with its log.
func TestUpTimeoutShowsLog(t *testing.T) {
	bin := fakeBinDir(t, `echo "waiting for something that never comes"; exec sleep 600`)
	dir := t.TempDir()
	start := time.Now()
	_, err := Up(context.Background(), Options{Dir: dir, BinDir: bin, Clusters: 1, DieWithParent: true, ReadyTimeout: time.Second, StopGracePeriod: time.Second})
	if err == nil {
		t.Fatal("Up succeeded with an etcd that never serves")
	}
	for _, want := range []string{"cluster-1", "timed out waiting for etcd", "never comes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up error %q does not mention %q", err, want)
		}
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Up took %s to give up, want about the 1s ready timeout", d)
	}
	st, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.AllProcesses()) != 0 {
		t.Errorf("processes still recorded after a failed Up: %+v", st.AllProcesses())
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/x":       "/tmp/x",
		"/tmp/a b":     "'/tmp/a b'",
		"/tmp/it's":    `'/tmp/it'\''s'`,
		"/tmp/$(boom)": "'/tmp/$(boom)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
		if in == "/tmp/x" {
			continue
		}
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(in)).Output()
		if err != nil || string(out) != in {
			t.Errorf("sh reads %q back as %q (%v)", shellQuote(in), out, err)
		}
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var lines []string
	for i := range 30 {
		lines = append(lines, "line "+itoa(i))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := tailFile(path, 3)
	if got != "line 27\nline 28\nline 29" {
		t.Errorf("tailFile = %q", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestServeHTTPStdio(t *testing.T) {
	var out bytes.Buffer
	if err := ServeHTTPStdio(strings.NewReader("GET /hello HTTP/1.1\r\nHost: pod\r\n\r\n"), &out); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(&out), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != PortForwardReply+" GET /hello\n" {
		t.Errorf("answer = %d %q", resp.StatusCode, body)
	}
	if err := ServeHTTPStdio(strings.NewReader("not http"), io.Discard); err == nil {
		t.Error("a request that is not HTTP was answered")
	}
}

func TestKwokDebugging(t *testing.T) {
	c := &ClusterState{Name: "cluster-2", DataDir: "/data/cluster-2"}
	out, err := kwokDebugging(c, "/bin")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]map[string]any{}
	for _, d := range strings.Split(out, "---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("does not parse: %v\n%s", err, d)
		}
		kinds[obj["kind"].(string)] = obj["spec"].(map[string]any)
	}
	for _, k := range []string{"ClusterLogs", "ClusterAttach", "ClusterExec", "ClusterPortForward"} {
		if kinds[k] == nil {
			t.Errorf("no %s", k)
		}
	}
	if got := mustJSON(t, kinds["ClusterLogs"]); !strings.Contains(got, `"logsFile":"/data/cluster-2/containers.log"`) || !strings.Contains(got, `"follow":true`) {
		t.Errorf("logs = %s", got)
	}
	if got := mustJSON(t, kinds["ClusterPortForward"]); !strings.Contains(got, `"command":["/bin/fleetlet-sandbox","http-stdio"]`) {
		t.Errorf("port-forward = %s", got)
	}
}
