package azure

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/machinist-io/machinist/providers/kit"
)

// loginPolicy turns an authentication failure without a response into loginUnreachableError
// carrying the cause the credential's transport saw (kit.Reach: MSAL flattens it into its error
// text, "unable to resolve an endpoint"): a login that could not reach Microsoft Entra ID is an
// outage, not a bad secret. It runs per call, around the bearer token policy.
type loginPolicy struct{ reach *kit.Reach }

func (p loginPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	var af *azidentity.AuthenticationFailedError
	if err != nil && errors.As(err, &af) && af.RawResponse == nil {
		host, cause := p.reach.Last()
		return resp, &loginUnreachableError{host: host, cause: cause, err: err}
	}
	return resp, err
}

// loginUnreachableError is a login that got no answer from Microsoft Entra ID.
type loginUnreachableError struct {
	host  string
	cause error // nil when the transport saw no failure (another call's login failed)
	err   error
}

func (e *loginUnreachableError) Error() string {
	if e.cause == nil {
		return fmt.Sprintf("cannot reach Microsoft Entra ID: %v", e.err)
	}
	return fmt.Sprintf("cannot reach Microsoft Entra ID at %s: %v", e.host, e.cause)
}

func (e *loginUnreachableError) Unwrap() error { return e.err }
