// answers: what this process last heard from a target, over every request
// and watch it makes there, so that a probe that runs out of time while the
// target answers everything else is taken for a busy target, not for one
// that is gone.

package fleet

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// answers remembers when a target last sent this process anything: a
// response that is not a server error, or a byte of one (a watch's event,
// a list's page).
type answers struct {
	clock clock.PassiveClock
	// last is that time, in Unix nanoseconds; 0 before the first answer.
	last atomic.Int64
}

// heard records an answer now.
func (a *answers) heard() { a.last.Store(a.clock.Now().UnixNano()) }

// since tells whether the target sent anything at or after t.
func (a *answers) since(t time.Time) bool {
	last := a.last.Load()
	return last != 0 && last >= t.UnixNano()
}

// wrap is a rest.Config's WrapTransport: every response through rt is an
// answer, and so is every byte read from its body.
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
	if err != nil || resp.StatusCode >= http.StatusInternalServerError || req.Context().Value(probeRequest{}) != nil {
		return resp, err
	}
	t.answers.heard()
	if resp.StatusCode != http.StatusSwitchingProtocols { // an upgraded body is written to too
		resp.Body = &answerBody{ReadCloser: resp.Body, answers: t.answers}
	}
	return resp, nil
}

// answerBody records every read that brings bytes: a watch opened long
// ago still shows that the target sends its events.
type answerBody struct {
	io.ReadCloser
	answers *answers
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.answers.heard()
	}
	return n, err
}
