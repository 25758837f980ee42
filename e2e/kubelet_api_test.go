package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/sandbox"
)

// kubectlCmd is a bin/kubectl command against the source, not started.
func kubectlCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(sb.BinDir(), "kubectl"), append([]string{"--context", sandbox.SourceCluster}, args...)...)
	cmd.Env = kubectlEnv()
	return cmd
}

// startKubectl starts bin/kubectl against the source and reads its
// output; it is killed when the test ends.
func startKubectl(t *testing.T, args ...string) *lines {
	t.Helper()
	cmd := kubectlCmd(args...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return newLines(out)
}

// lines reads a command's output line by line, in one goroutine for the
// whole stream.
type lines struct {
	ch  chan string
	got []string
}

func newLines(r io.Reader) *lines {
	l := &lines{ch: make(chan string, 1024)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.ch <- s.Text()
		}
		close(l.ch)
	}()
	return l
}

// until reads lines until one contains want, for at most timeout, and
// returns that line.
func (l *lines) until(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-l.ch:
			if !ok {
				require.FailNowf(t, "output ended", "output ended before %q; got:\n%s", want, strings.Join(l.got, "\n"))
			}
			l.got = append(l.got, line)
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			require.FailNowf(t, "timed out", "no %q within %s; got:\n%s", want, timeout, strings.Join(l.got, "\n"))
		}
	}
}

// appendContainerLog appends msg to what every container of cluster logs.
// attachSees runs `kubectl attach` with args and waits until it shows
// line, which it appends to the cluster's container log once a second
// meanwhile: kwok attaches from the log's end, so only lines written from
// then on show.
func attachSees(t *testing.T, cluster, line string, args ...string) {
	t.Helper()
	out := startKubectl(t, args...)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
				appendContainerLog(t, cluster, line)
			}
		}
	}()
	out.until(t, line, 30*time.Second)
}

func appendContainerLog(t *testing.T, cluster, msg string) {
	t.Helper()
	st := sb.State()
	cs, err := st.Cluster(cluster)
	if !assert.NoError(t, err) {
		return
	}
	f, err := os.OpenFile(filepath.Join(cs.DataDir, sandbox.ContainerLogFile), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(sandbox.ContainerLogLine(time.Now(), msg))
		f.Close()
	}
	assert.NoError(t, err)
}

// kubeletGet calls a virtual node's kubelet API directly, as token's
// holder (none: anonymous).
// summaryHas tells whether a /stats/summary reports the pod with usage.
func summaryHas(sum statsv1alpha1.Summary, ns, name string) bool {
	for _, ps := range sum.Pods {
		if ps.PodRef.Namespace == ns && ps.PodRef.Name == name && ps.CPU != nil && ps.CPU.UsageCoreNanoSeconds != nil {
			return true
		}
	}
	return false
}

func kubeletGet(t *testing.T, port int32, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The virtual node's serving certificate verifies against the
	// source's CA (its kubelet-serving signer issued it).
	st := sb.State()
	src, err := st.Cluster(sandbox.SourceCluster)
	require.NoError(t, err)
	caPEM, err := os.ReadFile(src.CAFile())
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// callerToken is a token of a new ServiceAccount of namespace ns, with no
// right yet; grant binds it a ClusterRole with one rule. Everything goes
// when the test ends.
func callerToken(t *testing.T, ns, name string) (token string, grant func(rbacv1.PolicyRule)) {
	t.Helper()
	ctx := context.Background()
	src := kube(t, sandbox.SourceCluster)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	_, err := src.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := src.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	grant = func(rule rbacv1.PolicyRule) {
		t.Helper()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Rules: []rbacv1.PolicyRule{rule}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
		_, err := src.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = src.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
		})
		_, err = src.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = src.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		})
	}
	return tr.Status.Token, grant
}

