package fakeopenstack

import (
	"fmt"
	"maps"
	"net/http"
	"time"
)

// Volume is a Cinder volume.
type Volume struct {
	ID               string
	Name             string
	Size             int
	VolumeType       string
	Status           string // creating, available, in-use, error
	AvailabilityZone string
	ImageID          string
	Bootable         bool
	Metadata         map[string]string
	Attachments      []string // server IDs
	Created          time.Time

	seq     int
	readyAt time.Time
}

func (c *cinder) serveVolume(w http.ResponseWriter, r *http.Request, rest string) {
	p := pathParts(rest)
	if len(p) == 0 {
		writeError(w, "volume", http.StatusNotFound, "", "The resource could not be found.")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case p[0] == "volumes" && len(p) == 1 && r.Method == http.MethodPost:
		c.createVolume(w, r)
	case p[0] == "volumes" && (len(p) == 1 || len(p) == 2 && p[1] == "detail") && r.Method == http.MethodGet:
		c.listVolumes(w, r)
	case p[0] == "volumes" && len(p) == 2 && r.Method == http.MethodGet:
		v := c.volumes[p[1]]
		if v == nil {
			writeError(w, "volume", http.StatusNotFound, "", fmt.Sprintf("Volume %s could not be found.", p[1]))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"volume": c.volumeView(v)})
	case p[0] == "volumes" && len(p) == 2 && r.Method == http.MethodDelete:
		v := c.volumes[p[1]]
		if v == nil {
			writeError(w, "volume", http.StatusNotFound, "", fmt.Sprintf("Volume %s could not be found.", p[1]))
			return
		}
		if v.Status != "available" && v.Status != "error" {
			writeError(w, "volume", http.StatusBadRequest, "", "Invalid volume: Volume status must be available or error or error_restoring or error_extending or error_managing and must not be migrating, attached, belong to a group, have snapshots, awaiting a transfer, or be disassociated from snapshots after volume transfer.")
			return
		}
		delete(c.volumes, v.ID)
		w.WriteHeader(http.StatusAccepted)
	case p[0] == "types" && len(p) == 1 && r.Method == http.MethodGet:
		out := []any{}
		for name, id := range c.volumeTypes {
			out = append(out, map[string]any{"id": id, "name": name, "is_public": true, "extra_specs": map[string]any{}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"volume_types": out})
	default:
		writeError(w, "volume", http.StatusNotFound, "", "The resource could not be found.")
	}
}

func (c *cinder) createVolume(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Volume struct {
			Size             int               `json:"size"`
			Name             string            `json:"name"`
			VolumeType       string            `json:"volume_type"`
			ImageRef         string            `json:"imageRef"`
			AvailabilityZone string            `json:"availability_zone"`
			Metadata         map[string]string `json:"metadata"`
		} `json:"volume"`
	}
	if !decodeBody(w, r, "volume", &body) {
		return
	}
	b := body.Volume
	if b.Size <= 0 {
		writeError(w, "volume", http.StatusBadRequest, "", fmt.Sprintf("Invalid input received: Volume size '%d' must be an integer and greater than 0", b.Size))
		return
	}
	vt := b.VolumeType
	if vt == "" {
		vt = VolumeTypeStandard
	}
	if _, ok := c.volumeTypes[vt]; !ok {
		writeError(w, "volume", http.StatusNotFound, "", fmt.Sprintf("Volume type with name %s could not be found.", vt))
		return
	}
	if b.ImageRef != "" {
		img := c.images[b.ImageRef]
		if img == nil {
			writeError(w, "volume", http.StatusBadRequest, "", fmt.Sprintf("Invalid image identifier or unable to access requested image. (Image %s could not be found.)", b.ImageRef))
			return
		}
		if img.MinDisk > b.Size {
			writeError(w, "volume", http.StatusBadRequest, "", fmt.Sprintf("Invalid input received: Volume size %dGB cannot be smaller than the image minDisk size %dGB.", b.Size, img.MinDisk))
			return
		}
	}
	az := b.AvailabilityZone
	if az == "" {
		az = AvailabilityZone
	}
	if !c.zones[az] {
		writeError(w, "volume", http.StatusBadRequest, "", "Invalid input received: Availability zone '"+az+"' is invalid.")
		return
	}
	v := c.newVolume(b.Name, b.Size, vt, az)
	v.ImageID = b.ImageRef
	v.Bootable = b.ImageRef != ""
	v.Metadata = maps.Clone(b.Metadata)
	writeJSON(w, http.StatusAccepted, map[string]any{"volume": c.volumeView(v)})
}

func (c *cinder) listVolumes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var meta map[string]string
	if m := q.Get("metadata"); m != "" {
		var err error
		if meta, err = parsePyDict(m); err != nil {
			writeError(w, "volume", http.StatusBadRequest, "", "Invalid input received: metadata filter: "+err.Error())
			return
		}
	}
	var ids []string
	byID := map[string]*Volume{}
	for _, v := range sortedBySeq(c.volumes, func(v *Volume) int { return -v.seq }) {
		if n, ok := q["name"]; ok && v.Name != n[0] {
			continue
		}
		if s := q.Get("status"); s != "" && v.Status != s {
			continue
		}
		match := true
		for k, want := range meta {
			if got, ok := v.Metadata[k]; !ok || got != want {
				match = false
			}
		}
		if !match {
			continue
		}
		ids = append(ids, v.ID)
		byID[v.ID] = v
	}
	ids, next := page(q, ids)
	out := []any{}
	for _, id := range ids {
		out = append(out, c.volumeView(byID[id]))
	}
	body := map[string]any{"volumes": out}
	if next != "" {
		body["volumes_links"] = []any{map[string]any{"rel": "next", "href": nextLink(r, next)}}
	}
	writeJSON(w, http.StatusOK, body)
}

// newVolume records a volume in "creating". Callers hold c.mu.
func (c *state) newVolume(name string, size int, volumeType, az string) *Volume {
	c.order++
	now := c.now()
	v := &Volume{ID: newID(), Name: name, Size: size, VolumeType: volumeType, Status: "creating",
		AvailabilityZone: az, Metadata: map[string]string{}, Created: now, seq: c.order, readyAt: now.Add(c.volumeCreateTime)}
	c.volumes[v.ID] = v
	return v
}

// attachVolume attaches a volume to a booting server. Callers hold c.mu.
func (c *state) attachVolume(v *Volume, s *Server, deleteOnTermination bool) {
	v.Status = "in-use"
	v.Attachments = []string{s.ID}
	s.Volumes = append(s.Volumes, AttachedVolume{ID: v.ID, DeleteOnTermination: deleteOnTermination})
}

func (c *cinder) volumeView(v *Volume) map[string]any {
	att := []any{}
	for _, sid := range v.Attachments {
		att = append(att, map[string]any{"server_id": sid, "attachment_id": newID(), "volume_id": v.ID, "device": "/dev/vda", "id": v.ID})
	}
	bootable := "false"
	if v.Bootable {
		bootable = "true"
	}
	meta := v.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return map[string]any{
		"id": v.ID, "name": v.Name, "size": v.Size, "volume_type": v.VolumeType, "status": v.Status,
		"availability_zone": v.AvailabilityZone, "bootable": bootable, "metadata": meta, "attachments": att,
		"created_at": v.Created.UTC().Format("2006-01-02T15:04:05.000000"), "multiattach": false, "encrypted": false,
		"os-vol-tenant-attr:tenant_id": ProjectID, "user_id": UserID,
	}
}
