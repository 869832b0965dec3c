package deploy

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: no topology file, however broken, panics the parser; one it
// accepts survives Marshal (Parse(t.Marshal()) is the same topology, as Up
// relies on when it saves topology.yaml), and every prismd node of it gets
// a configuration.
func FuzzParse(f *testing.F) {
	for _, name := range EmbeddedNames() {
		b, err := Embedded(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(strings.Replace(minimal, "{kind: prismd}",
		"{kind: prismd, backend: afxdp, xdp_mode: native, kulisch_partials: scaled, fault: {ingress: {drop_percent: 0.25, duplicate_percent: 1, reorder_percent: 5, reorder_depth: 8, delay_us: 3, seed: 9}, egress: {reorder_percent: 2.5, reorder_depth: 4, delay_us: 20}}}", 1)))
	f.Add([]byte(strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1:\n      kind: prismd\n      fault:\n        egress: {delay_us: 1}", 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		tp, err := Parse(b)
		if err != nil {
			return
		}
		m := tp.Marshal()
		back, err := Parse(m)
		if err != nil {
			t.Fatalf("Parse of its own Marshal: %v\n%s", err, m)
		}
		if !reflect.DeepEqual(stripLines(back), stripLines(tp)) {
			t.Fatalf("Marshal round trip differs:\n%s", m)
		}
		for _, n := range tp.NodesOf(KindPrismd) {
			c, err := NewPrismdConfig(tp, n, "/run/prismd-lab/"+tp.Name)
			if err != nil {
				t.Fatalf("config of %s: %v", n, err)
			}
			if _, err := c.Marshal(); err != nil {
				t.Fatalf("config of %s does not marshal: %v", n, err)
			}
		}
	})
}
