package fakegcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	compute "google.golang.org/api/compute/v1"
)

// route is a Compute API request: its operation and the path parameters.
type route struct {
	op      string
	project string
	zone    string // zonal paths
	region  string // regional paths
	name    string // the resource (instance, disk, image, family, operation, ...)
}

// routeOf maps a method and a path below /compute/v1/ to the operation it calls.
func routeOf(method, path string) (route, bool) {
	s := strings.Split(strings.Trim(path, "/"), "/")
	if len(s) < 3 || s[0] != "projects" {
		return route{}, false
	}
	r := route{project: s[1]}
	rest := s[2:]
	get, post, del := method == http.MethodGet, method == http.MethodPost, method == http.MethodDelete
	switch {
	case len(rest) >= 3 && rest[0] == "zones":
		r.zone = rest[1]
		kind := rest[2]
		rest = rest[3:]
		switch {
		case kind == "instances" && len(rest) == 0 && post:
			r.op = OpInsertInstance
		case kind == "instances" && len(rest) == 0 && get:
			r.op = OpListInstances
		case kind == "instances" && len(rest) == 1 && get:
			r.op, r.name = OpGetInstance, rest[0]
		case kind == "instances" && len(rest) == 1 && del:
			r.op, r.name = OpDeleteInstance, rest[0]
		case kind == "disks" && len(rest) == 0 && get:
			r.op = OpListDisks
		case kind == "disks" && len(rest) == 1 && get:
			r.op, r.name = OpGetDisk, rest[0]
		case kind == "disks" && len(rest) == 1 && del:
			r.op, r.name = OpDeleteDisk, rest[0]
		case kind == "machineTypes" && len(rest) == 1 && get:
			r.op, r.name = OpGetMachineType, rest[0]
		case kind == "operations" && len(rest) == 0 && get:
			r.op = OpListOperations
		case kind == "operations" && len(rest) == 1 && get:
			r.op, r.name = OpGetOperation, rest[0]
		case kind == "operations" && len(rest) == 2 && rest[1] == "wait" && post:
			r.op, r.name = OpWaitOperation, rest[0]
		}
	case len(rest) == 3 && rest[0] == "global" && rest[1] == "images" && get:
		r.op, r.name = OpGetImage, rest[2]
	case len(rest) == 4 && rest[0] == "global" && rest[1] == "images" && rest[2] == "family" && get:
		r.op, r.name = OpGetImageFamily, rest[3]
	case len(rest) == 3 && rest[0] == "global" && rest[1] == "networks" && get:
		r.op, r.name = OpGetNetwork, rest[2]
	case len(rest) == 4 && rest[0] == "regions" && rest[2] == "subnetworks" && get:
		r.op, r.region, r.name = OpGetSubnetwork, rest[1], rest[3]
	}
	return r, r.op != ""
}

