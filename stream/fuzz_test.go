package stream

import (
	"encoding/binary"
	"testing"
)

// FuzzRecvWindow drives a RecvWindow with arbitrary frame descriptors and
// checks every verdict against the naive oracle (unbounded credit and
// history, so the two must agree exactly), plus the watermark and holes.
func FuzzRecvWindow(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 10, 7})
	f.Add([]byte{0, 0, 0, 2, 0, 0, 0, 5, 0, 5, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 5, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		const n = 200
		r := NewRecvWindow(RecvConfig{VectorLen: n, Intervals: 1 << 12, History: 1 << 12})
		o := newOracle(n)
		var hs [MaxHoles]Hole
		for len(b) >= 11 {
			pid := binary.BigEndian.Uint32(b[0:])
			first := binary.BigEndian.Uint32(b[4:]) % (n + 5)
			count := uint32(binary.BigEndian.Uint16(b[8:])) % 40
			hash := uint64(b[10])
			b = b[11:]
			want := o.verdict(pid, first, first+count, hash)
			if count == 0 {
				want = Invalid
			}
			got := r.Admit(pid, first, count, 10, hash)
			if got != want {
				t.Fatalf("pid %d [%d,+%d) hash %d: %v, oracle %v", pid, first, count, hash, got, want)
			}
			if got == Accepted {
				o.accept(pid, first, first+count, hash)
			}
			if r.Committed() != o.watermark() {
				t.Fatalf("watermark %d, oracle %d", r.Committed(), o.watermark())
			}
			want2 := o.holes()
			k := r.Holes(hs[:])
			if k != min(len(want2), MaxHoles) {
				t.Fatalf("%d holes, oracle %v", k, want2)
			}
			for i := 0; i < k; i++ {
				if hs[i] != want2[i] {
					t.Fatalf("hole %d: %v, oracle %v", i, hs[i], want2[i])
				}
			}
			r.Release(r.Committed())
		}
	})
}
