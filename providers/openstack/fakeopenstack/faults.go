package fakeopenstack

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Fault makes matching requests fail before they reach the service. A request matches when its
// service, method and path prefix (relative to the service's versioned root, e.g. "/servers" for
// Nova or "/v2.0/ports" for Neutron) match; empty fields match anything.
type Fault struct {
	// Service is "identity", "compute", "network", "volume" or "image"; "" matches all.
	Service string
	// Method is an HTTP method; "" matches all.
	Method string
	// Path is a prefix of the path below the service's root; "" matches all.
	Path string
	// Status is the HTTP status to answer with.
	Status int
	// Message is the error message; "" uses a message that fits the status.
	Message string
	// Kind is the error's kind as the service names it ("forbidden", "overLimit", "OverQuota",
	// "Conflict"...); "" picks one that fits the status.
	Kind string
	// RetryAfter, when > 0, is sent as the Retry-After header in seconds.
	RetryAfter int
	// Times is how many matching requests fail; 0 or less means every one until ClearFaults.
	Times int
	// AfterHandling lets the service carry the request out and then answers with the fault, as
	// when a response is lost or a proxy fails after the backend acted.
	AfterHandling bool
	// ActsLate holds the request until the client gives up waiting (its timeout or cancellation),
	// answers nothing, and carries the request out only when ActLate is called: Nova accepting a
	// boot after the client's HTTP timeout, so a search right after the timeout finds no server
	// and one appears later. Not settable through the control endpoint.
	ActsLate bool `json:"-"`

	hits int
}

// Inject adds a fault. Faults are matched in the order they were added.
func (c *Cloud) Inject(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := f
	c.faults = append(c.faults, &cp)
}

// ClearFaults removes every injected fault and pending build failure (NoValidHost,
// QuotaRecheckFails).
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
	c.failBuilds = nil
}

// FaultHits returns how many requests the injected faults have failed so far.
func (c *Cloud) FaultHits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, f := range c.faults {
		n += f.hits
	}
	return n
}

// ServerQuotaExceeded is Nova's answer to a server create beyond the project's quota (403, as
// Nova has answered since microversion 2.1 of the quota rework).
func ServerQuotaExceeded(times int) Fault {
	return Fault{Service: "compute", Method: http.MethodPost, Path: "/servers", Status: http.StatusForbidden, Kind: "forbidden",
		Message: "Quota exceeded for cores: Requested 4, but already used 20 of 20 cores", Times: times}
}

// ServerOverLimit is the older Nova answer to a create beyond quota (413 overLimit).
func ServerOverLimit(times int) Fault {
	return Fault{Service: "compute", Method: http.MethodPost, Path: "/servers", Status: http.StatusRequestEntityTooLarge, Kind: "overLimit",
		Message: "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances", Times: times}
}

// PortQuotaExceeded is Neutron's answer to a port create beyond quota (409 OverQuota).
func PortQuotaExceeded(times int) Fault {
	return Fault{Service: "network", Method: http.MethodPost, Path: "/v2.0/ports", Status: http.StatusConflict, Kind: "OverQuota",
		Message: "Quota exceeded for resources: ['port'].", Times: times}
}

// VolumeQuotaExceeded is Cinder's answer to a volume create beyond the gigabytes quota (413).
func VolumeQuotaExceeded(times int) Fault {
	return Fault{Service: "volume", Method: http.MethodPost, Path: "/volumes", Status: http.StatusRequestEntityTooLarge, Kind: "overLimit",
		Message: "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested 50G, quota is 100G and 80G has been consumed.", Times: times}
}

// Conflict answers matching requests with 409.
func Conflict(service, method, path string, times int) Fault {
	return Fault{Service: service, Method: method, Path: path, Status: http.StatusConflict, Kind: "conflictingRequest",
		Message: "Cannot 'delete' instance while it is in task_state spawning", Times: times}
}

// ServerErrors answers the next times matching requests with status (a 5xx burst).
func ServerErrors(service, method, path string, status, times int) Fault {
	return Fault{Service: service, Method: method, Path: path, Status: status, Times: times}
}

// Throttle answers the next times matching requests with 429 and Retry-After.
func Throttle(service, method, path string, retryAfter, times int) Fault {
	return Fault{Service: service, Method: method, Path: path, Status: http.StatusTooManyRequests, RetryAfter: retryAfter, Times: times}
}

// matchFault returns the first live fault matching a request and counts the hit. Callers hold
// c.mu.
func (c *Cloud) matchFault(service, method, rest string) *Fault {
	for _, f := range c.faults {
		if f.Times > 0 && f.hits >= f.Times {
			continue
		}
		if f.Service != "" && f.Service != service {
			continue
		}
		if f.Method != "" && f.Method != method {
			continue
		}
		path := rest
		switch service {
		case "compute":
			path = trimPrefix(rest, "/v2.1")
		case "volume":
			path = trimPrefix(rest, "/v3/"+ProjectID)
		}
		if f.Path != "" && !strings.HasPrefix(path, f.Path) {
			continue
		}
		f.hits++
		cp := *f
		return &cp
	}
	return nil
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
	c.mu.Lock()
	held := c.late
	c.late = nil
	c.mu.Unlock()
	for _, r := range held {
		c.ServeHTTP(discardWriter{}, r)
	}
	return len(held)
}
