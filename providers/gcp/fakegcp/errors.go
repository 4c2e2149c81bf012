package fakegcp

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// APIError is an error answer of the Compute API: the HTTP status and the reason and message of
// its error item, in the JSON shape googleapi.CheckResponse reads.
type APIError struct {
	Status  int
	Reason  string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Reason, e.Message)
}

// JSON is the response body.
func (e *APIError) JSON() []byte {
	type item struct {
		Message string `json:"message"`
		Domain  string `json:"domain"`
		Reason  string `json:"reason"`
	}
	body := map[string]any{"error": map[string]any{
		"code":    e.Status,
		"message": e.Message,
		"errors":  []item{{Message: e.Message, Domain: domainOf(e.Reason), Reason: e.Reason}},
		"status":  statusName(e.Status),
	}}
	b, _ := json.Marshal(body)
	return b
}

func apiErr(status int, reason, format string, args ...any) *APIError {
	return &APIError{Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func errNotFound(path string) *APIError {
	return apiErr(http.StatusNotFound, "notFound", "The resource '%s' was not found", path)
}

func errInvalid(field, value, why string) *APIError {
	return apiErr(http.StatusBadRequest, "invalid", "Invalid value for field '%s': '%s'. %s", field, value, why)
}

// ErrRateLimited is the answer to a request over the per-minute API rate quota.
func ErrRateLimited(status int) *APIError {
	return apiErr(status, "rateLimitExceeded",
		"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:%d'.", projectNumber)
}

// ErrServer is a transient server error (500, 502, 503, 504).
func ErrServer(status int) *APIError {
	reason := "backendError"
	if status == http.StatusServiceUnavailable {
		reason = "serviceUnavailable"
	}
	return apiErr(status, reason, "%s: the request failed on Compute Engine's side; retry", http.StatusText(status))
}

// ErrPermission is the answer to a caller without the IAM permission for resource.
func ErrPermission(permission, resource string) *APIError {
	return apiErr(http.StatusForbidden, "forbidden", "Required '%s' permission for '%s'", permission, resource)
}

// projectNumber is the fake project's number, as rate-limit messages name it.
const projectNumber = 761094522011

func domainOf(reason string) string {
	switch reason {
	case "rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded":
		return "usageLimits"
	}
	return "global"
}

func statusName(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ALREADY_EXISTS"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "UNKNOWN"
}

// OperationError is how an operation ends when it fails: the error item of Operation.error and
// the HTTP status the operation reports.
type OperationError struct {
	Code       string
	Message    string
	HTTPStatus int
	// Quota, when set, is the quota the error is about (errorDetails[].quotaInfo).
	Quota *QuotaInfo `json:",omitempty"`
	// Reason, when set, is errorDetails[].errorInfo.reason.
	Reason string `json:",omitempty"`
}

// QuotaInfo names an exceeded quota.
type QuotaInfo struct {
	Metric string
	Limit  string
	Value  float64
	Region string
}

// Stockout is a zone without capacity for the machine type; the message names the zone of the
// operation.
func Stockout() *OperationError {
	return &OperationError{Code: "ZONE_RESOURCE_POOL_EXHAUSTED", HTTPStatus: http.StatusServiceUnavailable, Reason: "resource_availability"}
}

// message is the error's message, or Compute Engine's for its code when it has none.
func (e *OperationError) message(zoneLink string) string {
	if e.Message != "" {
		return e.Message
	}
	switch e.Code {
	case "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS":
		return fmt.Sprintf("The zone '%s' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", zoneLink)
	}
	return e.Code
}

// CPUQuotaExceeded is a region whose CPUS quota the instance would exceed.
func CPUQuotaExceeded(region string, limit int) *OperationError {
	return &OperationError{Code: "QUOTA_EXCEEDED", HTTPStatus: http.StatusForbidden,
		Message: fmt.Sprintf("Quota 'CPUS' exceeded.  Limit: %d.0 in region %s.", limit, region),
		Quota:   &QuotaInfo{Metric: "compute.googleapis.com/cpus", Limit: "CPUS-per-project-region", Value: float64(limit), Region: region}}
}
