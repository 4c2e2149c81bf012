//go:build !slim

package main

import (
	"io"
	"strings"
	"testing"

	"github.com/machinist-io/machinist/harness/testenv"
)

// TestRunRefusesBadFlags: values that cannot work are refused before anything starts, naming
// the flag.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0"}, "--port 0"},
		{[]string{"--leader-elect-resource-lock", "configmaps"}, "--leader-elect-resource-lock"},
		{[]string{"--leader-elect-lease-duration", "5s"}, "--leader-elect-lease-duration"},
		{[]string{"--machine-safety-apiserver-statuscheck-period", "10s"}, "--machine-safety-apiserver-statuscheck-period"},
		{[]string{"--machine-health-timeout", "0s"}, "--machine-health-timeout"},
		{[]string{"--machine-preserve-timeout", "-1h"}, "--machine-preserve-timeout"},
		{[]string{"--machine-inplace-update-timeout", "-1m"}, "--machine-inplace-update-timeout"},
		{[]string{"--fallback-exhausted-ttl", "0s"}, "--fallback-exhausted-ttl"},
		{[]string{"--driver-endpoint", "openstack"}, "--driver-endpoint"},
		{[]string{"--driver-endpoint", "openstack=unix:///tmp/x.sock"}, "--driver-insecure"},
		{[]string{"--address", "not-an-ip"}, "--address"},
		{[]string{"--driver-exec", "openstack"}, "--driver-exec"},
		{[]string{"--driver-exec", "local=/nonexistent/machinist-local"}, "--driver-exec"},
	} {
		args := append([]string{"machinist", "run", "--control-kubeconfig", "/nonexistent"}, tc.args...)
		err := newApp(io.Discard, io.Discard).Run(args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// TestRunDialinPlainTextOnlyOnLoopback: --insecure serves the dial-in listener only on loopback
// or a unix socket.
func TestRunDialinPlainTextOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{":5000", "0.0.0.0:5000", "10.1.2.3:5000"} {
		err := newApp(io.Discard, io.Discard).Run([]string{"machinist", "run", "--control-kubeconfig", "/nonexistent", "--dialin-listen", addr, "--driver-insecure"})
		if err == nil || !strings.Contains(err.Error(), "--dialin-listen with --driver-insecure") || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--dialin-listen %s --driver-insecure: %v, want a refusal naming loopback", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:5000", "localhost:5000", "[::1]:5000", "unix:///tmp/dialin.sock"} {
		if err := loopbackOnly(addr, true); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// TestRunSaysToInstallCRDs: against a cluster without the machine.sapcloud.io CRDs, `machinist
// run` stops at once and says how to install them.
func TestRunSaysToInstallCRDs(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDDirs())
	err := newApp(io.Discard, io.Discard).Run([]string{"machinist", "run", "--control-kubeconfig", env.KubeconfigPath, "--port", "-1"})
	if err == nil || !strings.Contains(err.Error(), "kubectl apply -f kubernetes/crds/") || !strings.Contains(err.Error(), "MachineDeployment") {
		t.Fatalf("error %v, want one naming the missing kinds and how to install the CRDs", err)
	}
}
