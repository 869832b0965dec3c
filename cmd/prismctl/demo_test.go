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

// TestPortTableSumsSeries: a per-port counter with more labels than port
// is shown as the sum of its series (the last one was shown as the
// port's total, e.g. drops="unsupported" for every reason).
func TestPortTableSumsSeries(t *testing.T) {
	text := `# HELP prismd_port_drops_total x
prismd_port_drops_total{port="p1",reason="link_local"} 3
prismd_port_drops_total{port="p1",reason="unsupported"} 0
prismd_port_drops_total{port="p2",reason="link_local"} 1.5e+06
prismd_port_receive_frames_total{port="p1"} 1.240368e+06
prismd_frames_total{class="data"} 9
`
	byPort, cols := portTable(text)
	if byPort["p1"]["prismd_port_drops_total"] != 3 || byPort["p2"]["prismd_port_drops_total"] != 1500000 ||
		byPort["p1"]["prismd_port_receive_frames_total"] != 1240368 || len(cols) != 2 || len(byPort) != 2 {
		t.Fatalf("table %v, columns %v", byPort, cols)
	}
}
