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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// fakeBinDir returns a folder with an executable script for every binary the
// sandbox needs; each runs body.
func fakeBinDir(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range append(requiredBinaries, binFleetlet, binHelm) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
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
				require.NoError(t, err, "Validate()")
				return
			}
			require.Error(t, err, "Validate() = nil, want an error mentioning %q", tc.wantErr)
			for _, want := range tc.wantErr {
				assert.Containsf(t, err.Error(), want, "Validate() = %q, want it to mention %q", err, want)
			}
		})
	}
}

func TestDefaulted(t *testing.T) {
	got := Options{Dir: "d", BinDir: "b"}.Defaulted()
	assert.Falsef(t, got.Clusters != 3 || got.Nodes != 3 || got.NodeCPU != "32" || got.NodeMemory != "128Gi" || got.NodePods != "250" ||
		got.TolerationSeconds != 60 || got.CompleteAfter != 5*time.Second || got.Out == nil, "Defaulted() = %+v", got)
	kept := Options{Dir: "d", BinDir: "b", Clusters: 2, Nodes: 1, TolerationSeconds: 7}.Defaulted()
	assert.Falsef(t, kept.Clusters != 2 || kept.Nodes != 1 || kept.TolerationSeconds != 7, "Defaulted() overwrote set fields: %+v", kept)
}

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := freePorts(3 * portsPerCluster)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		// Below the ephemeral range: no outgoing connection nor listener
		// on port 0 takes it while a cluster restarts.
		assert.Falsef(t, p < portFloor || p >= ephemeralLow(), "port %d outside [%d, %d)", p, portFloor, ephemeralLow())
		assert.Falsef(t, seen[p], "port %d returned twice", p)
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(p)))
		if !assert.NoError(t, err, "port %d is not free after freePorts returned", p) {
			continue
		}
		l.Close()
	}
	got := portsFrom(ports[:portsPerCluster])
	want := Ports{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], ControllerManager: ports[3], Scheduler: ports[4],
		FleetletMetrics: ports[5], FleetletHealth: ports[6], KwokServer: ports[7], FleetletWebhook: ports[8], FleetletScheduler: ports[9],
		StandbyMetrics: ports[10], StandbyHealth: ports[11], KueueWebhook: ports[12], KueueMetrics: ports[13], KueueHealth: ports[14],
		MetricsServer: ports[15]}
	assert.Empty(t, cmp.Diff(want, got), "portsFrom (-want,+got)")
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
	require.NoError(t, prepareCluster(o, c))
	return o, c
}

func TestPrepareClusterKubeconfigs(t *testing.T) {
	_, c := testCluster(t)
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	require.NoError(t, err)
	assert.Equalf(t, "cluster-2", cfg.CurrentContext, "current context = %q, want cluster-2", cfg.CurrentContext)
	cl := cfg.Clusters["cluster-2"]
	require.Falsef(t, cl == nil || cl.Server != "https://127.0.0.1:6443", "cluster entry = %+v, want server https://127.0.0.1:6443", cl)
	assert.Falsef(t, len(cl.CertificateAuthorityData) == 0 || cl.CertificateAuthority != "" || cl.InsecureSkipTLSVerify, "cluster entry must carry inline CA data and verify TLS: %+v", cl)
	user := cfg.AuthInfos["cluster-2"]
	require.Falsef(t, user == nil || len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 || user.ClientCertificate != "" || user.Token != "" || user.Exec != nil, "user entry must carry only inline client certificate and key: %+v", user)
	ca := parseCert(t, cl.CertificateAuthorityData)
	admin := parseCert(t, user.ClientCertificateData)
	assert.NoError(t, admin.CheckSignatureFrom(ca), "admin certificate is not signed by the cluster CA")
	assert.Empty(t, cmp.Diff([]string{"system:masters"}, admin.Subject.Organization), "admin organization (-want,+got)")

	// Components authenticate with their well-known identities.
	for component, wantCN := range map[string]string{
		binControllerManager: "system:kube-controller-manager",
		binScheduler:         "system:kube-scheduler",
		binKwok:              "kwok",
	} {
		cfg, err := clientcmd.LoadFromFile(c.componentKubeconfig(component))
		require.NoError(t, err)
		assert.Equal(t, wantCN, parseCert(t, cfg.AuthInfos["cluster-2"].ClientCertificateData).Subject.CommonName, "%s client CN", component)
	}

	// The apiserver's serving certificate is valid for loopback and the
	// in-cluster names.
	data, err := os.ReadFile(c.pki("apiserver.crt"))
	require.NoError(t, err)
	serving := parseCert(t, data)
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", serviceIP} {
		assert.NoError(t, serving.VerifyHostname(host), "apiserver certificate not valid for %s", host)
	}
	if info, err := os.Stat(c.pki("ca.key")); err != nil || info.Mode().Perm() != 0o600 {
		assert.Failf(t, "ca.key must be private (0600)", "%v %v", info.Mode(), err)
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	require.NotNil(t, block, "no PEM block")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
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
			assert.Containsf(t, args[component], w, "%s args %q lack %q", component, args[component], w)
		}
	}
	for component, a := range args {
		assert.NotContainsf(t, a, "0.0.0.0", "%s listens beyond loopback: %s", component, a)
	}
}

