// Package graceful ends what runs in two steps: ask it to stop, and force it when it has not
// stopped within a grace period. gRPC servers (GracefulStop, then Stop) and child processes
// (SIGTERM, then SIGKILL) are stopped this way across the tree.
package graceful

import (
	"os"
	"syscall"
	"time"
)

// Stop calls gentle and, if it has not returned within grace, force; it returns once gentle has
// returned, and whether force was needed. force must make gentle return (as grpc.Server.Stop
// makes GracefulStop return).
func Stop(gentle, force func(), grace time.Duration) (forced bool) {
	stopped := make(chan struct{})
	go func() {
		gentle()
		close(stopped)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-stopped:
		return false
	case <-t.C:
		force()
		<-stopped
		return true
	}
}

// Process sends p SIGTERM and, if exited is not closed within grace, SIGKILL; it returns once
// exited is closed (by whoever waits for the process), and whether the kill was needed.
func Process(p *os.Process, exited <-chan struct{}, grace time.Duration) (killed bool) {
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return false
	case <-t.C:
		_ = p.Kill()
		<-exited
		return true
	}
}
