package fakeazure

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Fault makes matching requests fail with an ARM error before they reach the fake servers, as
// ARM's front door does for throttling and transient failures.
type Fault struct {
	// Op is the operation to fail (OpCreateVM, ...); "" matches every ARM request.
	Op string
	// Poll selects the status polls of Op's long-running operation instead of its initial
	// request.
	Poll bool
	// Times is how many matching requests fail; 0 means all of them until ClearFaults.
	Times int
	// Err is the error answered.
	Err *ARMError
}

type faultState struct {
	Fault
	used int
}

// Throttle answers the next times requests of op with 429 TooManyRequests and a Retry-After of
// retryAfter (whole seconds in Retry-After; sub-second delays also in retry-after-ms).
func Throttle(op string, times int, retryAfter time.Duration) Fault {
	return Fault{Op: op, Times: times, Err: ErrThrottled(opLabel(op), retryAfter)}
}

// ServerErrors answers the next times requests of op with a 5xx status (500, 502, 503, 504).
func ServerErrors(op string, times, status int) Fault {
	return Fault{Op: op, Times: times, Err: ErrServer(status)}
}

// Deny answers requests of op with 403 AuthorizationFailed, as for a role without the action.
func Deny(op string) Fault {
	action := actionOf(op)
	return Fault{Op: op, Err: armErr(http.StatusForbidden, "AuthorizationFailed",
		"The client does not have authorization to perform action '%s' over scope '/subscriptions/%s' or the scope is invalid. If access was recently granted, please refresh your credentials.",
		action, DefaultSubscriptionID)}
}

// Inject adds a fault. Faults are checked in the order they were added.
func (c *Cloud) Inject(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &faultState{Fault: f})
}

// ClearFaults removes every injected fault (not the quota, SKU and allocation settings).
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
}

// fault returns the injected error for a request, if any, and uses up one of its times.
func (c *Cloud) fault(op string, poll bool) *ARMError {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		if f.Op != "" && f.Poll != poll {
			continue
		}
		if f.Times > 0 && f.used >= f.Times {
			continue
		}
		f.used++
		e := *f.Err
		return &e
	}
	return nil
}

// authorize checks the bearer token of an ARM request and the subscription in its path.
func (c *Cloud) authorize(req *http.Request, op string) *ARMError {
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens = map[string]string{}
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