func TestKwokStages(t *testing.T) {
	docs := strings.Split(kwokStages(7*time.Second), "---\n")
	var names []string
	var succeeded map[string]any
	for _, d := range docs {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(d), &obj), "stage does not parse:\n%s", d)
		assert.Equalf(t, "Stage", obj["kind"], "kind = %v, want Stage", obj["kind"])
		name := obj["metadata"].(map[string]any)["name"].(string)
		names = append(names, name)
		if name == "sandbox-pod-succeeded" {
			succeeded = obj
		}
	}
	want := []string{"sandbox-node-ready", "sandbox-node-heartbeat", "sandbox-pod-running", "sandbox-pod-updated", "sandbox-pod-succeeded", "sandbox-pod-gone"}
	assert.Empty(t, cmp.Diff(want, names), "stages (-want,+got)")
	spec := succeeded["spec"].(map[string]any)
	assert.Equal(t, float64(7000), spec["delay"].(map[string]any)["durationMilliseconds"], "succeeded delay")
	assert.Containsf(t, mustJSON(t, spec["selector"]), `"Never","OnFailure"`, "succeeded stage must select restartPolicy Never and OnFailure only: %s", mustJSON(t, spec["selector"]))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	j, err := yaml.YAMLToJSON(b)
	require.NoError(t, err)
	return string(j)
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir, BinDir: "/b", Nodes: 2, CompleteAfter: 3 * time.Second}.Defaulted()
	st := &State{Version: stateVersion, Dir: dir, BinDir: "/b", Settings: settingsFrom(o), Clusters: []ClusterState{{
		Name: "cluster-1", Index: 1, Ports: Ports{APIServer: 1234},
		Processes: []Process{{Component: "etcd", PID: 42, StartTime: 7, Log: "/l"}},
	}}}
	require.NoError(t, st.save())
	got, err := LoadState(dir)
	require.NoError(t, err)
	assert.Empty(t, cmp.Diff(st, got), "LoadState (-want,+got)")
	back, err := got.options(Options{})
	require.NoError(t, err)
	assert.Falsef(t, back.Nodes != 2 || back.CompleteAfter != 3*time.Second || back.Clusters != 1 || back.BinDir != "/b", "options from state = %+v", back)
	_, err = got.Cluster("cluster-9")
	assert.ErrorContains(t, err, "cluster-1", "Cluster(cluster-9), want an error listing the clusters")

	st.Version = 99
	require.NoError(t, st.save())
	_, err = LoadState(dir)
	assert.ErrorContains(t, err, "version 99", "LoadState of another version, want a version error")
	_, err = LoadState(t.TempDir())
	assert.ErrorContains(t, err, "fleetlet-sandbox up", "LoadState of an empty folder, want a hint to run up")
}

