package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestAnswersCountWhatProvesTheTargetServes: a read or a write answered
// (429 too) is evidence that the target serves; a server error, a watch
// (fed from the API server's watch cache even while its etcd is down) and
// the probe's own requests are not.
func TestAnswersCountWhatProvesTheTargetServes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/failing":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	for _, tc := range []struct {
		name  string
		path  string
		probe bool
		heard bool
	}{
		{name: "a read answered", path: "/api/v1/namespaces/ns/pods/p", heard: true},
		{name: "too many requests", path: "/busy", heard: true},
		{name: "a server error", path: "/failing"},
		{name: "a watch opened", path: "/api/v1/namespaces/ns/pods?watch=true"},
		{name: "the probe's own read", path: "/api/v1/namespaces/ns/pods/p", probe: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &answers{clock: clk}
			hc := &http.Client{Transport: a.wrap(http.DefaultTransport)}
			ctx := context.Background()
			if tc.probe {
				ctx = context.WithValue(ctx, probeRequest{}, true)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equalf(t, tc.heard, a.since(clk.Now()), "answered since the request")
			clk.Step(time.Second)
			assert.False(t, a.since(clk.Now()), "answered since a second later")
		})
	}
}
