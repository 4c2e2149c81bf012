package oracle

import (
	"net/http"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// Scenarios are the classes and calls both drivers run: Gardener's published sample, the
// classes Gardener's AWS extension writes (workers with data volumes and a disabled
// source/destination check, spot, IPv6, GPUs with EFA in a placement group and a capacity
// reservation, arm64, ...), and the same calls under EC2's capacity errors, throttling, server
// errors and a lost answer.
var Scenarios = []Scenario{
	{
		Name:  "gardener-sample",
		About: "Gardener's published MachineClass (kubernetes/machine-class.yaml: t2.large, spotPrice \"\", two gp2 volumes, tags, metadata options) in a region that exists, with IDs the fake holds",
		Spec:  gardenerSample,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1"},
			{Op: oraclekit.List},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "after delete"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Note: "again"},
		},
	},
	{
		Name:  "worker",
		About: "a worker class as Gardener's AWS extension writes it: gp3 root and a gp3 data volume with IOPS and throughput, IMDSv2 with hop limit 2, srcAndDstChecksEnabled false",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "before initialize"},
			{Op: oraclekit.Initialize, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "after initialize"},
			{Op: oraclekit.Create, Machine: "m-2"},
			{Op: oraclekit.List},
			{Op: oraclekit.Delete, Machine: "m-2", Note: "by name"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.List, Note: "empty"},
		},
	},
	{
		Name:  "spot",
		About: "instanceMarketOptions.marketType spot, then the deprecated spotPrice with a maximum price, then one below EC2's spot price",
		Spec:  with(worker, map[string]any{"instanceMarketOptions": map[string]any{"marketType": "spot"}}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2", Spec: with(worker, map[string]any{"spotPrice": "0.05"}), Note: "spotPrice 0.05"},
			{Op: oraclekit.Create, Machine: "m-3", Spec: with(worker, map[string]any{"spotPrice": "0.01"}), Note: "spotPrice below the spot price"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-2", ByProviderID: true},
		},
	},
	{
		Name:  "ipv6",
		About: "a dual-stack interface: ipv6AddressCount (primary IPv6) at launch, ipv6PrefixCount assigned by InitializeMachine",
		Spec: with(worker, map[string]any{"networkInterfaces": []any{map[string]any{
			"subnetID": SubnetA, "securityGroupIDs": []any{NodesSG}, "ipv6AddressCount": 1, "ipv6PrefixCount": 2,
		}}, "srcAndDstChecksEnabled": nil}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "before initialize"},
			{Op: oraclekit.Initialize, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Note: "after initialize"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name:  "data-volumes",
		About: "data volumes: io1 with IOPS, gp3 with IOPS and throughput, an encrypted one with a KMS key and a snapshot, an st1 volume kept on termination",
		Spec: with(worker, map[string]any{"blockDevices": []any{
			ebs("/root", map[string]any{"volumeSize": 50, "volumeType": "gp3", "encrypted": true}),
			ebs("/dev/sdb", map[string]any{"volumeSize": 100, "volumeType": "io1", "iops": 3000}),
			ebs("/dev/sdc", map[string]any{"volumeSize": 200, "volumeType": "gp3", "iops": 6000, "throughput": 500}),
			ebs("/dev/sdd", map[string]any{"volumeSize": 20, "volumeType": "gp3", "encrypted": true,
				"kmsKeyID": "arn:aws:kms:eu-west-1:123456789012:key/0a1b2c3d-aaaa-bbbb-cccc-0a1b2c3d4e5f", "snapshotID": "snap-0a1b2c3d4e5f60718"}),
			ebs("/dev/sde", map[string]any{"volumeSize": 500, "volumeType": "st1", "deleteOnTermination": false}),
		}, "srcAndDstChecksEnabled": nil}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name: "gpu-efa",
		About: "a GPU class: p4d.24xlarge with an EFA interface on a second network card, in a partition of a placement group (by ID), " +
			"in a capacity reservation, with CPU options; InitializeMachine leaves the EFA interface's check alone",
		Spec: with(worker, map[string]any{
			"machineType": "p4d.24xlarge",
			"networkInterfaces": []any{
				map[string]any{"subnetID": SubnetA, "securityGroupIDs": []any{NodesSG}},
				map[string]any{"subnetID": SubnetA, "securityGroupIDs": []any{NodesSG}, "interfaceType": "efa", "deviceIndex": 1, "networkCardIndex": 1},
			},
			"placement":           map[string]any{"groupId": PlacementID, "partitionNumber": 2},
			"capacityReservation": map[string]any{"capacityReservationId": GPUReserved},
			"cpuOptions":          map[string]any{"coreCount": 48, "threadsPerCore": 2},
		}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Initialize, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name:  "arm64",
		About: "a Graviton type on an arm64 AMI, and the same type on an x86_64 AMI, which EC2 refuses",
		Spec:  with(worker, map[string]any{"machineType": "m7g.large", "ami": ArmAMI}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2", Spec: with(worker, map[string]any{"machineType": "m7g.large"}), Note: "x86_64 AMI"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name:  "reservations",
		About: "capacityReservation by preference, a capacity block (marketType capacity-block with its reservation), the awsPlacement node template annotation and an instance profile by ARN",
		Spec: with(worker, map[string]any{
			"capacityReservation": map[string]any{"capacityReservationPreference": "open"},
			"iam":                 map[string]any{"arn": "arn:aws:iam::123456789012:instance-profile/" + Profile},
		}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2", Spec: with(worker, map[string]any{
				"instanceMarketOptions": map[string]any{"marketType": "capacity-block"},
				"capacityReservation":   map[string]any{"capacityReservationId": Reservation},
			}), Note: "capacity block"},
			{Op: oraclekit.Create, Machine: "m-3", Placement: `{"GroupName":"` + PlacementName + `","PartitionNumber":1}`, Note: "awsPlacement annotation"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-2", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-3", ByProviderID: true},
		},
	},
	{
		Name:  "interfaces",
		About: "two interfaces with two security groups each, a description, one kept on termination; a public address on a single interface",
		Spec: with(worker, map[string]any{"networkInterfaces": []any{
			map[string]any{"subnetID": SubnetB, "securityGroupIDs": []any{NodesSG, ExtraSG}, "description": "primary"},
			map[string]any{"subnetID": SubnetB, "securityGroupIDs": []any{ExtraSG, NodesSG}, "deleteOnTermination": false},
		}}),
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2", Spec: with(worker, map[string]any{"networkInterfaces": []any{
				map[string]any{"subnetID": SubnetB, "securityGroupIDs": []any{NodesSG}, "associatePublicIPAddress": true},
			}}), Note: "public address"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-2", ByProviderID: true},
		},
	},
	{
		Name:  "capacity",
		About: "the zone has no capacity (InsufficientInstanceCapacity, HTTP 500), then has",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakeaws.Cloud) { c.Capacity.SetZoneCapacity(ZoneA, 0) }, Note: "no capacity"},
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakeaws.Cloud) { c.Capacity.SetZoneCapacity(ZoneA, -1) }, Note: "capacity back"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name:  "throttling",
		About: "RequestLimitExceeded (HTTP 503) once on each call, which the SDK retries, and on every attempt of DescribeImages",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakeaws.Cloud) { c.Faults.Inject(fakeaws.Throttle("RunInstances", 1)) }, Note: "launch throttled once"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Before: func(c *fakeaws.Cloud) { c.Faults.Inject(fakeaws.Throttle("DescribeInstances", 1)) }, Note: "throttled once"},
			{Op: oraclekit.Create, Machine: "m-2", Before: func(c *fakeaws.Cloud) { c.Faults.Inject(fakeaws.Throttle("DescribeImages", 0)) }, Note: "throttled throughout"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
	{
		Name:  "server-errors",
		About: "InternalError (500) once on a launch, Unavailable (503) on every attempt of a termination, and a launch whose answer is lost after it took effect",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", Before: func(c *fakeaws.Cloud) {
				c.Faults.Inject(fakeaws.ServerErrors("RunInstances", http.StatusInternalServerError, 1))
			}, Note: "500 once"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Before: func(c *fakeaws.Cloud) {
				c.Faults.Inject(fakeaws.ServerErrors("TerminateInstances", http.StatusServiceUnavailable, 0))
			}, Note: "503 throughout"},
			{Op: oraclekit.Create, Machine: "m-2", Before: func(c *fakeaws.Cloud) { c.Faults.Inject(fakeaws.LostResponse("RunInstances", 1)) }, Note: "answer lost"},
			{Op: oraclekit.List},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
			{Op: oraclekit.Delete, Machine: "m-2", ByProviderID: true},
		},
	},
	{
		Name:  "absent",
		About: "a machine without a VM: status, delete by name, delete by a provider ID EC2 does not know",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Status, Machine: "m-9"},
			{Op: oraclekit.Delete, Machine: "m-9", Note: "by name"},
			{Op: oraclekit.Delete, Machine: "m-9", ProviderID: "aws:///" + Region + "/i-0123456789abcdef0", Note: "unknown instance"},
		},
	},
	{
		Name:  "invalid-class",
		About: "a class that no longer validates (no AMI, both IAM name and ARN, no block devices) reaching a VM launched from its valid predecessor",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1"},
			{Op: oraclekit.Create, Machine: "m-2", Spec: invalidWorker, Note: "invalid class"},
			{Op: oraclekit.Status, Machine: "m-1", ByProviderID: true, Spec: invalidWorker, Note: "invalid class"},
			{Op: oraclekit.List, Spec: invalidWorker, Note: "invalid class"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Spec: invalidWorker, Note: "invalid class"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true, Note: "valid class"},
		},
	},
	{
		Name:  "foreign-cluster",
		About: "a machine whose provider ID names an instance of another cluster (a copied manifest, a wrong takeover)",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-other", Spec: otherCluster, Note: "another cluster's class"},
			{Op: oraclekit.Delete, Machine: "m-1", ProviderIDOf: "m-other", Note: "the other cluster's instance"},
			{Op: oraclekit.Delete, Machine: "m-other", ByProviderID: true, Spec: otherCluster, Note: "by its own class"},
		},
	},
	{
		Name:  "secrets",
		About: "a secret without credential keys, and one with the alternative key names accessKeyID and secretAccessKey",
		Spec:  worker,
		Steps: []Step{
			{Op: oraclekit.Create, Machine: "m-1", SecretData: map[string]string{"userData": UserData}, Note: "no keys"},
			{Op: oraclekit.Create, Machine: "m-1", SecretData: map[string]string{"accessKeyID": AccessKeyID, "secretAccessKey": SecretKey, "userData": UserData}, Note: "alternative keys"},
			{Op: oraclekit.List, SecretData: map[string]string{"userData": UserData}, Note: "no keys"},
			{Op: oraclekit.Delete, Machine: "m-1", ByProviderID: true},
		},
	},
}

