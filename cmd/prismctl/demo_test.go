package main

import (
	"strings"
	"testing"

	"github.com/prismd/prismd/deploy"
)

// TestDemoHeader: the demo says up front which name its lab runs under and
// why it is not the topology's own.
func TestDemoHeader(t *testing.T) {
	tp, err := deploy.Load("single")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ arg, orig, want string }{
		{"/tmp/x/wk4.yaml", "wk4", "== lab demo1a2b (wk4 from /tmp/x/wk4.yaml, renamed so it cannot collide with a running lab): 2 hosts, 1 switches, 2 links"},
		{"spine-leaf", "spine-leaf", "== lab demo1a2b (spine-leaf, renamed so it cannot collide with a running lab): "},
	} {
		if got := demoHeader("demo1a2b", c.arg, c.orig, tp); !strings.HasPrefix(got, c.want) {
			t.Errorf("--topology %s: %q, want %q", c.arg, got, c.want)
		}
	}
}
