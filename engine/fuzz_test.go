package engine

import (
	"testing"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// FuzzHandle feeds arbitrary bytes, seeded with valid DATA and PROGRESS
// frames of an active operation, through both entry points: nothing may
// panic, and a frame that fails decoding must not change the operation.
func FuzzHandle(f *testing.F) {
	seed := newRig(f, kulisch.KulischFixed, 1<<20)
	f.Add(seed.data[0], uint8(0))
	f.Add(seed.data[1], uint8(1))
	f.Add(seed.prog[0], uint8(0))
	// A persistent collective's invocation end (PUSH), which moves the
	// emission and inactivity rules.
	pushed := append([]byte(nil), seed.data[1]...)
	parser.DataHeader(pushed[parser.HdrOff:parser.DataBodyOff]).SetFlags(parser.FlagPush)
	f.Add(pushed, uint8(1))
	r := seed // one operation for every input: state accumulates, as on a switch
	f.Fuzz(func(t *testing.T, frame []byte, port uint8) {
		in := int(port % 4)
		before, _ := r.e.Status(r.key)
		r.e.HandleData(r.now, in, frame, r.tx)
		r.e.HandleProgress(r.now, in, frame, r.tx)
		r.now += 1000
		r.e.Tick(r.now, r.tx)
		var d parser.Data
		if d.Decode(frame, parser.Limits{VectorLen: 1 << 20, KulischBytes: 35, MTU: 1500}) != nil {
			var p parser.Progress
			if p.Decode(frame, parser.Limits{VectorLen: 1 << 20, MTU: 1500}) != nil {
				if s, _ := r.e.Status(r.key); s != before {
					t.Fatalf("an undecodable frame changed the operation: %+v -> %+v", before, s)
				}
			}
		}
	})
}
