package fakeopenstack

import (
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Image is a Glance image.
type Image struct {
	ID      string
	Name    string
	Status  string
	MinDisk int
	Created time.Time
}

func (c *glance) serveImage(w http.ResponseWriter, r *http.Request, rest string) {
	if rest == "/" && r.Method == http.MethodGet {
		writeJSON(w, http.StatusMultipleChoices, map[string]any{"versions": []any{
			map[string]any{"id": "v2.16", "status": "CURRENT", "links": []any{map[string]any{"rel": "self", "href": c.url + "/image/v2/"}}},
			map[string]any{"id": "v2.15", "status": "SUPPORTED", "links": []any{map[string]any{"rel": "self", "href": c.url + "/image/v2/"}}},
		}})
		return
	}
	p := pathParts(rest)
	if len(p) < 2 || p[0] != "v2" || p[1] != "images" {
		writeError(w, "image", http.StatusNotFound, "", "The resource could not be found.")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(p) == 2 && r.Method == http.MethodGet:
		q := r.URL.Query()
		imgs := make([]*Image, 0, len(c.images))
		for _, img := range c.images {
			if n := q.Get("name"); n != "" && img.Name != n {
				continue
			}
			if s := q.Get("status"); s != "" && img.Status != s {
				continue
			}
			imgs = append(imgs, img)
		}
		sort.Slice(imgs, func(i, j int) bool { return imgs[i].Created.After(imgs[j].Created) })
		ids := make([]string, len(imgs))
		byID := map[string]*Image{}
		for i, img := range imgs {
			ids[i] = img.ID
			byID[img.ID] = img
		}
		ids, next := page(q, ids)
		out := []any{}
		for _, id := range ids {
			out = append(out, imageView(byID[id]))
		}
		body := map[string]any{"images": out, "schema": "/v2/schemas/images", "first": "/v2/images"}
		if next != "" {
			nq := q
			nq.Set("marker", next)
			body["next"] = "/v2/images?" + nq.Encode()
		}
		writeJSON(w, http.StatusOK, body)
	case len(p) == 3 && r.Method == http.MethodGet:
		img := c.images[p[2]]
		if img == nil {
			writeError(w, "image", http.StatusNotFound, "", fmt.Sprintf("No image found with ID %s", p[2]))
			return
		}
		writeJSON(w, http.StatusOK, imageView(img))
	default:
		writeError(w, "image", http.StatusNotFound, "", "The resource could not be found.")
	}
}

func imageView(img *Image) map[string]any {
	ts := img.Created.UTC().Format(time.RFC3339)
	return map[string]any{"id": img.ID, "name": img.Name, "status": img.Status, "visibility": "public",
		"min_disk": img.MinDisk, "min_ram": 0, "disk_format": "qcow2", "container_format": "bare",
		"created_at": ts, "updated_at": ts, "tags": []string{}, "protected": false, "os_hidden": false,
		"owner": ProjectID, "self": "/v2/images/" + img.ID, "file": "/v2/images/" + img.ID + "/file", "schema": "/v2/schemas/image"}
}
