package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/pkg/proxy"
)

// TestChaperonCachesAskForNoGzip: the caches' watches of a target ask for
// uncompressed streams, each of which would otherwise hold a gzip reader
// for its whole life; the client's other requests keep Go's default.
func TestChaperonCachesAskForNoGzip(t *testing.T) {
	encodings := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encodings <- r.Header.Get("Accept-Encoding")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	// TLS, as every target: client-go gives a plain-HTTP config without
	// TLS options Go's default transport, whatever the config says.
	target := func() *rest.Config {
		return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	}
	c, err := newCluster(context.Background(), proxy.TargetKey{Name: "t"}, connection{config: target()},
		runtime.NewScheme(), &Options{SourceName: "s"}, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, nil)
	require.NoError(t, err)
	get := func(cfg *rest.Config) string {
		hc, err := rest.HTTPClientFor(cfg)
		require.NoError(t, err)
		resp, err := hc.Get(srv.URL + "/api/v1/namespaces/ns/pods?watch=true")
		require.NoError(t, err)
		_ = resp.Body.Close()
		return <-encodings
	}
	// The control: Go's transport asks for gzip unless told not to.
	require.Equal(t, "gzip", get(target()), "Accept-Encoding of a default client")
	assert.Empty(t, get(c.cacheCfg), "Accept-Encoding of the caches' requests")
}