// serveCompute answers a Compute API request whose route and caller are known.
func (c *computeAPI) serveCompute(w http.ResponseWriter, req *http.Request, r route) int {
	c.mu.Lock()
	apiError, opErr, delay := c.faultsFor(r.op)
	c.mu.Unlock()
	if apiError != nil {
		return writeError(w, apiError)
	}
	// Images of public image projects are readable by everyone; everything else is the
	// fake's project.
	if r.project != c.project && r.op != OpGetImage && r.op != OpGetImageFamily {
		return writeError(w, errNotFound("projects/"+r.project))
	}
	if r.zone != "" {
		if _, ok := c.zones[r.zone]; !ok {
			return writeError(w, errInvalid("zone", r.zone, "Unknown zone."))
		}
	}
	if r.op == OpWaitOperation {
		op, ok := c.waitOperation(req.Context(), r.zone, r.name)
		if !ok {
			return writeError(w, errNotFound(fmt.Sprintf("projects/%s/zones/%s/operations/%s", c.project, r.zone, r.name)))
		}
		return writeJSON(w, http.StatusOK, op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settleLocked()
	var (
		out any
		e   *APIError
	)
	switch r.op {
	case OpInsertInstance:
		out, e = c.insertInstanceLocked(req, r.zone, opErr, delay)
	case OpGetInstance:
		in, ok := c.instances[r.zone+"/"+r.name]
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, r.zone, r.name))
		} else {
			out = in
		}
	case OpListInstances:
		out, e = listPage(req, c.pageSize, reflect.TypeFor[compute.Instance](), c.itemsLocked(c.instances, r.zone), func(items []any, next string) any {
			list := &compute.InstanceList{Kind: "compute#instanceList", Id: "projects/" + c.project + "/zones/" + r.zone + "/instances", NextPageToken: next,
				SelfLink: c.link("projects/%s/zones/%s/instances", c.project, r.zone), Items: []*compute.Instance{}}
			for _, i := range items {
				list.Items = append(list.Items, i.(*compute.Instance))
			}
			return list
		})
	case OpDeleteInstance:
		out, e = c.deleteInstanceLocked(r.zone, r.name, opErr, delay)
	case OpListOperations:
		out, e = listPage(req, c.pageSize, reflect.TypeFor[compute.Operation](), c.zoneOperationsLocked(r.zone), func(items []any, next string) any {
			list := &compute.OperationList{Kind: "compute#operationList", Id: "projects/" + c.project + "/zones/" + r.zone + "/operations", NextPageToken: next,
				SelfLink: c.link("projects/%s/zones/%s/operations", c.project, r.zone), Items: []*compute.Operation{}}
			for _, i := range items {
				list.Items = append(list.Items, i.(*compute.Operation))
			}
			return list
		})
	case OpGetDisk:
		d, ok := c.disks[r.zone+"/"+r.name]
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/zones/%s/disks/%s", c.project, r.zone, r.name))
		} else {
			out = d
		}
	case OpListDisks:
		out, e = listPage(req, c.pageSize, reflect.TypeFor[compute.Disk](), c.itemsLocked(c.disks, r.zone), func(items []any, next string) any {
			list := &compute.DiskList{Kind: "compute#diskList", Id: "projects/" + c.project + "/zones/" + r.zone + "/disks", NextPageToken: next,
				SelfLink: c.link("projects/%s/zones/%s/disks", c.project, r.zone), Items: []*compute.Disk{}}
			for _, i := range items {
				list.Items = append(list.Items, i.(*compute.Disk))
			}
			return list
		})
	case OpDeleteDisk:
		out, e = c.deleteDiskLocked(r.zone, r.name, delay)
	case OpGetMachineType:
		cpus, ok := c.offersLocked(r.zone, r.name)
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/zones/%s/machineTypes/%s", c.project, r.zone, r.name))
		} else {
			out = &compute.MachineType{Kind: "compute#machineType", Name: r.name, GuestCpus: int64(cpus), Zone: r.zone,
				SelfLink: c.link("projects/%s/zones/%s/machineTypes/%s", c.project, r.zone, r.name)}
		}
	case OpGetOperation:
		op, ok := c.operationLocked(r.zone, r.name)
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/zones/%s/operations/%s", c.project, r.zone, r.name))
		} else {
			out = op.Operation
		}
	case OpGetImage:
		img, ok := c.images[r.project+"/"+r.name]
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/global/images/%s", r.project, r.name))
		} else {
			out = img
		}
	case OpGetImageFamily:
		img := c.imageOfFamilyLocked(r.project, r.name)
		if img == nil {
			e = errNotFound(fmt.Sprintf("projects/%s/global/images/family/%s", r.project, r.name))
		} else {
			out = img
		}
	case OpGetNetwork:
		n, ok := c.networks[r.name]
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/global/networks/%s", c.project, r.name))
		} else {
			out = n
		}
	case OpGetSubnetwork:
		s, ok := c.subnetworks[r.region+"/"+r.name]
		if !ok {
			e = errNotFound(fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", c.project, r.region, r.name))
		} else {
			out = s
		}
	}
	if e != nil {
		return writeError(w, e)
	}
	return writeJSON(w, http.StatusOK, out)
}

// itemsLocked returns the resources of a zone, sorted by name, as JSON-able values.
func (c *computeAPI) itemsLocked(m any, zone string) []any {
	var out []any
	switch m := m.(type) {
	case map[string]*compute.Instance:
		for _, k := range sortedKeys(m) {
			if strings.HasPrefix(k, zone+"/") {
				out = append(out, m[k])
			}
		}
	case map[string]*compute.Disk:
		for _, k := range sortedKeys(m) {
			if strings.HasPrefix(k, zone+"/") {
				out = append(out, m[k])
			}
		}
	}
	return out
}

// zoneOperationsLocked returns the operations of a zone, oldest first.
func (c *computeAPI) zoneOperationsLocked(zone string) []any {
	var ops []*operation
	for _, op := range c.operations {
		if op.zone == zone {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Id < ops[j].Id })
	out := make([]any, 0, len(ops))
	for _, op := range ops {
		out = append(out, op.Operation)
	}
	return out
}

