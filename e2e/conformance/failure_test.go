package conformance

import (
	"math"
	"testing"
	"time"
)

// isFailedAnnouncement matches PROGRESS FAILED with Packet ID 0 to rank r
// on its DATA stream (7, Failure announcement).
func (e *env) isFailedAnnouncement(id ident, r int) func(rxFrame) bool {
	base := e.isProgressFor(id, r)
	return func(f rxFrame) bool {
		return base(f) && f.Payload[2+38] == psFailed && be.Uint32(f.Payload[2+24:]) == 0
	}
}

// checkAnnouncements checks the failure announcement on rank r: exactly
// three PROGRESS FAILED with Packet ID 0, at least 10 ms apart, with the
// window's Committed Element, then none. It returns the first one's time.
func (e *env) checkAnnouncements(t *testing.T, o opSpec, r int, from int, committed uint32, wait time.Duration) time.Time {
	t.Helper()
	n := e.rankNIC(r)
	first, ok := n.waitFor(&from, wait, e.isFailedAnnouncement(o.ID, r))
	if !ok {
		t.Errorf("rank %d: no PROGRESS FAILED (Packet ID 0) within %v (7: a context that becomes FAILED sends it to every contributor)", r, wait)
		return time.Time{}
	}
	time.Sleep(250 * time.Millisecond) // three sets 10 ms apart, then never again
	all := n.since(from-1, e.isFailedAnnouncement(o.ID, r))
	if len(all) != 3 {
		t.Errorf("rank %d: %d failure announcements, want 3 (7: three times, 10 ms apart, then never again)", r, len(all))
	}
	for i, f := range all {
		p := e.checkProgress(t, f, o, r)
		if p.Committed != committed || p.Flags&pfResult != 0 {
			t.Errorf("rank %d announcement %d: committed %d flags %#x, want the window's committed %d, flag RESULT clear", r, i, p.Committed, p.Flags, committed)
		}
		if i > 0 {
			// Kernel receive times: the reader goroutine's own can bunch
			// frames sent 10 ms apart when it waits for a core.
			prev, at := all[i-1].Kernel, f.Kernel
			if prev.IsZero() || at.IsZero() {
				prev, at = all[i-1].At, f.At
			}
			if gap := at.Sub(prev); gap < 5*time.Millisecond { // 7: 10 ms by the node's timer; queues shorten it
				t.Errorf("rank %d: announcements %d and %d only %v apart (7: 10 ms apart)", r, i-1, i, gap)
			}
		}
	}
	return first.At
}

