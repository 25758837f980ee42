package kubeletapi

import (
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// verbOf maps an HTTP method to the verb a kubelet authorizes.
func verbOf(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// isSubpath reports whether p is path or below it.
func isSubpath(p, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return p == path || (strings.HasPrefix(p, path) && p[len(path)] == '/')
}

// subresourcesOf returns the node subresources a request to path needs,
// the kubelet's mapping with fine-grained authorization: any one allowed
// lets the request through.
func subresourcesOf(path string) []string {
	var subs []string
	switch {
	case isSubpath(path, "/pods"), isSubpath(path, "/runningpods"):
		subs = append(subs, "pods")
	case isSubpath(path, "/healthz"):
		subs = append(subs, "healthz")
	case isSubpath(path, "/configz"):
		subs = append(subs, "configz")
	}
	switch {
	case isSubpath(path, "/stats"):
		subs = append(subs, "stats")
	case isSubpath(path, "/metrics"):
		subs = append(subs, "metrics")
	case isSubpath(path, "/logs"):
		subs = append(subs, "log")
	case isSubpath(path, "/checkpoint"):
		subs = append(subs, "checkpoint")
	default:
		subs = append(subs, "proxy")
	}
	return subs
}

// requestAttributes returns what authorizes u's request r to node's
// kubelet API: one record per subresource of subresourcesOf.
func requestAttributes(u user.Info, r *http.Request, node string) []authorizer.Attributes {
	verb := verbOf(r.Method)
	var attrs []authorizer.Attributes
	for _, sub := range subresourcesOf(r.URL.Path) {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            verb,
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            node,
			ResourceRequest: true,
			Path:            r.URL.Path,
		})
	}
	return attrs
}
