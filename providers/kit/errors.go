package kit

import (
	"context"
	"errors"

	"github.com/machinist-io/machinist/core/driver"
)

// Errors maps the failures every cloud shares to the driver's codes, before a provider maps its
// cloud's own answers. Messages start with the provider's name and say what failed and what to
// do.
type Errors struct {
	// Provider prefixes every message ("aws").
	Provider string
	// Cloud names the service the driver talks to ("EC2", "Compute Engine").
	Cloud string
	// CAKey is the secret key that holds the CA bundle of the cloud's endpoints; "" when the
	// provider reads none.
	CAKey string
}

// Common maps err when it is a failure every cloud shares, and reports whether it was: no error
// (nil), an error that already carries a code (returned as it is), the end of the caller's deadline
// (DeadlineExceeded) or its cancellation (Canceled), and an endpoint certificate that does not
// verify against the secret's CA bundle (FailedPrecondition). what names the call ("create VM
// m-1").
func (e Errors) Common(what string, err error) (error, bool) {
	var st *driver.Status
	switch {
	case err == nil:
		return nil, true
	case errors.As(err, &st):
		return err, true
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Errorf(driver.DeadlineExceeded, "%s: %s: timed out; %s may still finish it, and the next call picks it up", e.Provider, what, e.Cloud), true
	case errors.Is(err, context.Canceled):
		return driver.Errorf(driver.Canceled, "%s: %s: canceled", e.Provider, what), true
	case e.CAKey != "" && UntrustedCertificate(err):
		return driver.Errorf(driver.FailedPrecondition, "%s: %s: %v: the endpoint's certificate is not trusted: put the CA that signs it in the secret's data.%s", e.Provider, what, err, e.CAKey), true
	}
	return nil, false
}

// Unreachable is Unavailable for a call that got no answer from the cloud (connection refused,
// DNS, TLS, a broken response): the controllers retry it.
func (e Errors) Unreachable(what string, err error) error {
	return driver.Errorf(driver.Unavailable, "%s: %s: %s gave no answer: %v: the call is retried", e.Provider, what, e.Cloud, err)
}
