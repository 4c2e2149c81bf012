package fakeazure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/fake/server"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9/fake"
	resourcesfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources/v3/fake"
)

// fakePollerStatus is the header the SDK's fake LRO pattern carries the operation state in.
const fakePollerStatus = "Fake-Poller-Status"

// fakePollSuffix is what the SDK's fake poller appends to a resource path to poll it.
const fakePollSuffix = "/get/fake/status"

// Request is one request the cloud answered.
type Request struct {
	Time   time.Time
	Method string
	Host   string
	Path   string
	// Op is the SDK operation (OpCreateVM, ...), OpToken or OpOpenIDMetadata.
	Op string
	// Poll is true for the status polls of a long-running operation.
	Poll bool
	// Status is the HTTP status answered (0 when the request failed without a response).
	Status    int
	RequestID string
}

// Operation is the request's Op.
func (r Request) Operation() string { return r.Op }

// Transport answers the SDK clients' requests: it authenticates them, injects faults, counts
// them and hands them to the SDK's fake servers. Use it as ClientOptions.Transport.
type Transport struct {
	c *Cloud
	// servers holds one SDK fake server transport per client the provider uses, by client name
	// (the first part of the operation name). Not the packages' ServerFactoryTransport: a
	// factory can dispatch to every fake server of its package, so it links all of them (about
	// 25 MB of the machinist binary, where `machinist fakecloud` serves this fake).
	servers map[string]interface {
		Do(*http.Request) (*http.Response, error)
	}
}

type lro struct {
	op string
	// complete runs when the operation reaches its terminal state. It returns the resource to
	// answer with (nil keeps the fake's answer) or the error the operation failed with.
	complete func() (any, *ARMError)
}

type pendingPoller struct {
	op     string
	rawURL string
}

type pendingPager struct {
	op       string
	nextLink string
}

func newTransport(c *Cloud) *Transport {
	vms, disks, images := c.compute.virtualMachinesServer(), c.compute.disksServer(), c.compute.imagesServer()
	nics, subnets := c.network.interfacesServer(), c.network.subnetsServer()
	resources, groups := c.resources.resourcesServer(), c.resources.resourceGroupsServer()
	return &Transport{c: c, servers: map[string]interface {
		Do(*http.Request) (*http.Response, error)
	}{
		"VirtualMachinesClient":      computefake.NewVirtualMachinesServerTransport(&vms),
		"DisksClient":                computefake.NewDisksServerTransport(&disks),
		"VirtualMachineImagesClient": computefake.NewVirtualMachineImagesServerTransport(&images),
		"InterfacesClient":           networkfake.NewInterfacesServerTransport(&nics),
		"SubnetsClient":              networkfake.NewSubnetsServerTransport(&subnets),
		"Client":                     resourcesfake.NewServerTransport(&resources),
		"ResourceGroupsClient":       resourcesfake.NewResourceGroupsServerTransport(&groups),
	}}
}

// service is the part of the cloud a request is for.
type service int

const (
	unreachable service = iota
	login
	resourceManager
)

// RoundTrip answers one request, as the driver's Options.HTTPTransport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) { return t.Do(req) }

// Do answers one request, as an SDK client's ClientOptions.Transport.
func (t *Transport) Do(req *http.Request) (*http.Response, error) {
	switch req.URL.Host {
	case LoginHost:
		return t.answer(req, login)
	case ARMHost:
		return t.answer(req, resourceManager)
	}
	return t.answer(req, unreachable)
}

// answer answers one request for svc and counts it. The SDK operation comes from the request's
// context (runtime.CtxAPINameKey), as the SDK clients set it.
func (t *Transport) answer(req *http.Request, svc service) (*http.Response, error) {
	c := t.c.st
	rec := Request{Time: time.Now(), Method: req.Method, Host: req.URL.Host, Path: req.URL.Path}
	rec.Op, _ = req.Context().Value(runtime.CtxAPINameKey{}).(string)
	rec.Poll = strings.HasSuffix(req.URL.Path, fakePollSuffix)

	var resp *http.Response
	var err error
	// Like net/http, a request whose context is already done is not sent.
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	switch svc {
	case login:
		resp, rec.Op = t.c.login.serveLogin(req)
	case resourceManager:
		resp, err = t.serveARM(req, rec)
	default:
		err = fmt.Errorf("fakeazure: dial tcp: lookup %s: no such host", req.URL.Host)
	}

	c.mu.Lock()
	c.seq++
	rec.RequestID = fmt.Sprintf("5e0a0000-0000-4000-8000-%012x", c.seq)
	if resp != nil {
		rec.Status = resp.StatusCode
		resp.Header.Set("x-ms-request-id", rec.RequestID)
		resp.Header.Set("x-ms-correlation-request-id", rec.RequestID)
	}
	c.mu.Unlock()
	t.c.Requests.Add(rec)
	return resp, err
}

func (t *Transport) serveARM(req *http.Request, rec Request) (*http.Response, error) {
	if e := t.c.st.authorize(req, rec.Op); e != nil {
		return armResponse(req, e), nil
	}
	if e := takeFault(&t.c.Faults, rec.Op, rec.Poll); e != nil {
		return armResponse(req, e), nil
	}
	resKey := strings.ToLower(server.SanitizePagerPollerPath(req.URL.Path))
	if !rec.Poll && req.Method != http.MethodGet {
		// A new operation on a resource whose previous LRO was abandoned by its client: Azure
		// would have finished the old one by now.
		t.drainPoller(req.Context(), resKey)
	}
	if !rec.Poll && req.Method == http.MethodGet && !strings.Contains(req.URL.Path, "/fake_page_") {
		t.drainPager(req.Context(), resKey)
	}

	resp, err := t.route(req, rec.Op)
	if err != nil {
		var ae *ARMError
		if errors.As(err, &ae) {
			return armResponse(req, ae), nil
		}
		return nil, err
	}
	t.track(req, resp, rec.Op, resKey)
	return resp, nil
}

