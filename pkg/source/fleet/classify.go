package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/fleetlet/fleetlet/pkg/apis/multicluster/v1alpha1"
)

// classify turns a probe error into a Ready reason and a message a user can
// act on. A namespaced Target's status is read by that namespace's users,
// who may have pointed it anywhere: its message says what kind of failure
// it was (refused, timed out, no such host, certificate) and never echoes
// the error, which names addresses and what answered there. A ClusterTarget's
// (the cluster admin's) message carries the error too.
func classify(err error, doing string, namespaced bool) (reason, message string) {
	detail := func(msg string) string {
		if namespaced {
			return msg
		}
		return fmt.Sprintf("%s: %v", msg, err)
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return v1alpha1.ReasonForbidden, detail("the target refused the credentials while " + doing)
	case apierrors.IsForbidden(err):
		// The API server's own message names the identity and the
		// right it lacks, no address: what the user needs.
		return v1alpha1.ReasonForbidden, fmt.Sprintf("the credentials are not allowed %s: %s", doing, apiMessage(err))
	case meta.IsNoMatchError(err), apierrors.IsNotFound(err):
		return v1alpha1.ReasonFleetletMissing, detail(fmt.Sprintf("fleetlet does not run in the target (%s failed): install it there", doing))
	case isTLSError(err):
		return v1alpha1.ReasonTLS, detail(fmt.Sprintf("the target's certificate is not trusted or does not match its name (%s): check the kubeconfig's certificate-authority-data and server", doing))
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return v1alpha1.ReasonUnreachable, detail(fmt.Sprintf("the target does not answer (%s: %s)", doing, netKind(err)))
	}
	if apierrors.ReasonForError(err) != "" {
		return v1alpha1.ReasonUnreachable, fmt.Sprintf("the target's API server failed %s: %s", doing, apiMessage(err))
	}
	return v1alpha1.ReasonUnreachable, detail(fmt.Sprintf("the target could not be reached (%s)", doing))
}

// apiMessage is the message of an API status error, which the API server
// wrote (no client-side address in it).
func apiMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return "an error"
}

func isTLSError(err error) bool {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		recordError tls.RecordHeaderError
		verify      *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &recordError) || errors.As(err, &verify) || strings.Contains(err.Error(), "tls: ")
}

// netKind names a network failure without its addresses.
func netKind(err error) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return "its host name does not resolve"
	case errors.As(err, &dns):
		return "its host name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to its host"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timed out"
	default:
		return "network error"
	}
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
