package main

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// per1500 is the FP32 elements of a DATA frame at MTU 1500.
var per1500 = parser.MaxPacketElements(1500) / 4

// sumPattern is the exact sum of size ranks' values, element by element,
// from first on: the oracle's expectation rebuilt the slow way.
func sumPattern(size, per int, first uint32, n int) []byte {
	b := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		q := int(first+uint32(i)) % per
		s := float32(0)
		for r := 0; r < size; r++ {
			s += rankValue(r, q)
		}
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(s))
	}
	return b
}

func TestOracleTemplates(t *testing.T) {
	o, err := newOracle(1, 3, per1500)
	if err != nil {
		t.Fatal(err)
	}
	for q := 0; q < per1500; q++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(o.tmpl[4*q:])); got != rankValue(1, q) {
			t.Fatalf("template element %d: %g, want %g", q, got, rankValue(1, q))
		}
	}
	// Groups at and between frame boundaries, longer than a period, and
	// the last short frame of a vector.
	for _, c := range []struct {
		first uint32
		n     int
	}{{0, per1500}, {uint32(per1500), per1500}, {17, 40}, {uint32(per1500) - 3, 10}, {5, 3*per1500 + 7}, {1 << 30, 1}} {
		if err := o.check(c.first, sumPattern(3, per1500, c.first, c.n)); err != nil {
			t.Errorf("exact sum from %d (%d elements) rejected: %v", c.first, c.n, err)
		}
	}
}

func TestOracleCatchesCorruption(t *testing.T) {
	o, err := newOracle(0, 2, per1500)
	if err != nil {
		t.Fatal(err)
	}
	const first = 1000003 // not on a frame boundary
	for _, bad := range []int{0, 1, per1500 - 1, per1500 + 5} {
		vals := sumPattern(2, per1500, first, per1500+10)
		want := binary.LittleEndian.Uint32(vals[4*bad:])
		got := math.Float32bits(math.Float32frombits(want) + 0.25)
		binary.LittleEndian.PutUint32(vals[4*bad:], got)
		err := o.check(first, vals)
		var me *mismatchError
		if !errors.As(err, &me) {
			t.Fatalf("corrupted element %d not caught: %v", first+bad, err)
		}
		if me.Element != uint32(first+bad) || me.Got != got || me.Want != want {
			t.Errorf("corrupted element %d: reported %+v", first+bad, *me)
		}
	}
	if err := o.check(0, make([]byte, 6)); err == nil {
		t.Error("a group of 6 bytes was accepted as FP32")
	}
}

// testOp is an operation granted to rank 0 of 2 at MTU 1500, with no AM and
// no port: enough to drive the DATA and RESULT paths by hand.
func testOp(t testing.TB, n uint32) (*contributor, *op) {
	t.Helper()
	c := &contributor{f: contribFlags{rank: 0, size: 2, coll: "allreduce", acc: "fp32"},
		mac: [6]byte{0x02, 0, 0, 0, 0, 0x10}, tx: make([][]byte, 0, batchMax)}
	c.readers = []*reader{newReader(1514)}
	g := &am.Grant{ID: "9-0-1-4-1", Op: am.OpIdentity{Job: 9, GroupGen: 1, OpID: 4, OpGen: 1}, Rank: 0, Size: 2,
		Collective: "allreduce", InputFormat: "fp32", AccPolicy: "fp32", VectorLen: n, MTU: 1500, TimeoutMS: 1000,
		Data:   am.StreamBinding{StreamID: 3, SrcEndpoint: 100, DstEndpoint: 1},
		Result: &am.StreamBinding{StreamID: 4, SrcEndpoint: 1, DstEndpoint: 100},
		Leaf:   "sw1", LeafMAC: "02:00:00:00:00:01",
		Window: am.Window{Intervals: 64, ReplayDepth: 64, Bytes: 64 * 1514, Elements: uint32(64 * per1500)}}
	o, err := c.newOp(g)
	if err != nil {
		t.Fatal(err)
	}
	return c, o
}

