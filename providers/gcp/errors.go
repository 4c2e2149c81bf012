package gcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/oauth2"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Operation error codes that mean no capacity or no quota: the machine cannot be created here
// now, and capacity fallback moves on. Gardener's provider classifies the same codes
// (pkg/gcp/machine_controller_util.go, checkIfResourceExhaustedError: these and any code
// containing QUOTA).
var exhaustedCodes = map[string]bool{
	"ZONE_RESOURCE_POOL_EXHAUSTED":              true,
	"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": true,
	"RESOURCE_POOL_EXHAUSTED":                   true,
	"QUOTA_EXCEEDED":                            true,
}

var quotaMessage = regexp.MustCompile(`(?i)quota .*exceeded|exceeded .*quota`)

// reference is a resource the driver names in an insert, and the spec field it comes from, so
// an error about the resource names the field.
type reference struct {
	kind  string // the collection: images, networks, subnetworks, diskTypes, acceleratorTypes, machineTypes
	name  string // the resource's name (for an image family: "family/NAME")
	field string // e.g. providerSpec.disks[0].image
	value string // what the spec says
}

// operationError is a zonal operation that ended with an error.
type operationError struct{ op *compute.Operation }

func (e *operationError) Error() string {
	var parts []string
	for _, item := range e.op.Error.Errors {
		s := item.Code + ": " + strings.TrimSpace(item.Message)
		for _, d := range item.ErrorDetails {
			if q := d.QuotaInfo; q != nil {
				s += fmt.Sprintf(" [quota %s of %s: limit %g", q.LimitName, q.MetricName, q.Limit)
				for _, k := range slices.Sorted(maps.Keys(q.Dimensions)) {
					s += fmt.Sprintf(", %s=%s", k, q.Dimensions[k])
				}
				s += "]"
			}
			if i := d.ErrorInfo; i != nil {
				s += fmt.Sprintf(" [%s %s", i.Domain, i.Reason)
				for _, k := range slices.Sorted(maps.Keys(i.Metadatas)) {
					s += fmt.Sprintf(", %s=%s", k, i.Metadatas[k])
				}
				s += "]"
			}
		}
		parts = append(parts, s)
	}
	msg := fmt.Sprintf("operation %s failed: %s", e.op.Name, strings.Join(parts, "; "))
	if e.op.HttpErrorStatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d %s)", e.op.HttpErrorStatusCode, e.op.HttpErrorMessage)
	}
	return msg
}

// computeErrors maps what every cloud's errors share.
var computeErrors = kit.Errors{Provider: ProviderName, Cloud: "Compute Engine", CAKey: KeyCACert}

// statusOf turns an error of a Compute API call into a driver status: the code says what the
// controller should do, the message what failed (the HTTP status, error reasons and message, or
// the operation's errors and their details) and what to do. what names the call ("create
// instance m-1 in europe-west1-b"); refs are the resources the call named.
func statusOf(what string, err error, refs ...reference) error {
	if st, ok := computeErrors.Common(what, err); ok {
		return st
	}
	var te *tokenError
	if errors.As(err, &te) {
		return tokenStatus(what, te)
	}
	var oe *operationError
	if errors.As(err, &oe) {
		return operationStatus(what, oe, refs)
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return computeErrors.Unreachable(what, err)
	}
	reasons := reasonsOf(ge)
	detail := fmt.Sprintf("HTTP %d", ge.Code)
	if len(reasons) > 0 {
		detail += " " + strings.Join(reasons, ", ")
	}
	detail += ": " + strings.TrimSpace(ge.Message)
	code, hint := classify(ge.Code, reasons, ge.Message)
	if notOfferedInZone(ge.Message) {
		code, hint = driver.ResourceExhausted, notOfferedHint(refs)
	} else if ref, ok := referenced(ge.Message, refs); ok && (ge.Code == http.StatusNotFound || ge.Code == http.StatusBadRequest) {
		code, hint = driver.InvalidArgument, fmt.Sprintf("%s %q names a %s that does not exist or cannot be used: fix it", ref.field, ref.value, singular(ref.kind))
	} else if f, ok := fieldOf(ge.Message); ok && ge.Code == http.StatusBadRequest {
		hint = "fix " + f + " in the MachineClass"
	}
	msg := fmt.Sprintf("gcp: %s: %s", what, detail)
	if hint != "" {
		msg += ": " + hint
	}
	return driver.Wrap(code, err, msg)
}

