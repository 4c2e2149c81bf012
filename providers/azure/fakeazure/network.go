package fakeazure

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9/fake"
	"k8s.io/utils/ptr"
)

var subnetIDPattern = regexp.MustCompile(`(?i)^/subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Network/virtualNetworks/([^/]+)/subnets/([^/]+)$`)

func (c *networkAPI) interfacesServer() networkfake.InterfacesServer {
	return networkfake.InterfacesServer{
		BeginCreateOrUpdate: c.createNIC,
		Get: func(_ context.Context, rg, name string, _ *armnetwork.InterfacesClientGetOptions) (resp azfake.Responder[armnetwork.InterfacesClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			nic, ok := c.nics[key(rg, name)]
			if !ok {
				return resp, fail(errResourceNotFound("Microsoft.Network/networkInterfaces", rg, name))
			}
			resp.SetResponse(http.StatusOK, armnetwork.InterfacesClientGetResponse{Interface: *clone(nic)}, nil)
			return resp, errResp
		},
		BeginDelete: func(_ context.Context, rg, name string, _ *armnetwork.InterfacesClientBeginDeleteOptions) (resp azfake.PollerResponder[armnetwork.InterfacesClientDeleteResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			k := key(rg, name)
			nic, ok := c.nics[k]
			if !ok {
				return lroResponder(0, http.StatusAccepted, http.StatusNoContent, armnetwork.InterfacesClientDeleteResponse{}), errResp
			}
			if vm := nic.Properties.VirtualMachine; vm != nil {
				return resp, fail(armErr(http.StatusBadRequest, "NicInUse",
					"Network Interface %s is used by existing resource %s. In order to delete the network interface, it must be dissociated from the resource. To learn more, see aka.ms/deletenic.", deref(nic.ID), deref(vm.ID)))
			}
			st := armnetwork.ProvisioningStateDeleting
			nic.Properties.ProvisioningState = &st
			c.startLRO(deref(nic.ID), OpDeleteNIC, func() (any, *ARMError) {
				c.mu.Lock()
				defer c.mu.Unlock()
				delete(c.nics, k)
				return nil, nil
			})
			return lroResponder(c.polls(OpDeleteNIC), http.StatusAccepted, http.StatusOK, armnetwork.InterfacesClientDeleteResponse{}), errResp
		},
		NewListPager: func(rg string, _ *armnetwork.InterfacesClientListOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListResponse]) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				resp.AddError(errResourceGroupNotFound(rg))
				return resp
			}
			var all []*armnetwork.Interface
			for _, k := range sortedKeys(c.nics, rg) {
				all = append(all, clone(c.nics[k]))
			}
			for _, page := range pages(all, c.pageSize) {
				resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListResponse{InterfaceListResult: armnetwork.InterfaceListResult{Value: page}}, nil)
			}
			return resp
		},
	}
}

