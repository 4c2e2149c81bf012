package azure

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Capacity and quota error codes of Microsoft.Compute and ARM: the machine cannot be created now
// and retrying at once will not help.
var exhaustedCodes = map[string]bool{
	"ZonalAllocationFailed":                 true,
	"AllocationFailed":                      true,
	"SkuNotAvailable":                       true,
	"OverconstrainedAllocationRequest":      true,
	"OverconstrainedZonalAllocationRequest": true,
	"QuotaExceeded":                         true,
	"ResourceQuotaExceeded":                 true,
	"OperationNotAllowedQuotaExceeded":      true,
}

var (
	quotaMessage        = regexp.MustCompile(`(?i)exceed\w*\b.*\bquota`)
	notSupportedMessage = regexp.MustCompile(`(?i)not supported`)
)

// marketplace terms and plan errors: the subscription has to act first.
var marketplaceCodes = map[string]bool{
	"MarketplacePurchaseEligibilityFailed": true,
	"ResourcePurchaseValidationFailed":     true,
	"VMMarketplaceInvalidInput":            true,
}

// armError is the code, message and request id of a failed ARM call.
type armError struct {
	status    int
	code      string
	message   string
	requestID string
}

func armErrorOf(re *azcore.ResponseError) armError {
	e := armError{status: re.StatusCode, code: re.ErrorCode}
	if re.RawResponse != nil {
		e.requestID = re.RawResponse.Header.Get("x-ms-request-id")
		if e.code == "" {
			e.code = re.RawResponse.Header.Get("x-ms-error-code")
		}
		// Payload reads the body once and keeps it, so the ResponseError can still render it.
		if body, err := runtime.Payload(re.RawResponse); err == nil && len(body) > 0 {
			var parsed struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
				Code    string `json:"code"`
				Message string `json:"message"`
			}
			if json.Unmarshal(body, &parsed) == nil {
				e.message = parsed.Error.Message
				if e.message == "" {
					e.message = parsed.Message
				}
				if e.code == "" {
					e.code = parsed.Error.Code
				}
			}
		}
	}
	if e.message == "" {
		e.message = http.StatusText(e.status)
	}
	return e
}

func (e armError) String() string {
	s := fmt.Sprintf("%s: %s (HTTP %d", e.code, e.message, e.status)
	if e.requestID != "" {
		s += ", x-ms-request-id " + e.requestID
	}
	return s + ")"
}

// isNotFound reports whether err is an ARM 404.
func isNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// isGroupNotFound reports whether err says the resource group does not exist.
func isGroupNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.ErrorCode == "ResourceGroupNotFound"
}

// errorCode is the ARM error code of err, or "".
func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// armErrors maps what every cloud's errors share.
var armErrors = kit.Errors{Provider: ProviderName, Cloud: "Azure", CAKey: KeyCACert}

// statusOf turns an SDK error into a driver status: the code says what the controller should do
// and the message carries the ARM error code, its message and the request id for support cases.
// what names the operation ("create VM shoot--a-1").
func statusOf(what string, err error) error {
	if err == nil {
		return nil
	}
	var unreachable *loginUnreachableError
	if errors.As(err, &unreachable) && unreachable.cause != nil && kit.UntrustedCertificate(unreachable.cause) {
		err = unreachable.cause
	}
	if st, ok := armErrors.Common(what, err); ok {
		return st
	}
	// A login that got no answer, or a server error, is an outage of Microsoft Entra ID: retry,
	// and do not send anyone to rotate a good secret.
	if errors.As(err, &unreachable) {
		return driver.Errorf(driver.Unavailable, "azure: %s: %v: the credentials were not checked; the call is retried", what, unreachable)
	}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) {
		switch r := af.RawResponse; {
		case r == nil:
			return driver.Errorf(driver.Unavailable, "azure: %s: Microsoft Entra ID gave no answer: %s: the credentials were not checked; the call is retried", what, entraMessage(af))
		case r.StatusCode >= 500 || r.StatusCode == http.StatusTooManyRequests:
			return driver.Errorf(driver.Unavailable, "azure: %s: Microsoft Entra ID is unavailable (HTTP %d): %s: the credentials were not checked; the call is retried", what, r.StatusCode, entraMessage(af))
		}
		return driver.Errorf(driver.Unauthenticated, "azure: %s: Microsoft Entra ID refused the credentials: %s: check clientID, clientSecret or workloadIdentityTokenFile and tenantID in the secret", what, entraMessage(af))
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return armErrors.Unreachable(what, err)
	}
	e := armErrorOf(re)
	code, hint := classify(e)
	msg := fmt.Sprintf("azure: %s: %s", what, e)
	if hint != "" {
		msg += ": " + hint
	}
	return driver.Wrap(code, err, msg)
}

// classify maps an ARM error to a machine code and what the user can do.
func classify(e armError) (driver.Code, string) {
	switch {
	case exhaustedCodes[e.code], e.code == "OperationNotAllowed" && quotaMessage.MatchString(e.message):
		return driver.ResourceExhausted, "no capacity or quota for this VM: try another size or zone, or raise the quota"
	case e.code == "BadRequest" && notSupportedMessage.MatchString(e.message):
		return driver.ResourceExhausted, "the VM size or feature is not supported here: try another size or zone"
	case marketplaceCodes[e.code]:
		return driver.FailedPrecondition, "accept the image's marketplace terms for the subscription (az vm image terms accept --urn ...) or use another image"
	case e.status == http.StatusUnauthorized:
		return driver.Unauthenticated, "the credentials were not accepted: check the secret"
	case e.status == http.StatusForbidden:
		return driver.PermissionDenied, "grant the service principal the role in the README (Microsoft.Compute and Microsoft.Network permissions on the resource group)"
	case e.status == http.StatusNotFound:
		return driver.NotFound, ""
	case e.status == http.StatusTooManyRequests:
		return driver.Unavailable, "Azure is throttling the subscription; retry later"
	case e.status >= 500:
		return driver.Unavailable, "transient Azure failure; retry later"
	case e.status == http.StatusConflict || e.status == http.StatusPreconditionFailed:
		return driver.Aborted, "a concurrent operation conflicted; retry"
	case e.status == http.StatusBadRequest:
		return driver.InvalidArgument, "fix the MachineClass"
	}
	return driver.Internal, ""
}

// entraMessage extracts the AADSTS description from an authentication failure.
func entraMessage(af *azidentity.AuthenticationFailedError) string {
	if af.RawResponse == nil {
		first, _, _ := strings.Cut(af.Error(), "\n")
		return strings.TrimSpace(first)
	}
	if body, err := runtime.Payload(af.RawResponse); err == nil && len(body) > 0 {
		var parsed struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(body, &parsed) == nil && parsed.Error != "" {
			desc, _, _ := strings.Cut(parsed.Description, "\r\n")
			s := parsed.Error + ": " + desc
			if id := af.RawResponse.Header.Get("x-ms-request-id"); id != "" {
				s += " (x-ms-request-id " + id + ")"
			}
			return s
		}
	}
	first, _, _ := strings.Cut(af.Error(), "\n")
	return strings.TrimSpace(first)
}
