package driver

import "strconv"

// Code classifies a driver error. The names and numbers are those of Gardener MCM's machine codes
// (gRPC's 0–16 plus Uninitialized=17); the name is what the controller records in
// Machine.status.lastOperation.errorCode, so both are API and must not change.
type Code uint32

// The 18 machine codes.
const (
	// OK is success.
	OK Code = 0
	// Canceled: the caller cancelled the operation.
	Canceled Code = 1
	// Unknown: an error without enough information; what a non-status error reads as.
	Unknown Code = 2
	// InvalidArgument: the request is wrong whatever the state of the system (bad providerSpec,
	// wrong provider, empty machine name). Fix the input; retrying does not help.
	InvalidArgument Code = 3
	// DeadlineExceeded: the operation timed out and may still have succeeded.
	DeadlineExceeded Code = 4
	// NotFound: the VM does not exist.
	NotFound Code = 5
	// AlreadyExists: a VM with the machine's name exists but does not match the request.
	AlreadyExists Code = 6
	// PermissionDenied: the credentials lack a permission.
	PermissionDenied Code = 7
	// ResourceExhausted: quota or capacity is exhausted; retry much later or raise the quota.
	ResourceExhausted Code = 8
	// FailedPrecondition: the VM is in a state that forbids the operation; fix the state first.
	FailedPrecondition Code = 9
	// Aborted: a concurrent operation conflicted; retry.
	Aborted Code = 10
	// OutOfRange: on create, a size outside the valid range; on GetMachineStatus, several VMs
	// match one machine.
	OutOfRange Code = 11
	// Unimplemented: the driver does not support the method.
	Unimplemented Code = 12
	// Internal: an invariant is broken; needs a human.
	Internal Code = 13
	// Unavailable: a transient failure; retry with backoff.
	Unavailable Code = 14
	// DataLoss: unrecoverable data loss.
	DataLoss Code = 15
	// Unauthenticated: the credentials are missing or invalid.
	Unauthenticated Code = 16
	// Uninitialized: the VM exists but its post-create initialization has not completed.
	Uninitialized Code = 17
)

// NumCodes is the number of defined codes; valid codes are 0 through NumCodes-1.
const NumCodes = 18

var codeNames = [NumCodes]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
	"OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
	"Uninitialized",
}

// String returns the CamelCase name of the code, or "Code(n)" for an undefined value.
func (c Code) String() string {
	if c < NumCodes {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Valid reports whether c is one of the 18 defined codes.
func (c Code) Valid() bool { return c < NumCodes }

// ParseCode returns the code with the given CamelCase name. An unknown name yields Unknown and
// false.
func ParseCode(name string) (Code, bool) {
	for i, n := range codeNames {
		if n == name {
			return Code(i), true
		}
	}
	return Unknown, false
}

// Retryable reports whether an operation that failed with c may succeed when simply retried
// (the "Auto Retry Required" column of MCM's CreateMachine and DeleteMachine tables,
// docs/compatibility/mcm-driver-contract.md#documented-expectations-per-method).
func (c Code) Retryable() bool {
	switch c {
	case Unknown, DeadlineExceeded, Aborted, Unavailable:
		return true
	}
	return false
}