// notOfferedInZone reports whether Compute Engine refused a resource because the zone does not
// offer it: "Machine type with name 'a2-highgpu-1g' does not exist in zone 'europe-west1-d'."
// Gardener's provider classifies that ResourceExhausted (pkg/gcp/machine_controller_util.go,
// classifyIfResourceExhaustedError), so capacity fallback and Cluster Autoscaler's backoff move
// on to another zone or class: the zone cannot make this machine, as in a stockout.
func notOfferedInZone(message string) bool {
	return strings.Contains(message, "does not exist in zone")
}

func notOfferedHint(refs []reference) string {
	for _, r := range refs {
		if r.kind == "machineTypes" {
			return fmt.Sprintf("the zone does not offer %s %q: another zone or class (capacity fallback) can make the machine; if the name is mistyped, fix it", r.field, r.value)
		}
	}
	return "the zone does not offer what the class asks for: use another zone or class"
}

// classify maps an HTTP error of the Compute API to a machine code and what to do.
func classify(status int, reasons []string, message string) (driver.Code, string) {
	has := func(r ...string) bool {
		return slices.ContainsFunc(reasons, func(x string) bool { return slices.Contains(r, x) })
	}
	switch {
	case status == http.StatusTooManyRequests || has("rateLimitExceeded", "userRateLimitExceeded"):
		return driver.Unavailable, "Compute Engine is throttling the project's API requests; they were retried with backoff and are retried later"
	case has("quotaExceeded") || (status == http.StatusForbidden && quotaMessage.MatchString(message)):
		return driver.ResourceExhausted, "no quota for this machine: raise the quota, or use another region or machine type"
	case status == http.StatusUnauthorized:
		return driver.Unauthenticated, "the access token was not accepted: check the service account key (or workload identity) in the secret"
	case status == http.StatusForbidden:
		return driver.PermissionDenied, "grant the service account the roles in the GCP provider's README (roles/compute.instanceAdmin.v1 and roles/iam.serviceAccountUser)"
	case status == http.StatusNotFound:
		return driver.NotFound, ""
	case status == http.StatusConflict:
		return driver.AlreadyExists, ""
	case status == http.StatusPreconditionFailed:
		return driver.Aborted, "a concurrent change conflicted; retry"
	case has("resourceInUseByAnotherResource", "resourceNotReady"):
		return driver.FailedPrecondition, "the resource is in use or not ready (deletion protection?): resolve that first"
	case status >= 500:
		return driver.Unavailable, "transient Compute Engine failure; it was retried with backoff and is retried later"
	case status == http.StatusBadRequest:
		return driver.InvalidArgument, "fix the MachineClass"
	}
	return driver.Internal, ""
}

// operationStatus maps a failed operation: capacity and quota are ResourceExhausted; otherwise
// the operation's HTTP status decides.
func operationStatus(what string, oe *operationError, refs []reference) error {
	code, hint := driver.Internal, ""
	items := oe.op.Error.Errors
	exhausted := false
	for _, item := range items {
		if exhaustedCodes[item.Code] || strings.Contains(item.Code, "QUOTA") {
			exhausted = true
		}
	}
	switch {
	case exhausted:
		code, hint = driver.ResourceExhausted, "no capacity or quota for this machine here now: try another zone or machine type, or raise the quota"
	case len(items) > 0 && notOfferedInZone(items[len(items)-1].Message):
		code, hint = driver.ResourceExhausted, notOfferedHint(refs)
	case len(items) > 0 && items[0].Code == "RESOURCE_NOT_FOUND":
		code = driver.InvalidArgument
		if ref, ok := referenced(items[0].Message, refs); ok {
			hint = fmt.Sprintf("%s %q names a %s that does not exist: fix it", ref.field, ref.value, singular(ref.kind))
		} else {
			hint = "a resource the MachineClass names does not exist: fix it"
		}
	case oe.op.HttpErrorStatusCode != 0:
		code, hint = classify(int(oe.op.HttpErrorStatusCode), nil, oe.op.HttpErrorMessage)
		if code == driver.NotFound {
			code = driver.InvalidArgument
		}
	}
	msg := fmt.Sprintf("gcp: %s: %v", what, oe)
	if hint != "" {
		msg += ": " + hint
	}
	return driver.Wrap(code, oe, msg)
}

