package bitmap

import (
	"testing"

	"github.com/prismd/prismd/parser"
)

// FuzzHandleData feeds arbitrary bytes, seeded with valid frames of every
// kind, to a Fig. 1 leaf, a Fig. 2 branch node and a domain boundary (bx):
// nothing may panic, and what goes out must decode under the operation's
// limits.
func FuzzHandleData(f *testing.F) {
	a := fig1(f, nil)
	b := fig2(f, 50)
	c := bxFabric(f)
	vals := []float32{1, 2, 3}
	f.Add(0, workerFrame(a, 0, 1, vals))
	f.Add(1, workerFrame(a, 1, 1, vals))
	f.Add(2, a.hostFrame("w1", parser.ClassData, 3, 0, parser.AppendListSet(nil, 0), parser.EncList, 0, nil))
	f.Add(0, b.hostFrame("src", parser.ClassResult, 9, parser.XFlagInstall, parser.AppendHierSet(nil, 64, 1, 1, 2, 5), parser.EncHier, 0, vals))
	f.Add(1, b.hostFrame("e1", parser.ClassData, 9, parser.XFlagPartial, flat(0), parser.EncFlat, 0, vals))
	f.Add(1, c.hostFrame("w2", parser.ClassData, 4, 0, flat(1), parser.EncFlat, 0, vals))
	f.Add(2, c.hostFrame("up", parser.ClassResult, 4, parser.XFlagPartial, parser.AppendFlatSet(nil, 1, 1, 64), parser.EncFlat, 0, vals))
	f.Fuzz(func(t *testing.T, port int, fr []byte) {
		port &= 3
		for _, n := range []*tnode{a.nodes["s1"], b.nodes["s1"], c.nodes["bx"]} {
			var tx sink
			tx.ports = n.ports
			check := &checkSender{t: t, sink: &tx}
			n.sh.HandleData(a.now, port, fr, check)
			n.sh.Tick(a.now+int64(1e9), check)
		}
	})
}

type checkSender struct {
	t    *testing.T
	sink *sink
}

func (c *checkSender) Send(port int, frame []byte) bool {
	var d parser.Data
	if err := d.Decode(frame, parser.Limits{VectorLen: testVec, KulischBytes: testW / 8, MTU: 1500}); err != nil {
		c.t.Fatalf("sent an invalid frame: %v", err)
	}
	return c.sink.Send(port, frame)
}
func (c *checkSender) PortMAC(port int) [6]byte { return c.sink.PortMAC(port) }
func (c *checkSender) NumPorts() int            { return 5 }
