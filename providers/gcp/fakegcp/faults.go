package fakegcp

import (
	"time"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

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

// Fault makes matching requests, or the operations they start, fail or take long. A fault
// without an Op applies to the Compute API's requests only, not to the token endpoints'.
type Fault struct {
	// Rule is the operation (OpInsertInstance, ...) and how many requests the fault applies to.
	fakekit.Rule
	// Err, when set, is answered to the request instead of serving it.
	Err *APIError `json:",omitempty"`
	// OpErr, when set, is how the operation the request starts ends (instances.insert: the
	// instance and its disks are gone again, as after a stockout).
	OpErr *OperationError `json:",omitempty"`
	// Delay, when set, is how long the operation the request starts takes (a slow operation).
	Delay time.Duration `json:",omitempty"`
}

// applies reports whether the fault applies to a request of op.
func (f Fault) applies(op string) bool {
	return f.Matches(op) && (f.Op != "" || isComputeOp(op))
}

// StockoutNext makes the next times instance inserts end in ZONE_RESOURCE_POOL_EXHAUSTED (0:
// every insert until ClearFaults).
func StockoutNext(times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: OpInsertInstance, Times: times}, OpErr: Stockout()}
}

// Throttle answers the next times requests of op with rateLimitExceeded: status 403, as Compute
// Engine answers over its per-minute API quota, or 429 for the newer answer.
func Throttle(op string, times, status int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Err: ErrRateLimited(status)}
}

// ServerErrors answers the next times requests of op with a 5xx status.
func ServerErrors(op string, status, times int) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Err: ErrServer(status)}
}

// SlowOperations makes the operations of the next times requests of op take d.
func SlowOperations(op string, times int, d time.Duration) Fault {
	return Fault{Rule: fakekit.Rule{Op: op, Times: times}, Delay: d}
}

// Deny answers requests of op with 403, as for a caller whose role lacks the permission.
func Deny(op string) Fault {
	return Fault{Rule: fakekit.Rule{Op: op}, Err: ErrPermission(permissionOf(op), "projects/"+DefaultProject)}
}

// faultsFor returns what the faults say about a request of op, using up one time of the first
// fault of each kind (Err, OpErr, Delay) that applies.
func (c *computeAPI) faultsFor(op string) (apiErr *APIError, opErr *OperationError, delay time.Duration) {
	return takeFaults(c.faults, op)
}

func takeFaults(faults *fakekit.Faults[Fault], op string) (apiErr *APIError, opErr *OperationError, delay time.Duration) {
	faults.Each(func(f Fault) bool {
		if !f.applies(op) {
			return false
		}
		applies := (f.Err != nil && apiErr == nil) || (f.OpErr != nil && opErr == nil) || (f.Delay > 0 && delay == 0)
		if !applies {
			return false
		}
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
		return true
	})
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

// Operation is the request's Op.
func (r Request) Operation() string { return r.Op }
