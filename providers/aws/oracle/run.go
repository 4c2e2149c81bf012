package oracle

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/machinist-io/machinist/providers/kit/oraclekit"

	"github.com/machinist-io/machinist/providers/aws/fakeaws"
)

// Run runs a scenario's steps through target against cloud and returns the normalized
// transcript. Each step's faults are cleared after it; the fake's other settings stay.
func Run(ctx context.Context, s Scenario, cloud *fakeaws.Cloud, target oraclekit.Target, driverName string) (Transcript, error) {
	tr := Transcript{Scenario: s.Name, Driver: driverName}
	created := map[string]string{}
	for i, st := range s.Steps {
		if st.Before != nil {
			st.Before(cloud)
		}
		cloud.Requests.Reset()
		call, err := s.call(st, created)
		if err != nil {
			return tr, err
		}
		res, err := target.Call(ctx, call)
		cloud.Faults.Clear()
		if err != nil {
			return tr, fmt.Errorf("oracle: %s step %q: %w", driverName, st.label(i), err)
		}
		if st.Op == oraclekit.Create && res.Code == "OK" {
			created[st.Machine] = res.ProviderID
		}
		ex := Exchange{Step: st.label(i), Result: res}
		for _, r := range seen(cloud.Requests.All()) {
			ex.Requests = append(ex.Requests, Request{Action: r.Action, Code: r.Code, Params: r.Params})
		}
		tr.Steps = append(tr.Steps, ex)
	}
	Normalize(&tr, cloud.IDPrefix())
	tr.Left = Left{Instances: len(cloud.Live()), Volumes: len(cloud.Volumes()), NetworkInterfaces: len(cloud.NetworkInterfaces())}
	return tr, nil
}

// seen drops the requests whose successful answer never reached the client: the SDK retried
// their invocation (it lost the connection while reading the answer, a race of its transport
// on loopback, aws/aws-sdk-go-v2#2737). They say nothing of the driver and would make
// transcripts differ from run to run.
func seen(reqs []fakeaws.Request) []fakeaws.Request {
	var out []fakeaws.Request
	for i, r := range reqs {
		retried := r.Code == "" && r.Invocation != "" && slices.ContainsFunc(reqs[i+1:], func(later fakeaws.Request) bool {
			return later.Invocation == r.Invocation
		})
		if !retried {
			out = append(out, r)
		}
	}
	return out
}

var (
	requestIDPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	tagParamPattern  = regexp.MustCompile(`^TagSpecification\.(\d+)\.Tag\.(\d+)\.(Key|Value)$`)
)

// Normalize makes a transcript comparable across runs and drivers: the cloud's random ID part
// is dropped (i-<prefix>000000002 becomes i-000000002; the rest is the fake's sequence, the same
// for the same launches), request IDs in messages become <request-id>, RunInstances' client
// token becomes <client-token> (Gardener's SDK makes a random one per call, machinist derives
// one from the machine: see Difference "client-token"), and each tag specification's tags are
// sorted by key (Gardener's provider writes them in Go's map order).
func Normalize(tr *Transcript, idPrefix string) {
	clean := func(s string) string {
		if idPrefix != "" {
			s = strings.ReplaceAll(s, idPrefix, "")
		}
		return s
	}
	for i := range tr.Steps {
		ex := &tr.Steps[i]
		ex.Result.ProviderID = clean(ex.Result.ProviderID)
		ex.Result.Message = requestIDPattern.ReplaceAllString(clean(ex.Result.Message), "<request-id>")
		if ex.Result.MachineList != nil {
			list := map[string]string{}
			for k, v := range ex.Result.MachineList {
				list[clean(k)] = v
			}
			ex.Result.MachineList = list
		}
		for j := range ex.Requests {
			r := &ex.Requests[j]
			params := map[string]string{}
			for k, v := range r.Params {
				params[k] = clean(v)
			}
			if _, ok := params["ClientToken"]; ok && r.Action == "RunInstances" {
				params["ClientToken"] = "<client-token>"
			}
			r.Params = sortTags(params)
		}
	}
}

// sortTags renumbers the tags of each TagSpecification.N in the order of their keys.
func sortTags(params map[string]string) map[string]string {
	type tag struct{ key, value string }
	specs := map[string]map[string]*tag{}
	out := map[string]string{}
	for k, v := range params {
		m := tagParamPattern.FindStringSubmatch(k)
		if m == nil {
			out[k] = v
			continue
		}
		if specs[m[1]] == nil {
			specs[m[1]] = map[string]*tag{}
		}
		t := specs[m[1]][m[2]]
		if t == nil {
			t = &tag{}
			specs[m[1]][m[2]] = t
		}
		if m[3] == "Key" {
			t.key = v
		} else {
			t.value = v
		}
	}
	for spec, tags := range specs {
		list := make([]*tag, 0, len(tags))
		for _, t := range tags {
			list = append(list, t)
		}
		sort.Slice(list, func(a, b int) bool { return list[a].key < list[b].key })
		for i, t := range list {
			prefix := "TagSpecification." + spec + ".Tag." + strconv.Itoa(i+1) + "."
			out[prefix+"Key"], out[prefix+"Value"] = t.key, t.value
		}
	}
	return out
}
