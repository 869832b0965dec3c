package engine

import (
	"testing"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// TestCoalescedProgress: with CoalesceProgress, accepted frames are not
// acknowledged one by one; Flush sends exactly one PROGRESS per stream that
// carries the newest watermark and the last Packet ID, and a duplicate is
// still answered at once. The batch's frame counts reach Metrics at Flush.
func TestCoalescedProgress(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.e.cfg.CoalesceProgress = true
	r.tx.keep = true
	progressOn := func() map[uint16]parser.Progress {
		got := map[uint16]parser.Progress{}
		for _, f := range r.tx.frames {
			if parser.Class(f[parser.CWOff+1]) != parser.ClassProgress {
				continue
			}
			var p parser.Progress
			if err := p.Decode(f, parser.Limits{VectorLen: r.vlen}); err != nil {
				t.Fatal(err)
			}
			if p.Flags&parser.ProgressFlagResult == 0 {
				if _, dup := got[p.Stream]; dup {
					t.Fatalf("two PROGRESS for stream %d in one batch", p.Stream)
				}
				got[p.Stream] = p
			}
		}
		return got
	}
	const frames = 5
	for range frames {
		r.step()
	}
	if p := progressOn(); len(p) != 0 {
		t.Fatalf("PROGRESS sent before Flush: %+v", p)
	}
	// The batch's counts reach Metrics with Flush, all of them.
	m := r.e.Metrics()
	counts := func() [4]uint64 {
		return [4]uint64{m.Frames[parser.ClassData].Load(), m.Frames[parser.ClassProgress].Load(),
			m.FramesSent[parser.ClassResult].Load(), m.ElementsDone.Load()}
	}
	if c := counts(); c != [4]uint64{} {
		t.Fatalf("counts published before Flush: %v", c)
	}
	r.e.Flush(r.now, r.tx)
	// Every step: a DATA frame from each rank, a RESULT frame to each and
	// a PROGRESS from each for it; count elements completed once.
	if c, want := counts(), [4]uint64{2 * frames, 2 * frames, 2 * frames, frames * uint64(r.count)}; c != want {
		t.Fatalf("after Flush: DATA, PROGRESS admitted, RESULT sent, elements %v, want %v", c, want)
	}
	got := progressOn()
	for i, s := range []uint16{10, 11} {
		p, ok := got[s]
		if !ok {
			t.Fatalf("no PROGRESS for contributor stream %d after Flush", s)
		}
		if p.Committed != r.next || p.PacketID != r.pid || p.Status != parser.ProgressStatusOK {
			t.Fatalf("stream %d: committed %d pid %d status %v, want %d, %d, OK", s, p.Committed, p.PacketID, p.Status, r.next, r.pid)
		}
		if p.DstEP != uint16(1+i) {
			t.Fatalf("stream %d: PROGRESS to endpoint %d", s, p.DstEP)
		}
	}
	// Nothing owed any more: a second Flush sends nothing.
	n := len(r.tx.frames)
	r.e.Flush(r.now, r.tx)
	if len(r.tx.frames) != n {
		t.Fatal("second Flush sent frames")
	}
	// A duplicate is answered without waiting for the batch end.
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	if len(r.tx.frames) != n+1 {
		t.Fatalf("duplicate: %d frames sent, want 1", len(r.tx.frames)-n)
	}
	var p parser.Progress
	if err := p.Decode(r.tx.frames[n], parser.Limits{VectorLen: r.vlen}); err != nil || p.Status != parser.ProgressStatusDuplicate {
		t.Fatalf("duplicate answered with %+v, %v", p, err)
	}
}
