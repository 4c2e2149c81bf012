package fakeazure

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ARMError is an Azure Resource Manager error as the service sends it: an HTTP status, an error
// code and message in the body ({"error": {"code", "message", "details"}}) and the code again in the
// x-ms-error-code header. Handlers return it (through the SDK fake's ErrorResponder) and the
// transport turns it into a real HTTP response, so the SDK's own error parsing runs.
type ARMError struct {
	Status  int
	Code    string
	Message string
	Target  string
	Details []ARMError
	// Header holds extra response headers (Retry-After).
	Header http.Header
}

func (e *ARMError) Error() string {
	return fmt.Sprintf("fakeazure: %d %s: %s", e.Status, e.Code, e.Message)
}

type armErrorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Target  string         `json:"target,omitempty"`
	Details []armErrorBody `json:"details,omitempty"`
}

func (e *ARMError) body() armErrorBody {
	b := armErrorBody{Code: e.Code, Message: e.Message, Target: e.Target}
	for i := range e.Details {
		b.Details = append(b.Details, e.Details[i].body())
	}
	return b
}

// JSON returns the response body of the error.
func (e *ARMError) JSON() []byte {
	out, _ := json.Marshal(map[string]armErrorBody{"error": e.body()})
	return out
}

func armErr(status int, code, format string, args ...any) *ARMError {
	return &ARMError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// The error shapes below are those ARM and its resource providers document and send; each
// constructor names where the fake uses it.

// ErrThrottled is ARM's 429 answer when a subscription's request budget is spent.
func ErrThrottled(op string, retryAfter time.Duration) *ARMError {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	e := armErr(http.StatusTooManyRequests, "TooManyRequests",
		"The request is being throttled as the limit has been reached for operation '%s'. Please try again after '%d' seconds.", op, secs)
	e.Header = http.Header{}
	if retryAfter%time.Second == 0 {
		e.Header.Set("Retry-After", strconv.Itoa(secs))
	} else {
		// Sub-second delays use the retry-after-ms header, which the SDK prefers over Retry-After.
		e.Header.Set("Retry-After", strconv.Itoa(secs))
		e.Header.Set("retry-after-ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	e.Header.Set("x-ms-ratelimit-remaining-subscription-reads", "0")
	return e
}

// ErrServer is a transient 5xx failure of ARM or a resource provider.
func ErrServer(status int) *ARMError {
	switch status {
	case http.StatusServiceUnavailable:
		return armErr(status, "ServiceUnavailable", "The service is currently unavailable. Please try again later.")
	case http.StatusGatewayTimeout:
		return armErr(status, "GatewayTimeout", "The gateway did not receive a response from 'Microsoft.Compute' within the specified time period.")
	case http.StatusBadGateway:
		return armErr(status, "BadGateway", "The gateway received an invalid response from the resource provider.")
	}
	return armErr(status, "InternalServerError", "The server encountered an internal error. Please retry the request.")
}

// ErrCoreQuota is Microsoft.Compute's answer to a VM that would exceed the regional vCPU quota.
func ErrCoreQuota(location string, limit, usage, required int) *ARMError {
	return armErr(http.StatusConflict, "OperationNotAllowed",
		"Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: %s, Current Limit: %d, Current Usage: %d, Additional Required: %d, (Minimum) New Limit Required: %d. Submit a request for Quota increase at https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView by specifying parameters listed in the 'Details' section for deployment to succeed.",
		location, limit, usage, required, usage+required)
}

// ErrFamilyQuota is Microsoft.Compute's QuotaExceeded shape for a VM family's vCPU quota.
func ErrFamilyQuota(family, location string, limit, usage, required int) *ARMError {
	return armErr(http.StatusConflict, "QuotaExceeded",
		"Operation could not be completed as it results in exceeding approved %s Cores quota. Additional details - Deployment Model: Resource Manager, Location: %s, Current Limit: %d, Current Usage: %d, Additional Required: %d, (Minimum) New Limit Required: %d. Submit a request for Quota increase at https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView by specifying parameters listed in the 'Details' section for deployment to succeed.",
		family, location, limit, usage, required, usage+required)
}

// ErrResourceQuota is ARM's answer when a resource group holds too many resources of a type.
func ErrResourceQuota(resourceType string, limit int) *ARMError {
	return armErr(http.StatusConflict, "ResourceQuotaExceeded",
		"Creating the resource of type '%s' would exceed the quota of '%d' resources of type '%s' per resource group. The current resource count is '%d', please delete some resources of this type before creating a new one.",
		resourceType, limit, resourceType, limit)
}

// ErrSkuNotAvailable is Microsoft.Compute's answer for a VM size without capacity for the
// subscription in a location or zone.
func ErrSkuNotAvailable(size, location string, zones []string) *ARMError {
	where := fmt.Sprintf("location '%s'", location)
	if len(zones) > 0 {
		where += fmt.Sprintf(" zones '%s'", strings.Join(zones, ","))
	}
	return armErr(http.StatusConflict, "SkuNotAvailable",
		"The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: %s' is currently not available in %s for subscription. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details.",
		size, where)
}

// ErrAllocation is the terminal error of a VM create LRO that found no capacity.
func ErrAllocation(code string) *ARMError {
	switch code {
	case "ZonalAllocationFailed":
		return armErr(http.StatusOK, code, "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance")
	case "OverconstrainedAllocationRequest", "OverconstrainedZonalAllocationRequest":
		return armErr(http.StatusOK, code, "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive. Please remove some constraints and try again. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance")
	}
	return armErr(http.StatusOK, code, "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance")
}

func errResourceGroupNotFound(rg string) *ARMError {
	return armErr(http.StatusNotFound, "ResourceGroupNotFound", "Resource group '%s' could not be found.", rg)
}

func errResourceNotFound(typ, rg, name string) *ARMError {
	return armErr(http.StatusNotFound, "ResourceNotFound", "The Resource '%s/%s' under resource group '%s' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix", typ, name, rg)
}

func errInvalidParameter(target, format string, args ...any) *ARMError {
	e := armErr(http.StatusBadRequest, "InvalidParameter", format, args...)
	e.Target = target
	return e
}