// listPage filters items by the request's filter and answers one page of at most maxResults
// (and the fake's page size) items, continuing at pageToken.
func listPage(req *http.Request, pageSize int, item reflect.Type, items []any, wrap func(items []any, next string) any) (any, *APIError) {
	q := req.URL.Query()
	filter, err := parseFilter(q.Get("filter"), item)
	if err != nil {
		return nil, err
	}
	var matched []any
	for _, it := range items {
		if filter.matches(it) {
			matched = append(matched, it)
		}
	}
	size := pageSize
	if s := q.Get("maxResults"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 500 {
			return nil, errInvalid("maxResults", s, "Must be between 0 and 500.")
		}
		if n > 0 && n < size {
			size = n
		}
	}
	start := 0
	if tok := q.Get("pageToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		offset, f, _ := strings.Cut(string(b), "\x00")
		n, convErr := strconv.Atoi(offset)
		if err != nil || convErr != nil || n < 0 || f != q.Get("filter") {
			return nil, errInvalid("pageToken", tok, "Invalid page token for this list request.")
		}
		start = n
	}
	if start > len(matched) {
		start = len(matched)
	}
	end := min(start+size, len(matched))
	next := ""
	if end < len(matched) {
		next = base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("%d\x00%s", end, q.Get("filter"))))
	}
	return wrap(matched[start:end], next), nil
}

var (
	namePattern       = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)
	labelKeyPattern   = regexp.MustCompile(`^[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}$`)
	labelValuePattern = regexp.MustCompile(`^[\p{Ll}\p{Lo}\p{N}_-]{0,63}$`)
)

