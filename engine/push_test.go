package engine

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// pushRig is a SINGLE ALLREDUCE of two ranks run as a persistent
// collective: invocations of n elements one after the other over one
// vector, each rank's last frame of an invocation marked PUSH (or not).
type pushRig struct {
	e         *Engine
	tx        *sink
	key       parser.OpKey
	n         uint32
	pid       [2]uint32
	vectorLen uint32
	now       int64
}

func newPushRig(t *testing.T, acc kulisch.Policy, n, invocations uint32, timeout time.Duration) *pushRig {
	t.Helper()
	key := parser.OpKey{Job: 3, Group: 1, Op: 7, OpGen: 1}
	spec := singleSpec(key, acc, n*invocations, 1500, 8192)
	spec.Timeout = timeout
	r := &pushRig{e: New(Config{Logger: quiet()}), tx: &sink{keep: true}, key: key, n: n, now: 1e9, vectorLen: n * invocations}
	if err := r.e.Stage(r.now, &spec, 4); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Commit(r.now, key); err != nil {
		t.Fatal(err)
	}
	return r
}

// value is rank's contribution to element k of invocation inv.
func pushValue(rank int, inv, k uint32) float32 {
	return float32(inv)*8 + float32(k)*0.25 + float32(rank+1)
}

// contribute sends rank's invocation inv as one frame.
func (r *pushRig) contribute(t *testing.T, rank int, inv uint32, push bool) {
	t.Helper()
	v := make([]byte, 4*r.n)
	for k := range r.n {
		binary.LittleEndian.PutUint32(v[4*k:], math.Float32bits(pushValue(rank, inv, k)))
	}
	var flags uint8
	if push {
		flags = parser.FlagPush
	}
	first := inv * r.n
	if first+r.n == r.vectorLen {
		flags |= parser.FlagLast
	}
	r.pid[rank]++
	mac := [][6]byte{rank0, rank1}[rank]
	f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: r.tx.PortMAC(rank), Src: mac}, Class: parser.ClassData,
		Op: r.key, SrcEP: uint16(1 + rank), DstEP: uint16(100 + rank), PacketID: r.pid[rank], First: first, Flags: flags,
		Stream: uint16(10 + rank)}, nil, parser.Group{Format: parser.FormatFP32, Count: uint16(r.n), Values: v})
	if err != nil {
		t.Fatal(err)
	}
	r.now += int64(time.Microsecond)
	r.e.HandleData(r.now, rank, f, r.tx)
	r.e.Flush(r.now, r.tx)
}

// ack answers every RESULT up to element end from both ranks, as their
// host libraries do.
func (r *pushRig) ack(t *testing.T, end uint32) {
	t.Helper()
	for i := range 2 {
		mac := [][6]byte{rank0, rank1}[i]
		p := parser.Progress{Op: r.key, SrcEP: uint16(1 + i), DstEP: uint16(200 + i), Stream: uint16(20 + i), Committed: end,
			IntervalCredits: 64, ByteCredits: 64 * 1514, Flags: parser.ProgressFlagResult}
		pb := make([]byte, parser.EthLen+p.Len())
		if _, err := p.Encode(pb, parser.Eth{Dst: r.tx.PortMAC(i), Src: mac}); err != nil {
			t.Fatal(err)
		}
		r.e.HandleProgress(r.now, i, pb, r.tx)
	}
}

// results returns the RESULT frames sent to rank 1 since the last call,
// decoded, and forgets every kept frame.
func (r *pushRig) results(t *testing.T) []parser.Data {
	t.Helper()
	var out []parser.Data
	for _, f := range r.tx.frames {
		if parser.Class(f[parser.CWOff+1]) != parser.ClassResult || [6]byte(f[0:6]) != rank1 {
			continue
		}
		var d parser.Data
		if err := d.Decode(f, parser.Limits{}); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	r.tx.frames, r.tx.ports = nil, nil
	return out
}

// checkInvocation asserts that rs delivered exactly invocation inv, its
// last frame marked PUSH, with the sums of both ranks' values.
func (r *pushRig) checkInvocation(t *testing.T, rs []parser.Data, inv uint32) {
	t.Helper()
	if len(rs) == 0 {
		t.Fatalf("invocation %d: no RESULT sent (held back waiting for input that will not come)", inv)
	}
	got := map[uint32]float32{}
	for i, d := range rs {
		if last := i == len(rs)-1; (d.Flags&parser.FlagPush != 0) != last {
			t.Fatalf("invocation %d: RESULT frame %d of %d has PUSH=%v", inv, i+1, len(rs), !last)
		}
		var it parser.GroupIter
		for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
			for k := 0; k < int(g.Count); k++ {
				got[g.First+uint32(k)] = math.Float32frombits(binary.LittleEndian.Uint32(g.Values[4*k:]))
			}
		}
	}
	if len(got) != int(r.n) {
		t.Fatalf("invocation %d: %d elements delivered, want %d", inv, len(got), r.n)
	}
	for k := range r.n {
		want := pushValue(0, inv, k) + pushValue(1, inv, k) // exact: small dyadic values
		if g, ok := got[inv*r.n+k]; !ok || g != want {
			t.Fatalf("invocation %d element %d = %v (present %v), want %v", inv, k, g, ok, want)
		}
	}
}

