package fakeazure

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Fault makes matching requests fail with an ARM error before they reach the fake servers, as
// ARM's front door does for throttling and transient failures.
type Fault struct {
	// Rule is the operation to fail (OpCreateVM, ...; "" matches every ARM request) and how many
	// requests fail.
	fakekit.Rule
	// Poll selects the status polls of Op's long-running operation instead of its initial
	// request.
	Poll bool `json:",omitempty"`
	// Err is the error answered.
	Err *ARMError
}

// applies reports whether the fault applies to a request of op (a status poll when poll).
func (f Fault) applies(op string, poll bool) bool {
	return f.Matches(op) && (f.Op == "" || f.Poll == poll)
}

// Throttle answers the next times requests of op with 429 TooManyRequests and a Retry-After of
// retryAfter (whole seconds in Retry-After; sub-second delays also in retry-after-ms).
func Throttle(op string, times int, retryAfter time.Duration) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Err: ErrThrottled(opLabel(op), retryAfter)}
}

// ServerErrors answers the next times requests of op with a 5xx status (500, 502, 503, 504).
func ServerErrors(op string, status, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Err: ErrServer(status)}
}

// Deny answers requests of op with 403 AuthorizationFailed, as for a role without the action.
func Deny(op string) Fault {
	action := actionOf(op)
	return Fault{Rule: fakekit.Rule{Op: op}, Err: armErr(http.StatusForbidden, "AuthorizationFailed",
		"The client does not have authorization to perform action '%s' over scope '/subscriptions/%s' or the scope is invalid. If access was recently granted, please refresh your credentials.",
		action, DefaultSubscriptionID)}
}

// takeFault returns the injected error for a request of op, if any, and uses up one of its times.
func takeFault(faults *fakekit.Faults[Fault], op string, poll bool) *ARMError {
	f, ok := faults.Take(func(f Fault) bool { return f.applies(op, poll) })
	if !ok {
		return nil
	}
	e := *f.Err
	return &e
}

// authorize checks the bearer token of an ARM request and the subscription in its path.
func (c *state) authorize(req *http.Request, op string) *ARMError {
	auth := req.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok || token == "" {
		return armErr(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	}
	clientID, known := c.tokens[token]
	if !known {
		return armErr(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
	}
	if _, exists := c.principals[clientID]; !exists {
		return armErr(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is from an application that no longer exists.")
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if len(parts) >= 2 && strings.EqualFold(parts[0], "subscriptions") && !strings.EqualFold(parts[1], c.subscriptionID) {
		return armErr(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", parts[1])
	}
	return nil
}

// RevokeTokens invalidates every access token issued so far: ARM answers 401 until the client
// gets a new one.
func (c *Cloud) RevokeTokens() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.tokens = map[string]string{}
}

func opLabel(op string) string {
	if op == "" {
		return "Microsoft.Resources"
	}
	return op
}

// actionOf names the Azure RBAC action of an operation, for AuthorizationFailed messages.
func actionOf(op string) string {
	actions := map[string]string{
		OpCreateVM: "Microsoft.Compute/virtualMachines/write", OpUpdateVM: "Microsoft.Compute/virtualMachines/write",
		OpGetVM: "Microsoft.Compute/virtualMachines/read", OpListVMs: "Microsoft.Compute/virtualMachines/read",
		OpDeleteVM:   "Microsoft.Compute/virtualMachines/delete",
		OpCreateDisk: "Microsoft.Compute/disks/write", OpUpdateDisk: "Microsoft.Compute/disks/write",
		OpGetDisk: "Microsoft.Compute/disks/read", OpListDisks: "Microsoft.Compute/disks/read",
		OpDeleteDisk: "Microsoft.Compute/disks/delete",
		OpCreateNIC:  "Microsoft.Network/networkInterfaces/write", OpGetNIC: "Microsoft.Network/networkInterfaces/read",
		OpListNICs: "Microsoft.Network/networkInterfaces/read", OpDeleteNIC: "Microsoft.Network/networkInterfaces/delete",
		OpGetSubnet:     "Microsoft.Network/virtualNetworks/subnets/read",
		OpListResources: "Microsoft.Resources/subscriptions/resourceGroups/resources/read",
		OpGetImage:      "Microsoft.Compute/locations/publishers/artifacttypes/offers/skus/versions/read",
		OpListImages:    "Microsoft.Compute/locations/publishers/artifacttypes/offers/skus/versions/read",
	}
	if a, ok := actions[op]; ok {
		return a
	}
	return fmt.Sprintf("%s/action", opLabel(op))
}
