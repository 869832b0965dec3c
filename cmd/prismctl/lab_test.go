package main

import (
	"testing"

	"github.com/prismd/prismd/deploy"
)

// TestAMCommand: 'lab up' suggests an AM on the first addressed host, with
// the lab's own copy of the topology (a renamed lab's MACs differ from the
// embedded topology's); a lab without a prismd switch gets no suggestion.
func TestAMCommand(t *testing.T) {
	for _, c := range []struct{ lab, want string }{
		{"spine-leaf", "h1 -- prismctl am --topology /s/t.yaml --listen 10.0.0.1:7000 --iface eth0"},
		{"bridge-pair", ""},
	} {
		src, err := deploy.Embedded(c.lab)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := deploy.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := amCommand(tp, "/s/t.yaml"); got != c.want {
			t.Errorf("%s: %q, want %q", c.lab, got, c.want)
		}
	}
}