// TestPushEmitsShortFrames: a short frame is held back while more input
// may come (the bulk optimisation), but a PUSH from the contributor that
// holds the frontier releases it at once, marked PUSH, for every
// invocation of a persistent collective.
func TestPushEmitsShortFrames(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		// Without PUSH nothing goes out: the node waits to fill a frame.
		r := newPushRig(t, acc, 5, 8, time.Hour)
		r.contribute(t, 0, 0, false)
		r.contribute(t, 1, 0, false)
		if rs := r.results(t); len(rs) != 0 {
			t.Fatalf("%v: %d RESULT frames without PUSH; the hold-back this test relies on is gone", acc, len(rs))
		}
		r = newPushRig(t, acc, 5, 8, time.Hour)
		for inv := range uint32(8) {
			r.contribute(t, 1, inv, true)
			if rs := r.results(t); len(rs) != 0 {
				t.Fatalf("%v: invocation %d: RESULT before rank 0 contributed", acc, inv)
			}
			r.contribute(t, 0, inv, true)
			r.checkInvocation(t, r.results(t), inv)
			r.ack(t, (inv+1)*r.n)
		}
		if s, _ := r.e.Status(r.key); s.State != parser.StateComplete {
			t.Fatalf("%v: state %v after every invocation, want COMPLETE", acc, s.State)
		}
	}
}

