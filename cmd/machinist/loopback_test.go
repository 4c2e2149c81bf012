package main

import (
	"strings"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	for _, c := range []struct {
		addr   string
		unixOK bool
		ok     bool
	}{
		{"127.0.0.1:8086", false, true},
		{"127.0.0.2:8086", false, true},
		{"[::1]:8086", false, true},
		{"localhost:8086", false, true},
		{"unix:///run/x.sock", true, true},
		{"unix:///run/x.sock", false, false},
		{":8086", false, false},
		{"0.0.0.0:8086", false, false},
		{"10.1.2.3:8086", true, false},
		{"example.com:8086", false, false},
		{"127.0.0.1", false, false}, // no port
	} {
		err := loopbackOnly(c.addr, c.unixOK)
		if (err == nil) != c.ok {
			t.Errorf("loopbackOnly(%q, unix %v) = %v, want ok %v", c.addr, c.unixOK, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "listen on 127.0.0.1:<port>") && !strings.Contains(err.Error(), "missing port") {
			t.Errorf("loopbackOnly(%q): %v does not say what to listen on", c.addr, err)
		}
	}
}
