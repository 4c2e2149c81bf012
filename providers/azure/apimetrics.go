package azure

import (
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/machinist-io/machinist/providers/kit"
)

// apiServices names the SDK operations as MCM's Azure provider names its API calls in the
// service label of mcm_cloud_api_* (machine-controller-manager-provider-azure
// pkg/azure/access/helpers). Operations MCM does not make are named the same way; one missing
// here counts under its SDK name.
var apiServices = map[string]string{
	"VirtualMachinesClient.Get":                 "virtual_machine_get",
	"VirtualMachinesClient.BeginCreateOrUpdate": "virtual_machine_create",
	"VirtualMachinesClient.BeginUpdate":         "virtual_machine_update",
	"VirtualMachinesClient.BeginDelete":         "virtual_machine_delete",
	"InterfacesClient.Get":                      "nic_get",
	"InterfacesClient.BeginCreateOrUpdate":      "nic_create",
	"InterfacesClient.BeginDelete":              "nic_delete",
	"DisksClient.Get":                           "disk_get",
	"DisksClient.BeginCreateOrUpdate":           "disk_create",
	"DisksClient.BeginUpdate":                   "disk_update",
	"DisksClient.BeginDelete":                   "disk_delete",
	"SubnetsClient.Get":                         "subnet_get",
	"VirtualMachineImagesClient.Get":            "virtual_machine_image_get",
	"VirtualMachineImagesClient.List":           "virtual_machine_image_list",
	"Client.NewListByResourceGroupPager":        "resource_list",
	"ResourceGroupsClient.CheckExistence":       "resource_group_exists",
	"ResourceGroupsClient.Get":                  "resource_group_exists",
	"MarketplaceAgreementsClient.Get":           "market_place_agreement_get",
	"MarketplaceAgreementsClient.Create":        "market_place_agreement_create",
}

// apiMetrics records each ARM operation the way MCM's Azure provider records its calls: a
// success (a 404 included, which MCM's lookups turn into "not there") counts in
// mcm_cloud_api_requests_total and observes mcm_cloud_api_api_request_duration_seconds, a
// failure counts in mcm_cloud_api_requests_failed_total only. It is a per-call policy, so
// retries are one call; the status polls of a long-running operation carry no operation name
// and are not counted (MCM times a create or delete up to its end, machinist up to ARM's
// acceptance).
type apiMetrics struct{}

func (apiMetrics) Do(req *policy.Request) (*http.Response, error) {
	op, _ := req.Raw().Context().Value(runtime.CtxAPINameKey{}).(string)
	if op == "" {
		return req.Next()
	}
	svc, ok := apiServices[op]
	if !ok {
		svc = op
	}
	start := time.Now()
	resp, err := req.Next()
	kit.APIMetrics(ProviderName).Call(svc, start, kit.FailedResponse(resp, err))
	return resp, err
}

var _ policy.Policy = apiMetrics{}
