package fleet_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
	proxypod "github.com/fleetlet/fleetlet/pkg/proxy"
	"github.com/fleetlet/fleetlet/pkg/source/fleet"
	"github.com/fleetlet/fleetlet/pkg/testenv"
)

// TestBusyTargetStaysReady: a target whose API server takes longer than a
// probe may wait to renew this source's heartbeat, while it answers the
// source's other requests, is busy, not gone: it stays Ready. Before, three
// such probes in a row made it NotReady (Unreachable), which took it out of
// every election and tainted its virtual node; at ten targets under a burst
// every target went NotReady and back, again and again. Without other
// answers the same probes still count, and it turns NotReady.
func TestBusyTargetStaysReady(t *testing.T) {
	f := start(t, func(o *fleet.Options) { o.ProbeTimeout = time.Second })
	ensureSummary(t, f.target)
	var busy atomic.Bool
	f.putSecret(t, "busy-secret", holdingLeases(t, targetEnv.Config, &busy))
	f.createTarget(t, "busy", "busy-secret")
	f.waitReady(t, "busy", metav1.ConditionTrue, v1alpha1.ReasonConnected)
	cl, ok := f.registry.Get(proxypod.TargetKey{Namespace: f.ns, Name: "busy"})
	require.True(t, ok, "no connection for the Target")
	cluster := f.ns + "/busy"
	before := probes(t, cluster, v1alpha1.ReasonUnreachable)

	busy.Store(true)
	stop := keepAsking(cl.Client())
	testenv.EventuallyTrue(t, waitTimeout, "five probes out of time", func(context.Context) bool {
		return probes(t, cluster, v1alpha1.ReasonUnreachable) >= before+5
	})
	h := cl.Health()
	assert.True(t, h.Ready, "a target that answers every other request turned NotReady: %+v", h)
	assert.Equal(t, 1.0, gauge(t, "fleetlet_target_ready", cluster), "fleetlet_target_ready")

	stop()
	msg := f.waitReady(t, "busy", metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	assert.Contains(t, msg, "renewing the heartbeat Lease", "the condition's message")
	busy.Store(false)
	f.waitReady(t, "busy", metav1.ConditionTrue, v1alpha1.ReasonConnected)
}

// holdingLeases is a kubeconfig for a proxy in front of the API server of
// cfg that, while busy is set, holds every request for a Lease until the
// client gives up, and passes every other request on: a target too busy
// to renew a heartbeat in time that still answers the rest.
func holdingLeases(t *testing.T, cfg *rest.Config, busy *atomic.Bool) []byte {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	require.NoError(t, err)
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	upstream, err := url.Parse(host)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Header.Del("Authorization") // the proxy's own credentials go upstream
		},
		Transport:     rt,
		FlushInterval: -1, // watches stream
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if busy.Load() && strings.Contains(r.URL.Path, "/leases/") {
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() }) // the registry's watches through it too
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	// A token the proxy drops: a Target's kubeconfig must carry credentials.
	return testenv.Kubeconfig(t, &rest.Config{Host: srv.URL, BearerToken: "dropped", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, "default", "")
}

// keepAsking reads the target's ClusterSummary through c every 50 ms
// until the returned stop is called: the source's other traffic, which
// the target answers.
func keepAsking(c client.Client) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			var cs v1alpha1.ClusterSummary
			_ = c.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSummaryName}, &cs)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
