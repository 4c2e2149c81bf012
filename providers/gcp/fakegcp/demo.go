package fakegcp

// What SeedDemo creates, which `machinist fakecloud gcp` serves and the MachineClass
// kubernetes/samples/fakecloud/gcp-machineclass.yaml uses.
const (
	DemoServiceAccount = "machinist-demo@" + DefaultProject + ".iam.gserviceaccount.com"
	DemoRegion         = "europe-west1"
	DemoZone           = "europe-west1-b"
	DemoNetwork        = "machinist-demo"
	DemoSubnetwork     = "machinist-demo-nodes"
	DemoSubnetworkCIDR = "10.250.0.0/16"
	DemoImageProject   = "sap-se-gcp-gardenlinux"
	DemoImage          = "gardenlinux-gcp-1592-1-0"
	DemoImageFamily    = "gardenlinux"
)

// SeedDemo adds a network with a subnetwork (and a secondary range "ipv4-pods") and a Garden
// Linux image, and returns the JSON key of a new service account whose token_uri is tokenURI.
func (c *Cloud) SeedDemo(tokenURI string) []byte {
	c.AddNetwork(DemoNetwork)
	c.AddSubnetwork(DemoRegion, DemoNetwork, DemoSubnetwork, DemoSubnetworkCIDR, map[string]string{"ipv4-pods": "100.96.0.0/11"})
	c.AddImage(DemoImageProject, DemoImage, DemoImageFamily)
	return c.AddServiceAccount(DemoServiceAccount, tokenURI)
}
