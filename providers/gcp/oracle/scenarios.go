package oracle

import (
	"encoding/json"
	"maps"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	compute "google.golang.org/api/compute/v1"

	"github.com/machinist-io/machinist/providers/gcp"
	"github.com/machinist-io/machinist/providers/gcp/fakegcp"
)

const (
	zone        = fakegcp.DemoZone
	clusterTag  = "kubernetes-io-cluster-" + Namespace
	roleTag     = "kubernetes-io-role-node"
	gardenLinux = "projects/" + fakegcp.DemoImageProject + "/global/images/" + fakegcp.DemoImage
)

// sampleSpec is Gardener's published sample class (kubernetes/machine-class.yaml of
// machine-controller-manager-provider-gcp, in providers/gcp/testdata/gardener-published), its
// secretRef nested in providerSpec included: a dual-stack interface with an alias range.
func sampleSpec() map[string]any {
	return map[string]any{
		"canIpForward":       true,
		"deletionProtection": false,
		"description":        "Machine of shoot ash created by Machine-Controller-Manager.",
		"disks": []any{map[string]any{
			"autoDelete": true, "boot": true, "sizeGb": 50, "type": "pd-standard", "image": SampleImage,
			"labels": map[string]any{"name": "test-mc"},
		}},
		"labels":      map[string]any{"name": "test-mc"},
		"machineType": "n1-standard-2",
		"metadata":    []any{map[string]any{"key": "ash", "value": "my-value"}},
		"networkInterfaces": []any{map[string]any{
			"network": SampleNetwork, "subnetwork": SampleSubnetwork, "stackType": "IPV4_IPV6", "ipv6accessType": "EXTERNAL",
			"ipCidrRange": "/24", "subnetworkRangeName": SampleRange,
		}},
		"scheduling":      map[string]any{"automaticRestart": true, "onHostMaintenance": "MIGRATE", "preemptible": false},
		"secretRef":       map[string]any{"name": "test-secret", "namespace": "default"},
		"serviceAccounts": []any{map[string]any{"email": "default@project.iam.gserviceaccount.com", "scopes": []any{compute.ComputeScope}}},
		"tags":            []any{"kubernetes-io-cluster-test-mc", "kubernetes-io-role-mcm", "test-mc"},
		"region":          fakegcp.DemoRegion,
		"zone":            zone,
	}
}

// extensionSpec is a class as gardener-extension-provider-gcp writes it for a worker pool
// (pkg/controller/worker/machines.go): the nodes' subnetwork without external IP, the pool's
// disks and labels, block-project-ssh-keys, the shoot's service account, the shoot's tags.
func extensionSpec(change ...func(map[string]any)) func() map[string]any {
	return func() map[string]any {
		s := map[string]any{
			"region":             fakegcp.DemoRegion,
			"zone":               zone,
			"canIpForward":       true,
			"deletionProtection": false,
			"description":        "Machine of Shoot oracle created by machine-controller-manager.",
			"disks": []any{map[string]any{
				"autoDelete": true, "boot": true, "sizeGb": 50, "type": "pd-balanced", "image": gardenLinux,
				"labels": map[string]any{"name": "oracle"},
			}},
			"labels":            map[string]any{"name": "oracle", "worker_gardener_cloud_pool": "workers"},
			"metadata":          []any{map[string]any{"key": "block-project-ssh-keys", "value": "TRUE"}},
			"machineType":       "n2-standard-2",
			"networkInterfaces": []any{map[string]any{"subnetwork": fakegcp.DemoSubnetwork, "disableExternalIP": true}},
			"serviceAccounts":   []any{map[string]any{"email": ServiceAccount, "scopes": []any{compute.ComputeScope}}},
			"tags":              []any{Namespace, clusterTag, roleTag},
			"scheduling":        map[string]any{"automaticRestart": true, "onHostMaintenance": "MIGRATE", "preemptible": false},
		}
		for _, c := range change {
			c(s)
		}
		return s
	}
}