// tokenStatus maps a failure to get an access token: a refusal of the credentials is
// Unauthenticated; a token endpoint that gives no answer or a server error is an outage
// (Unavailable), and nobody should rotate a good key for it.
func tokenStatus(what string, te *tokenError) error {
	if te.cause != nil {
		if kit.UntrustedCertificate(te.cause) {
			return driver.Errorf(driver.FailedPrecondition, "gcp: %s: %v: the token endpoint's certificate is not trusted: put the CA that signs it in the secret's data.%s", what, te, KeyCACert)
		}
		return driver.Errorf(driver.Unavailable, "gcp: %s: %v: the credentials were not checked; the call is retried", what, te)
	}
	status, desc := 0, firstLine(te.err.Error())
	var re *oauth2.RetrieveError
	if errors.As(te.err, &re) && re.Response != nil {
		status = re.Response.StatusCode
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		if json.Unmarshal(re.Body, &body) == nil && body.Error != "" {
			desc = body.Error + ": " + body.Description
		}
	} else if m := stsStatus.FindStringSubmatch(te.err.Error()); m != nil {
		status, _ = strconv.Atoi(m[1])
	}
	switch {
	case status == 0:
		return driver.Errorf(driver.Unavailable, "gcp: %s: no access token: %s: the credentials were not checked; the call is retried", what, desc)
	case status >= 500 || status == http.StatusTooManyRequests:
		return driver.Errorf(driver.Unavailable, "gcp: %s: the token endpoint is unavailable (HTTP %d): %s: the credentials were not checked; the call is retried", what, status, desc)
	}
	return driver.Errorf(driver.Unauthenticated, "gcp: %s: the token endpoint refused the credentials (HTTP %d): %s: check the service account key or workload identity credentials in the secret", what, status, desc)
}

var stsStatus = regexp.MustCompile(`status code (\d{3})`)

func reasonsOf(ge *googleapi.Error) []string {
	var out []string
	for _, e := range ge.Errors {
		if e.Reason != "" && !slices.Contains(out, e.Reason) {
			out = append(out, e.Reason)
		}
	}
	return out
}

// isNotFound reports whether err is a 404 of the Compute API.
func isNotFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusNotFound
}

// isAlreadyExists reports whether err is a 409 of the Compute API.
func isAlreadyExists(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusConflict
}

var notFoundResource = regexp.MustCompile(`The resource '([^']+)' was not found`)

// referenced finds the reference an error message is about: a resource that was not found, or
// the field of an invalid value.
func referenced(message string, refs []reference) (reference, bool) {
	if m := notFoundResource.FindStringSubmatch(message); m != nil {
		path := m[1]
		for _, r := range refs {
			if strings.HasSuffix(path, "/"+r.kind+"/"+r.name) {
				return r, true
			}
		}
	}
	if f := invalidField.FindStringSubmatch(message); f != nil && f[1] == "resource.machineType" {
		for _, r := range refs {
			if r.kind == "machineTypes" {
				return r, true
			}
		}
	}
	return reference{}, false
}

var invalidField = regexp.MustCompile(`Invalid value for field '([^']+)'`)

// fieldOf translates the field of an invalid-value error (resource.disks[0].initializeParams.
// diskSizeGb) to the spec field it comes from.
func fieldOf(message string) (string, bool) {
	m := invalidField.FindStringSubmatch(message)
	if m == nil {
		return "", false
	}
	f := strings.TrimPrefix(m[1], "resource.")
	f = strings.Replace(f, ".initializeParams", "", 1)
	f = strings.Replace(f, "diskSizeGb", "sizeGb", 1)
	f = strings.Replace(f, "sourceImage", "image", 1)
	f = strings.Replace(f, "diskType", "type", 1)
	f = strings.Replace(f, "guestAccelerators", "gpu", 1)
	f = strings.Replace(f, "tags.items", "tags", 1)
	return "providerSpec." + f, true
}

func singular(kind string) string {
	switch kind {
	case "images":
		return "image"
	case "networks":
		return "network"
	case "subnetworks":
		return "subnetwork"
	case "diskTypes":
		return "disk type"
	case "acceleratorTypes":
		return "accelerator type"
	case "machineTypes":
		return "machine type"
	}
	return kind
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(first)
}
