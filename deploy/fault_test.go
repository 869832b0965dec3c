package deploy

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestParseFault: a prismd node's fault key is parsed into Node.Fault,
// survives Marshal, and reaches every port of the generated prismd
// configuration with the same impairment and seeds of the port's own.
func TestParseFault(t *testing.T) {
	src := strings.Replace(minimal, "{kind: prismd}",
		"{kind: prismd, fault: {ingress: {drop_percent: 1.5, duplicate_percent: 1, reorder_percent: 5, reorder_depth: 8}, egress: {reorder_percent: 3, reorder_depth: 4, delay_us: 20}}}", 1)
	tp, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Fault{Ingress: &IngressFault{DropPercent: 1.5, DuplicatePercent: 1, ReorderPercent: 5, ReorderDepth: 8},
		Egress: &EgressFault{ReorderPercent: 3, ReorderDepth: 4, DelayUS: 20}}
	if got := tp.Nodes["sw1"].Fault; !reflect.DeepEqual(got, want) {
		t.Fatalf("sw1 fault %+v, want %+v", got, want)
	}
	back, err := Parse(tp.Marshal())
	if err != nil {
		t.Fatalf("reparse of Marshal: %v\n%s", err, tp.Marshal())
	}
	if !reflect.DeepEqual(stripLines(back), stripLines(tp)) {
		t.Errorf("Marshal round trip differs:\n%s", tp.Marshal())
	}

	c, err := NewPrismdConfig(tp, "sw1", "/run/prismd-lab/t1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Read back as prismd would: the keys of its port schema.
	var cfg struct {
		Ports []struct {
			Name  string `yaml:"name"`
			Fault struct {
				Ingress map[string]any `yaml:"ingress"`
				Egress  map[string]any `yaml:"egress"`
			} `yaml:"fault"`
		} `yaml:"ports"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("config is not YAML: %v\n%s", err, b)
	}
	if len(cfg.Ports) != 2 {
		t.Fatalf("%d ports in\n%s", len(cfg.Ports), b)
	}
	seeds := map[any]string{}
	for _, p := range cfg.Ports {
		in, eg := p.Fault.Ingress, p.Fault.Egress
		if in["drop_percent"] != 1.5 || in["duplicate_percent"] != 1 || in["reorder_percent"] != 5 || in["reorder_depth"] != 8 ||
			eg["reorder_percent"] != 3 || eg["reorder_depth"] != 4 || eg["delay_us"] != 20 {
			t.Errorf("port %s fault ingress %v egress %v, want the node's", p.Name, in, eg)
		}
		for dir, s := range map[string]any{"ingress": in["seed"], "egress": eg["seed"]} {
			if s == nil {
				t.Errorf("port %s %s has no seed", p.Name, dir)
			}
			if other, dup := seeds[s]; dup {
				t.Errorf("port %s %s seed %v is also %s's: the ports would drop and reorder in step", p.Name, dir, s, other)
			}
			seeds[s] = p.Name + " " + dir
		}
	}
	// Reproducible: the same topology gives the same seeds.
	c2, _ := NewPrismdConfig(tp, "sw1", "/run/prismd-lab/t1")
	if b2, _ := c2.Marshal(); string(b2) != string(b) {
		t.Errorf("a second config of the same lab differs:\n%s\n%s", b, b2)
	}
	// No fault, no key.
	plain, err := NewPrismdConfig(mustParse(t, "single"), "sw1", "/x")
	if err != nil {
		t.Fatal(err)
	}
	if pb, _ := plain.Marshal(); strings.Contains(string(pb), "fault") {
		t.Errorf("a node without fault got one:\n%s", pb)
	}
}

// TestParseFaultErrors: every mistake names the node or key, the rule and
// the line.
func TestParseFaultErrors(t *testing.T) {
	for _, tc := range []struct{ keys, want string }{
		{"fault: {ingress: {drop: 1}}", `6: unknown key "drop" in fault.ingress; valid keys are: drop_percent, duplicate_percent`},
		{"fault: {egres: {}}", `6: unknown key "egres" in fault; valid keys are: ingress, egress`},
		{"fault: {}", "6: node sw1: fault has neither ingress nor egress"},
		{"fault: {ingress: {drop_percent: 101}}", "6: node sw1: fault.ingress.drop_percent 101 is not a percentage; use 0..100"},
		{"fault: {ingress: {reorder_percent: 5}}", "6: node sw1: fault.ingress.reorder_depth must be >= 1 when reorder_percent > 0"},
		{"fault: {egress: {reorder_percent: 1, reorder_depth: 1001}}", "6: node sw1: fault.egress.reorder_depth 1001 is out of range; use 1..1000"},
		{"fault: {egress: {delay_us: -1}}", "6: node sw1: fault.egress.delay_us -1 is out of range; use 0..1000000 microseconds"},
		{"fault: [1]", "6: fault must be a mapping"},
		{"fault: {ingress: {reorder_percent: 5, reorder_depth: 2.5}}", "6: fault.ingress.reorder_depth must be a whole number written without a decimal point, not 2.5"},
		{"fault: {egress: {delay_us: 0.5}}", "6: fault.egress.delay_us must be a whole number written without a decimal point, not 0.5"},
		{"fault: {ingress: {drop_percent: many}}", `6: fault.ingress.drop_percent: "many" is not a number`},
	} {
		t.Run(tc.keys, func(t *testing.T) {
			_, err := Parse([]byte(strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, "+tc.keys+"}", 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Egress percentages take fractions like ingress ones (an int field
	// would have read 0.5 as 0: yaml truncates).
	tp, err := Parse([]byte(strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, fault: {egress: {reorder_percent: 0.5, reorder_depth: 2}}}", 1)))
	if err != nil || tp.Nodes["sw1"].Fault.Egress.ReorderPercent != 0.5 {
		t.Errorf("egress reorder_percent 0.5: %v", err)
	}
	_, err = Parse([]byte(strings.Replace(minimal, "h1: {kind: host, ipv4: 10.0.0.1/24}", "h1: {kind: host, ipv4: 10.0.0.1/24, fault: {ingress: {drop_percent: 1}}}", 1)))
	if err == nil || !strings.Contains(err.Error(), "node h1: fault is only for kind prismd") {
		t.Errorf("fault on a host: %v", err)
	}
	// Build (topologies made in code) applies the same rules.
	nodes := []Node{{Name: "h", Kind: KindHost}, {Name: "s", Kind: KindPrismd, Fault: &Fault{Ingress: &IngressFault{DuplicatePercent: -1}}}}
	links := []Link{{A: Endpoint{"h", "e"}, B: Endpoint{"s", "p"}}}
	if _, err := Build("b", 0, nodes, links); err == nil || !strings.Contains(err.Error(), "fault.ingress.duplicate_percent -1 is not a percentage") {
		t.Errorf("Build with a bad fault: %v", err)
	}
}

// TestParseWholeNumbers: an MTU or a fault's count with a fraction is an
// error naming the key and the line, not a truncated value.
func TestParseWholeNumbers(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{strings.Replace(minimal, "name: t1", "name: t1\nmtu: 1500.5", 1), "2: mtu must be a whole number written without a decimal point, not 1500.5"},
		{strings.Replace(minimal, `- endpoints: ["h2:eth0", "sw1:p2"]`, `- endpoints: ["h2:eth0", "sw1:p2"]`+"\n      mtu: 9000.0", 1), "10: a link's mtu must be a whole number written without a decimal point, not 9000.0"},
		{strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, fault: {ingress: {seed: 1.5}}}", 1), "6: fault.ingress.seed must be a whole number written without a decimal point, not 1.5"},
	} {
		if _, err := Parse([]byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to contain %q\n%s", err, tc.want, tc.src)
		}
	}
}