// insertInstanceLocked checks an instance the way Compute Engine does and starts creating it:
// the instance and its persistent disks exist at once (PROVISIONING) and the operation makes it
// RUNNING, or, when it fails (opErr, quota), removes them again.
func (c *computeAPI) insertInstanceLocked(req *http.Request, zone string, opErr *OperationError, delay time.Duration) (any, *APIError) {
	if id := req.URL.Query().Get("requestId"); id != "" {
		if key, ok := c.requestIDs[id]; ok {
			return c.operations[key].Operation, nil
		}
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, "parseError", "the request body cannot be read: %v", err)
	}
	in := &compute.Instance{}
	if err := json.Unmarshal(body, in); err != nil {
		return nil, apiErr(http.StatusBadRequest, "parseError", "Invalid JSON payload received. %v", err)
	}
	region := c.zones[zone]
	if !namePattern.MatchString(in.Name) {
		return nil, errInvalid("resource.name", in.Name, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
	}
	key := zone + "/" + in.Name
	if _, exists := c.instances[key]; exists {
		return nil, apiErr(http.StatusConflict, "alreadyExists", "The resource 'projects/%s/zones/%s/instances/%s' already exists", c.project, zone, in.Name)
	}
	mtZone, mt, ok := zonalResource(in.MachineType, "machineTypes")
	if !ok || (mtZone != "" && mtZone != zone) {
		return nil, errInvalid("resource.machineType", in.MachineType, "Invalid machine type: the value must be zones/ZONE/machineTypes/TYPE in the instance's zone.")
	}
	cpus, known := c.offersLocked(zone, mt)
	if !known {
		return nil, errInvalid("resource.machineType", in.MachineType, fmt.Sprintf("Machine type with name '%s' does not exist in zone '%s'.", mt, zone))
	}
	if e := validLabels("resource.labels", in.Labels); e != nil {
		return nil, e
	}
	if in.Tags != nil {
		for i, t := range in.Tags.Items {
			if !namePattern.MatchString(t) {
				return nil, errInvalid(fmt.Sprintf("resource.tags.items[%d]", i), t, "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
			}
		}
	}
	if in.Metadata != nil {
		seen := map[string]bool{}
		for _, item := range in.Metadata.Items {
			if seen[item.Key] {
				return nil, errInvalid("resource.metadata", item.Key, "Duplicate keys: "+item.Key)
			}
			seen[item.Key] = true
		}
	}
	if e := c.checkSchedulingLocked(in); e != nil {
		return nil, e
	}
	nics, e := c.buildNICsLocked(in, region)
	if e != nil {
		return nil, e
	}
	disks, attached, e := c.buildDisksLocked(in, zone)
	if e != nil {
		return nil, e
	}
	for i, acc := range in.GuestAccelerators {
		accZone, t, ok := zonalResource(acc.AcceleratorType, "acceleratorTypes")
		if !ok || (accZone != "" && accZone != zone) || !c.accelerators[t] {
			return nil, errNotFound(fmt.Sprintf("projects/%s/zones/%s/acceleratorTypes/%s", c.project, zone, lastSegment(acc.AcceleratorType)))
		}
		if acc.AcceleratorCount <= 0 {
			return nil, errInvalid(fmt.Sprintf("resource.guestAccelerators[%d].acceleratorCount", i), strconv.FormatInt(acc.AcceleratorCount, 10), "Must be positive.")
		}
	}

	in.Kind = "compute#instance"
	in.Id = c.newIDLocked()
	in.CreationTimestamp = c.timestamp()
	in.Zone = c.link("projects/%s/zones/%s", c.project, zone)
	in.SelfLink = c.link("projects/%s/zones/%s/instances/%s", c.project, zone, in.Name)
	in.MachineType = c.link("projects/%s/zones/%s/machineTypes/%s", c.project, zone, mt)
	in.Status = "PROVISIONING"
	in.NetworkInterfaces = nics
	in.Disks = attached
	in.Fingerprint = base64.StdEncoding.EncodeToString([]byte(strconv.FormatUint(in.Id, 16)))
	completeInstanceLocked(in)
	c.instances[key] = in
	for _, d := range disks {
		c.disks[zone+"/"+d.Name] = d
	}
	name := in.Name
	op := c.startOperationLocked(zone, "insert", fmt.Sprintf("zones/%s/instances/%s", zone, name), delay, func() *OperationError {
		cur, ok := c.instances[key]
		if !ok || cur.Id != in.Id {
			return nil // deleted while being created
		}
		failed := opErr
		if failed == nil {
			if limit, ok := c.cpuQuota[region]; ok && c.cpusInRegionLocked(region, key)+cpus > limit {
				failed = CPUQuotaExceeded(region, limit)
			}
		}
		if failed != nil {
			c.removeInstanceLocked(key, true)
			return failed
		}
		cur.Status = "RUNNING"
		cur.LastStartTimestamp = c.timestamp()
		for _, d := range cur.Disks {
			if dd, ok := c.disks[zone+"/"+lastSegment(d.Source)]; ok {
				dd.Status = "READY"
			}
		}
		return nil
	})
	op.TargetId = in.Id
	if id := req.URL.Query().Get("requestId"); id != "" {
		c.requestIDs[id] = zone + "/" + op.Name
	}
	return op.Operation, nil
}

// cpusInRegionLocked counts the vCPUs of the region's instances other than skip.
func (c *computeAPI) cpusInRegionLocked(region, skip string) int {
	n := 0
	for k, in := range c.instances {
		z, _, _ := strings.Cut(k, "/")
		if k == skip || c.zones[z] != region || in.Status == "TERMINATED" {
			continue
		}
		n += c.machineTypes[lastSegment(in.MachineType)]
	}
	return n
}

func (c *computeAPI) checkSchedulingLocked(in *compute.Instance) *APIError {
	s := in.Scheduling
	if s == nil {
		return nil
	}
	restart := s.AutomaticRestart == nil || *s.AutomaticRestart
	switch s.OnHostMaintenance {
	case "", "MIGRATE", "TERMINATE":
	default:
		return errInvalid("resource.scheduling.onHostMaintenance", s.OnHostMaintenance, "Must be MIGRATE or TERMINATE.")
	}
	switch s.ProvisioningModel {
	case "", "STANDARD", "SPOT":
	default:
		return errInvalid("resource.scheduling.provisioningModel", s.ProvisioningModel, "Must be STANDARD or SPOT.")
	}
	if (s.Preemptible || s.ProvisioningModel == "SPOT") && restart {
		return errInvalid("resource.scheduling.automaticRestart", "true", "Preemptible and Spot instances cannot be automatically restarted.")
	}
	if (s.Preemptible || s.ProvisioningModel == "SPOT" || len(in.GuestAccelerators) > 0) && s.OnHostMaintenance == "MIGRATE" {
		return errInvalid("resource.scheduling.onHostMaintenance", "MIGRATE", "Preemptible and Spot instances and instances with guest accelerators do not support live migration: use TERMINATE.")
	}
	return nil
}

// buildNICsLocked resolves the instance's networks and subnetworks and gives each interface its
// addresses.
func (c *computeAPI) buildNICsLocked(in *compute.Instance, region string) ([]*compute.NetworkInterface, *APIError) {
	nics := in.NetworkInterfaces
	if len(nics) == 0 {
		nics = []*compute.NetworkInterface{{Network: "global/networks/default"}}
	}
	var out []*compute.NetworkInterface
	for i, nic := range nics {
		n := cloneJSON(nic)
		n.Kind = "compute#networkInterface"
		n.Name = fmt.Sprintf("nic%d", i)
		var sub *compute.Subnetwork
		if n.Subnetwork != "" {
			r, name, ok := regionalResource(n.Subnetwork, "subnetworks")
			if !ok {
				return nil, errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].subnetwork", i), n.Subnetwork, "Invalid subnetwork URL.")
			}
			if r == "" {
				r = region
			}
			if sub = c.subnetworks[r+"/"+name]; sub == nil {
				return nil, errNotFound(fmt.Sprintf("projects/%s/regions/%s/subnetworks/%s", c.project, r, name))
			}
			if r != region {
				return nil, errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].subnetwork", i), n.Subnetwork, "The subnetwork must be in the instance's region "+region+".")
			}
			n.Subnetwork = sub.SelfLink
		}
		switch {
		case n.Network != "":
			name, ok := globalResource(n.Network, "networks")
			if !ok || c.networks[name] == nil {
				return nil, errNotFound(fmt.Sprintf("projects/%s/global/networks/%s", c.project, lastSegment(n.Network)))
			}
			if sub != nil && lastSegment(sub.Network) != name {
				return nil, errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].subnetwork", i), n.Subnetwork, "The subnetwork does not belong to network "+name+".")
			}
			n.Network = c.networks[name].SelfLink
		case sub != nil:
			n.Network = sub.Network
		}
		for _, alias := range n.AliasIpRanges {
			if alias.SubnetworkRangeName == "" {
				continue
			}
			found := false
			if sub != nil {
				for _, r := range sub.SecondaryIpRanges {
					found = found || r.RangeName == alias.SubnetworkRangeName
				}
			}
			if !found {
				return nil, errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].aliasIpRanges.subnetworkRangeName", i), alias.SubnetworkRangeName, "The secondary range does not exist in the subnetwork.")
			}
		}
		if e := ipv6Of(n, sub, i); e != nil {
			return nil, e
		}
		c.nextIP++
		n.NetworkIP = fmt.Sprintf("10.%d.%d.%d", 250+i, c.nextIP/250, c.nextIP%250+2)
		switch {
		case len(n.Ipv6AccessConfigs) > 0:
			n.Ipv6AccessConfigs[0].ExternalIpv6 = fmt.Sprintf("%s%x:0:0", strings.TrimSuffix(sub.ExternalIpv6Prefix, ":/64"), c.nextIP)
		case n.StackType == "IPV4_IPV6":
			n.Ipv6Address = fmt.Sprintf("%s%x:0:0", strings.TrimSuffix(sub.InternalIpv6Prefix, ":/64"), c.nextIP)
		}
		for j, ac := range n.AccessConfigs {
			ac.Kind = "compute#accessConfig"
			if ac.Type == "" {
				ac.Type = "ONE_TO_ONE_NAT"
			}
			if ac.Name == "" {
				ac.Name = "external-nat"
			}
			ac.NatIP = fmt.Sprintf("34.%d.%d.%d", 76+j, c.nextIP/250, c.nextIP%250+2)
			ac.NetworkTier = "PREMIUM"
		}
		if n.StackType == "" {
			n.StackType = "IPV4_ONLY"
		}
		out = append(out, n)
	}
	return out, nil
}

