package kubeletapi

import (
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
)

func TestRequestAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	cases := []struct {
		method, path string
		verb         string
		subs         []string
	}{
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"GET", "/exec/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/portForward/ns/p", "create", []string{"proxy"}},
		{"POST", "/attach/ns/p/c", "create", []string{"proxy"}},
		{"DELETE", "/pods", "delete", []string{"pods", "proxy"}},
		// A prefix is not a subpath.
		{"GET", "/statsfoo", "get", []string{"proxy"}},
		{"GET", "/podsx", "get", []string{"proxy"}},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		attrs := requestAttributes(u, r, "fleetlet-cluster-2")
		var subs []string
		for _, a := range attrs {
			subs = append(subs, a.GetSubresource())
			assert.Falsef(t, a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "fleetlet-cluster-2" || a.GetAPIGroup() != "" ||
				!a.IsResourceRequest() || a.GetUser().GetName() != "alice" || a.GetNamespace() != "",
				"%s %s: attributes %+v", tc.method, tc.path, a)
		}
		assert.Empty(t, cmp.Diff(tc.subs, subs), "%s %s: subresources (-want,+got)", tc.method, tc.path)
	}
}

func TestParseLogQuery(t *testing.T) {
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		query   string
		want    *corev1.PodLogOptions
		wantErr bool
	}{
		{query: "", want: &corev1.PodLogOptions{}},
		{query: "follow=true&previous=1&timestamps=true", want: &corev1.PodLogOptions{Follow: true, Previous: true, Timestamps: true}},
		{query: "tailLines=0", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](0)}},
		{query: "tailLines=10&limitBytes=100", want: &corev1.PodLogOptions{TailLines: ptr.To[int64](10), LimitBytes: ptr.To[int64](100)}},
		{query: "sinceSeconds=60", want: &corev1.PodLogOptions{SinceSeconds: ptr.To[int64](60)}},
		{query: "sinceTime=2026-12-01T10:00:00Z", want: &corev1.PodLogOptions{SinceTime: &metav1.Time{Time: since}}},
		{query: "tailLines=-1", wantErr: true},
		{query: "limitBytes=0", wantErr: true},
		{query: "sinceSeconds=0", wantErr: true},
		{query: "follow=maybe", wantErr: true},
		{query: "sinceTime=yesterday", wantErr: true},
		{query: "sinceSeconds=5&sinceTime=2026-12-01T10:00:00Z", wantErr: true},
	}
	for _, tc := range cases {
		q, err := url.ParseQuery(tc.query)
		require.NoError(t, err)
		got, err := parseLogQuery(q)
		if (err != nil) != tc.wantErr {
			assert.Failf(t, "error or not", "%q: err = %v, want error %t", tc.query, err, tc.wantErr)
			continue
		}
		if err == nil {
			assert.Empty(t, cmp.Diff(tc.want, got), "%q (-want,+got)", tc.query)
		}
	}
}

func TestParsePortRange(t *testing.T) {
	cases := []struct {
		in      string
		want    PortRange
		wantErr bool
	}{
		{in: "0", want: PortRange{}},
		{in: "10250", want: PortRange{First: 10250, Last: 10250}},
		{in: "10250-10349", want: PortRange{First: 10250, Last: 10349}},
		{in: "10349-10250", wantErr: true},
		{in: "0-10", wantErr: true},
		{in: "1-70000", wantErr: true},
		{in: "ten", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range cases {
		got, err := ParsePortRange(tc.in)
		assert.Falsef(t, (err != nil) != tc.wantErr || (err == nil && got != tc.want), "%q: %+v, %v", tc.in, got, err)
	}
}
