package fakeopenstack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// writeError answers with the error body shape of the service, as the real services do:
// Keystone {"error": {...}}, Nova and Cinder {"<kind>": {"code", "message"}}, Neutron
// {"NeutronError": {"type", "message", "detail"}}, Glance a plain-text page.
func writeError(w http.ResponseWriter, service string, status int, kind, msg string) {
	if service == "image" {
		// Glance answers errors as webob renders them for Accept: application/json (gophercloud
		// always sends it): a flat object whose message ends in "<br /><br />", real Glance (Zed)
		// 404 and 401 alike, keystonemiddleware's 401 included.
		if status == http.StatusUnauthorized {
			msg = "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required."
		}
		writeJSON(w, status, map[string]any{"message": msg + "<br /><br />\n\n\n", "code": fmt.Sprintf("%d %s", status, http.StatusText(status)), "title": http.StatusText(status)})
		return
	}
	if status == http.StatusUnauthorized {
		// keystonemiddleware answers 401 in front of every service.
		writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "title": "Unauthorized", "message": msg}})
		return
	}
	switch service {
	case "identity":
		if kind == "" {
			kind = http.StatusText(status)
		}
		writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "title": kind, "message": msg}})
	case "network":
		if kind == "" {
			kind = neutronKind(status)
		}
		writeJSON(w, status, map[string]any{"NeutronError": map[string]any{"type": kind, "message": msg, "detail": ""}})
	default:
		if kind == "" {
			kind = novaKind(status)
		}
		writeJSON(w, status, map[string]any{kind: map[string]any{"code": status, "message": msg}})
	}
}

func novaKind(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "badRequest"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "itemNotFound"
	case http.StatusConflict:
		return "conflictingRequest"
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return "overLimit"
	case http.StatusServiceUnavailable:
		return "serviceUnavailable"
	}
	return "computeFault"
}

func neutronKind(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusForbidden:
		return "PolicyNotAuthorized"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	}
	return "InternalServerError"
}

// decodeBody reads a JSON request body into v, answering 400 in the service's shape when it is
// not JSON. It reports whether decoding succeeded.
func decodeBody(w http.ResponseWriter, r *http.Request, service string, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		writeError(w, service, http.StatusBadRequest, "", "Malformed request body: "+err.Error())
		return false
	}
	return true
}

// page applies limit/marker pagination to ids (already in listing order) and returns the page
// and the marker of the next page ("" on the last page).
func page(q url.Values, ids []string) ([]string, string) {
	if m := q.Get("marker"); m != "" {
		for i, id := range ids {
			if id == m {
				ids = ids[i+1:]
				break
			}
		}
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit >= len(ids) {
		return ids, ""
	}
	return ids[:limit], ids[limit-1]
}

// nextLink builds the URL of the next page from the request URL.
func nextLink(r *http.Request, marker string) string {
	q := r.URL.Query()
	q.Set("marker", marker)
	u := *r.URL
	u.RawQuery = q.Encode()
	u.Scheme = "http"
	u.Host = r.Host
	return u.String()
}

// pathParts splits "/servers/abc/metadata" into ["servers", "abc", "metadata"].
func pathParts(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// parsePyDict parses Cinder's metadata filter, a Python dict literal such as
// {'k1':'v1', 'k2':'v2'} (the form gophercloud sends).
func parsePyDict(s string) (map[string]string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, fmt.Errorf("not a dict: %q", s)
	}
	s = s[1 : len(s)-1]
	out := map[string]string{}
	var strs []string
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'', '"':
			q := s[i]
			j := strings.IndexByte(s[i+1:], q)
			if j < 0 {
				return nil, fmt.Errorf("unterminated string in %q", s)
			}
			strs = append(strs, s[i+1:i+1+j])
			i += j + 1
		case ' ', ',', ':':
		default:
			return nil, fmt.Errorf("unexpected %q in %q", s[i], s)
		}
	}
	if len(strs)%2 != 0 {
		return nil, fmt.Errorf("odd number of strings in %q", s)
	}
	for i := 0; i < len(strs); i += 2 {
		out[strs[i]] = strs[i+1]
	}
	return out, nil
}
