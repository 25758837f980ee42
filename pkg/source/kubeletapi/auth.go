package kubeletapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Auth authenticates and authorizes the callers of the kubelet API, as a
// kubelet with webhook authentication and authorization does.
type Auth struct {
	authn authenticator.Request
	authz authorizer.UnconditionalAuthorizer
}

// NewAuth returns the Auth of a source cluster: client certificates are
// verified against clientCA (nil accepts none), bearer tokens through
// TokenReviews, and every request is authorized by SubjectAccessReviews,
// all with cs, the manager's client of the source.
func NewAuth(cs kubernetes.Interface, clientCA dynamiccertificates.CAContentProvider) (*Auth, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            cs.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                options.DefaultAuthWebhookRetryBackoff(),
		CacheTTL:                           2 * time.Minute,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the kubelet API's authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       options.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the kubelet API's authorizer: %w", err)
	}
	return &Auth{authn: authn, authz: authz}, nil
}

// filter lets through to next only the requests to node's API an
// authenticated caller is allowed: 401 for an unauthenticated caller, 403
// for a refused one, 500 when the decision could not be made.
func (a *Auth) filter(node string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := ctrllog.FromContext(r.Context())
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil {
			log.V(2).Info("Kubelet API authentication failed", "err", err.Error(), "node", node)
		}
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := requestAttributes(resp.User, r, node)
		var subs []string
		for _, attr := range attrs {
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				log.Error(err, "Kubelet API authorization failed", "user", resp.User.GetName(), "node", node)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)",
					resp.User.GetName(), attr.GetVerb(), attr.GetSubresource()), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
			subs = append(subs, attr.GetSubresource())
		}
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=[%s], name=%s)",
			resp.User.GetName(), attrs[0].GetVerb(), strings.Join(subs, " "), node), http.StatusForbidden)
	})
}