// ipv6Of checks a dual-stack interface against its subnetwork, as Compute Engine does, and gives
// an EXTERNAL one its IPv6 access config (the address is filled in by the caller).
func ipv6Of(n *compute.NetworkInterface, sub *compute.Subnetwork, i int) *APIError {
	if n.StackType != "IPV4_IPV6" {
		if n.Ipv6AccessType != "" {
			return errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].ipv6AccessType", i), n.Ipv6AccessType, "IPv6 access type can only be set on a dual-stack (IPV4_IPV6) network interface.")
		}
		return nil
	}
	if sub == nil || sub.StackType != "IPV4_IPV6" {
		return errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].stackType", i), n.StackType, "The subnetwork of a dual-stack network interface must have an IPv6 range (stack type IPV4_IPV6).")
	}
	access := n.Ipv6AccessType
	if access == "" {
		access = sub.Ipv6AccessType
	}
	if access != sub.Ipv6AccessType {
		return errInvalid(fmt.Sprintf("resource.networkInterfaces[%d].ipv6AccessType", i), access, "The subnetwork's IPv6 access type is "+sub.Ipv6AccessType+".")
	}
	n.Ipv6AccessType = access
	if access == "EXTERNAL" {
		n.Ipv6AccessConfigs = []*compute.AccessConfig{{Kind: "compute#accessConfig", Name: "external-ipv6", Type: "DIRECT_IPV6", ExternalIpv6PrefixLength: 96, NetworkTier: "PREMIUM"}}
	}
	return nil
}

