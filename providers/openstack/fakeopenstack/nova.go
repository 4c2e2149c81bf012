package fakeopenstack

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"sort"
	"time"
)

// Flavor is a Nova flavor.
type Flavor struct {
	ID    string
	Name  string
	VCPUs int
	RAM   int // MiB
	Disk  int // GB
}

// Keypair is a Nova key pair.
type Keypair struct {
	Name      string
	Type      string
	PublicKey string
}

// ServerGroup is a Nova server group.
type ServerGroup struct {
	ID      string
	Name    string
	Policy  string
	Members []string
}

// ServerFault is the fault Nova records on a server in ERROR.
type ServerFault struct {
	Code    int
	Message string
	Details string
	Created time.Time
}

// AttachedVolume is a volume attached to a server at boot.
type AttachedVolume struct {
	ID                  string
	DeleteOnTermination bool
}

// Server is a Nova server.
type Server struct {
	ID               string
	Name             string
	Status           string // BUILD, ACTIVE, ERROR
	TaskState        string
	VMState          string
	PowerState       int
	FlavorID         string
	ImageID          string // "" when booted from a volume
	AvailabilityZone string
	KeyName          string
	ConfigDrive      bool
	UserData         []byte // decoded
	Metadata         map[string]string
	SecurityGroups   []string
	ServerGroup      string
	Fault            *ServerFault
	Ports            []string
	Volumes          []AttachedVolume
	Created          time.Time

	seq        int
	buildDone  time.Time
	failBuild  *ServerFault
	deleting   bool
	deleteDone time.Time
}

type serverCreate struct {
	Server struct {
		Name             string            `json:"name"`
		ImageRef         string            `json:"imageRef"`
		FlavorRef        string            `json:"flavorRef"`
		AvailabilityZone string            `json:"availability_zone"`
		Metadata         map[string]string `json:"metadata"`
		ConfigDrive      *bool             `json:"config_drive"`
		UserData         *string           `json:"user_data"`
		KeyName          string            `json:"key_name"`
		SecurityGroups   []struct {
			Name string `json:"name"`
		} `json:"security_groups"`
		Networks any `json:"networks"`
		BDM      []struct {
			SourceType          string `json:"source_type"`
			UUID                string `json:"uuid"`
			BootIndex           int    `json:"boot_index"`
			DeleteOnTermination bool   `json:"delete_on_termination"`
			DestinationType     string `json:"destination_type"`
			VolumeSize          int    `json:"volume_size"`
			VolumeType          string `json:"volume_type"`
		} `json:"block_device_mapping_v2"`
	} `json:"server"`
	Hints map[string]any `json:"os:scheduler_hints"`
}

