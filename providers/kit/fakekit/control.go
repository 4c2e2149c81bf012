package fakekit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ControlPrefix is the path under which a served fake answers its control requests: GET
// ControlPrefix+"state" dumps its state, POST ControlPrefix+"faults" injects a fault given as
// JSON, DELETE ControlPrefix+"faults" clears the faults, GET ControlPrefix+"requests" dumps the
// requests answered and DELETE ControlPrefix+"requests" forgets them.
const ControlPrefix = "/.fakecloud/"

// Control answers a fake's control requests.
type Control[F Fault, R Recorded] struct {
	// Name prefixes error messages ("fakegcp").
	Name string
	// State is the fake's state dump.
	State  func() any
	Faults *Faults[F]
	// Clear, when set, runs after the faults are cleared (a fake releases what they hold).
	Clear    func()
	Requests *Journal[R]
	// Check, when set, refuses a fault that would do nothing.
	Check func(F) error
	// Example is a fault as JSON, for the error message of a bad one.
	Example string
}

// Serves reports whether r is a control request.
func Serves(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, ControlPrefix) }

// ServeHTTP answers a control request.
func (c *Control[F, R]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch what := strings.TrimPrefix(r.URL.Path, ControlPrefix); {
	case what == "state" && r.Method == http.MethodGet:
		writeJSON(w, c.State())
	case what == "faults" && r.Method == http.MethodPost:
		var f F
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		err := dec.Decode(&f)
		if err == nil && c.Check != nil {
			err = c.Check(f)
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("%s: the body must be a Fault as JSON, e.g. %s: %v", c.Name, c.Example, err), http.StatusBadRequest)
			return
		}
		c.Faults.Inject(f)
		w.WriteHeader(http.StatusNoContent)
	case what == "faults" && r.Method == http.MethodDelete:
		c.Faults.Clear()
		if c.Clear != nil {
			c.Clear()
		}
		w.WriteHeader(http.StatusNoContent)
	case what == "requests" && r.Method == http.MethodGet:
		writeJSON(w, c.Requests.All())
	case what == "requests" && r.Method == http.MethodDelete:
		c.Requests.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, c.Name+": control requests are GET "+ControlPrefix+"state, POST and DELETE "+ControlPrefix+"faults, GET and DELETE "+ControlPrefix+"requests", http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