func TestLockDirExcludesASecondCommand(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	require.NoError(t, err)
	_, err = lockDir(dir)
	require.Error(t, err, "a second lock on the same folder succeeded")
	unlock()
	unlock2, err := lockDir(dir)
	require.NoError(t, err, "lock after unlock")
	unlock2()
}

func TestProcessLifecycle(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	r, err := startProcess(processSpec{component: "sleeper", binary: "/bin/sh", args: []string{"-c", "echo hello; exec sleep 60"}, log: log, dieWithParent: true})
	require.NoError(t, err)
	require.True(t, r.Alive(), "started process is not alive")
	assert.NotZero(t, r.StartTime, "start time not recorded")
	// The same PID with another start time is another process: never alive,
	// never signalled.
	impostor := r.Process
	impostor.StartTime++
	assert.False(t, impostor.Alive(), "a process with another start time counts as alive")
	require.NoError(t, stopProcess(impostor, time.Second))
	require.True(t, r.Alive(), "stopProcess signalled a process whose start time differs")

	require.NoError(t, stopProcess(r.Process, 5*time.Second))
	<-r.done
	assert.False(t, r.Alive(), "process alive after stopProcess")
	assert.NoError(t, stopProcess(r.Process, time.Second), "stopping a stopped process")
	waitForText(t, log, "hello")
}

func TestStopProcessKillsWhatIgnoresSIGTERM(t *testing.T) {
	r, err := startProcess(processSpec{component: "stubborn", binary: "/bin/sh", args: []string{"-c", "trap '' TERM; while true; do sleep 0.1; done"}, log: filepath.Join(t.TempDir(), "l"), dieWithParent: true})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	start := time.Now()
	require.NoError(t, stopProcess(r.Process, 300*time.Millisecond))
	<-r.done
	assert.False(t, r.Alive(), "process alive after SIGKILL")
	d := time.Since(start)
	assert.GreaterOrEqualf(t, d, 300*time.Millisecond, "SIGKILL came after %s, before the grace period", d)
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
	assert.Failf(t, "text not found", "%s never contained %q", path, want)
}

// A component that fails to start is named in the error with the end of its
// log, and nothing is left running.
func TestUpFailureNamesComponentAndShowsLog(t *testing.T) {
	bin := fakeBinDir(t, `echo "fatal: the disk is on fire" >&2; exit 3`)
	dir := t.TempDir()
	_, err := Up(context.Background(), Options{Dir: dir, BinDir: bin, Clusters: 2, DieWithParent: true, ReadyTimeout: 20 * time.Second})
	require.Error(t, err, "Up succeeded with binaries that exit at once")
	for _, want := range []string{"etcd exited", "exit status 3", "the disk is on fire", "etcd.log"} {
		assert.Containsf(t, err.Error(), want, "Up error %q does not mention %q", err, want)
	}
	st, err := LoadState(dir)
	require.NoError(t, err)
	for _, p := range st.AllProcesses() {
		assert.Falsef(t, p.Alive(), "%s (pid %d) left running after a failed Up", p.Component, p.PID)
	}
}

