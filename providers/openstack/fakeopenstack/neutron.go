package fakeopenstack

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Network is a Neutron network.
type Network struct {
	ID      string
	Name    string
	Subnets []string
}

// Subnet is a Neutron subnet with a simple sequential IP allocator.
type Subnet struct {
	ID        string
	Name      string
	NetworkID string
	CIDR      string

	ipnet *net.IPNet
	next  uint32
}

func (s *Subnet) allocate() string {
	base := binary.BigEndian.Uint32(s.ipnet.IP.To4())
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, base+s.next)
	s.next++
	return ip.String()
}

// SecurityGroup is a Neutron security group.
type SecurityGroup struct {
	ID   string
	Name string
}

// FixedIP is an address of a port on a subnet.
type FixedIP struct {
	SubnetID  string
	IPAddress string
}

// AddressPair is an allowed address pair of a port.
type AddressPair struct {
	IPAddress  string
	MACAddress string
}

// Port is a Neutron port.
type Port struct {
	ID                  string
	Name                string
	NetworkID           string
	DeviceID            string
	DeviceOwner         string
	Status              string
	MACAddress          string
	FixedIPs            []FixedIP
	SecurityGroups      []string
	AllowedAddressPairs []AddressPair
	Tags                []string
	RevisionNumber      int
	Created             time.Time

	seq         int
	novaCreated bool
}

type portBody struct {
	Port struct {
		NetworkID string  `json:"network_id"`
		Name      *string `json:"name"`
		FixedIPs  []struct {
			SubnetID  string `json:"subnet_id"`
			IPAddress string `json:"ip_address"`
		} `json:"fixed_ips"`
		SecurityGroups      *[]string `json:"security_groups"`
		AllowedAddressPairs *[]struct {
			IPAddress  string `json:"ip_address"`
			MACAddress string `json:"mac_address"`
		} `json:"allowed_address_pairs"`
		DeviceID    *string  `json:"device_id"`
		DeviceOwner *string  `json:"device_owner"`
		Tags        []string `json:"tags"`
	} `json:"port"`
}

