package aws

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// Error codes of EC2 (errors-overview in the EC2 API reference) by what they mean for the
// controllers. Capacity and quota are ResourceExhausted, so capacity fallback moves on to the
// next class (spot → on-demand included); Gardener's provider maps the first ten so too
// (pkg/aws/errors/utils.go GetMCMErrorCodeForCreateMachine).
var (
	capacityCodes = map[string]bool{
		"InsufficientInstanceCapacity":         true,
		"InsufficientCapacity":                 true,
		"InsufficientAddressCapacity":          true,
		"InsufficientVolumeCapacity":           true,
		"InsufficientFreeAddressesInSubnet":    true,
		"InsufficientHostCapacity":             true,
		"InsufficientReservedInstanceCapacity": true,
		"InsufficientCapacityOnHost":           true,
		"ReservationCapacityExceeded":          true,
		"Unsupported":                          true,
	}
	quotaCodes = map[string]bool{
		"InstanceLimitExceeded": true,
		"VcpuLimitExceeded":     true,
		"VolumeLimitExceeded":   true,
		"MaxIOPSLimitExceeded":  true,
		"RouteLimitExceeded":    true,
	}
	spotCodes = map[string]bool{
		"SpotMaxPriceTooLow":           true,
		"MaxSpotInstanceCountExceeded": true,
	}
	throttleCodes = map[string]bool{
		"RequestLimitExceeded":      true,
		"Throttling":                true,
		"ThrottlingException":       true,
		"RequestThrottled":          true,
		"RequestThrottledException": true,
	}
	unavailableCodes = map[string]bool{
		"InternalError":      true,
		"InternalFailure":    true,
		"ServiceUnavailable": true,
		"Unavailable":        true,
	}
	authCodes = map[string]bool{
		"AuthFailure":                true,
		"InvalidClientTokenId":       true,
		"SignatureDoesNotMatch":      true,
		"IncompleteSignature":        true,
		"MissingAuthenticationToken": true,
		"InvalidIdentityToken":       true,
		"IDPCommunicationError":      true,
		"ExpiredToken":               true,
		"ExpiredTokenException":      true,
		"RequestExpired":             true,
		"InvalidAccessKeyId":         true,
	}
	permissionCodes = map[string]bool{
		"UnauthorizedOperation": true,
		"AccessDenied":          true,
		"AccessDeniedException": true,
		"OptInRequired":         true,
		"Blocked":               true,
		"PendingVerification":   true,
	}
)

// awsError is the code, message and request ID of a failed AWS call.
type awsError struct {
	status    int
	code      string
	message   string
	requestID string
}

func (e awsError) String() string {
	s := e.code + ": " + e.message
	if e.requestID != "" {
		s += " (request ID " + e.requestID
		if e.status != 0 {
			s += fmt.Sprintf(", HTTP %d", e.status)
		}
		s += ")"
	}
	return s
}

// apiErrorOf extracts the AWS error of err, if it carries one.
func apiErrorOf(err error) (awsError, bool) {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return awsError{}, false
	}
	e := awsError{code: ae.ErrorCode(), message: ae.ErrorMessage()}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.requestID = re.ServiceRequestID()
		e.status = re.HTTPStatusCode()
	}
	return e, true
}

// errorCode is the AWS error code of err, or "".
func errorCode(err error) string {
	if e, ok := apiErrorOf(err); ok {
		return e.code
	}
	return ""
}

// ec2Errors maps what every cloud's errors share.
var ec2Errors = kit.Errors{Provider: ProviderName, Cloud: "EC2"}

// statusOf turns an SDK error into a driver status: the code tells the controllers what to do,
// and the message carries the AWS error code, its message, the request ID and, where the error
// is about the MachineClass, the field to fix. what names the operation ("run instance for
// machine m-1").
func statusOf(spec *ProviderSpec, what string, err error) error {
	if st, ok := ec2Errors.Common(what, err); ok {
		return st
	}
	var ce *credentialsError
	if errors.As(err, &ce) {
		return credentialsStatus(what, ce.err)
	}
	e, ok := apiErrorOf(err)
	if !ok {
		return ec2Errors.Unreachable(what, err)
	}
	code, hint := classify(spec, e)
	msg := fmt.Sprintf("aws: %s: %s", what, e)
	if hint != "" {
		msg += ": " + hint
	}
	// The message says all the SDK's error does (code, message, request ID, HTTP status); the
	// SDK's own rendering would repeat it.
	return driver.Error(code, msg)
}

// credentialsStatus reports a failure to obtain credentials (STS web identity, the default
// chain) before any EC2 request was sent.
func credentialsStatus(what string, err error) error {
	if e, ok := apiErrorOf(err); ok {
		switch {
		case e.status >= 500 || throttleCodes[e.code] || unavailableCodes[e.code]:
			return driver.Errorf(driver.Unavailable, "aws: %s: get credentials: %s: STS is unavailable; the call is retried", what, e)
		case permissionCodes[e.code]:
			return driver.Errorf(driver.PermissionDenied, "aws: %s: get credentials: %s: let the role's trust policy accept the workload identity token (roleARN in the secret)", what, e)
		}
		return driver.Errorf(driver.Unauthenticated, "aws: %s: get credentials: %s: check workloadIdentityTokenFile and roleARN in the secret", what, e)
	}
	return driver.Errorf(driver.Unauthenticated,
		"aws: %s: no AWS credentials: %v: put providerAccessKeyId and providerSecretAccessKey (or workloadIdentityTokenFile and roleARN) in the secret, or give the process credentials of its own (IRSA, EKS Pod Identity, an instance profile; providers/aws/README.md)", what, err)
}

