package fakeaws

import (
	"net/http"
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Fault makes matching requests fail (or stall) the way EC2's front end does. Faults are checked
// in the order they were injected; the first that matches and has uses left applies.
type Fault struct {
	// Rule is the API action to fail (RunInstances, DescribeInstances, ...; "" matches every EC2
	// and STS request) and how many matching requests the fault applies to.
	fakekit.Rule
	// Status and Code are the HTTP status and EC2 error code answered; Message its text.
	// Without a Code the fault only delays (Delay) or hangs (Hang) the request.
	Status  int    `json:"status,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// AfterEffect applies the request first and then answers the error: the caller never learns
	// that it succeeded (a lost response).
	AfterEffect bool `json:"afterEffect,omitempty"`
	// Delay holds the answer back this long (or until the caller gives up).
	Delay time.Duration `json:"delay,omitempty"`
	// Hang holds the answer back until Release (or until the caller gives up); with AfterEffect
	// the request has taken effect by then.
	Hang bool `json:"hang,omitempty"`
}

// Throttle answers the next times requests of action with RequestLimitExceeded (HTTP 503), as
// EC2 does when an account exceeds its API request rate.
func Throttle(action string, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: action, Times: times}, Status: http.StatusServiceUnavailable, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
}

// ServerErrors answers the next times requests of action with a server error: 500
// InternalError or 503 Unavailable.
func ServerErrors(action string, status, times int) Fault {
	if status == http.StatusServiceUnavailable {
		return Fault{Rule: fakekit.Rule{Op: action, Times: times}, Status: status, Code: "Unavailable", Message: "The server is overloaded and can't handle the request."}
	}
	return Fault{Rule: fakekit.Rule{Op: action, Times: times}, Status: http.StatusInternalServerError, Code: "InternalError", Message: "An internal error has occurred."}
}

// Deny answers requests of action with UnauthorizedOperation (HTTP 403), as for an IAM policy
// without the action.
func Deny(action string) Fault {
	return Fault{Rule: fakekit.Rule{Op: action}, Status: http.StatusForbidden, Code: "UnauthorizedOperation",
		Message: "You are not authorized to perform this operation. User: arn:aws:iam::" + DefaultAccountID + ":user/machinist is not authorized to perform: ec2:" + action + " because no identity-based policy allows the ec2:" + action + " action. Encoded authorization failure message: fakeaws-" + action}
}

// LostResponse applies the next times requests of action and then answers 500 InternalError,
// so the caller does not know they took effect.
func LostResponse(action string, times int) Fault {
	f := ServerErrors(action, http.StatusInternalServerError, times)
	f.AfterEffect = true
	return f
}

// Release lets every hung request answer.
func (c *Cloud) Release() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.releaseLocked()
}

// Hung is how many requests are held by a Hang fault now.
func (c *Cloud) Hung() int {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return len(c.st.hangs)
}

func (c *state) releaseLocked() {
	for _, ch := range c.hangs {
		close(ch)
	}
	c.hangs = nil
}

// hang registers a hung request and returns the channel closed on its release.
func (c *state) hang() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.hangs = append(c.hangs, ch)
	return ch
}
