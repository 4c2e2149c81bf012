package fakeazure

import (
	"context"
	"net/http"
	"regexp"
	"sort"
	"strings"

	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3"
	resourcesfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3/fake"
	"k8s.io/utils/ptr"
)

// resourcesServer serves the generic resource list of a resource group with ARM's $filter
// support for tags, resource types and names.
func (c *resourcesAPI) resourcesServer() resourcesfake.Server {
	return resourcesfake.Server{
		NewListByResourceGroupPager: func(rg string, opts *armresources.ClientListByResourceGroupOptions) (resp azfake.PagerResponder[armresources.ClientListByResourceGroupResponse]) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(rg)] == nil {
				resp.AddError(errResourceGroupNotFound(rg))
				return resp
			}
			var filter string
			if opts != nil {
				filter = deref(opts.Filter)
			}
			match, hideTags, e := parseFilter(filter)
			if e != nil {
				resp.AddError(e)
				return resp
			}
			var all []*armresources.GenericResourceExpanded
			add := func(id, name, typ, location string, tags map[string]*string, managedBy *string) {
				r := &armresources.GenericResourceExpanded{ID: ptr.To(id), Name: ptr.To(name), Type: ptr.To(typ), Location: ptr.To(location), ManagedBy: managedBy}
				if !match(r, tags) {
					return
				}
				if !hideTags && tags != nil {
					r.Tags = make(map[string]*string, len(tags))
					for k, v := range tags {
						r.Tags[k] = ptr.To(deref(v))
					}
				}
				all = append(all, r)
			}
			for _, k := range sortedKeys(c.vms, rg) {
				vm := c.vms[k]
				add(deref(vm.ID), deref(vm.Name), deref(vm.Type), deref(vm.Location), vm.Tags, nil)
			}
			for _, k := range sortedKeys(c.nics, rg) {
				nic := c.nics[k]
				add(deref(nic.ID), deref(nic.Name), deref(nic.Type), deref(nic.Location), nic.Tags, nil)
			}
			for _, k := range sortedKeys(c.disks, rg) {
				d := c.disks[k]
				add(deref(d.ID), deref(d.Name), deref(d.Type), deref(d.Location), d.Tags, d.ManagedBy)
			}
			sort.Slice(all, func(i, j int) bool { return strings.ToLower(*all[i].ID) < strings.ToLower(*all[j].ID) })
			for _, page := range pages(all, c.pageSize) {
				resp.AddPage(http.StatusOK, armresources.ClientListByResourceGroupResponse{ResourceListResult: armresources.ResourceListResult{Value: page}}, nil)
			}
			return resp
		},
	}
}

var filterClause = regexp.MustCompile(`(?i)^\s*(tagName|tagValue|resourceType|name|location)\s+eq\s+'((?:[^']|'')*)'\s*$`)

// parseFilter understands the $filter forms ARM documents for listing resources: clauses
// "field eq 'value'" joined by "and", over tagName, tagValue, resourceType, name and location.
// As in ARM, a filter on a tag name and value returns the resources without their tags.
func parseFilter(filter string) (func(*armresources.GenericResourceExpanded, map[string]*string) bool, bool, *ARMError) {
	if strings.TrimSpace(filter) == "" {
		return func(*armresources.GenericResourceExpanded, map[string]*string) bool { return true }, false, nil
	}
	want := map[string]string{}
	for _, clause := range regexp.MustCompile(`(?i)\s+and\s+`).Split(filter, -1) {
		m := filterClause.FindStringSubmatch(clause)
		if m == nil {
			return nil, false, armErr(http.StatusBadRequest, "InvalidFilterInQueryString", "Invalid $filter '%s' specified in the query string.", filter)
		}
		want[strings.ToLower(m[1])] = strings.ReplaceAll(m[2], "''", "'")
	}
	if _, ok := want["tagvalue"]; ok {
		if _, ok := want["tagname"]; !ok {
			return nil, false, armErr(http.StatusBadRequest, "InvalidFilterInQueryString", "Invalid $filter '%s': tagValue requires tagName.", filter)
		}
	}
	_, hasValue := want["tagvalue"]
	return func(r *armresources.GenericResourceExpanded, tags map[string]*string) bool {
		if v, ok := want["resourcetype"]; ok && !strings.EqualFold(deref(r.Type), v) {
			return false
		}
		if v, ok := want["name"]; ok && !strings.EqualFold(deref(r.Name), v) {
			return false
		}
		if v, ok := want["location"]; ok && !strings.EqualFold(deref(r.Location), v) {
			return false
		}
		if name, ok := want["tagname"]; ok {
			found := false
			for k, v := range tags {
				if strings.EqualFold(k, name) && (!hasValue || deref(v) == want["tagvalue"]) {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}, hasValue, nil
}

func (c *resourcesAPI) resourceGroupsServer() resourcesfake.ResourceGroupsServer {
	render := func(g *group) armresources.ResourceGroup {
		return armresources.ResourceGroup{
			ID:         ptr.To("/subscriptions/" + c.subscriptionID + "/resourceGroups/" + g.name),
			Name:       ptr.To(g.name),
			Location:   ptr.To(g.location),
			Type:       ptr.To("Microsoft.Resources/resourceGroups"),
			Properties: &armresources.ResourceGroupProperties{ProvisioningState: ptr.To(StateSucceeded)},
		}
	}
	return resourcesfake.ResourceGroupsServer{
		Get: func(_ context.Context, name string, _ *armresources.ResourceGroupsClientGetOptions) (resp azfake.Responder[armresources.ResourceGroupsClientGetResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			g := c.groups[strings.ToLower(name)]
			if g == nil {
				return resp, fail(errResourceGroupNotFound(name))
			}
			resp.SetResponse(http.StatusOK, armresources.ResourceGroupsClientGetResponse{ResourceGroup: render(g)}, nil)
			return resp, errResp
		},
		CheckExistence: func(_ context.Context, name string, _ *armresources.ResourceGroupsClientCheckExistenceOptions) (resp azfake.Responder[armresources.ResourceGroupsClientCheckExistenceResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(name)] == nil {
				resp.SetResponse(http.StatusNotFound, armresources.ResourceGroupsClientCheckExistenceResponse{Success: false}, nil)
			} else {
				resp.SetResponse(http.StatusNoContent, armresources.ResourceGroupsClientCheckExistenceResponse{Success: true}, nil)
			}
			return resp, errResp
		},
		CreateOrUpdate: func(_ context.Context, name string, in armresources.ResourceGroup, _ *armresources.ResourceGroupsClientCreateOrUpdateOptions) (resp azfake.Responder[armresources.ResourceGroupsClientCreateOrUpdateResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			g := c.groups[strings.ToLower(name)]
			if g == nil {
				g = &group{name: name, location: deref(in.Location)}
				c.groups[strings.ToLower(name)] = g
			}
			resp.SetResponse(http.StatusOK, armresources.ResourceGroupsClientCreateOrUpdateResponse{ResourceGroup: render(g)}, nil)
			return resp, errResp
		},
		BeginDelete: func(_ context.Context, name string, _ *armresources.ResourceGroupsClientBeginDeleteOptions) (resp azfake.PollerResponder[armresources.ResourceGroupsClientDeleteResponse], errResp azfake.ErrorResponder) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.groups[strings.ToLower(name)] == nil {
				return resp, fail(errResourceGroupNotFound(name))
			}
			c.deleteGroupLocked(name)
			return lroResponder(c.polls(OpDeleteGroup), http.StatusAccepted, http.StatusOK, armresources.ResourceGroupsClientDeleteResponse{}), errResp
		},
	}
}
