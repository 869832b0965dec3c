package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/deploy"
)

func TestFaultSections(t *testing.T) {
	src := `ports:
  - name: a
    fault:
      ingress: {drop_percent: 0.5, duplicate_percent: 2, reorder_percent: 10, reorder_depth: 4, delay_us: 300, seed: 7}
      egress: {reorder_percent: 5, reorder_depth: 2, delay_us: 50, seed: 9}
  - name: b
    fault: {reorder_percent: 10, reorder_depth: 3, delay_us: 50, ingress: {drop_percent: 1}}
  - name: c
    fault: {ingress: {delay_us: 20}}
`
	c, err := ParseConfig("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []dataplane.Fault{
		{ReorderPercent: 5, ReorderDepth: 2, Delay: 50 * time.Microsecond, Seed: 9,
			Ingress: dataplane.IngressFault{DropPercent: 0.5, DuplicatePercent: 2, ReorderPercent: 10, ReorderDepth: 4,
				Delay: 300 * time.Microsecond, Seed: 7}},
		// The original form stays egress, next to an ingress section.
		{ReorderPercent: 10, ReorderDepth: 3, Delay: 50 * time.Microsecond, Ingress: dataplane.IngressFault{DropPercent: 1}},
		{Ingress: dataplane.IngressFault{Delay: 20 * time.Microsecond}},
	}
	for i, w := range want {
		if got := c.Ports[i].fault(); got != w {
			t.Errorf("ports[%d] fault:\n got %+v\nwant %+v", i, got, w)
		}
		if !c.Ports[i].fault().Active() {
			t.Errorf("ports[%d]: fault not active", i)
		}
	}
}

func TestFaultSectionErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"both egress forms", "ports:\n  - name: a\n    fault: {delay_us: 5, egress: {delay_us: 5}}\n",
			"ports[0].fault.egress: egress keys are also given directly under fault"},
		{"unknown ingress key", "ports:\n  - name: a\n    fault: {ingress: {loss: 1}}\n",
			"field loss not found in fault.ingress (valid keys: drop_percent"},
		{"drop on egress", "ports:\n  - name: a\n    fault: {egress: {drop_percent: 1}}\n",
			"field drop_percent not found in fault.egress"},
		{"drop range", "ports:\n  - name: a\n    fault: {ingress: {drop_percent: 100.5}}\n",
			"ports[0].fault.ingress.drop_percent: 100.5 is not a percentage"},
		{"dup negative", "ports:\n  - name: a\n    fault: {ingress: {duplicate_percent: -1}}\n",
			"ports[0].fault.ingress.duplicate_percent: -1 is not a percentage"},
		{"ingress depth", "ports:\n  - name: a\n    fault: {ingress: {reorder_percent: 1}}\n",
			"ports[0].fault.ingress.reorder_depth: must be >= 1"},
		{"egress depth", "ports:\n  - name: a\n    fault: {egress: {reorder_percent: 1, reorder_depth: 1001}}\n",
			"ports[0].fault.egress.reorder_depth: 1001 is out of range"},
		{"ingress delay", "ports:\n  - name: a\n    fault: {ingress: {delay_us: 2000000}}\n",
			"ports[0].fault.ingress.delay_us: 2000000 is out of range"},
		{"unknown fault key lists sections", "ports:\n  - name: a\n    fault: {bogus: 1}\n",
			"valid keys: reorder_percent, reorder_depth, delay_us, ingress, egress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("t.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// TestLabFaultConfig: the configuration a lab generates for a prismd node
// with a fault key (package deploy) is read by prismd's own loader into
// the same impairment on every port, fractions included (egress reorder
// 2.5%: an int field read 0.5 as 0, silently), each port with its own
// seeds.
func TestLabFaultConfig(t *testing.T) {
	tp, err := deploy.Parse([]byte(`name: t1
topology:
  nodes:
    h1: {kind: host, ipv4: 10.0.0.1/24}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    sw1: {kind: prismd, fault: {ingress: {drop_percent: 0.5, duplicate_percent: 1, reorder_percent: 5, reorder_depth: 8, delay_us: 10}, egress: {reorder_percent: 2.5, reorder_depth: 4, delay_us: 20}}}
  links:
    - endpoints: ["h1:eth0", "sw1:p1"]
    - endpoints: ["h2:eth0", "sw1:p2"]
`))
	if err != nil {
		t.Fatal(err)
	}
	gen, err := deploy.NewPrismdConfig(tp, "sw1", "/run/prismd-lab/t1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := gen.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig("sw1.yaml", b)
	if err != nil {
		t.Fatalf("prismd refuses the lab's config: %v\n%s", err, b)
	}
	if len(c.Ports) != 2 {
		t.Fatalf("%d ports", len(c.Ports))
	}
	seeds := map[uint64]bool{}
	for i, p := range c.Ports {
		f := p.fault()
		seeds[f.Seed], seeds[f.Ingress.Seed] = true, true
		f.Seed, f.Ingress.Seed = 0, 0
		want := dataplane.Fault{ReorderPercent: 2.5, ReorderDepth: 4, Delay: 20 * time.Microsecond,
			Ingress: dataplane.IngressFault{DropPercent: 0.5, DuplicatePercent: 1, ReorderPercent: 5, ReorderDepth: 8, Delay: 10 * time.Microsecond}}
		if f != want {
			t.Errorf("ports[%d] fault (seeds aside):\n got %+v\nwant %+v", i, f, want)
		}
	}
	if len(seeds) != 4 || seeds[0] {
		t.Errorf("seeds %v: want 4 distinct non-zero ones (2 ports x 2 directions)", seeds)
	}
}