// classify maps an AWS error to a machine code and what the user can do.
func classify(spec *ProviderSpec, e awsError) (driver.Code, string) {
	switch {
	case capacityCodes[e.code] && spec.spotRequested():
		return driver.ResourceExhausted, "no spot capacity for this instance here now: raise providerSpec.spotPrice, or let a fallback class (another zone, or on-demand) take over"
	case capacityCodes[e.code]:
		return driver.ResourceExhausted, "EC2 has no capacity for this instance here now: a fallback class (another zone or instance type) takes over, else the machine is retried"
	case quotaCodes[e.code]:
		return driver.ResourceExhausted, "the account's EC2 quota is used up: raise it in Service Quotas, or free instances"
	case spotCodes[e.code]:
		return driver.ResourceExhausted, "no spot capacity at this price: raise providerSpec.spotPrice, or let a fallback class (on-demand) take over"
	case throttleCodes[e.code]:
		return driver.Unavailable, "EC2 is throttling the account's API requests; the call is retried with backoff"
	case unavailableCodes[e.code] || e.status >= 500:
		return driver.Unavailable, "EC2 failed transiently; the call is retried"
	case authCodes[e.code]:
		return driver.Unauthenticated, "AWS did not accept the credentials: check providerAccessKeyId and providerSecretAccessKey (or workloadIdentityTokenFile and roleARN) in the secret"
	case permissionCodes[e.code]:
		return driver.PermissionDenied, "grant the IAM identity the EC2 permissions listed in providers/aws/README.md"
	case e.code == "InvalidInstanceID.NotFound":
		return driver.NotFound, ""
	case strings.HasPrefix(e.code, "InvalidAMIID."):
		return driver.InvalidArgument, fmt.Sprintf("fix providerSpec.ami (%s): the AMI must exist in region %s and be shared with the account", spec.AMI, spec.Region)
	case strings.HasPrefix(e.code, "InvalidSubnetID.") || e.code == "InvalidSubnet":
		return driver.InvalidArgument, "fix " + fieldFor(spec, e.message, "subnetID") + ": the subnet must exist in region " + spec.Region
	case strings.HasPrefix(e.code, "InvalidGroup.") || strings.HasPrefix(e.code, "InvalidGroupId.") ||
		(e.code == "InvalidParameter" && strings.Contains(e.message, "belong to different networks")):
		return driver.InvalidArgument, "fix " + fieldFor(spec, e.message, "securityGroupIDs") + ": the security groups must exist in the subnet's VPC"
	case strings.HasPrefix(e.code, "InvalidKeyPair."):
		return driver.InvalidArgument, "fix providerSpec.keyName: the key pair must exist in region " + spec.Region
	case strings.Contains(strings.ToLower(e.message), "iaminstanceprofile"):
		return driver.InvalidArgument, "fix providerSpec.iam: the instance profile must exist (and the identity needs iam:PassRole on its role)"
	case e.code == "InvalidBlockDeviceMapping" || (strings.HasPrefix(e.code, "InvalidParameter") && mentionsVolume(e.message)):
		return driver.InvalidArgument, "fix providerSpec.blockDevices"
	case strings.HasPrefix(e.code, "InvalidCapacityReservationId."):
		return driver.InvalidArgument, "fix providerSpec.capacityReservation"
	case strings.HasPrefix(e.code, "InvalidPlacementGroup.") || e.code == "InvalidHostID.NotFound":
		return driver.InvalidArgument, "fix providerSpec.placement"
	case e.code == "IdempotentParameterMismatch":
		return driver.Aborted, "an earlier request with this machine's client token had other parameters; retry"
	}
	switch {
	case strings.HasPrefix(e.code, "InvalidParameter") || e.code == "MissingParameter" || strings.HasSuffix(e.code, ".Malformed"):
		return driver.InvalidArgument, "fix the MachineClass's providerSpec"
	case e.status == http.StatusUnauthorized:
		return driver.Unauthenticated, "check the credentials in the secret"
	case e.status == http.StatusForbidden:
		return driver.PermissionDenied, "grant the IAM identity the EC2 permissions listed in providers/aws/README.md"
	}
	return driver.Internal, ""
}

// fieldFor names the network interface field an EC2 message is about: the interface whose
// subnet or security group the message names, else the first.
func fieldFor(spec *ProviderSpec, message, child string) string {
	for i, n := range spec.NetworkInterfaces {
		ids := append([]string{n.SubnetID}, n.SecurityGroupIDs...)
		for _, id := range ids {
			if id != "" && strings.Contains(message, id) {
				if child == "securityGroupIDs" {
					for j, sg := range n.SecurityGroupIDs {
						if strings.Contains(message, sg) {
							return fmt.Sprintf("providerSpec.networkInterfaces[%d].securityGroupIDs[%d] (%s)", i, j, sg)
						}
					}
				}
				return fmt.Sprintf("providerSpec.networkInterfaces[%d].%s (%s)", i, child, id)
			}
		}
	}
	return "providerSpec.networkInterfaces[0]." + child
}

// mentionsVolume reports whether an InvalidParameter* message is about a block device.
func mentionsVolume(message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "volume") || strings.Contains(m, "iops") || strings.Contains(m, "throughput") || strings.Contains(m, "device")
}
