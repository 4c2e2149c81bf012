package fakeopenstack

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Operations faults are injected into, "<service> <METHOD> <path prefix>": the path relative to
// the service's versioned root ("/servers" for Nova, "/v2.0/ports" for Neutron). A fault's Op may
// leave out its tail: "compute" matches every Nova request, "compute POST" every POST to Nova.
const (
	OpCreateServer = "compute POST /servers"
	OpCreatePort   = "network POST /v2.0/ports"
	OpCreateVolume = "volume POST /volumes"
)

// Fault makes matching requests fail before they reach the service.
type Fault struct {
	// Rule is the operation (Op, matched as a prefix: see OpCreateServer) and how often.
	fakekit.Rule
	// Status is the HTTP status to answer with.
	Status int `json:"status,omitempty"`
	// Message is the error message; "" uses a message that fits the status.
	Message string `json:"message,omitempty"`
	// Kind is the error's kind as the service names it ("forbidden", "overLimit", "OverQuota",
	// "Conflict"...); "" picks one that fits the status.
	Kind string `json:"kind,omitempty"`
	// RetryAfter, when > 0, is sent as the Retry-After header in seconds.
	RetryAfter int `json:"retryAfter,omitempty"`
	// AfterHandling lets the service carry the request out and then answers with the fault, as
	// when a response is lost or a proxy fails after the backend acted.
	AfterHandling bool `json:"afterHandling,omitempty"`
	// ActsLate holds the request until the client gives up waiting (its timeout or cancellation),
	// answers nothing, and carries the request out only when ActLate is called: Nova accepting a
	// boot after the client's HTTP timeout, so a search right after the timeout finds no server
	// and one appears later. Not settable through the control endpoint.
	ActsLate bool `json:"-"`
}

// matches reports whether the fault applies to a request of service, method and path (below the
// service's root).
func (f Fault) matches(service, method, rest string) bool {
	want := strings.SplitN(f.Op, " ", 3)
	path := rest
	switch service {
	case "compute":
		path = trimPrefix(rest, "/v2.1")
	case "volume":
		path = trimPrefix(rest, "/v3/"+ProjectID)
	}
	have := []string{service, method, path}
	for i, w := range want {
		if w == "" {
			continue
		}
		if (i < 2 && w != have[i]) || (i == 2 && !strings.HasPrefix(have[i], w)) {
			return false
		}
	}
	return true
}

// ServerQuotaExceeded is Nova's answer to a server create beyond the project's quota (403, as
// Nova has answered since microversion 2.1 of the quota rework).
func ServerQuotaExceeded(times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: OpCreateServer, Times: times}, Status: http.StatusForbidden, Kind: "forbidden",
		Message: "Quota exceeded for cores: Requested 4, but already used 20 of 20 cores"}
}

// ServerOverLimit is the older Nova answer to a create beyond quota (413 overLimit).
func ServerOverLimit(times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: OpCreateServer, Times: times}, Status: http.StatusRequestEntityTooLarge, Kind: "overLimit",
		Message: "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances"}
}

// PortQuotaExceeded is Neutron's answer to a port create beyond quota (409 OverQuota).
func PortQuotaExceeded(times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: OpCreatePort, Times: times}, Status: http.StatusConflict, Kind: "OverQuota",
		Message: "Quota exceeded for resources: ['port']."}
}

// VolumeQuotaExceeded is Cinder's answer to a volume create beyond the gigabytes quota (413).
func VolumeQuotaExceeded(times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: OpCreateVolume, Times: times}, Status: http.StatusRequestEntityTooLarge, Kind: "overLimit",
		Message: "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested 50G, quota is 100G and 80G has been consumed."}
}

// Conflict answers the next times requests of op with 409.
func Conflict(op string, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Status: http.StatusConflict, Kind: "conflictingRequest",
		Message: "Cannot 'delete' instance while it is in task_state spawning"}
}

// ServerErrors answers the next times requests of op with status (a 5xx burst).
func ServerErrors(op string, status, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Status: status}
}

// Throttle answers the next times requests of op with 429 and Retry-After (seconds).
func Throttle(op string, times, retryAfter int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Status: http.StatusTooManyRequests, RetryAfter: retryAfter}
}

func (f *Fault) write(w http.ResponseWriter, service string) {
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("injected fault: %d %s", f.Status, http.StatusText(f.Status))
	}
	writeError(w, service, f.Status, f.Kind, msg)
}

// ActLate carries out the requests held by ActsLate faults, as the service would once it gets to
// them, and returns how many it carried out.
func (c *Cloud) ActLate() int {
	c.st.mu.Lock()
	held := c.st.late
	c.st.late = nil
	c.st.mu.Unlock()
	for _, r := range held {
		c.ServeHTTP(discardWriter{}, r)
	}
	return len(held)
}

// clearBuildFailures drops the pending build failures (NoValidHost, QuotaRecheckFails).
func (c *state) clearBuildFailures() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failBuilds = nil
}
