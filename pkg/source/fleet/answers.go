// answers: what this process last heard from a target, over every request
// it makes there, so that a probe that runs out of time while the target
// answers everything else is taken for a busy target, not for one that is
// gone.

package fleet

import (
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// answers remembers when a target last answered a request of this
// process with anything but a server error. A watch is no evidence: its
// events and bookmarks come from the API server's watch cache, which
// streams on while the server cannot serve a read or a write (its etcd
// down), and so does the response that opens a watch.
type answers struct {
	clock clock.PassiveClock
	// last is that time, in Unix nanoseconds; 0 before the first answer.
	last atomic.Int64
}

// heard records an answer now.
func (a *answers) heard() { a.last.Store(a.clock.Now().UnixNano()) }

// since tells whether the target answered anything at or after t.
func (a *answers) since(t time.Time) bool {
	last := a.last.Load()
	return last != 0 && last >= t.UnixNano()
}

// wrap is a rest.Config's WrapTransport: every response through rt is an
// answer, but a watch's.
func (a *answers) wrap(rt http.RoundTripper) http.RoundTripper {
	return answerTransport{next: rt, answers: a}
}

type answerTransport struct {
	next    http.RoundTripper
	answers *answers
}

// probeRequest marks, in a request's context, the probe's own requests:
// they are what the answers are evidence for, not evidence.
type probeRequest struct{}

// RoundTrip records the response unless it is a server error (5xx): an
// API server that answers 5xx is up but failing, and says nothing of its
// health. 429 (too many requests) is an answer: busy, not gone.
func (t answerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode < http.StatusInternalServerError &&
		req.Context().Value(probeRequest{}) == nil && req.URL.Query().Get("watch") != "true" {
		t.answers.heard()
	}
	return resp, err
}
