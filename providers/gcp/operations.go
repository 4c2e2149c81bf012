package gcp

import (
	"context"

	compute "google.golang.org/api/compute/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// await waits within ctx until a zonal operation is DONE, with zoneOperations.wait (Compute
// Engine holds each wait until the operation is done or about two minutes pass), and returns
// its error, an *operationError, when it failed.
func (d *Driver) await(ctx context.Context, cs *clientSet, zone string, op *compute.Operation) error {
	err := wait.PollUntilContextCancel(ctx, d.opts.PollInterval, true, func(ctx context.Context) (bool, error) {
		if op.Status == "DONE" {
			return true, nil
		}
		got, err := cs.waitOperation(ctx, zone, op.Name)
		if err != nil {
			return false, err
		}
		op = got
		return op.Status == "DONE", nil
	})
	if err != nil {
		return err
	}
	if op.Error != nil && len(op.Error.Errors) > 0 {
		return &operationError{op: op}
	}
	return nil
}