// testSilentContributor: rank 1 sends its first frame and goes silent; the
// context FAILs after Timeout with cause TIMEOUT naming rank 1's stream and
// first missing element, and announces it to both ranks (5.1, 5.2, 7).
func (e *env) testSilentContributor(t *testing.T, id ident) {
	const timeout = 400
	o := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 3000, ResultTo: []int{0, 1}, Timeout: timeout})
	in := inputs(7, int(o.VecLen))
	e.newSink(0, o)
	e.newSink(1, o)
	e.am.expectAck(t, "STAGE", control{ID: id, Cmd: cmdStage, Body: e.stageOf(o).encode()}, stOK, osStaged)
	e.am.expectAck(t, "COMMIT", e.am.cmd(id, cmdCommit), stOK, osActive)
	marks := [2]int{e.h1.mark(), e.h2.mark()}
	cs := chunks(int(o.VecLen))
	s0, s1 := e.newSender(0, o), e.newSender(1, o)
	for k := range cs {
		a, _ := frameRange(cs, k)
		s0.send(t, s0.frame(in[0], a, cs[k], 0))
	}
	_, b0 := frameRange(cs, 0)
	s1.send(t, s1.frame(in[1], 0, cs[0], 0))

	failedAt := e.checkAnnouncements(t, o, 1, marks[1], uint32(b0), 3*timeout*time.Millisecond)
	e.checkAnnouncements(t, o, 0, marks[0], o.VecLen, 100*time.Millisecond)
	if !failedAt.IsZero() {
		// h2 sent nothing after rank 1's last DATA but PROGRESS for RESULT,
		// which precedes the silence; the bound counts from h2's last frame.
		silent := failedAt.Sub(e.h2.lastSend())
		t.Logf("rank 1 silent for %v before the first failure announcement (Timeout %d ms)", silent, timeout)
		if silent < timeout*time.Millisecond-5*time.Millisecond || silent > timeout*time.Millisecond+250*time.Millisecond {
			t.Errorf("the context failed %v after rank 1's last frame, want about Timeout = %d ms (5.1)", silent, timeout)
		}
		// Timer-driven PROGRESS (Packet ID 0, OK) to the incomplete stream
		// during the silence: at least once per Timeout/4 (7).
		n := len(e.h2.since(marks[1], func(f rxFrame) bool {
			return e.isProgressFor(id, 1)(f) && f.Payload[2+38] == psOK && be.Uint32(f.Payload[2+24:]) == 0 && f.At.Before(failedAt)
		}))
		finding(t, "timer_driven_progress", fTimerProgress, n >= 2,
			"rank 1's stream was incomplete and silent for %v (Timeout %d ms), and sw1 sent it %d timer-driven PROGRESS (Packet ID 0) before failing; 7 says at least one per Timeout/4 while a stream is incomplete", silent, timeout, n)
	}
	c := e.am.must(t, e.am.cmd(id, cmdComplete))
	if c.C.Status != stOK || c.Ack.State != osFailed || c.Ack.Cause != fcTimeout || c.Ack.MissingStream != 2 || c.Ack.MissingFrom != uint32(b0) {
		t.Errorf("COMPLETE of the failed context: status %d %+v, want OK, FAILED, cause TIMEOUT(1), Missing Stream 2 from %d (5.2)", c.C.Status, c.Ack, b0)
	}
	// A frame that passes the binding checks is answered FAILED (7)...
	from := e.h2.mark()
	a1, _ := frameRange(cs, 1)
	d := s1.frame(in[1], a1, cs[1], 0)
	b := s1.send(t, d)
	if p, ok := e.waitProgress(t, &from, o, 1, d.PacketID, time.Second); !ok || p.Status != psFailed {
		t.Errorf("DATA to a FAILED context: PROGRESS %+v (found %v), want status FAILED(5) (7)", p, ok)
	}
	// ...one that does not, is not answered.
	be.PutUint16(b[2+18:], 0x0999)
	from = e.h2.mark()
	if err := e.h2.send(e.portMAC[1], b); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h2, from, 100*time.Millisecond, "DATA with a wrong endpoint to a FAILED context", func(f rxFrame) bool {
		return f.Payload[1] == classProgress && getIdent(f.Payload[2:]) == id
	})
	e.am.expectAck(t, "RELEASE of a FAILED context", e.am.cmd(id, cmdRelease), stOK, osReleased)
}

// testPeerFailed: rank 0 answers the RESULT frame that ends the vector
// with PROGRESS FAILED (both DATA streams are complete by then); the node
// fails at once with cause PEER_FAILED and announces it (7).
func (e *env) testPeerFailed(t *testing.T, id ident) {
	o := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 1000, ResultTo: []int{0, 1}, Timeout: 5000})
	in := inputs(8, int(o.VecLen))
	sk := e.newSink(0, o)
	sk.failLast = true
	e.newSink(1, o)
	e.am.expectAck(t, "STAGE", control{ID: id, Cmd: cmdStage, Body: e.stageOf(o).encode()}, stOK, osStaged)
	e.am.expectAck(t, "COMMIT", e.am.cmd(id, cmdCommit), stOK, osActive)
	marks := [2]int{e.h1.mark(), e.h2.mark()}
	cs := chunks(int(o.VecLen))
	for r := 0; r < 2; r++ {
		s := e.newSender(r, o)
		for k := range cs {
			a, _ := frameRange(cs, k)
			s.send(t, s.frame(in[r], a, cs[k], 0))
		}
	}
	e.checkAnnouncements(t, o, 0, marks[0], o.VecLen, time.Second)
	e.checkAnnouncements(t, o, 1, marks[1], o.VecLen, 100*time.Millisecond)
	c := e.am.must(t, e.am.cmd(id, cmdComplete))
	if c.C.Status != stOK || c.Ack.State != osFailed || c.Ack.Cause != fcPeerFailed || c.Ack.MissingStream != 1 {
		t.Errorf("COMPLETE after rank 0 answered FAILED: status %d %+v, want OK, FAILED, cause PEER_FAILED(2), Missing Stream 1 (rank 0's result path) (5.2)", c.C.Status, c.Ack)
	}
	e.am.expectAck(t, "ABORT of a FAILED context", e.am.cmd(id, cmdAbort), stOK, osAborted)
}