// Scenarios are what the differential run drives both drivers through.
var Scenarios = []Scenario{
	{
		Name: "gardener-sample", About: "Gardener's published sample class: dual stack with an alias range, through its life",
		Spec: sampleSpec,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.List},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "gone"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Note: "again"},
		},
	},
	{
		Name: "extension-worker", About: "a worker pool's class as Gardener's GCP extension writes it: two machines, a repeated create, list, delete",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2"},
			{Op: oraclekit.Create, Machine: "m-1", Note: "again"},
			{Op: oraclekit.List},
			{Op: oraclekit.Status, Machine: "m-2"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-2", ByProviderID: true},
			{Op: oraclekit.List, Note: "empty"},
		},
	},
	{
		Name: "data-disks", About: "data volumes: a persistent disk kept on delete (autoDelete false), an encrypted one, a local SSD",
		Spec: extensionSpec(func(s map[string]any) {
			s["disks"] = append(s["disks"].([]any),
				map[string]any{"autoDelete": false, "boot": false, "sizeGb": 100, "type": "pd-ssd", "labels": map[string]any{"name": "oracle"}},
				map[string]any{"autoDelete": true, "boot": false, "sizeGb": 20, "type": "hyperdisk-balanced", "provisionedIops": 3000, "provisionedThroughput": 140,
					"encryption": map[string]any{"kmsKeyName": "projects/oracle/locations/europe-west1/keyRings/r/cryptoKeys/k", "kmsKeyServiceAccount": ServiceAccount}},
				map[string]any{"autoDelete": true, "boot": false, "type": "SCRATCH", "interface": "NVME"})
		}),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "gpu", About: "a pool with GPUs: an accelerator, no live migration",
		Spec: extensionSpec(func(s map[string]any) {
			s["machineType"] = "n1-standard-4"
			s["gpu"] = map[string]any{"acceleratorType": "nvidia-tesla-t4", "count": 1}
			s["scheduling"] = map[string]any{"automaticRestart": true, "onHostMaintenance": "TERMINATE", "preemptible": false}
		}),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "alias-ipv6", About: "a dual-stack (internal IPv6) interface with an alias range for pods, shielded VM and nested virtualization",
		Spec: extensionSpec(func(s map[string]any) {
			s["networkInterfaces"] = []any{map[string]any{
				"subnetwork": DualStackSubnet, "disableExternalIP": true, "stackType": "IPV4_IPV6", "ipv6accessType": "INTERNAL",
				"useAliasIPs": true, "ipCidrRange": "/24", "subnetworkRangeName": PodsRange,
			}}
			s["shieldedInstanceConfiguration"] = map[string]any{"secureBoot": true, "vtpm": true, "integrityMonitoring": true}
			s["advancedMachineFeatures"] = map[string]any{"enableNestedVirtualization": true}
			s["minCpuPlatform"] = "Intel Ice Lake"
		}),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.Status, Machine: "m-1", ByProviderID: true}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "preemptible", About: "a preemptible VM, preempted: TERMINATED, still the machine's, then deleted",
		Spec: extensionSpec(func(s map[string]any) {
			s["scheduling"] = map[string]any{"automaticRestart": false, "onHostMaintenance": "TERMINATE", "preemptible": true}
		}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "preempted", Before: preempt("m-1")},
			{Op: oraclekit.List},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name: "spot", About: "machinist's Spot VM fields (provisioningModel, instanceTerminationAction), which Gardener's spec lacks",
		Spec: extensionSpec(func(s map[string]any) {
			s["scheduling"] = map[string]any{"automaticRestart": false, "onHostMaintenance": "TERMINATE", "preemptible": false, "provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
		}),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "stockout", About: "the zone has no capacity (ZONE_RESOURCE_POOL_EXHAUSTED), then has",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Note: "stockout", Before: func(c *fakegcp.Cloud) { c.Faults.Inject(fakegcp.StockoutNext(1)) }},
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name: "quota", About: "the region's CPUS quota is used up (QUOTA_EXCEEDED)",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakegcp.Cloud) { c.SetCPUQuota(fakegcp.DemoRegion, 1) }},
			{Op: oraclekit.List},
		},
	},
	{
		Name: "machine-type-not-in-zone", About: "the zone does not offer the machine type",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakegcp.Cloud) { c.WithdrawMachineType(zone, "n2-standard-2") }},
		},
	},
	{
		Name: "not-the-class-instances", About: "instances of the machines' names without the class's tags: untagged, another cluster's",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Delete, Machine: "m-1", Note: "untagged", Before: func(c *fakegcp.Cloud) {
				c.PutInstance(zone, &compute.Instance{Name: "m-1"})
				c.PutInstance(zone, &compute.Instance{Name: "m-2", Tags: &compute.Tags{Items: []string{"kubernetes-io-cluster-other", roleTag}}})
			}},
			{Op: oraclekit.Delete, Machine: "m-2", Note: "another cluster's"},
			{Op: oraclekit.Status, Machine: "m-1"},
			{Op: oraclekit.List},
			{Op: oraclekit.Create, Machine: "m-1"},
		},
	},
	{
		Name: "absent", About: "a machine whose instance never existed",
		Spec:  extensionSpec(),
		Steps: []Step{{Op: oraclekit.Status, Machine: "m-1"}, {Op: oraclekit.Delete, Machine: "m-1"}},
	},
	{
		Name: "key-without-project-id", About: "a service account key without project_id and the secret's projectID",
		Spec: extensionSpec(),
		Secret: func(data map[string][]byte) {
			var key map[string]any
			_ = json.Unmarshal(data[gcp.KeyServiceAccountJSON], &key)
			delete(key, "project_id")
			data[gcp.KeyServiceAccountJSON], _ = json.Marshal(key)
			data[gcp.KeyProjectID] = []byte(fakegcp.DefaultProject)
		},
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.List}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "class-no-longer-valid", About: "instances of a class that no longer validates are still found and deleted; a create from it is refused",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Spec: invalidSpec},
			{Op: oraclekit.List, Spec: invalidSpec},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Spec: invalidSpec},
			{Op: oraclekit.Create, Machine: "m-2", Spec: invalidSpec},
		},
	},
	{
		Name: "deletion-protection", About: "an instance with deletion protection",
		Spec:  extensionSpec(func(s map[string]any) { s["deletionProtection"] = true }),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1"}, {Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true}},
	},
	{
		Name: "throttled", About: "Compute Engine's rate limit answers a list 403 rateLimitExceeded; an outage answers one 503",
		Spec: extensionSpec(),
		Steps: []Step{
			{Op: oraclekit.List, Note: "throttled", Before: func(c *fakegcp.Cloud) { c.Faults.Inject(fakegcp.Throttle(fakegcp.OpListInstances, 1, 403)) }},
			{Op: oraclekit.List, Note: "outage", Before: func(c *fakegcp.Cloud) { c.Faults.Inject(fakegcp.ServerErrors(fakegcp.OpListInstances, 503, 1)) }},
		},
	},
	{
		Name: "denied", About: "the service account may not create instances",
		Spec:  extensionSpec(),
		Steps: []Step{{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakegcp.Cloud) { c.Faults.Inject(fakegcp.Deny(fakegcp.OpInsertInstance)) }}},
	},
}

// invalidSpec is extensionSpec without a machine type and disks, with a region Compute Engine
// does not have and a scheduling no VM can have.
func invalidSpec() map[string]any {
	s := maps.Clone(extensionSpec()())
	delete(s, "machineType")
	delete(s, "disks")
	s["region"] = "Not A Region"
	s["scheduling"] = map[string]any{"onHostMaintenance": "SOMETIMES"}
	return s
}

// preempt preempts a machine's instance and lets the preemption finish.
func preempt(name string) func(*fakegcp.Cloud) {
	return func(c *fakegcp.Cloud) {
		if _, err := c.Preempt(zone, name); err != nil {
			panic(err)
		}
		c.Settle()
	}
}
