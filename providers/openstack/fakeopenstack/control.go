package fakeopenstack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ControlPrefix is the path under which the cloud answers its control requests: GET
// ControlPrefix+"state" dumps the servers, ports and volumes (State), POST ControlPrefix+"faults"
// injects a Fault given as JSON, DELETE ControlPrefix+"faults" clears them.
const ControlPrefix = "/.fakecloud/"

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
	return State{Servers: servers, Ports: c.Ports(), Volumes: c.Volumes(), Requests: c.Requests()}
}

func (c *Cloud) serveControl(w http.ResponseWriter, r *http.Request) {
	what := strings.TrimPrefix(r.URL.Path, ControlPrefix)
	switch {
	case what == "state" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.State())
	case what == "faults" && r.Method == http.MethodPost:
		var f Fault
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil || f.Status < 400 {
			http.Error(w, fmt.Sprintf(`fakeopenstack: the body must be a Fault as JSON, e.g. {"Service":"compute","Method":"POST","Path":"/servers","Status":403,"Kind":"forbidden","Message":"Quota exceeded for instances","Times":1}: %v`, err), http.StatusBadRequest)
			return
		}
		c.Inject(f)
		w.WriteHeader(http.StatusNoContent)
	case what == "faults" && r.Method == http.MethodDelete:
		c.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "fakeopenstack: control requests are GET "+ControlPrefix+"state, POST and DELETE "+ControlPrefix+"faults", http.StatusNotFound)
	}
}