func (c *neutron) serveNetwork(w http.ResponseWriter, r *http.Request, rest string) {
	if rest == "/" && r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, map[string]any{"versions": []any{map[string]any{
			"id": "v2.0", "status": "CURRENT", "links": []any{map[string]any{"rel": "self", "href": c.url + "/network/v2.0/"}},
		}}})
		return
	}
	p := pathParts(rest)
	if len(p) < 2 || p[0] != "v2.0" {
		writeError(w, "network", http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
		return
	}
	p = p[1:]
	c.mu.Lock()
	defer c.mu.Unlock()
	q := r.URL.Query()
	switch {
	case p[0] == "networks" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		nets := make([]*Network, 0, len(c.networks))
		for _, n := range c.networks {
			nets = append(nets, n)
		}
		sort.Slice(nets, func(i, j int) bool { return nets[i].Name < nets[j].Name })
		for _, n := range nets {
			if v := q.Get("name"); v != "" && n.Name != v {
				continue
			}
			if v := q.Get("id"); v != "" && n.ID != v {
				continue
			}
			out = append(out, networkView(n))
		}
		writeJSON(w, http.StatusOK, map[string]any{"networks": out})
	case p[0] == "networks" && len(p) == 2 && r.Method == http.MethodGet:
		n := c.networks[p[1]]
		if n == nil {
			writeError(w, "network", http.StatusNotFound, "NetworkNotFound", fmt.Sprintf("Network %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"network": networkView(n)})
	case p[0] == "subnets" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		for _, s := range c.subnets {
			if v := q.Get("network_id"); v != "" && s.NetworkID != v {
				continue
			}
			if v := q.Get("name"); v != "" && s.Name != v {
				continue
			}
			out = append(out, subnetView(s))
		}
		writeJSON(w, http.StatusOK, map[string]any{"subnets": out})
	case p[0] == "subnets" && len(p) == 2 && r.Method == http.MethodGet:
		s := c.subnets[p[1]]
		if s == nil {
			writeError(w, "network", http.StatusNotFound, "SubnetNotFound", fmt.Sprintf("Subnet %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"subnet": subnetView(s)})
	case p[0] == "security-groups" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		for _, sg := range c.secgroups {
			if v := q.Get("name"); v != "" && sg.Name != v {
				continue
			}
			if v := q.Get("id"); v != "" && sg.ID != v {
				continue
			}
			out = append(out, map[string]any{"id": sg.ID, "name": sg.Name, "description": "", "tenant_id": ProjectID, "project_id": ProjectID, "security_group_rules": []any{}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"security_groups": out})
	case p[0] == "ports" && len(p) == 1 && r.Method == http.MethodPost:
		c.createPort(w, r)
	case p[0] == "ports" && len(p) == 1 && r.Method == http.MethodGet:
		c.listPorts(w, r)
	case p[0] == "ports" && len(p) == 2 && r.Method == http.MethodGet:
		port := c.ports[p[1]]
		if port == nil {
			writeError(w, "network", http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"port": portView(port)})
	case p[0] == "ports" && len(p) == 2 && r.Method == http.MethodPut:
		c.updatePort(w, r, p[1])
	case p[0] == "ports" && len(p) == 2 && r.Method == http.MethodDelete:
		if c.ports[p[1]] == nil {
			writeError(w, "network", http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", p[1]))
			return
		}
		delete(c.ports, p[1])
		w.WriteHeader(http.StatusNoContent)
	case p[0] == "ports" && len(p) == 3 && p[2] == "tags" && r.Method == http.MethodPut:
		port := c.ports[p[1]]
		if port == nil {
			// The tag API answers for the resource generically (real Neutron, Zed).
			writeError(w, "network", http.StatusNotFound, "TagResourceNotFound", fmt.Sprintf("Resource ports %s could not be found.", p[1]))
			return
		}
		var body struct {
			Tags []string `json:"tags"`
		}
		if !decodeBody(w, r, "network", &body) {
			return
		}
		for _, t := range body.Tags {
			if t == "" || len(t) > 255 || strings.Contains(t, ",") {
				writeError(w, "network", http.StatusBadRequest, "InvalidInput", fmt.Sprintf("Invalid input for operation: '%s' is not a valid tag.", t))
				return
			}
		}
		port.Tags = dedupe(body.Tags)
		port.RevisionNumber++
		writeJSON(w, http.StatusOK, map[string]any{"tags": port.Tags})
	case p[0] == "ports" && len(p) == 3 && p[2] == "tags" && r.Method == http.MethodGet:
		port := c.ports[p[1]]
		if port == nil {
			// The tag API answers for the resource generically (real Neutron, Zed).
			writeError(w, "network", http.StatusNotFound, "TagResourceNotFound", fmt.Sprintf("Resource ports %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"tags": port.Tags})
	default:
		writeError(w, "network", http.StatusNotFound, "HTTPNotFound", "The resource could not be found.")
	}
}

func (c *neutron) createPort(w http.ResponseWriter, r *http.Request) {
	var body portBody
	if !decodeBody(w, r, "network", &body) {
		return
	}
	b := body.Port
	n := c.networks[b.NetworkID]
	if n == nil {
		writeError(w, "network", http.StatusNotFound, "NetworkNotFound", fmt.Sprintf("Network %s could not be found.", b.NetworkID))
		return
	}
	name := ""
	if b.Name != nil {
		name = *b.Name
	}
	var fixed []FixedIP
	for _, f := range b.FixedIPs {
		sn := c.subnets[f.SubnetID]
		if sn == nil {
			// Real Neutron (Zed): a subnet that does not exist is 404 SubnetNotFound; only one of
			// another network is 400 InvalidInput (test/openstack-real, docs/openstack-real.md).
			writeError(w, "network", http.StatusNotFound, "SubnetNotFound", fmt.Sprintf("Subnet %s could not be found.", f.SubnetID))
			return
		}
		if sn.NetworkID != n.ID {
			writeError(w, "network", http.StatusBadRequest, "InvalidInput", fmt.Sprintf("Invalid input for operation: Failed to create port on network %s, because fixed_ips included invalid subnet %s.", n.ID, f.SubnetID))
			return
		}
		ip := f.IPAddress
		if ip == "" {
			ip = sn.allocate()
		}
		fixed = append(fixed, FixedIP{SubnetID: sn.ID, IPAddress: ip})
	}
	var sgs []string
	if b.SecurityGroups != nil {
		for _, id := range *b.SecurityGroups {
			if c.secgroups[id] == nil {
				writeError(w, "network", http.StatusNotFound, "SecurityGroupNotFound", fmt.Sprintf("Security group %s does not exist", id))
				return
			}
			sgs = append(sgs, id)
		}
	}
	pairs, ok := addressPairs(w, b.AllowedAddressPairs)
	if !ok {
		return
	}
	p := c.newPort(name, n.ID)
	if len(fixed) > 0 {
		p.FixedIPs = fixed
	} else if sn := c.firstSubnet(n.ID); sn != nil {
		p.FixedIPs = []FixedIP{{SubnetID: sn.ID, IPAddress: sn.allocate()}}
	}
	p.SecurityGroups = sgs
	p.AllowedAddressPairs = pairs
	p.Tags = dedupe(b.Tags)
	if b.DeviceID != nil {
		p.DeviceID = *b.DeviceID
	}
	if b.DeviceOwner != nil {
		p.DeviceOwner = *b.DeviceOwner
	}
	writeJSON(w, http.StatusCreated, map[string]any{"port": portView(p)})
}

func addressPairs(w http.ResponseWriter, in *[]struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address"`
}) ([]AddressPair, bool) {
	if in == nil {
		return nil, true
	}
	out := []AddressPair{}
	for _, a := range *in {
		if net.ParseIP(a.IPAddress) == nil {
			if _, _, err := net.ParseCIDR(a.IPAddress); err != nil {
				writeError(w, "network", http.StatusBadRequest, "InvalidInput", fmt.Sprintf("Invalid input for operation: '%s' is not a valid IP address.", a.IPAddress))
				return nil, false
			}
		}
		out = append(out, AddressPair{IPAddress: a.IPAddress, MACAddress: a.MACAddress})
	}
	return out, true
}

func (c *neutron) updatePort(w http.ResponseWriter, r *http.Request, id string) {
	p := c.ports[id]
	if p == nil {
		writeError(w, "network", http.StatusNotFound, "PortNotFound", fmt.Sprintf("Port %s could not be found.", id))
		return
	}
	var body portBody
	if !decodeBody(w, r, "network", &body) {
		return
	}
	b := body.Port
	if b.Name != nil {
		p.Name = *b.Name
	}
	if b.SecurityGroups != nil {
		p.SecurityGroups = append([]string(nil), (*b.SecurityGroups)...)
	}
	if b.AllowedAddressPairs != nil {
		pairs, ok := addressPairs(w, b.AllowedAddressPairs)
		if !ok {
			return
		}
		p.AllowedAddressPairs = pairs
	}
	if b.DeviceID != nil {
		p.DeviceID = *b.DeviceID
	}
	p.RevisionNumber++
	writeJSON(w, http.StatusOK, map[string]any{"port": portView(p)})
}

func (c *neutron) listPorts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	all := sortedBySeq(c.ports, func(p *Port) int { return p.seq })
	var ids []string
	byID := map[string]*Port{}
	for _, p := range all {
		if v, ok := q["name"]; ok && p.Name != v[0] {
			continue
		}
		if v, ok := q["device_id"]; ok && p.DeviceID != v[0] {
			continue
		}
		if v := q.Get("network_id"); v != "" && p.NetworkID != v {
			continue
		}
		if v := q.Get("id"); v != "" && p.ID != v {
			continue
		}
		if v := q.Get("tags"); v != "" && !hasAll(p.Tags, strings.Split(v, ",")) {
			continue
		}
		if v := q.Get("tags-any"); v != "" && !hasAny(p.Tags, strings.Split(v, ",")) {
			continue
		}
		ids = append(ids, p.ID)
		byID[p.ID] = p
	}
	ids, next := page(q, ids)
	out := []any{}
	for _, id := range ids {
		out = append(out, portView(byID[id]))
	}
	body := map[string]any{"ports": out}
	if next != "" {
		body["ports_links"] = []any{map[string]any{"rel": "next", "href": nextLink(r, next)}}
	}
	writeJSON(w, http.StatusOK, body)
}

// newPort records a DOWN port. Callers hold c.mu.
func (c *state) newPort(name, networkID string) *Port {
	c.order++
	id := newID()
	p := &Port{ID: id, Name: name, NetworkID: networkID, Status: "DOWN",
		MACAddress: fmt.Sprintf("fa:16:3e:%s:%s:%s", id[0:2], id[2:4], id[4:6]), Created: c.now(), seq: c.order}
	c.ports[id] = p
	return p
}

func (c *state) firstSubnet(networkID string) *Subnet {
	n := c.networks[networkID]
	if n == nil || len(n.Subnets) == 0 {
		return nil
	}
	return c.subnets[n.Subnets[0]]
}

func (c *state) secgroupByNameOrID(s string) *SecurityGroup {
	if sg := c.secgroups[s]; sg != nil {
		return sg
	}
	for _, sg := range c.secgroups {
		if sg.Name == s {
			return sg
		}
	}
	return nil
}

func networkView(n *Network) map[string]any {
	return map[string]any{"id": n.ID, "name": n.Name, "status": "ACTIVE", "admin_state_up": true, "subnets": n.Subnets,
		"tenant_id": ProjectID, "project_id": ProjectID, "shared": false, "mtu": 1450, "tags": []string{}}
}

func subnetView(s *Subnet) map[string]any {
	return map[string]any{"id": s.ID, "name": s.Name, "network_id": s.NetworkID, "cidr": s.CIDR, "ip_version": 4,
		"enable_dhcp": true, "tenant_id": ProjectID, "project_id": ProjectID, "tags": []string{}}
}

func portView(p *Port) map[string]any {
	fixed := []any{}
	for _, f := range p.FixedIPs {
		fixed = append(fixed, map[string]any{"subnet_id": f.SubnetID, "ip_address": f.IPAddress})
	}
	pairs := []any{}
	for _, a := range p.AllowedAddressPairs {
		mac := a.MACAddress
		if mac == "" {
			mac = p.MACAddress
		}
		pairs = append(pairs, map[string]any{"ip_address": a.IPAddress, "mac_address": mac})
	}
	tags := p.Tags
	if tags == nil {
		tags = []string{}
	}
	sgs := p.SecurityGroups
	if sgs == nil {
		sgs = []string{}
	}
	return map[string]any{
		"id": p.ID, "name": p.Name, "network_id": p.NetworkID, "device_id": p.DeviceID, "device_owner": p.DeviceOwner,
		"status": p.Status, "mac_address": p.MACAddress, "fixed_ips": fixed, "security_groups": sgs,
		"allowed_address_pairs": pairs, "tags": tags, "admin_state_up": true, "tenant_id": ProjectID, "project_id": ProjectID,
		"revision_number": p.RevisionNumber, "created_at": p.Created.UTC().Format(time.RFC3339), "updated_at": p.Created.UTC().Format(time.RFC3339),
		"description": "",
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !hasAny(have, []string{w}) {
			return false
		}
	}
	return true
}

func hasAny(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w {
				return true
			}
		}
	}
	return false
}
