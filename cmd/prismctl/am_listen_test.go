package main

import (
	"net"
	"strings"
	"testing"
)

// listenHint against the errors real listens give: a taken port, an
// address no interface has (TEST-NET-1), no port at all.
func TestListenHint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	for addr, want := range map[string]string{
		l.Addr().String(): "another AM",
		"192.0.2.1:7000":  "no interface",
		"bogus":           "HOST:PORT",
	} {
		_, err := net.Listen("tcp", addr)
		if err == nil {
			t.Fatalf("listen %s succeeded", addr)
		}
		if h := listenHint(err); !strings.Contains(h, want) {
			t.Errorf("listen %s (%v): hint %q, want it to say %q", addr, err, h, want)
		}
	}
}
