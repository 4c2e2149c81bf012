package oracle

import (
	"regexp"
	"slices"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"
)

// Difference is a documented way machinist's requests or answers differ from Gardener's
// (oraclekit.Difference); docs/compatibility/aws.md gives each one's reason, and Gardener names
// the file at GardenerCommit that behaves otherwise.
type Difference = oraclekit.Difference[Step, Exchange]

// Differences are every difference that remains between the two drivers over Scenarios.
var Differences = []Difference{
	{
		ID: "adopt-before-launch", Gardener: "pkg/aws/core.go CreateMachine",
		What: "machinist's CreateMachine first looks for a live instance with the machine's Name and the class's tags (DescribeInstances) and adopts it; Gardener's launches without looking",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Create || len(m.Requests) == 0 || !byName(m.Requests[0]) {
				return false
			}
			m.Requests = m.Requests[1:]
			return true
		},
	},
	{
		ID: "lost-answer-lookup", Gardener: "pkg/aws/core.go CreateMachine",
		What: "after a failed RunInstances, machinist looks up the instances launched with its client token (the launch may have taken effect although its answer was lost); Gardener's does not",
		Apply: func(st Step, g, m *Exchange) bool {
			changed := false
			for i := 1; i < len(m.Requests); i++ {
				if m.Requests[i-1].Action == "RunInstances" && m.Requests[i-1].Code != "" && byToken(m.Requests[i]) {
					m.Requests = slices.Delete(m.Requests, i, i+1)
					changed = true
				}
			}
			return changed
		},
	},
	{
		ID: "capacity-not-retried", Gardener: "pkg/cpi/aws.go NewConfig (the SDK's default retryer)",
		What: "EC2 answers capacity errors with HTTP 500, which the SDK's default retryer of Gardener's client tries 3 times; machinist's does not retry them, so a fallback class takes over at once",
		Apply: func(st Step, g, m *Exchange) bool {
			changed := false
			for i := 1; i < len(g.Requests); i++ {
				prev, cur := g.Requests[i-1], g.Requests[i]
				if cur.Action == prev.Action && cur.Code == prev.Code && capacityCodes[cur.Code] {
					g.Requests = slices.Delete(g.Requests, i, i+1)
					i--
					changed = true
				}
			}
			return changed
		},
	},
	{
		ID: "max-results", Gardener: "pkg/aws/core_util.go getMachineInstancesByTagsAndStatus, pkg/aws/core.go ListMachines",
		What: "machinist pages filtered DescribeInstances with MaxResults 1000, as EC2's reference recommends for large accounts; Gardener's paginator sends no MaxResults",
		Apply: func(st Step, g, m *Exchange) bool {
			changed := false
			for i := range m.Requests {
				if _, ok := m.Requests[i].Params["MaxResults"]; ok && m.Requests[i].Action == "DescribeInstances" {
					m.Requests[i].Params = without(m.Requests[i].Params, func(k string) bool { return k == "MaxResults" })
					changed = true
				}
			}
			return changed
		},
	},
	{
		ID: "applied-fields", Gardener: "pkg/aws/core.go CreateMachine, pkg/aws/core_util.go generateBlockDevices",
		What: "machinist passes ebs.kmsKeyID, ebsOptimized and monitoring to RunInstances; Gardener's provider decodes them and leaves them out",
		Apply: func(st Step, g, m *Exchange) bool {
			changed := false
			for i := range m.Requests {
				if m.Requests[i].Action != "RunInstances" {
					continue
				}
				before := len(m.Requests[i].Params)
				m.Requests[i].Params = without(m.Requests[i].Params, func(k string) bool { return appliedOnlyByMachinist.MatchString(k) })
				changed = changed || len(m.Requests[i].Params) != before
			}
			return changed
		},
	},
	{
		ID: "delete-looks-first", Gardener: "pkg/aws/core.go DeleteMachine, pkg/aws/core_util.go terminateInstance",
		What: "machinist's DeleteMachine by provider ID describes the instance first and terminates it only when it is live and carries no other cluster's tag; Gardener's terminates the ID as it is",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Delete || (st.ProviderID == "" && !st.ByProviderID && st.ProviderIDOf == "") || len(m.Requests) == 0 || !byID(m.Requests[0]) {
				return false
			}
			m.Requests = m.Requests[1:]
			if !slices.ContainsFunc(m.Requests, func(r Request) bool { return r.Action == "TerminateInstances" }) {
				g.Requests = slices.DeleteFunc(g.Requests, func(r Request) bool { return r.Action == "TerminateInstances" })
			}
			return true
		},
	},
	{
		ID: "foreign-cluster-kept", Gardener: "pkg/aws/core.go DeleteMachine",
		What: "machinist's DeleteMachine refuses (FailedPrecondition) to terminate the instance of a provider ID when it carries another cluster's tag; Gardener's terminates it",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Delete || m.Result.Code != "FailedPrecondition" || g.Result.Code != "OK" {
				return false
			}
			g.Result = m.Result
			return true
		},
	},
	{
		ID: "initialize-redescribe", Gardener: "pkg/aws/core_util.go disableSrcAndDestCheck",
		What: "Gardener's InitializeMachine describes the instance again by ID before disabling the source/destination check; machinist uses the instance it found",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Initialize {
				return false
			}
			for i := 1; i < len(g.Requests); i++ {
				if byName(g.Requests[i-1]) && byID(g.Requests[i]) {
					g.Requests = slices.Delete(g.Requests, i, i+1)
					return true
				}
			}
			return false
		},
	},
	{
		ID: "error-codes", Gardener: "pkg/aws/errors/utils.go GetMCMErrorCodeForCreateMachine, pkg/aws/core_util.go",
		What: "Gardener's provider answers Internal for every EC2 error outside its capacity list; machinist answers the code that says what to do (Unavailable for throttling and 5xx, InvalidArgument for a refused parameter, ResourceExhausted for a spot price below EC2's)",
		Apply: func(st Step, g, m *Exchange) bool {
			if g.Result.Code != "Internal" || m.Result.Code == "OK" || m.Result.Code == "Internal" {
				return false
			}
			g.Result.Code = m.Result.Code
			return true
		},
	},
	{
		ID: "validate-to-launch-only", Gardener: "pkg/aws/core_util.go decodeProviderSpecAndSecret",
		What: "Gardener's provider validates the whole spec on every call; machinist's DeleteMachine, GetMachineStatus and ListMachines need only the region and the cluster and role tags, so a class that no longer validates can still have its VMs found and deleted",
		Apply: func(st Step, g, m *Exchange) bool {
			if (st.Op != oraclekit.Delete && st.Op != oraclekit.Status && st.Op != oraclekit.List) || g.Result.Code != "InvalidArgument" || len(g.Requests) > 0 || m.Result.Code == "InvalidArgument" {
				return false
			}
			*g = *m
			return true
		},
	},
	{
		ID: "gone-is-not-found", Gardener: "pkg/aws/core_util.go getMatchingInstancesForMachine",
		What: "when no live instance carries the machine's name, Gardener's GetMachineStatus reports the instance its provider ID names whatever its state; machinist answers NotFound for one that is terminated (or not the class's), so the machine is replaced",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Status || g.Result.Code != "OK" || m.Result.Code != "NotFound" {
				return false
			}
			g.Result = m.Result
			return true
		},
	},
}

// capacityCodes are EC2's capacity errors (HTTP 500).
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity": true, "InsufficientCapacity": true, "InsufficientAddressCapacity": true,
	"InsufficientVolumeCapacity": true, "InsufficientHostCapacity": true, "InsufficientReservedInstanceCapacity": true,
}

var appliedOnlyByMachinist = regexp.MustCompile(`^(BlockDeviceMapping\.\d+\.Ebs\.KmsKeyId|EbsOptimized|Monitoring\.Enabled)$`)

func filterNamed(r Request, name string) bool {
	for k, v := range r.Params {
		if strings.HasPrefix(k, "Filter.") && strings.HasSuffix(k, ".Name") && v == name {
			return true
		}
	}
	return false
}

func byName(r Request) bool { return r.Action == "DescribeInstances" && filterNamed(r, "tag:Name") }
func byToken(r Request) bool {
	return r.Action == "DescribeInstances" && filterNamed(r, "client-token")
}
func byID(r Request) bool {
	_, ok := r.Params["InstanceId.1"]
	return r.Action == "DescribeInstances" && ok
}

func without(params map[string]string, drop func(string) bool) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if !drop(k) {
			out[k] = v
		}
	}
	return out
}
