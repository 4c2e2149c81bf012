package oracle

import (
	"slices"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

// Difference is a documented way machinist's requests or answers differ from Gardener's
// (oraclekit.Difference); docs/compatibility/gcp.md gives each one's reason, and Gardener names
// the file and function at GardenerCommit that behaves otherwise.
type Difference = oraclekit.Difference[Step, Exchange]

// Differences are every difference that remains between the two drivers over Scenarios, in the
// order Compare applies them.
var Differences = []Difference{
	{
		ID: "look-before-insert", Gardener: "pkg/gcp/machine_controller_util.go CreateMachineUtil",
		What: "machinist's CreateMachine first gets the instance of the machine's name (to adopt its own or refuse another's); Gardener's inserts without looking",
		Apply: func(st Step, _, m *Exchange) bool {
			if st.Op != oraclekit.Create || len(m.Requests) == 0 || m.Requests[0].Op != fakegcp.OpGetInstance {
				return false
			}
			m.Requests = m.Requests[1:]
			return true
		},
	},
	{
		ID: "create-existing-instance", Gardener: "pkg/gcp/machine_controller_util.go CreateMachineUtil",
		What: "for a machine whose instance exists, machinist answers from the instance it found (its own is adopted: OK; another's is AlreadyExists) without inserting; Gardener inserts, Compute Engine answers 409 alreadyExists, and Gardener answers Internal",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Create || len(g.Requests) == 0 || g.Requests[0].Op != fakegcp.OpInsertInstance || g.Requests[0].Status != 409 || hasOp(m.Requests, fakegcp.OpInsertInstance) {
				return false
			}
			g.Requests = g.Requests[1:]
			if m.Result.Code == "OK" && g.Result.Code == "Internal" {
				g.Result = m.Result
			}
			return true
		},
	},
	{
		ID: "insert-request-id", Gardener: "pkg/gcp/machine_controller_util.go CreateMachineUtil",
		What: "machinist's insert carries a requestId, so a retried insert makes no second instance; Gardener's carries none",
		Apply: func(st Step, _, m *Exchange) bool {
			changed := false
			for i, r := range m.Requests {
				if r.Op == fakegcp.OpInsertInstance && strings.Contains(r.Query, "requestId=SET") {
					m.Requests[i].Query = strings.Trim(strings.ReplaceAll(r.Query, "requestId=SET", ""), "&")
					changed = true
				}
			}
			return changed
		},
	},
	{
		ID: "await-by-wait", Gardener: "pkg/gcp/machine_controller_util.go WaitUntilOperationCompleted",
		What: "machinist awaits an operation with zoneOperations.wait, which Compute Engine holds until the operation is done; Gardener polls zoneOperations.get every 5 seconds (for at most 300)",
		Apply: func(_ Step, g, m *Exchange) bool {
			changed := false
			for i, r := range m.Requests {
				if r.Op == fakegcp.OpWaitOperation {
					m.Requests[i].Method, m.Requests[i].Op, m.Requests[i].Path = "GET", fakegcp.OpGetOperation, strings.TrimSuffix(r.Path, "/wait")
					changed = true
				}
			}
			for _, e := range []*Exchange{g, m} {
				e.Requests = slices.CompactFunc(e.Requests, func(a, b Request) bool {
					return a.Op == fakegcp.OpGetOperation && line(a) == line(b)
				})
			}
			return changed
		},
	},
	{
		ID: "create-reads-instance", Gardener: "pkg/gcp/machine_controller.go CreateMachine",
		What: "after a create, machinist gets the instance for its addresses (CreateMachineResponse.Addresses, which Gardener's MCM does not have); Gardener answers without them",
		Apply: func(st Step, _, m *Exchange) bool {
			n := len(m.Requests)
			if st.Op != oraclekit.Create || m.Result.Code != "OK" || n < 2 || m.Requests[n-1].Op != fakegcp.OpGetInstance || m.Requests[n-1].Status != 200 || !isAwait(m.Requests[n-2]) {
				return false
			}
			m.Requests = m.Requests[:n-1]
			return true
		},
	},
	{
		ID: "cleanup-after-failed-insert", Gardener: "pkg/gcp/machine_controller_util.go CreateMachineUtil",
		What: "when an insert's operation fails, machinist looks for the instance it made (by its ID) and deletes it before answering; Gardener leaves it to the orphan collector (Compute Engine removes an instance whose insert failed, so both end alike)",
		Apply: func(st Step, _, m *Exchange) bool {
			n := len(m.Requests)
			if st.Op != oraclekit.Create || m.Result.Code == "OK" || n < 2 || m.Requests[n-1].Op != fakegcp.OpGetInstance || m.Requests[n-1].Status != 404 || !isAwait(m.Requests[n-2]) {
				return false
			}
			m.Requests = m.Requests[:n-1]
			return true
		},
	},
	{
		ID: "reach-by-get", Gardener: "pkg/gcp/machine_controller_util.go getVMs (DeleteMachineUtil, GetMachineStatusUtil)",
		What: "GetMachineStatus and DeleteMachine get the machine's instance by name (one request, its tags checked as Gardener checks them); Gardener lists the whole zone, page by page, to find it",
		Apply: func(st Step, g, m *Exchange) bool {
			if (st.Op != oraclekit.Status && st.Op != oraclekit.Delete) || len(m.Requests) == 0 || m.Requests[0].Op != fakegcp.OpGetInstance {
				return false
			}
			pages := 0
			for pages < len(g.Requests) && g.Requests[pages].Op == fakegcp.OpListInstances {
				pages++
			}
			if pages == 0 {
				return false
			}
			g.Requests, m.Requests = g.Requests[pages:], m.Requests[1:]
			return true
		},
	},
	{
		ID: "deletion-protection-checked", Gardener: "pkg/gcp/machine_controller_util.go DeleteMachineUtil",
		What: "machinist sees deletion protection on the instance it got and answers FailedPrecondition with the command that turns it off; Gardener sends the delete, which Compute Engine refuses (400 resourceInUseByAnotherResource), and answers Internal",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Delete || m.Result.Code != "FailedPrecondition" || len(g.Requests) != 1 || g.Requests[0].Op != fakegcp.OpDeleteInstance || g.Requests[0].Status != 400 {
				return false
			}
			g.Requests = nil
			return true
		},
	},
	{
		ID: "delete-absent-is-ok", Gardener: "pkg/gcp/machine_controller_util.go DeleteMachineUtil",
		What: "deleting a machine whose instance does not exist is OK in machinist (the driver contract: delete is idempotent); Gardener answers NotFound. Both controllers read either as \"the VM is gone\"",
		Apply: func(st Step, g, m *Exchange) bool {
			if st.Op != oraclekit.Delete || g.Result.Code != "NotFound" || m.Result.Code != "OK" {
				return false
			}
			m.Result.Code = "NotFound"
			return true
		},
	},
	{
		ID: "throttling-retried", Gardener: "pkg/gcp/plugin.go NewComputeService (no retries)",
		What: "machinist retries a request Compute Engine throttles (rateLimitExceeded, 429) or fails with 5xx, with backoff, within the call; Gardener's call fails (Internal) and MCM retries the whole operation later",
		Apply: func(_ Step, g, m *Exchange) bool {
			gi := slices.IndexFunc(g.Requests, retriable)
			mi := slices.IndexFunc(m.Requests, retriable)
			if gi < 0 || mi < 0 || gi != len(g.Requests)-1 || g.Result.Code != "Internal" || mi+1 >= len(m.Requests) {
				return false
			}
			if next := m.Requests[mi+1]; next.Op != m.Requests[mi].Op || next.Status != 200 {
				return false
			}
			m.Requests, m.Result = m.Requests[:mi+1], g.Result
			return true
		},
	},
	{
		ID: "spot-vms", Gardener: "pkg/api/v1alpha1/provider_spec.go GCPScheduling",
		What: "machinist's spec has scheduling.provisioningModel and instanceTerminationAction (Spot VMs) and sends them; Gardener's spec has no such fields and ignores them",
		Apply: func(st Step, g, m *Exchange) bool {
			changed := false
			for i, r := range m.Requests {
				s, _ := r.Body["scheduling"].(map[string]any)
				if r.Op != fakegcp.OpInsertInstance || s == nil {
					continue
				}
				for _, k := range []string{"provisioningModel", "instanceTerminationAction"} {
					if _, ok := s[k]; ok {
						delete(m.Requests[i].Body["scheduling"].(map[string]any), k)
						changed = true
					}
				}
			}
			return changed
		},
	},
	{
		ID: "key-without-project-id", Gardener: "pkg/gcp/plugin.go NewComputeService, through gardener-extension-provider-gcp v1.43.1 pkg/gcp/credentialsconfig.go GetCredentialsConfigFromJSON",
		What: "a service account key without project_id works in machinist with the secret's projectID; Gardener's ExtractProject would fall back to projectID too, but its NewComputeService refuses such a key first (\"no project id specified\"), so every call fails Internal before any request",
		Apply: func(_ Step, g, m *Exchange) bool {
			if g.Result.Code != "Internal" || len(g.Requests) != 0 || !strings.Contains(g.Result.Message, "no project id specified") {
				return false
			}
			g.Result, g.Requests = m.Result, m.Requests
			return true
		},
	},
	{
		ID: "precise-codes", Gardener: "pkg/gcp/machine_controller.go prepareErrorf",
		What: "machinist answers the code that says what to do (InvalidArgument for a class to fix, PermissionDenied, FailedPrecondition, AlreadyExists, Unavailable for an outage); Gardener answers Internal for everything but NotFound and ResourceExhausted",
		Apply: func(_ Step, g, m *Exchange) bool {
			if g.Result.Code != "Internal" || !slices.Contains([]string{"InvalidArgument", "PermissionDenied", "FailedPrecondition", "AlreadyExists", "Unavailable", "Unauthenticated"}, m.Result.Code) {
				return false
			}
			m.Result.Code = "Internal"
			return true
		},
	},
}

func hasOp(reqs []Request, op string) bool {
	return slices.ContainsFunc(reqs, func(r Request) bool { return r.Op == op })
}

func isAwait(r Request) bool {
	return r.Op == fakegcp.OpGetOperation || r.Op == fakegcp.OpWaitOperation
}

// retriable is a request refused with a status that may be a rate limit or an outage (403
// rateLimitExceeded, 429, 5xx); the rule above takes it for one only when machinist's next
// request repeats it and succeeds.
func retriable(r Request) bool {
	return r.Status == 403 || r.Status == 429 || r.Status >= 500
}
