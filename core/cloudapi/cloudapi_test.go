package cloudapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
)

// TestErrorCode: the error_code label is the code's number, as MCM's Azure provider writes it
// (strconv.Itoa of the status code), and Internal's for an error without a code.
func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{driver.Error(driver.Unavailable, "busy"), "14"},
		{fmt.Errorf("azure: %w", driver.Error(driver.ResourceExhausted, "quota")), "8"},
		{driver.Error(driver.Uninitialized, "not yet"), "17"},
		{errors.New("plain"), "13"},
		{context.DeadlineExceeded, "13"},
	} {
		if got := ErrorCode(tc.err); got != tc.want {
			t.Errorf("ErrorCode(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