// testPush is the worked example of 6.1 with n = 5: PUSH makes the node
// emit a short RESULT at once, resting contributors are not timed out, and
// once one passes the other, the rester's inactivity counts.
func (e *env) testPush(t *testing.T, id ident) {
	const timeout = 300
	o := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 10, ResultTo: []int{0, 1}, Timeout: timeout})
	in := inputs(9, int(o.VecLen))
	sinks := [2]*resultSink{e.newSink(0, o), e.newSink(1, o)}
	e.am.expectAck(t, "STAGE", control{ID: id, Cmd: cmdStage, Body: e.stageOf(o).encode()}, stOK, osStaged)
	e.am.expectAck(t, "COMMIT", e.am.cmd(id, cmdCommit), stOK, osActive)
	marks := [2]int{e.h1.mark(), e.h2.mark()}
	s0, s1 := e.newSender(0, o), e.newSender(1, o)
	isResult := func(r int) func(rxFrame) bool {
		return func(f rxFrame) bool {
			return f.Eth.Dst == e.rankNIC(r).mac && f.Payload[1] == classResult && getIdent(f.Payload[2:]) == id
		}
	}
	s1.send(t, s1.frame(in[1], 0, []int{5}, dfPush))
	from := marks[0]
	if _, ok := e.h1.waitFor(&from, 50*time.Millisecond, isResult(0)); ok {
		t.Errorf("RESULT before rank 0 contributed")
	}
	s0.send(t, s0.frame(in[0], 0, []int{5}, dfPush))
	for r := 0; r < 2; r++ {
		from := marks[r]
		f, ok := e.rankNIC(r).waitFor(&from, 500*time.Millisecond, isResult(r))
		if !ok {
			t.Errorf("rank %d: no RESULT [0,5) after both ranks rest with PUSH (6.1 P2)", r)
			continue
		}
		d, err := decodeData(f.Payload, opCtx{MTU: 1500, VecLen: o.VecLen, W: int(o.W)})
		if err != nil {
			t.Errorf("rank %d RESULT: %v", r, err)
			continue
		}
		if d.First != 0 || d.ElemCount != 5 || d.Flags&dfPush == 0 || d.Flags&dfLast != 0 {
			t.Errorf("rank %d: RESULT [%d,+%d) flags %#x, want [0,+5) with PUSH, without LAST (6.1 P2, P3)", r, d.First, d.ElemCount, d.Flags)
		}
	}
	// Both rest: the context is ACTIVE and lacks nothing (5.2), and stays so
	// past Timeout (6.1 P4).
	time.Sleep(2 * timeout * time.Millisecond)
	c := e.am.must(t, e.am.cmd(id, cmdComplete))
	if c.Ack.State != osActive || c.Ack.MissingStream != 0xFFFF || c.Ack.MissingFrom != 0 || c.Ack.Completed != 5 {
		t.Errorf("COMPLETE with both ranks resting %v: %+v, want ACTIVE, Completed 5, Missing 0xFFFF/0 (5.2, 6.1 P4)", 2*timeout*time.Millisecond, c.Ack)
	}
	// Rank 0 goes on: [5,10) with PUSH (and LAST). Rank 1 now holds the
	// frontier; after Timeout the context fails naming stream 2 from 5.
	mark1 := e.h2.mark()
	s0.send(t, s0.frame(in[0], 5, []int{5}, dfPush))
	passed := time.Now()
	first := e.checkAnnouncements(t, o, 1, mark1, 5, 3*timeout*time.Millisecond)
	if !first.IsZero() {
		if dt := first.Sub(passed); dt < timeout*time.Millisecond-5*time.Millisecond || dt > timeout*time.Millisecond+250*time.Millisecond {
			t.Errorf("rank 1 failed %v after rank 0 passed it, want about Timeout = %d ms (6.1 P4)", dt, timeout)
		}
	}
	c = e.am.must(t, e.am.cmd(id, cmdComplete))
	if c.Ack.State != osFailed || c.Ack.Cause != fcTimeout || c.Ack.MissingStream != 2 || c.Ack.MissingFrom != 5 {
		t.Errorf("COMPLETE: %+v, want FAILED, TIMEOUT, Missing Stream 2 from 5 (6.1 worked example)", c.Ack)
	}
	got := sinks[0].partial(t)
	sinks[1].partial(t)
	for i := 0; i < 5; i++ {
		if want := exactSum(in[0][i], in[1][i]); math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Errorf("RESULT element %d: %g, exact sum %g", i, got[i], want)
		}
	}
	e.am.expectAck(t, "ABORT", e.am.cmd(id, cmdAbort), stOK, osAborted)
}
