package fleet

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stretchr/testify/assert"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// A namespaced Target's message says what kind of failure it was and never
// the address (its readers may have pointed it at the internal network); a
// ClusterTarget's keeps the error. Before: every message echoed the error.
func TestClassify(t *testing.T) {
	const addr = "10.9.8.7:6443"
	urlErr := func(inner error) error {
		return &url.Error{Op: "Get", URL: "https://" + addr + "/apis", Err: inner}
	}
	dial := func(errno syscall.Errno) error {
		return urlErr(&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.9.8.7"), Port: 6443}, Err: os.NewSyscallError("connect", errno)})
	}
	for _, tc := range []struct {
		name, reason, says string
		err                error
	}{
		{"refused", v1alpha1.ReasonUnreachable, "connection refused", dial(syscall.ECONNREFUSED)},
		{"no route", v1alpha1.ReasonUnreachable, "no route", dial(syscall.EHOSTUNREACH)},
		{"dns", v1alpha1.ReasonUnreachable, "does not resolve", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "internal.corp", IsNotFound: true}})},
		{"timeout", v1alpha1.ReasonUnreachable, "timed out", urlErr(context.DeadlineExceeded)},
		{"untrusted certificate", v1alpha1.ReasonTLS, "certificate", urlErr(x509.UnknownAuthorityError{})},
		{"wrong name", v1alpha1.ReasonTLS, "certificate", urlErr(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.9.8.7"})},
		{"unauthorized", v1alpha1.ReasonForbidden, "refused the credentials", apierrors.NewUnauthorized("Unauthorized")},
		{"forbidden", v1alpha1.ReasonForbidden, "cannot get", apierrors.NewForbidden(schema.GroupResource{Resource: "clustersummaries"}, "default", errors.New("User \"x\" cannot get"))},
		{"no fleetlet", v1alpha1.ReasonFleetletMissing, "install it", apierrors.NewNotFound(schema.GroupResource{Resource: "clustersummaries"}, "default")},
		{"a network error", v1alpha1.ReasonUnreachable, "network error", urlErr(errors.New("something at " + addr))},
		{"other", v1alpha1.ReasonUnreachable, "could not be reached", fmt.Errorf("odd: something at %s", addr)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := classify(tc.err, "reading the ClusterSummary", true)
			assert.Falsef(t, reason != tc.reason || !strings.Contains(msg, tc.says), "namespaced: %s %q, want %s saying %q", reason, msg, tc.reason, tc.says)
			assert.Falsef(t, strings.Contains(msg, "10.9.8.7"), "a namespaced Target's message names the address: %q", msg)
			_, full := classify(tc.err, "reading the ClusterSummary", false)
			assert.Falsef(t, !strings.Contains(full, tc.err.Error()) && reason != v1alpha1.ReasonForbidden, "a ClusterTarget's message lacks the error: %q", full)
		})
	}
}