func (c *nova) serveCompute(w http.ResponseWriter, r *http.Request, rest string) {
	p := pathParts(rest)
	if len(p) == 0 {
		writeError(w, "compute", http.StatusNotFound, "", "The resource could not be found.")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case p[0] == "servers" && len(p) == 1 && r.Method == http.MethodPost:
		c.createServer(w, r)
	case p[0] == "servers" && (len(p) == 1 || p[1] == "detail" && len(p) == 2) && r.Method == http.MethodGet:
		c.listServers(w, r, len(p) == 2)
	case p[0] == "servers" && len(p) == 2 && r.Method == http.MethodGet:
		s := c.servers[p[1]]
		if s == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Instance %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"server": c.serverView(s)})
	case p[0] == "servers" && len(p) == 3 && p[2] == "metadata" && r.Method == http.MethodGet:
		s := c.servers[p[1]]
		if s == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Instance %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"metadata": s.Metadata})
	case p[0] == "servers" && len(p) == 2 && r.Method == http.MethodDelete:
		s := c.servers[p[1]]
		if s == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Instance %s could not be found.", p[1]))
			return
		}
		if !s.deleting {
			s.deleting = true
			s.TaskState = "deleting"
			s.deleteDone = c.now().Add(c.deleteTime)
			if c.deleteTime <= 0 {
				c.finishDelete(s)
				delete(c.servers, s.ID)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	case p[0] == "flavors" && (len(p) == 1 || p[1] == "detail") && r.Method == http.MethodGet:
		out := []any{}
		for _, f := range c.sortedFlavors() {
			out = append(out, flavorView(f))
		}
		writeJSON(w, http.StatusOK, map[string]any{"flavors": out})
	case p[0] == "flavors" && len(p) == 2 && r.Method == http.MethodGet:
		f := c.flavors[p[1]]
		if f == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Flavor %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"flavor": flavorView(f)})
	case p[0] == "os-keypairs" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		for _, k := range c.keypairs {
			out = append(out, map[string]any{"keypair": keypairView(k)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"keypairs": out})
	case p[0] == "os-keypairs" && len(p) == 2 && r.Method == http.MethodGet:
		k := c.keypairs[p[1]]
		if k == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Keypair %s not found for user %s", p[1], UserID))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"keypair": keypairView(k)})
	case p[0] == "os-server-groups" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		for _, g := range c.groups {
			out = append(out, groupView(g))
		}
		writeJSON(w, http.StatusOK, map[string]any{"server_groups": out})
	case p[0] == "os-server-groups" && len(p) == 2 && r.Method == http.MethodGet:
		g := c.groups[p[1]]
		if g == nil {
			writeError(w, "compute", http.StatusNotFound, "", fmt.Sprintf("Instance group %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"server_group": groupView(g)})
	case p[0] == "os-availability-zone" && r.Method == http.MethodGet:
		out := []any{}
		for z := range c.zones {
			out = append(out, map[string]any{"zoneName": z, "zoneState": map[string]any{"available": true}, "hosts": nil})
		}
		writeJSON(w, http.StatusOK, map[string]any{"availabilityZoneInfo": out})
	default:
		writeError(w, "compute", http.StatusNotFound, "", "The resource could not be found.")
	}
}

// createServer validates a boot request the way Nova's API does (every referenced resource must
// exist, ports must be free) and starts the build. Callers hold c.mu.
func (c *nova) createServer(w http.ResponseWriter, r *http.Request) {
	var req serverCreate
	if !decodeBody(w, r, "compute", &req) {
		return
	}
	s := req.Server
	bad := func(format string, args ...any) {
		writeError(w, "compute", http.StatusBadRequest, "", fmt.Sprintf(format, args...))
	}
	if s.Name == "" {
		bad("Invalid input for field/attribute name. Value: . '' is too short")
		return
	}
	if c.flavors[s.FlavorRef] == nil {
		bad("Flavor %s could not be found.", s.FlavorRef)
		return
	}
	bootFromVolume := false
	for _, b := range s.BDM {
		if b.BootIndex == 0 {
			bootFromVolume = true
		}
	}
	if !bootFromVolume || s.ImageRef != "" {
		if img := c.images[s.ImageRef]; img == nil || img.Status != "active" {
			bad("Image %s could not be found.", s.ImageRef)
			return
		}
	}
	if s.KeyName != "" && c.keypairs[s.KeyName] == nil {
		bad("Invalid key_name provided.")
		return
	}
	az := s.AvailabilityZone
	if az == "" {
		az = AvailabilityZone
	}
	if !c.zones[az] {
		bad("The requested availability zone is not available")
		return
	}
	for k, v := range s.Metadata {
		if len(k) == 0 || len(k) > 255 || len(v) > 255 {
			bad("Invalid input for field/attribute metadata. Value: %s.", k)
			return
		}
	}
	var userData []byte
	if s.UserData != nil {
		b, err := base64.StdEncoding.DecodeString(*s.UserData)
		if err != nil {
			bad("User data needs to be valid base 64.")
			return
		}
		if len(*s.UserData) > 65535 {
			bad("Invalid input for field/attribute user_data.")
			return
		}
		userData = b
	}
	var sgNames []string
	for _, sg := range s.SecurityGroups {
		if c.secgroupByNameOrID(sg.Name) == nil {
			bad("Security group %s not found for project %s.", sg.Name, ProjectID)
			return
		}
		sgNames = append(sgNames, sg.Name)
	}
	type nic struct{ network, port string }
	var nics []nic
	switch n := s.Networks.(type) {
	case nil:
		bad("Multiple possible networks found, use a Network ID to be more specific.")
		return
	case []any:
		for _, e := range n {
			m, _ := e.(map[string]any)
			uuid, _ := m["uuid"].(string)
			port, _ := m["port"].(string)
			switch {
			case port != "":
				p := c.ports[port]
				if p == nil {
					bad("Port id %s not found.", port)
					return
				}
				if p.DeviceID != "" {
					writeError(w, "compute", http.StatusConflict, "", fmt.Sprintf("Port %s is still in use.", port))
					return
				}
				nics = append(nics, nic{port: port})
			case uuid != "":
				if c.networks[uuid] == nil {
					bad("Network %s could not be found.", uuid)
					return
				}
				nics = append(nics, nic{network: uuid})
			default:
				bad("Bad networks format")
				return
			}
		}
	default:
		bad("Bad networks format")
		return
	}
	group := ""
	if g, ok := req.Hints["group"].(string); ok && g != "" {
		if c.groups[g] == nil {
			bad("Invalid server group %s", g)
			return
		}
		group = g
	}
	for _, b := range s.BDM {
		switch b.SourceType {
		case "image":
			if img := c.images[b.UUID]; img == nil || img.Status != "active" {
				bad("Image %s could not be found.", b.UUID)
				return
			}
			if b.DestinationType == "volume" && b.VolumeSize <= 0 {
				bad("Images with destination_type 'volume' need to have a non-zero size specified")
				return
			}
			if b.VolumeType != "" {
				if _, ok := c.volumeTypes[b.VolumeType]; !ok {
					bad("Volume type %s could not be found.", b.VolumeType)
					return
				}
			}
		case "volume":
			v := c.volumes[b.UUID]
			if v == nil {
				bad("Volume %s could not be found.", b.UUID)
				return
			}
			if v.Status != "available" {
				bad("Invalid volume: volume '%s' status must be 'available'. Currently in '%s'", b.UUID, v.Status)
				return
			}
		default:
			bad("Invalid input for field/attribute source_type.")
			return
		}
	}

	srv := c.newServer(s.Name, s.FlavorRef, s.ImageRef, az)
	srv.KeyName = s.KeyName
	srv.ConfigDrive = s.ConfigDrive != nil && *s.ConfigDrive
	srv.UserData = userData
	srv.Metadata = maps.Clone(s.Metadata)
	if srv.Metadata == nil {
		srv.Metadata = map[string]string{}
	}
	srv.SecurityGroups = sgNames
	srv.ServerGroup = group
	if group != "" {
		c.groups[group].Members = append(c.groups[group].Members, srv.ID)
	}
	if len(c.failBuilds) > 0 {
		// The scheduler finds no host, or the conductor's quota recheck refuses: nothing is
		// wired up, the server goes to ERROR.
		f := c.failBuilds[0]
		c.failBuilds = c.failBuilds[1:]
		f.Created = c.now()
		srv.failBuild = &f
	} else {
		for _, n := range nics {
			if n.port != "" {
				p := c.ports[n.port]
				p.DeviceID = srv.ID
				p.DeviceOwner = "compute:" + az
				p.Status = "ACTIVE"
				srv.Ports = append(srv.Ports, p.ID)
				continue
			}
			c.attachNewPort(srv, n.network, sgNames)
		}
		for _, b := range s.BDM {
			switch {
			case b.SourceType == "image" && b.DestinationType == "volume":
				vt := b.VolumeType
				if vt == "" {
					vt = VolumeTypeStandard
				}
				v := c.newVolume("", b.VolumeSize, vt, az)
				v.ImageID = b.UUID
				v.Bootable = true
				c.attachVolume(v, srv, b.DeleteOnTermination)
			case b.SourceType == "volume":
				c.attachVolume(c.volumes[b.UUID], srv, b.DeleteOnTermination)
			}
		}
	}
	sgs := []any{}
	for _, n := range sgNames {
		sgs = append(sgs, map[string]any{"name": n})
	}
	if len(sgs) == 0 {
		sgs = append(sgs, map[string]any{"name": "default"})
	}
	w.Header().Set("Location", c.url+"/compute/v2.1/servers/"+srv.ID)
	writeJSON(w, http.StatusAccepted, map[string]any{"server": map[string]any{
		"id": srv.ID, "OS-DCF:diskConfig": "MANUAL", "security_groups": sgs, "adminPass": "Zm9vYmFy" + srv.ID[:6],
		"links": []any{map[string]any{"rel": "self", "href": c.url + "/compute/v2.1/servers/" + srv.ID}},
	}})
}

// newServer records a server in BUILD. Callers hold c.mu.
func (c *state) newServer(name, flavorID, imageID, az string) *Server {
	c.order++
	now := c.now()
	s := &Server{
		ID: newID(), Name: name, Status: "BUILD", TaskState: "spawning", VMState: "building",
		FlavorID: flavorID, ImageID: imageID, AvailabilityZone: az, Metadata: map[string]string{},
		Created: now, seq: c.order, buildDone: now.Add(c.buildTime),
	}
	c.servers[s.ID] = s
	return s
}

// attachNewPort makes the port Nova creates when a server boots on a network. Callers hold c.mu.
func (c *state) attachNewPort(s *Server, networkID string, sgNames []string) {
	p := c.newPort("", networkID)
	p.DeviceID = s.ID
	p.DeviceOwner = "compute:" + s.AvailabilityZone
	p.Status = "ACTIVE"
	p.novaCreated = true
	for _, n := range sgNames {
		if sg := c.secgroupByNameOrID(n); sg != nil {
			p.SecurityGroups = append(p.SecurityGroups, sg.ID)
		}
	}
	if sn := c.firstSubnet(networkID); sn != nil {
		p.FixedIPs = []FixedIP{{SubnetID: sn.ID, IPAddress: sn.allocate()}}
	}
	s.Ports = append(s.Ports, p.ID)
}

// finishDelete applies what Nova does when a server is finally gone: ports it created are
// deleted, ports it was given are unbound, volumes are detached and deleted when
// delete_on_termination says so. Callers hold c.mu.
func (c *state) finishDelete(s *Server) {
	for _, id := range s.Ports {
		p := c.ports[id]
		if p == nil {
			continue
		}
		if p.novaCreated {
			delete(c.ports, id)
			continue
		}
		p.DeviceID, p.DeviceOwner, p.Status = "", "", "DOWN"
	}
	for _, av := range s.Volumes {
		v := c.volumes[av.ID]
		if v == nil {
			continue
		}
		v.Attachments = nil
		v.Status = "available"
		if av.DeleteOnTermination {
			delete(c.volumes, av.ID)
		}
	}
	if s.ServerGroup != "" {
		if g := c.groups[s.ServerGroup]; g != nil {
			for i, m := range g.Members {
				if m == s.ID {
					g.Members = append(g.Members[:i], g.Members[i+1:]...)
					break
				}
			}
		}
	}
}

func (c *nova) listServers(w http.ResponseWriter, r *http.Request, detail bool) {
	q := r.URL.Query()
	var nameRE *regexp.Regexp
	if n := q.Get("name"); n != "" {
		re, err := regexp.Compile(n)
		if err != nil {
			writeError(w, "compute", http.StatusBadRequest, "", "Invalid filter name: "+err.Error())
			return
		}
		nameRE = re
	}
	status := q.Get("status")
	all := sortedBySeq(c.servers, func(s *Server) int { return -s.seq }) // newest first, as Nova sorts
	var ids []string
	byID := map[string]*Server{}
	for _, s := range all {
		if nameRE != nil && !nameRE.MatchString(s.Name) {
			continue
		}
		if status != "" && s.Status != status {
			continue
		}
		ids = append(ids, s.ID)
		byID[s.ID] = s
	}
	ids, next := page(q, ids)
	out := []any{}
	for _, id := range ids {
		s := byID[id]
		if detail {
			out = append(out, c.serverView(s))
		} else {
			out = append(out, map[string]any{"id": s.ID, "name": s.Name, "links": []any{}})
		}
	}
	body := map[string]any{"servers": out}
	if next != "" {
		body["servers_links"] = []any{map[string]any{"rel": "next", "href": nextLink(r, next)}}
	}
	writeJSON(w, http.StatusOK, body)
}

func (c *nova) serverView(s *Server) map[string]any {
	addresses := map[string]any{}
	for _, id := range s.Ports {
		p := c.ports[id]
		if p == nil {
			continue
		}
		n := c.networks[p.NetworkID]
		if n == nil {
			continue
		}
		var list []any
		if prev, ok := addresses[n.Name].([]any); ok {
			list = prev
		}
		for _, ip := range p.FixedIPs {
			list = append(list, map[string]any{"addr": ip.IPAddress, "version": 4, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p.MACAddress})
		}
		addresses[n.Name] = list
	}
	vols := []any{}
	for _, v := range s.Volumes {
		vols = append(vols, map[string]any{"id": v.ID, "delete_on_termination": v.DeleteOnTermination})
	}
	sgs := []any{}
	for _, n := range s.SecurityGroups {
		sgs = append(sgs, map[string]any{"name": n})
	}
	var image any = ""
	if s.ImageID != "" {
		image = map[string]any{"id": s.ImageID, "links": []any{}}
	}
	configDrive := ""
	if s.ConfigDrive {
		configDrive = "True"
	}
	v := map[string]any{
		"id": s.ID, "name": s.Name, "status": s.Status, "tenant_id": ProjectID, "user_id": UserID,
		"metadata": s.Metadata, "hostId": "", "image": image,
		"flavor":  map[string]any{"id": s.FlavorID, "links": []any{}},
		"created": s.Created.UTC().Format(time.RFC3339), "updated": s.Created.UTC().Format(time.RFC3339),
		"addresses": addresses, "accessIPv4": "", "accessIPv6": "", "links": []any{},
		"OS-DCF:diskConfig": "MANUAL", "progress": 0, "OS-EXT-AZ:availability_zone": s.AvailabilityZone,
		"config_drive": configDrive, "key_name": s.KeyName,
		"OS-EXT-STS:task_state": nilIfEmpty(s.TaskState), "OS-EXT-STS:vm_state": s.VMState, "OS-EXT-STS:power_state": s.PowerState,
		"os-extended-volumes:volumes_attached": vols, "security_groups": sgs,
	}
	if s.Status == "ERROR" && s.Fault != nil {
		fault := map[string]any{"code": s.Fault.Code, "message": s.Fault.Message, "created": s.Fault.Created.UTC().Format(time.RFC3339)}
		// Nova shows the details (a traceback) of a 500 fault to admins only
		// (nova/api/openstack/compute/views/servers.py _get_fault, Zed); the fake's user is a member.
		if s.Fault.Details != "" && s.Fault.Code != http.StatusInternalServerError {
			fault["details"] = s.Fault.Details
		}
		v["fault"] = fault
	}
	return v
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (c *nova) sortedFlavors() []*Flavor {
	out := make([]*Flavor, 0, len(c.flavors))
	for _, f := range c.flavors {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func flavorView(f *Flavor) map[string]any {
	return map[string]any{"id": f.ID, "name": f.Name, "vcpus": f.VCPUs, "ram": f.RAM, "disk": f.Disk,
		"OS-FLV-EXT-DATA:ephemeral": 0, "swap": "", "rxtx_factor": 1.0, "os-flavor-access:is_public": true, "links": []any{}}
}

func keypairView(k *Keypair) map[string]any {
	return map[string]any{"name": k.Name, "type": k.Type, "public_key": k.PublicKey, "fingerprint": "aa:bb:cc"}
}

func groupView(g *ServerGroup) map[string]any {
	members := append([]string{}, g.Members...)
	return map[string]any{"id": g.ID, "name": g.Name, "policies": []string{g.Policy}, "members": members, "metadata": map[string]any{}}
}