// buildDisksLocked resolves the instance's disks: persistent ones become disk resources named
// after the instance (the boot disk) or the instance and the disk's index.
func (c *computeAPI) buildDisksLocked(in *compute.Instance, zone string) ([]*compute.Disk, []*compute.AttachedDisk, *APIError) {
	boots := 0
	var disks []*compute.Disk
	var attached []*compute.AttachedDisk
	for i, ad := range in.Disks {
		field := fmt.Sprintf("resource.disks[%d]", i)
		if ad.Boot {
			boots++
		}
		p := ad.InitializeParams
		if p == nil {
			return nil, nil, errInvalid(field+".initializeParams", "", "Only new disks are supported: set initializeParams.")
		}
		dtZone, dt, ok := zonalResource(p.DiskType, "diskTypes")
		if p.DiskType == "" {
			dt, ok = "pd-standard", true
		}
		if !ok || (dtZone != "" && dtZone != zone) || !c.diskTypes[dt] {
			return nil, nil, errNotFound(fmt.Sprintf("projects/%s/zones/%s/diskTypes/%s", c.project, zone, lastSegment(p.DiskType)))
		}
		if e := validLabels(field+".initializeParams.labels", p.Labels); e != nil {
			return nil, nil, e
		}
		out := &compute.AttachedDisk{
			Kind: "compute#attachedDisk", Index: int64(i), Boot: ad.Boot, AutoDelete: ad.AutoDelete, Mode: "READ_WRITE",
			Type: "PERSISTENT", Interface: "SCSI", DeviceName: fmt.Sprintf("persistent-disk-%d", i), DiskEncryptionKey: ad.DiskEncryptionKey,
		}
		if ad.Type == "SCRATCH" {
			if dt != "local-ssd" {
				return nil, nil, errInvalid(field+".initializeParams.diskType", p.DiskType, "A SCRATCH disk must be of type local-ssd.")
			}
			out.Type, out.DiskSizeGb, out.DeviceName = "SCRATCH", 375, fmt.Sprintf("local-ssd-%d", i)
			if ad.Interface != "" {
				out.Interface = ad.Interface
			}
			attached = append(attached, out)
			continue
		}
		if dt == "local-ssd" {
			return nil, nil, errInvalid(field+".type", ad.Type, "A local-ssd disk must be of type SCRATCH.")
		}
		var image *compute.Image
		if p.SourceImage != "" {
			if image = c.resolveImageLocked(p.SourceImage); image == nil {
				return nil, nil, errNotFound(imagePath(c.project, p.SourceImage))
			}
		} else if ad.Boot {
			return nil, nil, errInvalid(field+".initializeParams.sourceImage", "", "A boot disk needs a source image.")
		}
		name := p.DiskName
		if name == "" {
			name = in.Name
			if !ad.Boot {
				name = fmt.Sprintf("%s-%d", in.Name, i)
			}
		}
		if _, exists := c.disks[zone+"/"+name]; exists {
			return nil, nil, apiErr(http.StatusConflict, "alreadyExists", "The resource 'projects/%s/zones/%s/disks/%s' already exists", c.project, zone, name)
		}
		size := p.DiskSizeGb
		if size == 0 {
			size = 10
			if image != nil {
				size = image.DiskSizeGb
			}
		}
		if image != nil && size < image.DiskSizeGb {
			return nil, nil, errInvalid(field+".initializeParams.diskSizeGb", strconv.FormatInt(size, 10), fmt.Sprintf("Requested disk size cannot be smaller than the image size (%d GB)", image.DiskSizeGb))
		}
		d := &compute.Disk{
			Kind: "compute#disk", Id: c.newIDLocked(), Name: name, SizeGb: size, Status: "CREATING", Labels: p.Labels,
			Type: c.link("projects/%s/zones/%s/diskTypes/%s", c.project, zone, dt), Zone: c.link("projects/%s/zones/%s", c.project, zone),
			ProvisionedIops: p.ProvisionedIops, ProvisionedThroughput: p.ProvisionedThroughput, StoragePool: p.StoragePool,
			CreationTimestamp: c.timestamp(), SelfLink: c.link("projects/%s/zones/%s/disks/%s", c.project, zone, name),
			Users: []string{c.link("projects/%s/zones/%s/instances/%s", c.project, zone, in.Name)}, DiskEncryptionKey: ad.DiskEncryptionKey,
		}
		if image != nil {
			d.SourceImage, d.SourceImageId = image.SelfLink, strconv.FormatUint(image.Id, 10)
		}
		disks = append(disks, d)
		out.Source, out.DiskSizeGb = d.SelfLink, size
		attached = append(attached, out)
	}
	if boots != 1 {
		return nil, nil, errInvalid("resource.disks", "", "Exactly one boot disk must be specified.")
	}
	return disks, attached, nil
}

