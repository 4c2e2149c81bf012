package main

import (
	"fmt"
	"net"
	"strings"
)

// loopbackOnly checks that a listen address is reachable from this machine only: localhost or a
// loopback IP with a port, or, when unixOK, a unix socket. It is the one check behind every
// listener that serves without authentication (autoscaler --insecure, run --dialin-listen with
// --driver-insecure, fakecloud); its error says what to listen on instead, callers add why.
func loopbackOnly(addr string, unixOK bool) error {
	if unixOK && strings.HasPrefix(addr, "unix:") {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	want := "127.0.0.1:<port>, [::1]:<port> or localhost:<port>"
	if unixOK {
		want = "127.0.0.1:<port>, [::1]:<port>, localhost:<port> or unix:///path"
	}
	return fmt.Errorf("%q is reachable from other machines: listen on %s", addr, want)
}