// route hands a request to the SDK fake server of its client. The fake servers see a context
// that is never cancelled: their dispatchers race a send against a closed channel when the
// request's context ends mid-dispatch, which panics (Azure/azure-sdk-for-go#25895). The answer is
// instantaneous, and Do has checked the context before.
func (t *Transport) route(req *http.Request, op string) (*http.Response, error) {
	req = req.WithContext(context.WithoutCancel(req.Context()))
	client, _, _ := strings.Cut(op, ".")
	if srv, ok := t.servers[client]; ok {
		return srv.Do(req)
	}
	return armResponse(req, armErr(http.StatusBadRequest, "NoRegisteredProviderFound",
		"fakeazure does not serve the operation %q (%s %s)", op, req.Method, req.URL.Path)), nil
}

// track follows LROs and pagers through the responses: it completes an LRO on its terminal
// answer and remembers unfinished ones so they can be drained when abandoned.
func (t *Transport) track(req *http.Request, resp *http.Response, op, resKey string) {
	c := t.c.st
	if status := resp.Header.Get(fakePollerStatus); status != "" {
		if isTerminal(status) {
			c.mu.Lock()
			delete(c.pending, resKey)
			l := c.lros[resKey]
			delete(c.lros, resKey)
			c.mu.Unlock()
			if l != nil {
				result, fail := l.complete()
				switch {
				case fail != nil:
					resp.StatusCode = http.StatusOK
					resp.Status = "200 OK"
					resp.Header.Set(fakePollerStatus, "Failed")
					resp.Header.Set("x-ms-error-code", fail.Code)
					setBody(resp, fail.JSON())
				case result != nil:
					if b, err := json.Marshal(result); err == nil {
						setBody(resp, b)
					}
				}
			}
		} else {
			c.mu.Lock()
			c.pending[resKey] = pendingPoller{op: op, rawURL: req.URL.Scheme + "://" + req.URL.Host + server.SanitizePagerPollerPath(req.URL.Path) + fakePollSuffix + "?" + req.URL.RawQuery}
			c.mu.Unlock()
		}
		return
	}
	if req.Method == http.MethodGet && strings.Contains(op, "Pager") && resp.StatusCode == http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		setBody(resp, body)
		var page struct {
			NextLink string `json:"nextLink"`
		}
		_ = json.Unmarshal(body, &page)
		c.mu.Lock()
		if page.NextLink != "" {
			c.pagers[resKey] = pendingPager{op: op, nextLink: page.NextLink}
		} else {
			delete(c.pagers, resKey)
		}
		c.mu.Unlock()
	}
}

// drainPoller runs an abandoned LRO of resKey to its end.
func (t *Transport) drainPoller(ctx context.Context, resKey string) {
	for range 100000 {
		t.c.st.mu.Lock()
		p, ok := t.c.st.pending[resKey]
		t.c.st.mu.Unlock()
		if !ok {
			return
		}
		req, err := http.NewRequestWithContext(context.WithValue(context.WithoutCancel(ctx), runtime.CtxAPINameKey{}, p.op), http.MethodGet, p.rawURL, nil)
		if err != nil {
			return
		}
		resp, err := t.route(req, p.op)
		if err != nil || resp.Header.Get(fakePollerStatus) == "" {
			t.c.st.mu.Lock()
			delete(t.c.st.pending, resKey)
			t.c.st.mu.Unlock()
			return
		}
		t.track(req, resp, p.op, resKey)
	}
}

// drainPager reads the remaining pages of an abandoned list of resKey, so a new list starts at
// the first page.
func (t *Transport) drainPager(ctx context.Context, resKey string) {
	for range 100000 {
		t.c.st.mu.Lock()
		p, ok := t.c.st.pagers[resKey]
		t.c.st.mu.Unlock()
		if !ok {
			return
		}
		req, err := http.NewRequestWithContext(context.WithValue(context.WithoutCancel(ctx), runtime.CtxAPINameKey{}, p.op), http.MethodGet, p.nextLink, nil)
		if err != nil {
			return
		}
		resp, err := t.route(req, p.op)
		if err != nil {
			t.c.st.mu.Lock()
			delete(t.c.st.pagers, resKey)
			t.c.st.mu.Unlock()
			return
		}
		t.track(req, resp, p.op, resKey)
	}
}

// settle drains every abandoned LRO.
func (t *Transport) settle() {
	t.c.st.mu.Lock()
	keys := make([]string, 0, len(t.c.st.pending))
	for k := range t.c.st.pending {
		keys = append(keys, k)
	}
	t.c.st.mu.Unlock()
	for _, k := range keys {
		t.drainPoller(context.Background(), k)
	}
}

func isTerminal(status string) bool {
	switch strings.ToLower(status) {
	case "succeeded", "failed", "canceled", "cancelled":
		return true
	}
	return false
}

// armResponse renders an ARM error as the HTTP response the service would send.
func armResponse(req *http.Request, e *ARMError) *http.Response {
	resp := &http.Response{
		StatusCode: e.Status,
		Status:     fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status)),
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Request:    req,
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	resp.Header.Set("x-ms-error-code", e.Code)
	setBody(resp, e.JSON())
	return resp
}

func jsonResponse(req *http.Request, status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	resp := &http.Response{
		StatusCode: status,
		Status:     fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Request:    req,
	}
	setBody(resp, b)
	return resp
}

func setBody(resp *http.Response, b []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp.Header.Set("Content-Length", fmt.Sprint(len(b)))
}