// resolveImageLocked finds the image a sourceImage names: projects/P/global/images/NAME,
// projects/P/global/images/family/FAMILY, global/images/... (the fake's project), with or
// without the API's URL in front.
func (c *computeAPI) resolveImageLocked(ref string) *compute.Image {
	project, rest, ok := imageRef(c.project, ref)
	if !ok {
		return nil
	}
	if family, ok := strings.CutPrefix(rest, "family/"); ok {
		return c.imageOfFamilyLocked(project, family)
	}
	return c.images[project+"/"+rest]
}

// imageOfFamilyLocked is the newest image of a family.
func (c *computeAPI) imageOfFamilyLocked(project, family string) *compute.Image {
	var best *compute.Image
	for k, img := range c.images {
		if strings.HasPrefix(k, project+"/") && img.Family == family && (best == nil || img.Id > best.Id) {
			best = img
		}
	}
	return best
}

func imageRef(ownProject, ref string) (project, rest string, ok bool) {
	ref = trimAPIURL(ref)
	if r, found := strings.CutPrefix(ref, "global/images/"); found {
		return ownProject, r, r != ""
	}
	s := strings.SplitN(ref, "/", 5)
	if len(s) == 5 && s[0] == "projects" && s[2] == "global" && s[3] == "images" {
		return s[1], s[4], s[4] != ""
	}
	return "", "", false
}

func imagePath(ownProject, ref string) string {
	if project, rest, ok := imageRef(ownProject, ref); ok {
		return fmt.Sprintf("projects/%s/global/images/%s", project, rest)
	}
	return ref
}

// deleteInstanceLocked starts deleting an instance: STOPPING at once, gone with its auto-delete
// disks when the operation is done.
func (c *computeAPI) deleteInstanceLocked(zone, name string, opErr *OperationError, delay time.Duration) (any, *APIError) {
	key := zone + "/" + name
	in, ok := c.instances[key]
	if !ok {
		return nil, errNotFound(fmt.Sprintf("projects/%s/zones/%s/instances/%s", c.project, zone, name))
	}
	if in.DeletionProtection {
		return nil, apiErr(http.StatusBadRequest, "resourceInUseByAnotherResource",
			"Invalid resource usage: 'Resource cannot be deleted if it's protected against deletion.'.")
	}
	in.Status = "STOPPING"
	id := in.Id
	op := c.startOperationLocked(zone, "delete", fmt.Sprintf("zones/%s/instances/%s", zone, name), delay, func() *OperationError {
		if opErr != nil {
			if cur, ok := c.instances[key]; ok && cur.Id == id {
				cur.Status = "RUNNING"
			}
			return opErr
		}
		if cur, ok := c.instances[key]; ok && cur.Id == id {
			c.removeInstanceLocked(key, false)
		}
		return nil
	})
	op.TargetId = id
	return op.Operation, nil
}

// removeInstanceLocked removes an instance and its auto-delete disks (all of its disks when
// failed: a failed insert leaves nothing) and detaches the others.
func (c *state) removeInstanceLocked(key string, failed bool) {
	in := c.instances[key]
	delete(c.instances, key)
	zone, _, _ := strings.Cut(key, "/")
	for _, ad := range in.Disks {
		if ad.Source == "" {
			continue
		}
		dk := zone + "/" + lastSegment(ad.Source)
		d, ok := c.disks[dk]
		if !ok {
			continue
		}
		if failed || ad.AutoDelete {
			delete(c.disks, dk)
			continue
		}
		var users []string
		for _, u := range d.Users {
			if u != in.SelfLink {
				users = append(users, u)
			}
		}
		d.Users = users
		d.LastDetachTimestamp = c.timestamp()
	}
}

