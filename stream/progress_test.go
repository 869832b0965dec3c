package stream

import (
	"testing"

	"github.com/prismd/prismd/parser"
)

// TestApplyProgressAhead: a PROGRESS that acknowledges elements the window
// never sent (Committed, or a hole's end, above the end of every frame
// sent) is Ahead and changes nothing; the genuine PROGRESS after it is
// applied. Before any frame was sent, a keepalive's watermark (from an
// earlier use of the stream) is applied as before.
func TestApplyProgressAhead(t *testing.T) {
	var holes [MaxHoles]Hole
	sw := NewSendWindow(SendConfig{ReplayDepth: 8, FrameSize: 64, RTO: 1e9, Deadline: -1})
	keep := parser.Progress{PacketID: 0, Committed: 500, IntervalCredits: 8, ByteCredits: 8 * 64}
	if v := sw.ApplyProgress(1, &keep, &holes); v != Applied || sw.Committed() != 500 {
		t.Fatalf("keepalive before any frame: %v, committed %d; want applied, 500", v, sw.Committed())
	}
	for _, first := range []uint32{500, 600} {
		if _, _, ok := sw.Reserve(2, first, 100, 10); !ok {
			t.Fatalf("reserve %d", first)
		}
		sw.Commit(2, 10)
	}
	for _, p := range []parser.Progress{
		{PacketID: 2, Committed: 1_000_000, IntervalCredits: 8, ByteCredits: 8 * 64, Flags: parser.ProgressFlagComplete},
		{PacketID: 2, Committed: 701, IntervalCredits: 8, ByteCredits: 8 * 64},
		{PacketID: 2, Committed: 500, IntervalCredits: 8, ByteCredits: 8 * 64, NHoles: 1, Holes: [32]parser.Hole{{Start: 500, End: 800}}},
	} {
		if v := sw.ApplyProgress(3, &p, &holes); v != Ahead {
			t.Fatalf("PROGRESS committed %d holes %v: %v, want ahead", p.Committed, p.Holes[:p.NHoles], v)
		}
		if f, b := sw.Unacked(); sw.Committed() != 500 || f != 2 || b != 20 {
			t.Fatalf("after an ahead PROGRESS: committed %d, unacked %d frames %d bytes; want 500, 2, 20", sw.Committed(), f, b)
		}
	}
	ok := parser.Progress{PacketID: 2, Committed: 700, IntervalCredits: 8, ByteCredits: 8 * 64}
	if v := sw.ApplyProgress(4, &ok, &holes); v != Applied || sw.Committed() != 700 || !sw.Idle() {
		t.Fatalf("genuine PROGRESS: %v, committed %d, idle %v; want applied, 700, idle", v, sw.Committed(), sw.Idle())
	}
	stale := parser.Progress{PacketID: 1, Committed: 600}
	if v := sw.ApplyProgress(5, &stale, &holes); v != Stale {
		t.Fatalf("PROGRESS below the watermark: %v, want stale", v)
	}
}
