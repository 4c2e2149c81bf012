package fakeazure

// The resources SeedDemo creates, which `machinist fakecloud azure` serves and the README's
// MachineClass (kubernetes/samples/fakecloud/azure-machineclass.yaml) uses.
const (
	DemoClientID      = "6d1f0c3e-0000-4000-8000-0000000de770"
	DemoClientSecret  = "fakeazure-demo-client-secret"
	DemoResourceGroup = "machinist-demo"
	DemoLocation      = "westeurope"
	DemoVNet          = "machinist-demo"
	DemoSubnet        = "machinist-demo-nodes"
	DemoSubnetPrefix  = "10.250.0.0/16"
	DemoImageURN      = "sap:gardenlinux:greatest:1592.1.0"
)

// SeedDemo adds a service principal, a resource group with a subnet and a marketplace image.
func (c *Cloud) SeedDemo() {
	c.AddServicePrincipal(DemoClientID, DemoClientSecret)
	c.AddResourceGroup(DemoResourceGroup, DemoLocation)
	c.AddSubnet(DemoResourceGroup, DemoVNet, DemoSubnet, DemoSubnetPrefix)
	c.AddImage(DemoLocation, "sap", "gardenlinux", "greatest", "1592.1.0", nil)
}
