package openstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/internal/truncate"
)

// apiError turns an error of a gophercloud call into a driver status: the code follows the
// HTTP status (401 Unauthenticated, 403 PermissionDenied, quota ResourceExhausted, 404 NotFound,
// 409 Aborted, 5xx and transport errors Unavailable) and the message carries the service's own
// message and the OpenStack request ID, so users can quote it to their cloud operator.
func apiError(op string, err error) error {
	if err == nil {
		return nil
	}
	if st := (*driver.Status)(nil); errors.As(err, &st) {
		return driver.Wrap(st.Code(), err, "openstack: "+op)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return driver.Wrap(driver.DeadlineExceeded, err, "openstack: "+op)
	case errors.Is(err, context.Canceled):
		return driver.Wrap(driver.Canceled, err, "openstack: "+op)
	}
	var reauth gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) {
		inner := apiError(op, reauth.ErrReauth)
		if driver.CodeOf(inner) == driver.Unauthenticated || driver.CodeOf(inner) == driver.Unknown {
			return driver.Errorf(driver.Unauthenticated, "openstack: %s: the token expired and Keystone refused a new one: %s: check the credentials secret", op, driver.MessageOf(inner))
		}
		return inner
	}
	var resp gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &resp) {
		return responseError(op, resp)
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) {
		return driver.Errorf(driver.Unavailable, "openstack: %s: %s: the API is unreachable; retrying", op, err.Error())
	}
	var nf gophercloud.ErrResourceNotFound
	if errors.As(err, &nf) {
		return driver.Errorf(driver.NotFound, "openstack: %s: %s", op, err.Error())
	}
	return driver.Errorf(driver.Unknown, "openstack: %s: %s", op, err.Error())
}

func responseError(op string, resp gophercloud.ErrUnexpectedResponseCode) error {
	kind, msg := serviceMessage(resp.Body)
	if msg == "" {
		msg = http.StatusText(resp.Actual)
	}
	where := ""
	if u, err := url.Parse(resp.URL); err == nil {
		where = resp.Method + " " + u.Path
	}
	detail := fmt.Sprintf("HTTP %d", resp.Actual)
	if where != "" {
		detail += " from " + where
	}
	if id := requestID(resp.ResponseHeader); id != "" {
		detail += ", request " + id
	}
	lower := strings.ToLower(msg)
	quota := strings.Contains(lower, "quota") || kind == "OverQuota" || kind == "overLimit"
	code := driver.Unknown
	hint := ""
	switch s := resp.Actual; {
	case s == http.StatusUnauthorized:
		code, hint = driver.Unauthenticated, ": check the credentials secret"
	case s == http.StatusForbidden && quota, s == http.StatusRequestEntityTooLarge, s == http.StatusConflict && quota:
		code, hint = driver.ResourceExhausted, ": raise the project's quota or free resources"
	case s == http.StatusForbidden:
		code, hint = driver.PermissionDenied, ": grant the user the role this call needs (see the provider README)"
	case s == http.StatusNotFound:
		code = driver.NotFound
	case s == http.StatusConflict:
		code = driver.Aborted
	case s == http.StatusBadRequest:
		code, hint = driver.InvalidArgument, ": fix the machine class"
	case s == http.StatusTooManyRequests, s >= 500:
		code = driver.Unavailable
	}
	return driver.Errorf(code, "openstack: %s: %s (%s)%s", op, msg, detail, hint)
}

// serviceMessage extracts the kind and message of an OpenStack error body: Nova and Cinder
// {"<kind>": {"message": ...}}, Neutron {"NeutronError": {"type", "message"}}, Keystone
// {"error": {"title", "message"}}, Glance's {"message", "code", "title"} (webob's JSON, whose
// message carries HTML line breaks), or plain text.
func serviceMessage(body []byte) (kind, msg string) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) == nil {
		for k, raw := range top {
			var inner struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Title   string `json:"title"`
			}
			if json.Unmarshal(raw, &inner) != nil || inner.Message == "" {
				continue
			}
			kind = k
			if inner.Type != "" {
				kind = inner.Type
			}
			return kind, clip(inner.Message)
		}
		var flat struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &flat) == nil && flat.Message != "" {
			return "", clip(flat.Message)
		}
	}
	// Plain text: "404 Not Found\n\nNo image found with ID ...".
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var parts []string
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || i == 0 && len(lines) > 1 {
			continue
		}
		parts = append(parts, l)
	}
	return "", clip(strings.Join(parts, " "))
}

func clip(s string) string {
	const maxLen = 512
	// webob (Glance) ends messages with "<br /><br />" and newlines.
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "<br />", " ")), " ")
	return truncate.String(s, maxLen)
}

// requestID returns the request ID OpenStack put in a response.
func requestID(h http.Header) string {
	for _, k := range []string{"X-Openstack-Request-Id", "X-Compute-Request-Id", "X-Request-Id"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

func isNotFound(err error) bool {
	return gophercloud.ResponseCodeIs(err, http.StatusNotFound)
}