func (c *networkAPI) createNIC(_ context.Context, rg, name string, in armnetwork.Interface, _ *armnetwork.InterfacesClientBeginCreateOrUpdateOptions) (resp azfake.PollerResponder[armnetwork.InterfacesClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[strings.ToLower(rg)] == nil {
		return resp, fail(errResourceGroupNotFound(rg))
	}
	k := key(rg, name)
	if nic, ok := c.nics[k]; ok {
		if in.Tags != nil {
			nic.Tags = in.Tags
		}
		return lroResponder(0, http.StatusCreated, http.StatusOK, armnetwork.InterfacesClientCreateOrUpdateResponse{Interface: *clone(nic)}), errResp
	}
	if deref(in.Location) == "" {
		return resp, fail(errInvalidParameter("location", "Required parameter 'location' is missing (null)."))
	}
	if in.Properties == nil || len(in.Properties.IPConfigurations) == 0 {
		return resp, fail(armErr(http.StatusBadRequest, "NetworkInterfaceMustHaveAtLeastOneIpConfiguration", "Network interface %s must have at least one IP configuration.", name))
	}
	nic := clone(&in)
	nicID := c.resourceID(rg, "Microsoft.Network/networkInterfaces", name)
	nic.ID, nic.Name, nic.Type = &nicID, &name, ptr.To("Microsoft.Network/networkInterfaces")
	for i, ipc := range nic.Properties.IPConfigurations {
		if ipc.Properties == nil || ipc.Properties.Subnet == nil || ipc.Properties.Subnet.ID == nil {
			return resp, fail(errInvalidParameter("ipConfigurations.subnet", "IP configuration %s of network interface %s must reference a subnet.", deref(ipc.Name), name))
		}
		subnetID := *ipc.Properties.Subnet.ID
		m := subnetIDPattern.FindStringSubmatch(subnetID)
		var subnet *armnetwork.Subnet
		if m != nil && strings.EqualFold(m[1], c.subscriptionID) {
			subnet = c.subnets[subnetKey(m[2], m[3], m[4])]
		}
		if subnet == nil {
			return resp, fail(armErr(http.StatusBadRequest, "InvalidResourceReference",
				"Resource %s referenced by resource %s was not found. Please make sure that the referenced resource exists, and that both resources are in the same region.", subnetID, nicID))
		}
		if ipc.Name == nil {
			ipc.Name = ptr.To(fmt.Sprintf("ipconfig%d", i+1))
		}
		ipc.ID = ptr.To(nicID + "/ipConfigurations/" + *ipc.Name)
		ipc.Properties.PrivateIPAddress = ptr.To(c.allocateIP(subnet))
		dynamic := armnetwork.IPAllocationMethodDynamic
		ipc.Properties.PrivateIPAllocationMethod = &dynamic
		ipc.Properties.Primary = ptr.To(i == 0)
	}
	nic.Properties.MacAddress = ptr.To(fmt.Sprintf("00-0D-3A-%02X-%02X-%02X", c.seq>>16&0xff, c.seq>>8&0xff, c.seq&0xff))
	st := armnetwork.ProvisioningStateUpdating
	nic.Properties.ProvisioningState = &st
	nic.Properties.VirtualMachine = nil
	c.nics[k] = nic
	c.startLRO(nicID, OpCreateNIC, func() (any, *ARMError) {
		c.mu.Lock()
		defer c.mu.Unlock()
		nic, ok := c.nics[k]
		if !ok {
			return nil, nil
		}
		st := armnetwork.ProvisioningStateSucceeded
		nic.Properties.ProvisioningState = &st
		return clone(nic), nil
	})
	return lroResponder(c.polls(OpCreateNIC), http.StatusCreated, http.StatusOK, armnetwork.InterfacesClientCreateOrUpdateResponse{Interface: *clone(nic)}), errResp
}

// allocateIP hands out the next address of a subnet; Azure reserves the first four. Callers hold
// c.mu.
func (c *networkAPI) allocateIP(subnet *armnetwork.Subnet) string {
	_, ipnet, err := net.ParseCIDR(deref(subnet.Properties.AddressPrefix))
	if err != nil || ipnet.IP.To4() == nil {
		return "10.0.0.4"
	}
	id := strings.ToLower(deref(subnet.ID))
	c.nextIP[id]++
	n := 3 + c.nextIP[id]
	ip := ipnet.IP.To4()
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(n)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String()
}

func (c *networkAPI) subnetsServer() networkfake.SubnetsServer {
	return networkfake.SubnetsServer{
		Get: func(_ context.Context, rg, vnet, subnet string, _ *armnetwork.SubnetsClientGetOptions) (resp azfake.Responder[armnetwork.SubnetsClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				return resp, fail(errResourceGroupNotFound(rg))
			}
			s, ok := c.subnets[subnetKey(rg, vnet, subnet)]
			if !ok {
				return resp, fail(armErr(http.StatusNotFound, "NotFound", "Resource /subscriptions/%s/resourceGroups/%s/providers/Microsoft.Network/virtualNetworks/%s/subnets/%s not found.", c.subscriptionID, rg, vnet, subnet))
			}
			resp.SetResponse(http.StatusOK, armnetwork.SubnetsClientGetResponse{Subnet: *clone(s)}, nil)
			return resp, errResp
		},
	}
}