// A component that never becomes ready times out with its log.
func TestUpTimeoutShowsLog(t *testing.T) {
	bin := fakeBinDir(t, `echo "waiting for something that never comes"; exec sleep 600`)
	dir := t.TempDir()
	start := time.Now()
	_, err := Up(context.Background(), Options{Dir: dir, BinDir: bin, Clusters: 1, DieWithParent: true, ReadyTimeout: time.Second, StopGracePeriod: time.Second})
	require.Error(t, err, "Up succeeded with an etcd that never serves")
	for _, want := range []string{"cluster-1", "timed out waiting for etcd", "never comes"} {
		assert.Containsf(t, err.Error(), want, "Up error %q does not mention %q", err, want)
	}
	d := time.Since(start)
	assert.LessOrEqualf(t, d, 15*time.Second, "Up took %s to give up, want about the 1s ready timeout", d)
	st, err := LoadState(dir)
	require.NoError(t, err)
	assert.Empty(t, st.AllProcesses(), "processes still recorded after a failed Up")
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/x":       "/tmp/x",
		"/tmp/a b":     "'/tmp/a b'",
		"/tmp/it's":    `'/tmp/it'\''s'`,
		"/tmp/$(boom)": "'/tmp/$(boom)'",
	} {
		assert.Equal(t, want, shellQuote(in), "shellQuote(%q)", in)
		if in == "/tmp/x" {
			continue
		}
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(in)).Output()
		assert.Falsef(t, err != nil || string(out) != in, "sh reads %q back as %q (%v)", shellQuote(in), out, err)
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var lines []string
	for i := range 30 {
		lines = append(lines, "line "+itoa(i))
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	got := tailFile(path, 3)
	assert.Equalf(t, "line 27\nline 28\nline 29", got, "tailFile = %q", got)
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestServeHTTPStdio(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, ServeHTTPStdio(strings.NewReader("GET /hello HTTP/1.1\r\nHost: pod\r\n\r\n"), &out))
	resp, err := http.ReadResponse(bufio.NewReader(&out), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Falsef(t, resp.StatusCode != http.StatusOK || string(body) != PortForwardReply+" GET /hello\n", "answer = %d %q", resp.StatusCode, body)
	assert.Error(t, ServeHTTPStdio(strings.NewReader("not http"), io.Discard), "a request that is not HTTP was answered")
}

func TestKwokDebugging(t *testing.T) {
	c := &ClusterState{Name: "cluster-2", DataDir: "/data/cluster-2"}
	out, err := kwokDebugging(c, "/bin")
	require.NoError(t, err)
	kinds := map[string]map[string]any{}
	for _, d := range strings.Split(out, "---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(d), &obj), "does not parse:\n%s", d)
		kinds[obj["kind"].(string)] = obj["spec"].(map[string]any)
	}
	for _, k := range []string{"ClusterLogs", "ClusterAttach", "ClusterExec", "ClusterPortForward"} {
		assert.NotNil(t, kinds[k], "no %s", k)
	}
	logs := mustJSON(t, kinds["ClusterLogs"])
	assert.Falsef(t, !strings.Contains(logs, `"logsFile":"/data/cluster-2/containers.log"`) || !strings.Contains(logs, `"follow":true`), "logs = %s", logs)
	assert.Contains(t, mustJSON(t, kinds["ClusterPortForward"]), `"command":["/bin/fleetlet-sandbox","http-stdio"]`, "port-forward")
}

// A kube-apiserver that waits on requests in flight after SIGTERM is killed
// after apiServerStopGrace, not after the whole grace period: stopping a
// cluster in the e2e suite took 11.5 s, 10 of them waiting for it. Every
// other component still gets the whole grace.
func TestStopClusterCutsTheAPIServersWaitShort(t *testing.T) {
	dir := t.TempDir()
	stubborn := func(component string) *running {
		r, err := startProcess(processSpec{component: component, binary: "/bin/sh", args: []string{"-c", "trap '' TERM; while true; do sleep 0.1; done"}, log: filepath.Join(dir, component), dieWithParent: true})
		require.NoError(t, err)
		return r
	}
	api, etcd := stubborn(binAPIServer), stubborn(binEtcd)
	time.Sleep(200 * time.Millisecond) // let the shells install their traps
	s := &Sandbox{opts: Options{StopGracePeriod: 4 * time.Second}, procs: map[int]*running{api.PID: api, etcd.PID: etcd}}
	c := &ClusterState{Name: "cluster-1", Processes: []Process{etcd.Process, api.Process}}

	start := time.Now()
	require.NoError(t, s.stopCluster(c))
	d := time.Since(start)
	assert.False(t, api.Alive(), "kube-apiserver alive after the stop")
	assert.False(t, etcd.Alive(), "etcd alive after the stop")
	want := apiServerStopGrace + s.opts.StopGracePeriod
	assert.GreaterOrEqualf(t, d, want, "stop took %s: etcd was not given its whole grace", d)
	assert.Lessf(t, d, want+time.Second, "stop took %s: the apiserver got more than %s", d, apiServerStopGrace)
}