// TestPausedContributorsDoNotTimeOut: between invocations every rank rests
// at its PUSH boundary for many timeouts and the context stays ACTIVE; once
// one rank starts the next invocation, a rank that does not follow within
// the timeout fails the operation, named with its missing range.
func TestPausedContributorsDoNotTimeOut(t *testing.T) {
	const timeout = 10 * time.Millisecond
	r := newPushRig(t, kulisch.FP32Arrival, 5, 4, timeout)
	r.contribute(t, 0, 0, true)
	r.contribute(t, 1, 0, true)
	r.checkInvocation(t, r.results(t), 0)
	r.ack(t, 5)
	for range 100 { // a second of application think time
		r.now += int64(timeout)
		r.e.Tick(r.now, r.tx)
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateActive || s.MissingStream != 0xFFFF {
		t.Fatalf("paused for 100 timeouts: state %v (%v), missing stream %d; want ACTIVE, nothing missing", s.State, s.Err, s.MissingStream)
	}
	r.e.Publish(r.now)
	if w := strings.Join(r.e.Snapshot().Ops[0].WaitingFor, "\n"); strings.Count(w, "its next invocation (it rests at element 5 after PUSH") != 2 {
		t.Fatalf("introspection of a resting persistent collective:\n%s\nwant both contributors resting at element 5", w)
	}
	r.contribute(t, 0, 1, true) // rank 1 is passed and waited for ...
	r.now += int64(timeout / 2)
	r.contribute(t, 1, 1, true) // ... until it comes
	r.checkInvocation(t, r.results(t), 1)
	r.ack(t, 10)
	for range 100 { // after an invocation in which a rank was waited for
		r.now += int64(timeout)
		r.e.Tick(r.now, r.tx)
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateActive {
		t.Fatalf("paused for 100 timeouts after rank 1 was waited for: state %v (%v), want ACTIVE", s.State, s.Err)
	}

	// Rank 0 goes on, rank 1 stays away.
	r.contribute(t, 0, 2, true)
	r.now += int64(timeout / 2)
	r.e.Tick(r.now, r.tx)
	if s, _ := r.e.Status(r.key); s.State != parser.StateActive || s.MissingStream != 11 || s.MissingFrom != 10 {
		t.Fatalf("rank 1 late by half the timeout: state %v (%v), missing stream %d from %d; want ACTIVE, stream 11 from 10",
			s.State, s.Err, s.MissingStream, s.MissingFrom)
	}
	r.e.Publish(r.now)
	if w := strings.Join(r.e.Snapshot().Ops[0].WaitingFor, "\n"); !strings.Contains(w, "stream 11 ") || !strings.Contains(w, "went past it 5 ms ago") {
		t.Fatalf("introspection while rank 1 is waited for:\n%s\nwant stream 11 named as waited for 5 ms", w)
	}
	r.now += int64(timeout)
	r.e.Tick(r.now, r.tx)
	s, _ := r.e.Status(r.key)
	var te *ContributorTimeoutError
	if s.State != parser.StateFailed || !errors.As(s.Err, &te) {
		t.Fatalf("rank 1 late by 1.5 timeouts: state %v, err %v; want FAILED with a ContributorTimeoutError", s.State, s.Err)
	}
	if te.Stream != 11 || te.From != 10 || te.Idle < timeout || te.Idle > 2*timeout {
		t.Fatalf("timeout names stream %d from %d idle %v; want stream 11 (rank 1) from element 10, idle about %v", te.Stream, te.From, te.Idle, timeout)
	}
}

// TestUnpushedContributorStillTimesOut: without PUSH the inactivity bound is
// unchanged: an ordinary collective whose rank stops mid-vector fails.
func TestUnpushedContributorStillTimesOut(t *testing.T) {
	const timeout = 10 * time.Millisecond
	r := newPushRig(t, kulisch.FP32Arrival, 5, 4, timeout)
	r.contribute(t, 0, 0, false)
	r.contribute(t, 1, 0, false)
	r.now += int64(2 * timeout)
	r.e.Tick(r.now, r.tx)
	if s, _ := r.e.Status(r.key); s.State != parser.StateFailed {
		t.Fatalf("state %v after 2 timeouts of silence without PUSH, want FAILED", s.State)
	}
}

// TestExpireComplete: a COMPLETE context nobody RELEASEd is handed to
// retire as RELEASED three timeouts plus ExpiryGrace after it completed. A
// persistent collective resting between invocations (ACTIVE) is handed
// over as ABORTED only after as long without CONTROL from its AM (Touch)
// and without DATA from its ranks: either keeps it.
func TestExpireComplete(t *testing.T) {
	const timeout = 10 * time.Millisecond
	ttl := 3*int64(timeout) + int64(ExpiryGrace)
	r := newPushRig(t, kulisch.FP32Arrival, 5, 2, timeout)
	rest := newPushRig(t, kulisch.FP32Arrival, 5, 4, timeout)
	invoke := func(x *pushRig, inv uint32) {
		x.contribute(t, 0, inv, true)
		x.contribute(t, 1, inv, true)
		x.results(t)
		x.ack(t, (inv+1)*5)
	}
	for inv := range uint32(2) {
		invoke(r, inv)
		invoke(rest, inv)
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateComplete {
		t.Fatalf("state %v, want COMPLETE", s.State)
	}
	// expire runs x's Expire at now and checks what it retired: nothing
	// (want NONE) or x's context as want.
	expire := func(x *pushRig, now int64, want parser.OpState, why string) {
		t.Helper()
		var got []parser.OpState
		x.e.Expire(now, func(k parser.OpKey, as parser.OpState) { got = append(got, as); x.e.Remove(k) })
		_, installed := x.e.Status(x.key)
		if want == parser.StateNone && (len(got) != 0 || !installed) ||
			want != parser.StateNone && (len(got) != 1 || got[0] != want || installed) {
			t.Fatalf("%s: expired %v (installed %v), want %v", why, got, installed, want)
		}
	}
	expire(r, r.now+ttl-1, parser.StateNone, "COMPLETE, a moment before its ttl")
	expire(rest, rest.now+ttl-1, parser.StateNone, "resting, a moment before its ttl")
	expire(r, r.now+ttl+1, parser.StateReleased, "COMPLETE, past its ttl")
	// The AM's CONTROL half way keeps the resting one a ttl more.
	rest.e.Touch(rest.now+ttl/2, rest.key)
	expire(rest, rest.now+ttl+1, parser.StateNone, "resting, touched by its AM")
	// So does an invocation.
	rest.now += ttl
	invoke(rest, 2)
	expire(rest, rest.now+ttl-1, parser.StateNone, "resting after an invocation")
	expire(rest, rest.now+ttl+1, parser.StateAborted, "resting, a ttl of silence")
}

// TestQuiet: Engine.Quiet holds exactly while no timer the 1 ms tick serves
// is armed: a STAGED context, and a persistent collective resting between
// invocations with its RESULT acknowledged; not while RESULT frames await
// their ACK, not while a rank that another went past is waited for, and
// not once the context FAILED (it announces itself on the tick).
func TestQuiet(t *testing.T) {
	const timeout = 10 * time.Millisecond
	e := New(Config{Logger: quiet()})
	spec := singleSpec(parser.OpKey{Job: 9, Group: 1, Op: 1, OpGen: 1}, kulisch.FP32Arrival, 100, 1500, 8192)
	if err := e.Stage(1e9, &spec, 4); err != nil {
		t.Fatal(err)
	}
	if !e.Quiet() {
		t.Fatal("a STAGED context: not quiet")
	}

	r := newPushRig(t, kulisch.FP32Arrival, 5, 4, timeout)
	if r.e.Quiet() {
		t.Fatal("COMMITted, no rank arrived yet (their inactivity clocks run): quiet")
	}
	r.contribute(t, 0, 0, true)
	r.contribute(t, 1, 0, true)
	if r.e.Quiet() {
		t.Fatal("RESULT sent, not acknowledged: quiet")
	}
	r.ack(t, 5)
	if !r.e.Quiet() {
		t.Fatal("resting between invocations with everything acknowledged: not quiet")
	}
	r.contribute(t, 0, 1, true) // rank 1 is now waited for
	if r.e.Quiet() {
		t.Fatal("rank 0 went past rank 1, which is waited for: quiet")
	}
	r.now += int64(2 * timeout)
	r.e.Tick(r.now, r.tx)
	if s, _ := r.e.Status(r.key); s.State != parser.StateFailed {
		t.Fatalf("state %v after rank 1 stayed away for 2 timeouts, want FAILED", s.State)
	}
	if r.e.Quiet() {
		t.Fatal("FAILED: quiet")
	}
}