// gardenerSample is Gardener's kubernetes/machine-class.yaml with the fake's IDs and a region
// that exists (the sample's eu-east-1 does not).
func gardenerSample() map[string]any {
	return map[string]any{
		"ami": AMI,
		"blockDevices": []any{
			ebs("/root", map[string]any{"volumeSize": 50, "volumeType": "gp2", "encrypted": false, "deleteOnTermination": true}),
			ebs("/dev/sdb", map[string]any{"volumeSize": 50, "volumeType": "gp2", "encrypted": true, "deleteOnTermination": true}),
		},
		"iam":               map[string]any{"name": Profile},
		"keyName":           KeyName,
		"machineType":       "t2.large",
		"networkInterfaces": []any{map[string]any{"subnetID": SubnetA, "securityGroupIDs": []any{NodesSG}}},
		"region":            Region,
		"spotPrice":         "",
		"tags": map[string]any{
			"Name": "sample-machine-name", ClusterTag: "1", RoleTag: "1", "tag1": "tag1-value", "tag2": "tag2-value",
		},
		"instanceMetadataOptions": map[string]any{"httpEndpoint": "enabled", "httpPutResponseHopLimit": 1, "httpTokens": "optional", "httpProtocolIpv6": "disabled"},
	}
}

// worker is a class as Gardener's AWS extension writes it for a worker pool.
func worker() map[string]any {
	return map[string]any{
		"apiVersion":        "mcm.gardener.cloud/v1alpha1",
		"ami":               AMI,
		"region":            Region,
		"machineType":       "m5.large",
		"iam":               map[string]any{"name": Profile},
		"keyName":           KeyName,
		"networkInterfaces": []any{map[string]any{"subnetID": SubnetA, "securityGroupIDs": []any{NodesSG}}},
		"blockDevices": []any{
			ebs("/root", map[string]any{"volumeSize": 50, "volumeType": "gp3", "encrypted": true}),
			ebs("/dev/sdb", map[string]any{"volumeSize": 100, "volumeType": "gp3", "iops": 4000, "throughput": 250, "encrypted": true}),
		},
		"tags": map[string]any{
			"Name": "shoot--dev--alpha", ClusterTag: "1", RoleTag: "1",
			"worker.gardener.cloud/pool": "worker-a", "worker.gardener.cloud/system-components": "true",
		},
		"srcAndDstChecksEnabled":  false,
		"instanceMetadataOptions": map[string]any{"httpTokens": "required", "httpPutResponseHopLimit": 2},
	}
}

// otherCluster is worker of another cluster.
func otherCluster() map[string]any {
	s := worker()
	s["tags"] = map[string]any{"Name": "shoot--dev--beta", "kubernetes.io/cluster/shoot--dev--beta": "1", RoleTag: "1"}
	return s
}

// invalidWorker is worker after edits machinist (and Gardener) refuse to launch from.
func invalidWorker() map[string]any {
	s := worker()
	delete(s, "ami")
	delete(s, "blockDevices")
	s["iam"] = map[string]any{"name": Profile, "arn": "arn:aws:iam::123456789012:instance-profile/" + Profile}
	return s
}

func ebs(device string, ebs map[string]any) map[string]any {
	return map[string]any{"deviceName": device, "ebs": ebs}
}

// with is base with fields replaced; a nil value removes the field.
func with(base func() map[string]any, fields map[string]any) func() map[string]any {
	return func() map[string]any {
		s := base()
		for k, v := range fields {
			if v == nil {
				delete(s, k)
				continue
			}
			s[k] = v
		}
		return s
	}
}
