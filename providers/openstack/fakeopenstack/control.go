package fakeopenstack

import (
	"errors"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// State is what the cloud holds, as the control endpoint dumps it. Servers carry no user data
// (it holds bootstrap tokens).
type State struct {
	Servers []Server `json:"servers"`
	Ports   []Port   `json:"ports"`
	Volumes []Volume `json:"volumes"`
	// Requests is how many API requests the cloud answered.
	Requests int `json:"requests"`
}

// State returns the cloud's servers (without user data), ports, volumes and request count.
func (c *Cloud) State() State {
	servers := c.Servers()
	for i := range servers {
		servers[i].UserData = nil
	}
	return State{Servers: servers, Ports: c.Ports(), Volumes: c.Volumes(), Requests: c.Requests.Len()}
}

// control answers the control requests (fakekit.Control); clearing the faults also drops the
// pending build failures (NoValidHost, QuotaRecheckFails).
func (c *Cloud) control() *fakekit.Control[Fault, Request] {
	return &fakekit.Control[Fault, Request]{
		Name: "fakeopenstack", State: func() any { return c.State() }, Faults: &c.Faults, Requests: &c.Requests,
		Clear: c.st.clearBuildFailures,
		Check: func(f Fault) error {
			if f.Status < 400 {
				return errors.New("status must be an HTTP error status")
			}
			return nil
		},
		Example: `{"op":"compute POST /servers","status":403,"kind":"forbidden","message":"Quota exceeded for instances","times":1}`,
	}
}
