package waitctx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/internal/waitctx"
)

func TestSleepEndsWhenTheClockHasAdvanced(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	done := make(chan error, 1)
	go func() { done <- waitctx.Sleep(context.Background(), clk, time.Minute) }()
	// The timer exists once Sleep waits on it; stepping before that would be lost.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatalf("Sleep never waited on the clock: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before the clock advanced", err)
	default:
	}
	clk.Step(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("Sleep after the clock advanced: %v, want nil", err)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- waitctx.Sleep(ctx, clk, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestSleepOfNothingOnlyChecksTheContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	if err := waitctx.Sleep(context.Background(), clk, 0); err != nil {
		t.Fatalf("Sleep(0): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitctx.Sleep(ctx, clk, -time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(-1s) with a cancelled context: %v, want context.Canceled", err)
	}
}
