package fakeaws

import (
	"net/http"
	"time"
)

// Fault makes matching requests fail (or stall) the way EC2's front end does. Faults are checked
// in the order they were injected; the first that matches and has uses left applies.
type Fault struct {
	// Action is the API action to fail (RunInstances, DescribeInstances, ...); "" matches every
	// EC2 and STS request.
	Action string `json:"action,omitempty"`
	// Times is how many matching requests the fault applies to; 0 means all of them until
	// ClearFaults.
	Times int `json:"times,omitempty"`
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

type faultState struct {
	Fault
	used int
}

// Throttle answers the next times requests of action with RequestLimitExceeded (HTTP 503), as
// EC2 does when an account exceeds its API request rate.
func Throttle(action string, times int) Fault {
	return Fault{Action: action, Times: times, Status: http.StatusServiceUnavailable, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
}

// ServerErrors answers the next times requests of action with a server error: 500
// InternalError or 503 Unavailable.
func ServerErrors(action string, times, status int) Fault {
	if status == http.StatusServiceUnavailable {
		return Fault{Action: action, Times: times, Status: status, Code: "Unavailable", Message: "The server is overloaded and can't handle the request."}
	}
	return Fault{Action: action, Times: times, Status: http.StatusInternalServerError, Code: "InternalError", Message: "An internal error has occurred."}
}

// Deny answers requests of action with UnauthorizedOperation (HTTP 403), as for an IAM policy
// without the action.
func Deny(action string) Fault {
	return Fault{Action: action, Status: http.StatusForbidden, Code: "UnauthorizedOperation",
		Message: "You are not authorized to perform this operation. User: arn:aws:iam::" + DefaultAccountID + ":user/machinist is not authorized to perform: ec2:" + action + " because no identity-based policy allows the ec2:" + action + " action. Encoded authorization failure message: fakeaws-" + action}
}

// LostResponse applies the next times requests of action and then answers 500 InternalError,
// so the caller does not know they took effect.
func LostResponse(action string, times int) Fault {
	f := ServerErrors(action, times, http.StatusInternalServerError)
	f.AfterEffect = true
	return f
}

// Inject adds a fault.
func (c *Cloud) Inject(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &faultState{Fault: f})
}

// ClearFaults removes every injected fault (not the capacity, quota and delay settings) and
// releases hung requests.
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
	c.releaseLocked()
}

// Release lets every hung request answer.
func (c *Cloud) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseLocked()
}

// Hung is how many requests are held by a Hang fault now.
func (c *Cloud) Hung() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.hangs)
}

func (c *Cloud) releaseLocked() {
	for _, ch := range c.hangs {
		close(ch)
	}
	c.hangs = nil
}

// faultFor returns the fault that applies to a request of action, using up one of its times.
func (c *Cloud) faultFor(action string) *Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.faults {
		if f.Action != "" && f.Action != action {
			continue
		}
		if f.Times > 0 && f.used >= f.Times {
			continue
		}
		f.used++
		cp := f.Fault
		return &cp
	}
	return nil
}

// hang registers a hung request and returns the channel closed on its release.
func (c *Cloud) hang() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.hangs = append(c.hangs, ch)
	return ch
}
