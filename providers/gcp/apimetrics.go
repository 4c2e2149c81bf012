package gcp

import (
	"net/http"
	"strings"
)

// Services as MCM's GCP provider names them in the service label of mcm_cloud_api_*
// (machine-controller-manager-provider-gcp pkg/gcp/machine_controller_util.go at f192d12:
// instance_create, instance_delete, instance_list, instance_get, operations_get). Calls MCM does
// not make are named the same way.
const (
	serviceInstanceCreate = "instance_create"
	serviceInstanceDelete = "instance_delete"
	serviceInstanceList   = "instance_list"
	serviceInstanceGet    = "instance_get"
	serviceOperationsGet  = "operations_get"
	serviceDiskGet        = "disk_get"
	serviceDiskList       = "disk_list"
	serviceDiskDelete     = "disk_delete"
	serviceImageGet       = "image_get"
	serviceNetworkGet     = "network_get"
	serviceSubnetworkGet  = "subnetwork_get"
	serviceOther          = "compute_other"
)

// serviceOf names a request in the service label of mcm_cloud_api_*. The Compute API's calls
// are recorded the way MCM's GCP provider records its calls (pkg/instrument/instrument.go,
// RecordGcpAPIMetric; kit.APIMetrics): a success (a 404 lookup included, which the driver reads
// as "not there") counts in mcm_cloud_api_requests_total and observes
// mcm_cloud_api_api_request_duration_seconds, a failure counts in
// mcm_cloud_api_requests_failed_total only. The recording wraps the retries, so a retried call is
// one call. MCM times a whole create or delete including the operation; machinist times each
// request, and each wait on an operation counts as operations_get.
func serviceOf(method, path string) string {
	i := strings.Index(path, "/projects/")
	if i < 0 {
		return serviceOther
	}
	s := strings.Split(strings.Trim(path[i+1:], "/"), "/") // projects/P/...
	if len(s) < 4 {
		return serviceOther
	}
	rest := s[2:]
	switch {
	case len(rest) >= 3 && rest[0] == "zones" && rest[2] == "operations":
		return serviceOperationsGet
	case len(rest) == 3 && rest[0] == "zones" && rest[2] == "instances":
		if method == http.MethodPost {
			return serviceInstanceCreate
		}
		return serviceInstanceList
	case len(rest) == 4 && rest[0] == "zones" && rest[2] == "instances":
		if method == http.MethodDelete {
			return serviceInstanceDelete
		}
		return serviceInstanceGet
	case len(rest) == 3 && rest[0] == "zones" && rest[2] == "disks":
		return serviceDiskList
	case len(rest) == 4 && rest[0] == "zones" && rest[2] == "disks":
		if method == http.MethodDelete {
			return serviceDiskDelete
		}
		return serviceDiskGet
	case len(rest) >= 3 && rest[0] == "global" && rest[1] == "images":
		return serviceImageGet
	case len(rest) == 3 && rest[0] == "global" && rest[1] == "networks":
		return serviceNetworkGet
	case len(rest) == 4 && rest[0] == "regions" && rest[2] == "subnetworks":
		return serviceSubnetworkGet
	}
	return serviceOther
}
