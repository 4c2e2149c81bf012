package fakegcp

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Operations that stop and start instances.
const (
	OpStopInstance    = "compute.instances.stop"
	OpStartInstance   = "compute.instances.start"
	OpSuspendInstance = "compute.instances.suspend"
	OpResumeInstance  = "compute.instances.resume"
)

// powerOps are the power operations by the last segment of their path.
var powerOps = map[string]string{"stop": OpStopInstance, "start": OpStartInstance, "suspend": OpSuspendInstance, "resume": OpResumeInstance}

// gpuFamilies are the machine families whose machine types come with GPUs attached.
var gpuFamilies = []string{"a2-", "a3-", "g2-"}

// maxSuspendMemoryGB is the largest memory Compute Engine suspends.
const maxSuspendMemoryGB = 208

// power is one power operation: the states it passes through and where it may start.
type power struct {
	verb    string
	from    []string // the states it acts on
	done    []string // the states in which it has nothing to do
	between string   // the state while the operation runs
	final   string
}

var powers = map[string]power{
	// A suspended instance can be stopped: its saved memory is discarded.
	OpStopInstance:    {verb: "stop", from: []string{"RUNNING", "PROVISIONING", "STAGING", "SUSPENDED", "REPAIRING"}, done: []string{"STOPPING", "TERMINATED"}, between: "STOPPING", final: "TERMINATED"},
	OpStartInstance:   {verb: "start", from: []string{"TERMINATED"}, done: []string{"PROVISIONING", "STAGING", "RUNNING"}, between: "STAGING", final: "RUNNING"},
	OpSuspendInstance: {verb: "suspend", from: []string{"RUNNING"}, done: []string{"SUSPENDING"}, between: "SUSPENDING", final: "SUSPENDED"},
	OpResumeInstance:  {verb: "resume", from: []string{"SUSPENDED"}, done: []string{"PROVISIONING", "STAGING", "RUNNING"}, between: "STAGING", final: "RUNNING"},
}

// powerLocked starts a power operation on an instance. What Compute Engine refuses (a start of a
// suspended instance, a suspend of one with GPUs or Local SSDs or more than 208 GB of memory, a
// suspend or resume in the wrong state) ends in an operation failed with UNSUPPORTED_OPERATION,
// the instance unchanged. A start or resume that finds no capacity (opErr: Stockout) leaves the
// instance as it was; a start over the region's CPU quota fails with QUOTA_EXCEEDED.
func (c *computeAPI) powerLocked(req *http.Request, r route, opErr *OperationError, delay time.Duration) (any, *APIError) {
	key := r.zone + "/" + r.name
	in, ok := c.instances[key]
	if !ok {
		return nil, errNotFound(fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, r.zone, r.name))
	}
	p := powers[r.op]
	target := fmt.Sprintf("zones/%s/instances/%s", r.zone, r.name)
	refuse := c.refusalLocked(req, r.op, in)
	acts := refuse == nil && slices.Contains(p.from, in.Status)
	if refuse == nil && !acts && !slices.Contains(p.done, in.Status) {
		refuse = wrongState(p.verb, in.Status)
	}
	id, from := in.Id, in.Status
	if acts {
		in.Status = p.between
	}
	op := c.startOperationLocked(r.zone, p.verb, target, delay, func() *OperationError {
		if refuse != nil {
			return refuse
		}
		cur, ok := c.instances[key]
		if !acts || !ok || cur.Id != id || cur.Status != p.between {
			return nil
		}
		failed := opErr
		if failed == nil && r.op == OpStartInstance {
			region := c.zones[r.zone]
			if limit, ok := c.cpuQuota[region]; ok && c.cpusInRegionLocked(region, key)+c.machineTypes[lastSegment(cur.MachineType)] > limit {
				failed = CPUQuotaExceeded(region, limit)
			}
		}
		if failed != nil {
			cur.Status = from
			return failed
		}
		cur.Status = p.final
		switch p.final {
		case "RUNNING":
			cur.LastStartTimestamp = c.timestamp()
		case "TERMINATED":
			cur.LastStopTimestamp = c.timestamp()
		case "SUSPENDED":
			cur.LastSuspendedTimestamp = c.timestamp()
		}
		return nil
	})
	op.TargetId = id
	return op.Operation, nil
}