// TestKubeletAPIThroughVirtualNodes: kubectl logs, exec, attach and
// port-forward on a proxy reach its delegate through the virtual node's
// kubelet API, which authenticates and authorizes its callers as a kubelet.
func TestKubeletAPIThroughVirtualNodes(t *testing.T) {
	need(t)
	ctx := context.Background()
	ns := enabledNamespace(t, "kubelet", sb.ClusterNames()[1:]...)
	sel := deployment(t, ns, "web", 1, notSource("web"))
	p := waitBound(t, ns, sel, 1, 2*time.Minute)[0]
	waitDeploymentRunning(t, ns, "web", 1, time.Minute)
	cluster := clusterOfNode(p.Spec.NodeName)
	rec, ok := proxy.Elected(&p)
	require.Truef(t, ok, "proxy %s has no election record", p.Name)
	delegate := rec.Chaperon
	// A manager started moments ago (an earlier scenario restarts it)
	// serves its virtual nodes' kubelet API before their serving
	// certificates are issued, as a kubelet with serverTLSBootstrap does:
	// until then a TLS handshake fails ("tls: internal error").
	eventually(t, time.Minute, "the virtual node's kubelet API to serve", func(context.Context) (bool, string) {
		out, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "--tail=1")
		return err == nil, out
	})

	t.Run("logs", func(t *testing.T) {
		got, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name)
		require.NoErrorf(t, err, "kubectl logs\n%s", got)
		direct, err := kubectl(t, "--context", cluster, "-n", ns, "logs", delegate)
		require.NoErrorf(t, err, "kubectl logs in %s\n%s", cluster, direct)
		assert.Falsef(t, got != direct || !strings.Contains(got, sandbox.ContainerLogMessage(cluster, 1)), "logs through the virtual node:\n%s\nwant what %s serves:\n%s", got, cluster, direct)
		tail, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "-c", "main", "--tail=2", "--timestamps")
		lines := strings.Split(strings.TrimSpace(tail), "\n")
		stamped := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+Z `)
		assert.Falsef(t, err != nil || len(lines) != 2 || !stamped.MatchString(lines[0]) || !strings.HasSuffix(lines[1], sandbox.ContainerLogMessage(cluster, sandbox.ContainerLogLines)), "--tail=2 --timestamps: %v\n%s", err, tail)
		none, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "--tail=0")
		assert.Falsef(t, err != nil || none != "", "--tail=0: %v %q, want no line", err, none)
		limited, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "--limit-bytes=7")
		assert.Falsef(t, err != nil || limited != direct[:7], "--limit-bytes=7: %v %q, want %q", err, limited, direct[:7])
		out, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "-c", "nosuch")
		assert.Falsef(t, err == nil || !strings.Contains(out, "nosuch"), "logs of a container the pod does not have: %v\n%s", err, out)
	})

	t.Run("follow", func(t *testing.T) {
		r := startKubectl(t, "-n", ns, "logs", "-f", p.Name)
		r.until(t, sandbox.ContainerLogMessage(cluster, sandbox.ContainerLogLines), 30*time.Second)
		line := fmt.Sprintf("appended %d", time.Now().UnixNano())
		appendContainerLog(t, cluster, line)
		r.until(t, line, 30*time.Second)
	})

	t.Run("exec", func(t *testing.T) {
		out, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "exec", p.Name, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2")
		assert.Falsef(t, err != nil || !strings.Contains(out, "to-stdout") || !strings.Contains(out, "to-stderr"), "exec: %v\n%s", err, out)
		// kwok reports a failed command as an error naming its status
		// (kubectl then exits 1), through the virtual node as directly.
		out, err = kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "exec", p.Name, "--", "sh", "-c", "exit 3")
		assert.Falsef(t, err == nil || !strings.Contains(out, "exit status 3"), "exec of a failing command: %v\n%s", err, out)
		// One line, not cat: kwok does not close a command's stdin
		// when the caller's ends (directly in the target neither).
		cmd := kubectlCmd("-n", ns, "exec", "-i", p.Name, "--", "sh", "-c", "read line; echo got: $line")
		cmd.Stdin = strings.NewReader("piped through\n")
		piped, err := cmd.CombinedOutput()
		assert.Falsef(t, err != nil || string(piped) != "got: piped through\n", "exec -i: %v %q", err, piped)
	})

	t.Run("attach", func(t *testing.T) {
		attachSees(t, cluster, fmt.Sprintf("attached %d", time.Now().UnixNano()), "-n", ns, "attach", p.Name, "-c", "main")
	})

	t.Run("port-forward", func(t *testing.T) {
		r := startKubectl(t, "-n", ns, "port-forward", "pod/"+p.Name, ":80", ":8080")
		local := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)`)
		for range 2 {
			m := local.FindStringSubmatch(r.until(t, "Forwarding from 127.0.0.1", 30*time.Second))
			require.NotNil(t, m, "no local port")
			resp, err := http.Get("http://127.0.0.1:" + m[1] + "/through-" + m[2])
			require.NoErrorf(t, err, "port %s", m[2])
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := sandbox.PortForwardReply + " GET /through-" + m[2] + "\n"
			assert.Equalf(t, want, string(body), "what port %s answered", m[2])
		}
	})

	// Called as metrics-server calls a kubelet: directly, with the rights
	// metrics-server's own role gives (nodes/metrics, nodes/stats). The
	// figures are the delegate's, from its target's metrics-server
	// (TestTopAndAutoscaleAcrossClusters checks them through kubectl top).
	// The API server's node proxy cannot be used here: it refuses the
	// nodes' loopback address.
	t.Run("usage endpoints", func(t *testing.T) {
		needMetricsServer(t)
		src := kube(t, sandbox.SourceCluster)
		node, err := src.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		require.NoError(t, err)
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		token, grant := callerToken(t, ns, "usage-reader")
		grant(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/metrics", "nodes/stats"}, Verbs: []string{"get"}})
		var text string
		eventually(t, time.Minute, "/metrics/resource to report "+p.Name, func(context.Context) (bool, string) {
			code, body := kubeletGet(t, port, "/metrics/resource", token)
			text = body
			return code == http.StatusOK && strings.Contains(body, `pod_cpu_usage_seconds_total{namespace="`+ns+`",pod="`+p.Name+`"}`), fmt.Sprintf("%d %s", code, body)
		})
		for _, want := range []string{"# TYPE node_cpu_usage_seconds_total counter", "scrape_error 0", `container_memory_working_set_bytes{container="main",namespace="` + ns + `",pod="` + p.Name + `"}`} {
			assert.Containsf(t, text, want, "/metrics/resource of %s has no %q:\n%s", p.Spec.NodeName, want, text)
		}
		code, raw := kubeletGet(t, port, "/stats/summary", token)
		var sum statsv1alpha1.Summary
		err = json.Unmarshal([]byte(raw), &sum)
		assert.Falsef(t, code != http.StatusOK || err != nil || sum.Node.NodeName != p.Spec.NodeName || !summaryHas(sum, ns, p.Name), "/stats/summary of %s: %d %v, %s", p.Spec.NodeName, code, err, raw)
		code, body := kubeletGet(t, port, "/pods", token)
		assert.Equalf(t, http.StatusForbidden, code, "/pods with nodes/metrics and nodes/stats only: %s", body)
	})

	t.Run("callers are authenticated and authorized", func(t *testing.T) {
		src := kube(t, sandbox.SourceCluster)
		node, err := src.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		require.NoError(t, err)
		other, err := src.CoreV1().Nodes().Get(ctx, "fleetlet-"+sandbox.SourceCluster, metav1.GetOptions{})
		require.NoError(t, err)
		port, otherPort := node.Status.DaemonEndpoints.KubeletEndpoint.Port, other.Status.DaemonEndpoints.KubeletEndpoint.Port
		require.Falsef(t, port == 0 || otherPort == 0 || port == otherPort, "kubelet ports %d and %d: want one per node", port, otherPort)
		code, body := kubeletGet(t, port, "/pods", "")
		assert.Equalf(t, http.StatusUnauthorized, code, "anonymous: %s", body)
		// A ServiceAccount allowed nodes/proxy on the other node only.
		token, grant := callerToken(t, ns, "kubelet-caller")
		code, body = kubeletGet(t, port, "/pods", token)
		assert.Equalf(t, http.StatusForbidden, code, "no right: %s", body)
		grant(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, ResourceNames: []string{other.Name}, Verbs: []string{"get"}})
		eventually(t, time.Minute, "the other node's kubelet API to allow the token", func(context.Context) (bool, string) {
			code, body := kubeletGet(t, otherPort, "/pods", token)
			return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
		})
		code, body = kubeletGet(t, port, "/pods", token)
		assert.Falsef(t, code != http.StatusForbidden || !strings.Contains(body, node.Name), "nodes/proxy for another node: %d %s, want 403 naming %s", code, body, node.Name)
		// A pod path for a pod bound to another node is refused there.
		code, body = kubeletGet(t, otherPort, fmt.Sprintf("/containerLogs/%s/%s/main", ns, p.Name), token)
		assert.Equalf(t, http.StatusNotFound, code, "logs of %s at %s's port: %s", p.Name, other.Name, body)
	})

	// servedBy waits until the node advertises another port than old
	// (0: any) and kubectl logs through it gives the delegate's log.
	servedBy := func(t *testing.T, leader string, old int32) int32 {
		t.Helper()
		src := kube(t, sandbox.SourceCluster)
		var port int32
		eventually(t, time.Minute, "kubectl logs through "+leader+"'s kubelet API", func(context.Context) (bool, string) {
			n, err := src.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			port = n.Status.DaemonEndpoints.KubeletEndpoint.Port
			if port == old {
				return false, "the node still advertises the old leader's port"
			}
			direct, err := kubectl(t, "--context", cluster, "-n", ns, "logs", delegate, "--tail=1")
			if err != nil {
				return false, direct
			}
			out, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "logs", p.Name, "--tail=1")
			return err == nil && out == direct, fmt.Sprint(err, out)
		})
		return port
	}

	t.Run("the kubelet API follows the leader", func(t *testing.T) {
		before := servedBy(t, sandbox.ComponentManager, 0)
		// Each replica is killed holding the Lease: with fastLease, the
		// other takes over after 6 s rather than 15 s.
		require.NoError(t, sb.StartComponentWith(ctx, sandbox.SourceCluster, sandbox.ComponentManagerStandby, fastLease...))
		require.NoError(t, sb.KillComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManager))
		waitLeading(t, sandbox.ComponentManagerStandby)
		standby := servedBy(t, sandbox.ComponentManagerStandby, before)
		// The usual leader back, for what follows.
		require.NoError(t, sb.StartComponentWith(ctx, sandbox.SourceCluster, sandbox.ComponentManager, fastLease...))
		require.NoError(t, sb.KillComponent(ctx, sandbox.SourceCluster, sandbox.ComponentManagerStandby))
		waitLeading(t, sandbox.ComponentManager)
		servedBy(t, sandbox.ComponentManager, standby)
	})

	t.Run("a Source without pods/exec in the target gets a clear error", func(t *testing.T) {
		tgt := kube(t, cluster)
		role, err := tgt.RbacV1().ClusterRoles().Get(ctx, "fleetlet-source", metav1.GetOptions{})
		require.NoError(t, err)
		saved := role.DeepCopy()
		var kept []rbacv1.PolicyRule
		for _, r := range role.Rules {
			if !strings.Contains(strings.Join(r.Resources, ","), "pods/exec") {
				kept = append(kept, r)
			}
		}
		role.Rules = kept
		_, err = tgt.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			cur, err := tgt.RbacV1().ClusterRoles().Get(context.Background(), saved.Name, metav1.GetOptions{})
			if err == nil {
				cur.Rules = saved.Rules
				_, err = tgt.RbacV1().ClusterRoles().Update(context.Background(), cur, metav1.UpdateOptions{})
			}
			assert.NoErrorf(t, err, "restoring fleetlet-source in %s", cluster)
		})
		began := time.Now()
		out, err := kubectl(t, "--context", sandbox.SourceCluster, "-n", ns, "exec", p.Name, "--request-timeout=60s", "--", "true")
		assert.Falsef(t, err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, cluster), "exec without the right in the target: %v\n%s", err, out)
		took := time.Since(began)
		assert.LessOrEqualf(t, took, 30*time.Second, "the refusal took %s", took)
	})
}