func (c *computeAPI) deleteDiskLocked(zone, name string, delay time.Duration) (any, *APIError) {
	key := zone + "/" + name
	d, ok := c.disks[key]
	if !ok {
		return nil, errNotFound(fmt.Sprintf("projects/%s/zones/%s/disks/%s", c.project, zone, name))
	}
	if len(d.Users) > 0 {
		return nil, apiErr(http.StatusBadRequest, "resourceInUseByAnotherResource", "The disk resource 'projects/%s/zones/%s/disks/%s' is already being used by '%s'",
			c.project, zone, name, strings.TrimPrefix(d.Users[0], "https://www.googleapis.com/compute/v1/"))
	}
	d.Status = "DELETING"
	id := d.Id
	op := c.startOperationLocked(zone, "delete", fmt.Sprintf("zones/%s/disks/%s", zone, name), delay, func() *OperationError {
		if cur, ok := c.disks[key]; ok && cur.Id == id {
			delete(c.disks, key)
		}
		return nil
	})
	op.TargetId = id
	return op.Operation, nil
}

func validLabels(field string, labels map[string]string) *APIError {
	if len(labels) > 64 {
		return errInvalid(field, "", "At most 64 labels are allowed.")
	}
	for _, k := range sortedKeys(labels) {
		if !labelKeyPattern.MatchString(k) {
			return errInvalid(field, k, "Label keys must start with a lowercase letter and contain only lowercase letters, digits, '_' and '-' (at most 63).")
		}
		if !labelValuePattern.MatchString(labels[k]) {
			return errInvalid(field+"."+k, labels[k], "Label values contain only lowercase letters, digits, '_' and '-' (at most 63).")
		}
	}
	return nil
}

// trimAPIURL removes the API's URL (any host) in front of a resource path.
func trimAPIURL(ref string) string {
	if i := strings.Index(ref, "/compute/v1/"); i >= 0 && strings.Contains(ref[:i], "://") {
		return ref[i+len("/compute/v1/"):]
	}
	return ref
}

// zonalResource parses [projects/P/]zones/Z/KIND/NAME or a bare NAME (zone "" then).
func zonalResource(ref, kind string) (zone, name string, ok bool) {
	ref = trimAPIURL(ref)
	s := strings.Split(ref, "/")
	switch {
	case len(s) == 1 && s[0] != "":
		return "", s[0], true
	case len(s) == 4 && s[0] == "zones" && s[2] == kind:
		return s[1], s[3], s[3] != ""
	case len(s) == 6 && s[0] == "projects" && s[2] == "zones" && s[4] == kind:
		return s[3], s[5], s[5] != ""
	}
	return "", "", false
}

// regionalResource parses [projects/P/]regions/R/KIND/NAME or a bare NAME.
func regionalResource(ref, kind string) (region, name string, ok bool) {
	ref = trimAPIURL(ref)
	s := strings.Split(ref, "/")
	switch {
	case len(s) == 1 && s[0] != "":
		return "", s[0], true
	case len(s) == 4 && s[0] == "regions" && s[2] == kind:
		return s[1], s[3], s[3] != ""
	case len(s) == 6 && s[0] == "projects" && s[2] == "regions" && s[4] == kind:
		return s[3], s[5], s[5] != ""
	}
	return "", "", false
}

// globalResource parses [projects/P/]global/KIND/NAME or a bare NAME.
func globalResource(ref, kind string) (string, bool) {
	ref = trimAPIURL(ref)
	s := strings.Split(ref, "/")
	switch {
	case len(s) == 1 && s[0] != "":
		return s[0], true
	case len(s) == 3 && s[0] == "global" && s[1] == kind:
		return s[2], s[2] != ""
	case len(s) == 5 && s[0] == "projects" && s[2] == "global" && s[3] == kind:
		return s[4], s[4] != ""
	}
	return "", false
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return writeError(w, apiErr(http.StatusInternalServerError, "backendError", "fakegcp: encode the answer: %v", err))
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return status
}

func writeError(w http.ResponseWriter, e *APIError) int {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
	return e.Status
}
