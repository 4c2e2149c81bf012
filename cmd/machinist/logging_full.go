//go:build !slim || machinecontroller

package main

import (
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/machinist-io/machinist/internal/logbridge"
)

// controller-runtime, which the controllers and the autoscaler server link, logs through the
// handler of setupLogging like everything else. It keeps the first logger it is given and, when
// it logs with none given for 30 s, prints "log.SetLogger(...) was never called" with a stack
// trace instead; so it gets a forwarding logger here, before any subcommand runs.
func init() { ctrllog.SetLogger(logbridge.Logger("")) }
