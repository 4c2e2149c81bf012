package fakegcp

import "time"

// Operations of the Compute API the fake serves, by the names Compute Engine gives them (the
// client's rpcName); faults and the request log use them.
const (
	OpInsertInstance  = "compute.instances.insert"
	OpGetInstance     = "compute.instances.get"
	OpListInstances   = "compute.instances.list"
	OpDeleteInstance  = "compute.instances.delete"
	OpGetDisk         = "compute.disks.get"
	OpListDisks       = "compute.disks.list"
	OpDeleteDisk      = "compute.disks.delete"
	OpGetMachineType  = "compute.machineTypes.get"
	OpGetOperation    = "compute.zoneOperations.get"
	OpListOperations  = "compute.zoneOperations.list"
	OpWaitOperation   = "compute.zoneOperations.wait"
	OpGetImage        = "compute.images.get"
	OpGetImageFamily  = "compute.images.getFromFamily"
	OpGetNetwork      = "compute.networks.get"
	OpGetSubnetwork   = "compute.subnetworks.get"
	OpToken           = "oauth2.token"
	OpSTSToken        = "sts.token"
	OpGenerateToken   = "iamcredentials.generateAccessToken"
	opUnknownEndpoint = "unknown"
)

// Fault makes matching requests, or the operations they start, fail or take long.
type Fault struct {
	// Op is the operation (OpInsertInstance, ...); "" matches every Compute API request.
	Op string
	// Times is how many matching requests the fault applies to; 0 means all until ClearFaults.
	Times int
	// Err, when set, is answered to the request instead of serving it.
	Err *APIError `json:",omitempty"`
	// OpErr, when set, is how the operation the request starts ends (instances.insert: the
	// instance and its disks are gone again, as after a stockout).
	OpErr *OperationError `json:",omitempty"`
	// Delay, when set, is how long the operation the request starts takes (a slow operation).
	Delay time.Duration `json:",omitempty"`
}

type faultState struct {
	Fault
	used int
}

// Inject adds a fault. Faults are checked in the order they were added; a request takes the
// first matching fault of each kind (Err, OpErr, Delay).
func (c *Cloud) Inject(f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &faultState{Fault: f})
}

// ClearFaults removes every injected fault (not the quotas).
func (c *Cloud) ClearFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
}

// StockoutNext makes the next times instance inserts end in ZONE_RESOURCE_POOL_EXHAUSTED (0:
// every insert until ClearFaults).
func StockoutNext(times int) Fault {
	return Fault{Op: OpInsertInstance, Times: times, OpErr: Stockout()}
}

// RateLimited answers the next times requests of op with rateLimitExceeded (HTTP 403, as
// Compute Engine answers over its per-minute API quota; 429 for the newer answer).
func RateLimited(op string, times, status int) Fault {
	return Fault{Op: op, Times: times, Err: ErrRateLimited(status)}
}

// ServerErrors answers the next times requests of op with a 5xx status.
func ServerErrors(op string, times, status int) Fault {
	return Fault{Op: op, Times: times, Err: ErrServer(status)}
}

// SlowOperations makes the operations of the next times requests of op take d.
func SlowOperations(op string, times int, d time.Duration) Fault {
	return Fault{Op: op, Times: times, Delay: d}
}

// Deny answers requests of op with 403, as for a caller whose role lacks the permission.
func Deny(op string) Fault {
	return Fault{Op: op, Err: ErrPermission(permissionOf(op), "projects/"+DefaultProject)}
}

// faultsFor returns what the faults say about a request of op, using up one time of each
// fault that applies.
func (c *Cloud) faultsFor(op string) (apiErr *APIError, opErr *OperationError, delay time.Duration) {
	for _, f := range c.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		if f.Op == "" && !isComputeOp(op) {
			continue
		}
		if f.Times > 0 && f.used >= f.Times {
			continue
		}
		applies := (f.Err != nil && apiErr == nil) || (f.OpErr != nil && opErr == nil) || (f.Delay > 0 && delay == 0)
		if !applies {
			continue
		}
		f.used++
		if f.Err != nil && apiErr == nil {
			e := *f.Err
			apiErr = &e
		}
		if f.OpErr != nil && opErr == nil {
			e := *f.OpErr
			opErr = &e
		}
		if f.Delay > 0 && delay == 0 {
			delay = f.Delay
		}
	}
	return apiErr, opErr, delay
}

func isComputeOp(op string) bool { return len(op) > 8 && op[:8] == "compute." }

// permissionOf names the IAM permission an operation needs.
func permissionOf(op string) string {
	perms := map[string]string{
		OpInsertInstance: "compute.instances.create", OpGetInstance: "compute.instances.get",
		OpListInstances: "compute.instances.list", OpDeleteInstance: "compute.instances.delete",
		OpGetDisk: "compute.disks.get", OpListDisks: "compute.disks.list", OpDeleteDisk: "compute.disks.delete",
		OpGetOperation: "compute.zoneOperations.get", OpWaitOperation: "compute.zoneOperations.get", OpListOperations: "compute.zoneOperations.list",
		OpGetImage: "compute.images.get", OpGetImageFamily: "compute.images.getFromFamily",
		OpGetNetwork: "compute.networks.get", OpGetSubnetwork: "compute.subnetworks.get",
		OpGetMachineType: "compute.machineTypes.get",
	}
	if p, ok := perms[op]; ok {
		return p
	}
	return op
}

// Request is one request the fake answered.
type Request struct {
	Time   time.Time
	Method string
	Path   string
	Op     string
	Status int
	// Query is the request's query string (filter, pageToken, requestId, ...).
	Query string
	// Body is a Compute request's body (an insert's instance); token requests' bodies, which
	// carry credentials, are not kept.
	Body []byte `json:",omitempty"`
}

// Requests returns every request so far, in order.
func (c *Cloud) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.requests...)
}

// RequestsFor returns the requests of one operation.
func (c *Cloud) RequestsFor(op string) []Request {
	var out []Request
	for _, r := range c.Requests() {
		if r.Op == op {
			out = append(out, r)
		}
	}
	return out
}

// ResetRequests forgets the requests so far.
func (c *Cloud) ResetRequests() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = nil
}
