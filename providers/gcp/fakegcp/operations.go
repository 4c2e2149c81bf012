package fakegcp

import (
	"context"
	"fmt"
	"sort"
	"time"

	compute "google.golang.org/api/compute/v1"
)

// operation is a zonal operation: RUNNING until doneAt, then DONE with finish's effects applied
// (finish returns the error the operation ends with, or nil).
type operation struct {
	*compute.Operation
	zone   string
	doneAt time.Time
	finish func() *OperationError
}

// startOperationLocked records an operation of kind on target (a resource path below the
// project) that finishes after the fake's delay (or delay, when set).
func (c *state) startOperationLocked(zone, kind, target string, delay time.Duration, finish func() *OperationError) *operation {
	if delay <= 0 {
		delay = c.opDelay
	}
	now := c.clock.Now()
	id := c.newIDLocked()
	name := fmt.Sprintf("operation-%d-%x", now.UnixMilli(), id)
	op := &operation{
		Operation: &compute.Operation{
			Kind: "compute#operation", Id: id, Name: name, OperationType: kind, Status: "RUNNING", Progress: 0,
			InsertTime: c.timestamp(), StartTime: c.timestamp(), User: "machinist@" + c.project + ".iam.gserviceaccount.com",
			TargetLink: c.link("projects/%s/%s", c.project, target), Zone: c.link("projects/%s/zones/%s", c.project, zone),
			SelfLink: c.link("projects/%s/zones/%s/operations/%s", c.project, zone, name),
		},
		zone:   zone,
		doneAt: now.Add(delay),
		finish: finish,
	}
	c.operations[zone+"/"+name] = op
	return op
}

// settleLocked finishes the operations that are due, in the order they become due.
func (c *state) settleLocked() {
	now := c.clock.Now()
	var due []*operation
	for _, op := range c.operations {
		if op.Status != "DONE" && !op.doneAt.After(now) {
			due = append(due, op)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].doneAt.Before(due[j].doneAt) })
	for _, op := range due {
		c.completeLocked(op)
	}
}

func (c *state) completeLocked(op *operation) {
	var failed *OperationError
	if op.finish != nil {
		failed = op.finish()
	}
	op.Status = "DONE"
	op.Progress = 100
	op.EndTime = c.timestamp()
	if failed == nil {
		return
	}
	zoneLink := fmt.Sprintf("projects/%s/zones/%s", c.project, op.zone)
	item := &compute.OperationErrorErrors{Code: failed.Code, Message: failed.message(zoneLink)}
	if q := failed.Quota; q != nil {
		item.ErrorDetails = append(item.ErrorDetails, &compute.OperationErrorErrorsErrorDetails{QuotaInfo: &compute.QuotaExceededInfo{
			MetricName: q.Metric, LimitName: q.Limit, Limit: q.Value, Dimensions: map[string]string{"region": q.Region},
		}})
	}
	if failed.Reason != "" {
		item.ErrorDetails = append(item.ErrorDetails, &compute.OperationErrorErrorsErrorDetails{ErrorInfo: &compute.ErrorInfo{
			Reason: failed.Reason, Domain: "compute.googleapis.com", Metadatas: map[string]string{"zone": op.zone},
		}})
	}
	op.Error = &compute.OperationError{Errors: []*compute.OperationErrorErrors{item}}
	status := failed.HTTPStatus
	if status == 0 {
		status = 400
	}
	op.HttpErrorStatusCode = int64(status)
	op.HttpErrorMessage = statusText(status)
}

// operationLocked returns the operation of a zone, settled.
func (c *state) operationLocked(zone, name string) (*operation, bool) {
	c.settleLocked()
	op, ok := c.operations[zone+"/"+name]
	return op, ok
}

// waitOperation holds the request until the operation is done, the fake's wait timeout passes or
// ctx ends, as zoneOperations.wait does, and returns it then (DONE or not).
func (c *state) waitOperation(ctx context.Context, zone, name string) (*compute.Operation, bool) {
	c.mu.Lock()
	op, ok := c.operationLocked(zone, name)
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	until := op.doneAt
	if limit := c.clock.Now().Add(c.waitMax); limit.Before(until) {
		until = limit
	}
	done := op.Status == "DONE"
	c.mu.Unlock()
	if !done {
		t := c.clock.NewTimer(until.Sub(c.clock.Now()))
		select {
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	op, _ = c.operationLocked(zone, name)
	return cloneJSON(op.Operation), true
}

func statusText(status int) string {
	switch status {
	case 400:
		return "BAD REQUEST"
	case 403:
		return "FORBIDDEN"
	case 404:
		return "NOT FOUND"
	case 409:
		return "CONFLICT"
	case 503:
		return "SERVICE UNAVAILABLE"
	}
	return "ERROR"
}