// refusalLocked is why Compute Engine refuses op on in regardless of its state, or nil.
func (c *computeAPI) refusalLocked(req *http.Request, op string, in *compute.Instance) *OperationError {
	switch op {
	case OpStartInstance:
		if in.Status == "SUSPENDED" || in.Status == "SUSPENDING" {
			return unsupported("The instance is suspended: resume it instead of starting it.")
		}
	case OpSuspendInstance:
		mt := lastSegment(in.MachineType)
		if len(in.GuestAccelerators) > 0 || slices.ContainsFunc(gpuFamilies, func(p string) bool { return strings.HasPrefix(mt, p) }) {
			return unsupported("You cannot suspend an instance that has GPUs attached.")
		}
		if tooMuchMemory(mt) {
			return unsupported("You cannot suspend an instance with more than %d GB of memory.", maxSuspendMemoryGB)
		}
		if in.ConfidentialInstanceConfig != nil && in.ConfidentialInstanceConfig.EnableConfidentialCompute {
			return unsupported("You cannot suspend a Confidential VM.")
		}
		for _, d := range in.Disks {
			if d.Type == "SCRATCH" && req.URL.Query().Get("discardLocalSsd") != "true" {
				return unsupported("You cannot suspend an instance with Local SSDs without discarding their data (discardLocalSsd=true).")
			}
		}
	}
	return nil
}

// tooMuchMemory reports whether a machine type has more memory than Compute Engine suspends: the
// memory-optimized megamem and ultramem types (m1, m2, m3: 961 GB and more); the fake's other
// types have at most 85 GB.
func tooMuchMemory(machineType string) bool {
	return strings.Contains(machineType, "megamem") || strings.Contains(machineType, "ultramem")
}

// wrongState is Compute Engine's refusal of verb on an instance in state.
func wrongState(verb, state string) *OperationError {
	switch {
	case verb == "suspend" && state == "SUSPENDED":
		return unsupported("You cannot suspend an already suspended instance.")
	case verb == "suspend" && (state == "STOPPING" || state == "TERMINATED"):
		return unsupported("You cannot suspend an instance that is stopped or terminated.")
	case verb == "suspend" && state == "REPAIRING":
		return unsupported("You cannot suspend an instance that is being repaired.")
	}
	return unsupported("You cannot %s an instance that is %s.", verb, strings.ToLower(state))
}

func unsupported(format string, args ...any) *OperationError {
	return &OperationError{Code: "UNSUPPORTED_OPERATION", HTTPStatus: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// Typical durations on Compute Engine, as seconds: an instance is RUNNING about 40 s after its
// insert, a stopped one about 20 s after its start and a suspended one about 10 s after its
// resume; a stop or suspend takes about 30 s (a suspend writes the memory out). Observed typical
// values, not service levels.
var realisticSeconds = map[string]int{
	"insert": 40, "start": 20, "resume": 10, "stop": 30, "suspend": 30, "delete": 30,
}

// SetRealisticDelays gives operations the relative durations they have on Compute Engine, a
// real second lasting second (on the fake's clock), for benchmarks that compare a fresh create
// with a start or resume. Other operations keep the operation delay.
func (c *Cloud) SetRealisticDelays(second time.Duration) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.kindDelay == nil {
		c.st.kindDelay = map[string]time.Duration{}
	}
	for kind, s := range realisticSeconds {
		c.st.kindDelay[kind] = time.Duration(s) * second
	}
}

// StockoutNextStart makes the next times starts or resumes (op: OpStartInstance or
// OpResumeInstance) end in ZONE_RESOURCE_POOL_EXHAUSTED, the instance left stopped or suspended
// (0: every one until ClearFaults).
func StockoutNextStart(op string, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, OpErr: Stockout()}
}