// resultFrame is the RESULT the leaf would send for [first, first+count).
func resultFrame(t testing.TB, o *op, pid, first uint32, vals []byte) []byte {
	t.Helper()
	cnt := len(vals) / 4
	h := parser.DataFields{Eth: parser.Eth{Dst: [6]byte{0x02, 0, 0, 0, 0, 0x10}, Src: o.leafMAC}, Class: parser.ClassResult,
		Op: o.key, SrcEP: o.g.Result.SrcEndpoint, DstEP: o.g.Result.DstEndpoint, PacketID: pid, First: first, Stream: o.g.Result.StreamID}
	if first+uint32(cnt) == o.n {
		h.Flags = parser.FlagLast
	}
	f, err := parser.AppendData(nil, &h, nil, parser.Group{Format: parser.FormatFP32, Count: uint16(cnt), First: first, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDataFramesDecode(t *testing.T) {
	n := uint32(3*per1500 + 11)
	c, o := testOp(t, n)
	batch, done, err := o.step(mono(), c.tx[:0])
	if err != nil || done {
		t.Fatalf("step: done %v, %v", done, err)
	}
	if len(batch) != 4 {
		t.Fatalf("%d frames for %d elements, want 4", len(batch), n)
	}
	var d parser.Data
	next := uint32(0)
	for i, f := range batch {
		if err := d.Decode(f, parser.Limits{VectorLen: n, MTU: 1500}); err != nil {
			t.Fatalf("frame %d does not decode: %v", i, err)
		}
		last := i == len(batch)-1
		if d.Class != parser.ClassData || d.First != next || d.PacketID != uint32(i+1) || (d.Flags&parser.FlagLast != 0) != last ||
			d.Stream != 3 || d.SrcEP != 100 || d.DstEP != 1 || d.Op != o.key {
			t.Fatalf("frame %d: %+v", i, d)
		}
		var it parser.GroupIter
		grp, _ := d.NextGroup(&it)
		for k := 0; k < int(grp.Count); k++ {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(grp.Values[4*k:])); v != rankValue(0, int(d.First+uint32(k))%per1500) {
				t.Fatalf("frame %d element %d: %g", i, d.First+uint32(k), v)
			}
		}
		next += uint32(d.Count)
	}
	if next != n {
		t.Fatalf("frames cover %d of %d elements", next, n)
	}
}

// A corrupted value in an accepted RESULT fails the operation with an
// error naming the element, what it was and what it should have been.
func TestCorruptedResultFailsOperation(t *testing.T) {
	n := uint32(2 * per1500)
	c, o := testOp(t, n)
	good := sumPattern(2, per1500, 0, per1500)
	if _, err := c.handle(c.readers[0], o, mono(), resultFrame(t, o, 1, 0, good)); err != nil {
		t.Fatalf("exact RESULT rejected: %v", err)
	}
	bad := sumPattern(2, per1500, uint32(per1500), per1500)
	const at = 77
	binary.LittleEndian.PutUint32(bad[4*at:], math.Float32bits(-1))
	_, err := c.handle(c.readers[0], o, mono(), resultFrame(t, o, 2, uint32(per1500), bad))
	if err == nil {
		t.Fatal("corrupted RESULT accepted")
	}
	var me *mismatchError
	if !errors.As(err, &me) || me.Element != uint32(per1500+at) || !strings.Contains(err.Error(), "is -1") {
		t.Fatalf("error does not name element %d and its value: %v", per1500+at, err)
	}
	t.Log(err)
}

// The per-frame paths allocate nothing: building and sending DATA,
// applying PROGRESS, admitting, verifying and answering RESULT.
func TestPerFrameAllocs(t *testing.T) {
	n := uint32(1 << 30)
	c, o := testOp(t, n)
	o.sw = stream.NewSendWindow(stream.SendConfig{ReplayDepth: 64, FrameSize: 1514}) // unlimited credit
	var pid uint32
	var first uint32
	vals := sumPattern(2, per1500, 0, per1500)
	prog := make([]byte, progressLen)
	allocs := alloctest.PerRun(200, func() {
		now := mono()
		batch, _, err := o.step(now, c.tx[:0])
		if err != nil {
			t.Fatal(err)
		}
		// Acknowledge the batch as the leaf would.
		p := parser.Progress{Op: o.key, SrcEP: 1, DstEP: 100, Stream: 3, PacketID: o.sw.NextPacketID() - 1,
			Committed: o.next, IntervalCredits: 64, ByteCredits: 1 << 20}
		m, _ := p.Encode(prog, parser.Eth{Dst: c.mac, Src: o.leafMAC})
		if _, err := c.handle(c.readers[0], o, now, prog[:m]); err != nil {
			t.Fatal(err)
		}
		_ = batch
		pid++
		r := c.readers[0]
		r.pq, r.nprog = r.pq[:0], 0
		f := resultFrameNoAlloc(o, pid, first, vals)
		if _, err := c.handle(c.readers[0], o, now, f); err != nil {
			t.Fatal(err)
		}
		c.progress(r, o, o.ackPID, parser.ProgressStatusOK) // the batch's coalesced answer
		first += uint32(per1500)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
	if o.frames < 200*batchMax || o.results < 200 || len(c.readers[0].pq) != 1 {
		t.Errorf("the loop did not exercise the paths: %d DATA frames, %d RESULT, %d answers queued", o.frames, o.results, len(c.readers[0].pq))
	}
}

var resultBuf = make([]byte, 1514)

// resultFrameNoAlloc builds a RESULT in place (full frame, never LAST).
func resultFrameNoAlloc(o *op, pid, first uint32, vals []byte) []byte {
	var b parser.DataBuilder
	h := parser.DataFields{Eth: parser.Eth{Src: o.leafMAC}, Class: parser.ClassResult, Op: o.key, SrcEP: 1, DstEP: 100,
		PacketID: pid, First: first, Stream: 4}
	_ = b.Reset(resultBuf, &h, nil, 1500)
	slot, _ := b.AddGroup(parser.FormatFP32, 0, len(vals)/4)
	copy(slot, vals)
	return b.Finish()
}

// TestProgressLaneChoice: auto puts PROGRESS on a lane for a REDUCE rank
// other than the root, the one that receives no RESULT; a bad value is
// refused with the values to use.
func TestProgressLaneChoice(t *testing.T) {
	for _, tc := range []struct {
		coll, lane string
		rank, root int
		want       bool
	}{
		{"reduce", "auto", 1, 0, true},
		{"reduce", "auto", 0, 0, false},
		{"allreduce", "auto", 1, 0, false},
		{"allreduce", "auto", 0, 0, false},
		{"allreduce", "off", 0, 0, false},
		{"allreduce", "on", 0, 0, true},
		{"reduce", "off", 1, 0, false},
	} {
		f := contribFlags{coll: tc.coll, progressLane: tc.lane, rank: tc.rank, root: tc.root}
		if got := f.wantProgressLane(); got != tc.want {
			t.Errorf("%s rank %d root %d --progress-lane %s: lane %v, want %v", tc.coll, tc.rank, tc.root, tc.lane, got, tc.want)
		}
	}
	f := contribFlags{coordinator: "http://x", node: "h1", size: 2, coll: "reduce", acc: "fp32", count: 10, progressLane: "yes"}
	if err := f.check(); err == nil || !strings.Contains(err.Error(), "use auto, on or off") {
		t.Errorf("--progress-lane yes: %v", err)
	}
	f.progressLane = "auto"
	if err := f.check(); err != nil {
		t.Errorf("good flags refused: %v", err)
	}
}
