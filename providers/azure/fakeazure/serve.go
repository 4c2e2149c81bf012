package fakeazure

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/fake/server"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/machinist-io/machinist/providers/kit/fakekit"
)

// Serve serves c over HTTPS on l until the server is closed: Microsoft Entra ID and Azure
// Resource Manager at one URL, told apart by path, with a certificate from a CA of its own
// (fakekit.ServeTLS). Point a custom cloud at it (activeDirectoryAuthorityHost and
// resourceManagerEndpoint: the server's URL with a trailing slash) and trust its CACert. wrap, when
// set, wraps the handler (to observe requests).
func (c *Cloud) Serve(l net.Listener, wrap func(http.Handler) http.Handler) (*fakekit.Server, error) {
	var h http.Handler = c.transport
	if wrap != nil {
		h = wrap(h)
	}
	srv, err := fakekit.ServeTLS("fakeazure", l, h)
	if err != nil {
		return nil, err
	}
	c.st.mu.Lock()
	c.st.audiences = append(c.st.audiences, srv.URL)
	c.st.mu.Unlock()
	return srv, nil
}

// ServeHTTP answers a request that arrived over the network: the control requests, Entra ID's
// (any path not under /subscriptions) and ARM's, whose SDK operation it works out from the method
// and path, as the SDK's fake servers need it.
func (t *Transport) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fakekit.Serves(r) {
		t.c.control().ServeHTTP(w, r)
		return
	}
	req := r.Clone(r.Context())
	req.RequestURI = ""
	req.URL.Scheme, req.URL.Host = "https", r.Host
	svc := login
	if strings.HasPrefix(strings.ToLower(r.URL.Path), "/subscriptions/") {
		svc = resourceManager
		op := t.c.st.opOf(r.Method, r.URL.Path)
		if op == "" {
			writeResponse(w, armResponse(req, armErr(http.StatusBadRequest, "NoRegisteredProviderFound",
				"fakeazure does not serve %s %s", r.Method, r.URL.Path)))
			return
		}
		req = req.WithContext(context.WithValue(req.Context(), runtime.CtxAPINameKey{}, op))
	}
	resp, err := t.answer(req, svc)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	writeResponse(w, resp)
}

func writeResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// armRoute maps an ARM method and path (poll and page suffixes removed) to the SDK operation.
type armRoute struct {
	method string
	path   *regexp.Regexp
	op     string
}

var armRoutes []armRoute

func init() {
	const (
		sub = `^/subscriptions/[^/]+`
		rg  = sub + `/resourcegroups/[^/]+`
		cmp = rg + `/providers/microsoft\.compute`
		net = rg + `/providers/microsoft\.network`
		img = sub + `/providers/microsoft\.compute/locations/[^/]+/publishers/[^/]+/artifacttypes/vmimage/offers/[^/]+/skus/[^/]+/versions`
	)
	add := func(method, path, op string) {
		armRoutes = append(armRoutes, armRoute{method, regexp.MustCompile("(?i)" + path + "$"), op})
	}
	add(http.MethodPut, cmp+`/virtualmachines/[^/]+`, OpCreateVM)
	add(http.MethodGet, cmp+`/virtualmachines/[^/]+`, OpGetVM)
	add(http.MethodPatch, cmp+`/virtualmachines/[^/]+`, OpUpdateVM)
	add(http.MethodDelete, cmp+`/virtualmachines/[^/]+`, OpDeleteVM)
	add(http.MethodGet, cmp+`/virtualmachines`, OpListVMs)
	add(http.MethodPut, cmp+`/disks/[^/]+`, OpCreateDisk)
	add(http.MethodGet, cmp+`/disks/[^/]+`, OpGetDisk)
	add(http.MethodPatch, cmp+`/disks/[^/]+`, OpUpdateDisk)
	add(http.MethodDelete, cmp+`/disks/[^/]+`, OpDeleteDisk)
	add(http.MethodGet, cmp+`/disks`, OpListDisks)
	add(http.MethodGet, img+`/[^/]+`, OpGetImage)
	add(http.MethodGet, img, OpListImages)
	add(http.MethodPut, net+`/networkinterfaces/[^/]+`, OpCreateNIC)
	add(http.MethodGet, net+`/networkinterfaces/[^/]+`, OpGetNIC)
	add(http.MethodDelete, net+`/networkinterfaces/[^/]+`, OpDeleteNIC)
	add(http.MethodGet, net+`/networkinterfaces`, OpListNICs)
	add(http.MethodGet, net+`/virtualnetworks/[^/]+/subnets/[^/]+`, OpGetSubnet)
	add(http.MethodGet, rg+`/resources`, OpListResources)
	add(http.MethodGet, rg, OpGetGroup)
	add(http.MethodHead, rg, OpCheckGroup)
	add(http.MethodPut, rg, OpCreateGroup)
	add(http.MethodDelete, rg, OpDeleteGroup)
}

// opOf is the SDK operation of an ARM request: a poll belongs to the operation it polls, any
// other request is found in armRoutes. "" when the fake does not serve it.
func (c *state) opOf(method, path string) string {
	clean := server.SanitizePagerPollerPath(path)
	if strings.HasSuffix(path, fakePollSuffix) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pending[strings.ToLower(clean)].op
	}
	for _, r := range armRoutes {
		if r.method == method && r.path.MatchString(clean) {
			return r.op
		}
	}
	return ""
}

// State is what a cloud holds, as the control endpoint dumps it.
type State struct {
	Resources []Resource `json:"resources"`
	// Requests is how many requests the cloud answered.
	Requests int `json:"requests"`
}

// State returns the cloud's resources and request count.
func (c *Cloud) State() State {
	res := c.Resources()
	if res == nil {
		res = []Resource{}
	}
	return State{Resources: res, Requests: c.Requests.Len()}
}

// control answers the control requests (fakekit.Control).
func (c *Cloud) control() *fakekit.Control[Fault, Request] {
	return &fakekit.Control[Fault, Request]{
		Name: "fakeazure", State: func() any { return c.State() }, Faults: &c.Faults, Requests: &c.Requests,
		Check: func(f Fault) error {
			if f.Err == nil || f.Err.Status < 400 {
				return fmt.Errorf("the fault needs an Err with an HTTP error status")
			}
			return nil
		},
		Example: fmt.Sprintf(`{"op":%q,"times":2,"Err":{"Status":503,"Code":"ServerBusy","Message":"busy"}}`, OpCreateVM),
	}
}
