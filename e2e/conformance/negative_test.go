package conformance

import (
	"bytes"
	"testing"
	"time"
)

// testStageInvalid sends STAGEs with one bad field each and checks the ACK
// status and Detail of 5.1, and that no context was created.
func (e *env) testStageInvalid(t *testing.T, id ident) {
	base := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 1000, ResultTo: []int{0, 1}})
	arrival := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accFP32Arrival, VecLen: 1000, ResultTo: []int{0, 1}})
	rec, _ := e.tuple(accKulischFixed)
	type tc struct {
		name   string
		o      opSpec
		mut    func(s *stage)
		status uint8
		detail uint16
		find   int // the finding the case came from (0: none); a label only
	}
	cases := []tc{
		{"role", base, func(s *stage) { s.Ctx.Role = 5 }, stInvalid, 0, 0},
		{"collective", base, func(s *stage) { s.Ctx.Collective = 0 }, stInvalid, 1, 0},
		{"input_format", base, func(s *stage) { s.Ctx.In = 5 }, stInvalid, 2, 0},
		{"accumulator_0x02", base, func(s *stage) { s.Ctx.Acc = 0x02 }, stInvalid, 3, 0},
		{"partial_policy", base, func(s *stage) { s.Ctx.Partial = 7 }, stInvalid, 4, 0},
		{"output_format", base, func(s *stage) { s.Ctx.Out = 0 }, stInvalid, 5, 0},
		// KULISCH_F64 (8) is a descriptor format only, never a policy (6).
		{"input_format_kulisch_f64", base, func(s *stage) { s.Ctx.In = fmtF64 }, stInvalid, 2, 0},
		{"partial_policy_kulisch_f64", base, func(s *stage) { s.Ctx.Partial = fmtF64 }, stInvalid, 4, 0},
		{"output_format_kulisch_f64", base, func(s *stage) { s.Ctx.Out = fmtF64 }, stInvalid, 5, 0},
		{"kulisch_width_below_278+log2N", base, func(s *stage) { s.Ctx.W = 272 }, stInvalid, 6, 0},
		{"kulisch_width_not_byte", base, func(s *stage) { s.Ctx.W = 284 }, stInvalid, 6, 0},
		{"kulisch_width_without_kulisch", arrival, func(s *stage) { s.Ctx.W = 280 }, stInvalid, 6, 0},
		{"vector_length_0", base, func(s *stage) { s.Ctx.VecLen = 0 }, stInvalid, 8, 0},
		{"mtu_1000", base, func(s *stage) { s.Ctx.MTU = 1000 }, stInvalid, 12, 0},
		{"set_records_not_bitmap", base, func(s *stage) {
			s.Sets = []setRecord{{Index: 0xFF, Encoding: encFlat, Set: flatSet(0, 1, 0, 1)}}
		}, stInvalid, 15, 0},
		{"window_intervals_0", base, func(s *stage) { s.Ctx.WI = 0 }, stInvalid, 16, 0},
		{"replay_depth_0", base, func(s *stage) { s.Ctx.RD = 0 }, stInvalid, 18, 0},
		{"window_bytes_below_mtu", base, func(s *stage) { s.Ctx.WB = 1499 }, stInvalid, 20, 0},
		{"window_elements_1451", base, func(s *stage) { s.Ctx.WE = 1451 }, stInvalid, 24, 0},
		{"max_terms_0", arrival, func(s *stage) { s.Ctx.MaxTerms = 0 }, stInvalid, 28, 0},
		{"timeout_0", base, func(s *stage) { s.Ctx.Timeout = 0 }, stInvalid, 32, 0},
		{"timeout_600001", base, func(s *stage) { s.Ctx.Timeout = 600001 }, stInvalid, 32, 0},
		{"tenant_not_bitmap", base, func(s *stage) { s.Ctx.Tenant = 5 }, stInvalid, 36, 0},
		{"binding1_kind_0", base, func(s *stage) { s.Bindings[1].Kind = 0 }, stInvalid, 40 + 16, 0},
		{"binding1_flags_reserved", base, func(s *stage) { s.Bindings[1].Flags = 0x03 }, stInvalid, 40 + 16 + 1, 0},
		// INVALID_BINDING: Detail = the failing field of the binding (5.1:
		// Port +8, Peer MAC +10, Stream ID +2, Local Endpoint +4; for a pair
		// the later binding).
		{"binding0_port_7", base, func(s *stage) { s.Bindings[0].Port = 7 }, stInvalidBinding, 40 + 8, fBindingDetail},
		{"binding1_group_mac", base, func(s *stage) { s.Bindings[1].MAC = mac{0x01, 0x00, 0x5e, 0, 0, 1} }, stInvalidBinding, 40 + 16 + 10, fBindingDetail},
		{"binding2_zero_mac", base, func(s *stage) { s.Bindings[2].MAC = mac{} }, stInvalidBinding, 40 + 32 + 10, fBindingDetail},
		{"duplicate_contributor_stream", base, func(s *stage) { s.Bindings[1].Stream = s.Bindings[0].Stream }, stInvalidBinding, 40 + 16 + 2, fBindingDetail},
		{"shared_incoming_local_endpoint", base, func(s *stage) { s.Bindings[1].Local = s.Bindings[0].Local }, stInvalidBinding, 40 + 16 + 4, fBindingDetail},
		{"vector_beyond_caps", base, func(s *stage) { s.Ctx.VecLen = rec.MaxVector + 1 }, stUnsupported, 0xFFFF, 0},
		{"tuple_not_advertised", arrival, func(s *stage) { s.Ctx.In = fmtINT8 }, stUnsupported, 0xFFFF, 0},
	}
	for _, c := range cases {
		s := e.stageOf(c.o)
		c.mut(&s)
		r := e.am.must(t, control{ID: id, Cmd: cmdStage, Body: s.encode()})
		ok := r.C.Status == c.status && r.Ack.Detail == c.detail && r.Ack.State == osNone
		if !ok {
			t.Errorf("STAGE %s: ACK status %d detail %d state %d, want status %d detail %d state NONE (5.1)",
				c.name, r.C.Status, r.Ack.Detail, r.Ack.State, c.status, c.detail)
		}
	}
	// None of them created a context (5: a command for an unknown identity
	// is BAD_STATE with state NONE).
	e.am.expectAck(t, "COMPLETE after refused STAGEs", e.am.cmd(id, cmdComplete), stBadState, osNone)
}

// testControlState covers COMMIT of an unknown operation, the transaction
// rules (recorded reply, CONFLICT) and command/state pairs of section 5.
//
// It returns the identity of the context it leaves ACTIVE.
func (e *env) testControlState(t *testing.T, unknown, id ident) ident {
	e.am.expectAck(t, "COMMIT of an unknown operation", e.am.cmd(unknown, cmdCommit), stBadState, osNone)
	e.am.expectAck(t, "RELEASE of an unknown operation", e.am.cmd(unknown, cmdRelease), stBadState, osNone)

	o := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 2000, ResultTo: []int{0, 1}})
	st := control{ID: id, Cmd: cmdStage, Body: e.stageOf(o).encode(), Txn: e.am.nextTxn()}
	first := e.am.expectAck(t, "STAGE", st, stOK, osStaged)
	// A retry (same Transaction ID, identical bytes) gets the recorded reply.
	again := e.am.must(t, st)
	if !bytes.Equal(again.Frame.Payload, first.Frame.Payload) {
		t.Errorf("retried STAGE: reply %x, first reply %x (5: answered with the recorded reply)", again.Frame.Payload, first.Frame.Payload)
	}
	// The same Transaction ID with different bytes: CONFLICT, nothing changes.
	conflict := e.am.must(t, control{ID: id, Cmd: cmdCommit, Body: []byte{}, Txn: st.Txn})
	if conflict.C.Status != stConflict {
		t.Errorf("COMMIT under the STAGE's Transaction ID: status %d state %d, want CONFLICT(6) (5)", conflict.C.Status, conflict.Ack.State)
	}
	c := e.am.expectAck(t, "COMPLETE of a STAGED context", e.am.cmd(id, cmdComplete), stOK, osStaged)
	if c.Ack.Completed != 0 {
		t.Errorf("COMPLETE of a STAGED context: Completed Elements %d, want 0 (5.2: 0 before ACTIVE)", c.Ack.Completed)
	}
	// 5.2: a STAGED context lacks everything; it names its first CONTRIBUTOR
	// binding (stream 1), from 0.
	finding(t, "staged_missing", fStagedMissing, c.Ack.MissingStream == 1 && c.Ack.MissingFrom == 0,
		"STAGED context: Missing Stream %#x, Missing From %d, want the first CONTRIBUTOR binding's stream 1 from 0 (5.2)", c.Ack.MissingStream, c.Ack.MissingFrom)
	e.am.expectAck(t, "STAGE of an installed identity under another transaction", control{ID: id, Cmd: cmdStage, Body: st.Body}, stBadState, osStaged)
	rel := e.am.must(t, e.am.cmd(id, cmdRelease))
	finding(t, "release_staged", fReleaseStaged, rel.C.Status == stOK && rel.Ack.State == osReleased,
		"RELEASE of a STAGED context answered status %d state %d; 5 says RELEASE moves STAGED to RELEASED (want OK, RELEASED)", rel.C.Status, rel.Ack.State)
	if rel.Ack.State != osStaged {
		// The context is gone; go on under a newer generation.
		id.OpGen++
		st.ID = id
		e.am.expectAck(t, "STAGE under a newer generation", control{ID: id, Cmd: cmdStage, Body: st.Body}, stOK, osStaged)
	}
	e.am.expectAck(t, "COMMIT", e.am.cmd(id, cmdCommit), stOK, osActive)
	e.am.expectAck(t, "RELEASE of an ACTIVE context", e.am.cmd(id, cmdRelease), stBadState, osActive)
	e.am.expectAck(t, "STAGE of an ACTIVE identity", control{ID: id, Cmd: cmdStage, Body: st.Body}, stBadState, osActive)
	return id
}

// noReply checks that no frame matching pred arrives at n within d.
func noReply(t *testing.T, n *nic, from int, d time.Duration, what string, pred func(rxFrame) bool) {
	t.Helper()
	if f, ok := n.waitFor(&from, d, pred); ok {
		t.Errorf("%s: got a reply %x (a drop has no reply, 1)", what, f.Payload)
	}
}

// testDataDrops runs on the ACTIVE context id of testControlState: DATA
// from an unbound MAC or endpoint, overlap under a new Packet ID, changed
// bytes under an old one.
func (e *env) testDataDrops(t *testing.T, id ident) {
	o := e.defaults(opSpec{ID: id, Collective: collAllreduce, Acc: accKulischFixed, VecLen: 2000, ResultTo: []int{0, 1}})
	for r := 0; r < 2; r++ {
		e.newSink(r, o)
	}
	in := inputs(99, int(o.VecLen))
	s1 := e.newSender(1, o)
	anyProgress := func(stream uint16) func(rxFrame) bool {
		return func(f rxFrame) bool {
			p := f.Payload
			return len(p) >= 2+progressHdr && p[1] == classProgress && getIdent(p[2:]) == id && be.Uint16(p[2+22:]) == stream
		}
	}
	// Rank 1's first frame from a MAC no binding names (same port, stream,
	// endpoints): dropped `bad_endpoint`, no reply, no state change.
	spoof := mac{0x02, 0xde, 0xad, 0xbe, 0xef, 0x01}
	d := s1.frame(in[1], 0, []int{363}, 0)
	b := d.encode()
	m0 := e.metrics()
	from := e.h2.mark()
	if err := e.h2.sendFrom(spoof, e.portMAC[1], b); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h2, from, 150*time.Millisecond, "DATA from an unbound MAC", anyProgress(2))
	m1 := e.metrics()
	finding(t, "unbound_mac_counted_bad_endpoint", fDropLabels, specDrops(m1, "bad_endpoint")-specDrops(m0, "bad_endpoint") == 1,
		"DATA from an unbound MAC should count `bad_endpoint` where section 10 says; prismd's counters changed: %s", dropDiff(m0, m1))
	// A bound MAC with a wrong Source Endpoint: the same.
	bad := append([]byte(nil), b...)
	be.PutUint16(bad[2+18:], 0x0999)
	from = e.h2.mark()
	if err := e.h2.send(e.portMAC[1], bad); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h2, from, 150*time.Millisecond, "DATA with a wrong Source Endpoint", anyProgress(2))
	m2 := e.metrics()
	finding(t, "wrong_endpoint_counted_bad_endpoint", fDropLabels, specDrops(m2, "bad_endpoint")-specDrops(m1, "bad_endpoint") == 1,
		"DATA with a wrong endpoint should count `bad_endpoint` where section 10 says; prismd's counters changed: %s", dropDiff(m1, m2))
	// The same frame from the bound MAC is accepted as new (Packet ID 1,
	// status OK): the dropped copies changed nothing.
	from = e.h2.mark()
	if err := e.h2.send(e.portMAC[1], b); err != nil {
		t.Fatal(err)
	}
	if p, ok := e.waitProgress(t, &from, o, 1, 1, time.Second); !ok || p.Status != psOK || p.Committed != 363 {
		t.Errorf("rank 1's frame after the dropped copies: PROGRESS %+v (found %v), want OK committed 363", p, ok)
	}

	// Rank 0: [0,363) as Packet ID 1, then [100,300) as Packet ID 2: overlap,
	// answered PROGRESS INVALID.
	s0 := e.newSender(0, o)
	from = e.h1.mark()
	f1 := s0.send(t, s0.frame(in[0], 0, []int{363}, 0))
	if p, ok := e.waitProgress(t, &from, o, 0, 1, time.Second); !ok || p.Status != psOK || p.Committed != 363 {
		t.Errorf("rank 0 packet 1: PROGRESS %+v (found %v), want OK committed 363", p, ok)
	}
	m3 := e.metrics()
	s0.send(t, s0.frame(in[0], 100, []int{200}, 0))
	if p, ok := e.waitProgress(t, &from, o, 0, 2, time.Second); !ok || p.Status != psInvalid {
		t.Errorf("overlap under a new Packet ID: PROGRESS %+v (found %v), want INVALID(2) (6, 7)", p, ok)
	} else if p.Committed != 363 {
		t.Errorf("overlap: PROGRESS committed %d, want 363 (no state change)", p.Committed)
	}
	m4 := e.metrics()
	finding(t, "overlap_counted", fDropLabels, drops(m4, "overlap")-drops(m3, "overlap") == 1,
		"an overlap should count `overlap` (6); prismd's counters changed: %s", dropDiff(m3, m4))
	// Packet ID 1 again with different values: INVALID too.
	changed := append([]byte(nil), f1...)
	changed[len(changed)-1] ^= 0x01
	if err := e.h1.send(e.portMAC[0], changed); err != nil {
		t.Fatal(err)
	}
	if p, ok := e.waitProgress(t, &from, o, 0, 1, time.Second); !ok || p.Status != psInvalid {
		t.Errorf("Packet ID 1 with changed bytes: PROGRESS %+v (found %v), want INVALID(2) (6)", p, ok)
	}
	// Frames that fail the receiver rules of 6 (D5, D13, D15) are dropped
	// under the rule's reason without reply. They carry the Packet ID the
	// valid frame after them uses: had any been recorded, that one would be
	// INVALID.
	good := s0.frame(in[0], 363, []int{363}, 0)
	gb := good.encode()
	for _, c := range []struct {
		rule, name, reason string
		mut                func(b []byte)
	}{
		{"D5", "reserved offset 38 nonzero", "reserved_nonzero", func(b []byte) { b[2+39] = 1 }},
		{"D6", "reserved flag 0x20", "reserved_nonzero", func(b []byte) { b[2+33] |= 0x20 }},
		{"D11", "format code 6 (AUTO) in a descriptor", "bad_format", func(b []byte) { b[2+dataHdr+2] = fmtAuto << 4 }},
		{"D13", "Element Count != sum of group Counts", "bad_count", func(b []byte) { be.PutUint16(b[2+30:], 362) }},
		{"D15", "LAST on a frame that does not end at Vector Length", "out_of_range", func(b []byte) { b[2+33] |= dfLast }},
	} {
		bad := append([]byte(nil), gb...)
		c.mut(bad)
		mb := e.metrics()
		from := e.h1.mark()
		if err := e.h1.send(e.portMAC[0], bad); err != nil {
			t.Fatal(err)
		}
		noReply(t, e.h1, from, 100*time.Millisecond, c.rule+" "+c.name, anyProgress(1))
		ma := e.metrics()
		finding(t, c.rule+"_counted_"+c.reason, fDropLabels, drops(ma, c.reason)-drops(mb, c.reason) == 1,
			"%s (%s) should count `%s` (6); prismd's counters changed: %s", c.rule, c.name, c.reason, dropDiff(mb, ma))
	}
	from = e.h1.mark()
	if err := e.h1.send(e.portMAC[0], gb); err != nil {
		t.Fatal(err)
	}
	if p, ok := e.waitProgress(t, &from, o, 0, good.PacketID, time.Second); !ok || p.Status != psOK || p.Committed != 726 {
		t.Errorf("the valid frame after the malformed ones: PROGRESS %+v (found %v), want OK committed 726 (a dropped frame changes no state)", p, ok)
	}
	// Drops change no state: the receiver's context is still ACTIVE (7: on
	// INVALID it is the sender that fails), and the stream furthest behind
	// is stream 2 (rank 1), from 363.
	c := e.am.must(t, e.am.cmd(id, cmdComplete))
	finding(t, "overlap_leaves_context_active", fOverlapFails, c.Ack.State == osActive,
		"after PROGRESS INVALID the receiving context is in state %d (cause %d); 7 says the receiver drops the frame and its context is unchanged", c.Ack.State, c.Ack.Cause)
	if c.Ack.State == osActive {
		// Stream 1 (rank 0) lacks [726, 2000), stream 2 (rank 1) [363, 2000).
		if !(c.Ack.MissingStream == 1 && c.Ack.MissingFrom == 726 || c.Ack.MissingStream == 2 && c.Ack.MissingFrom == 363) {
			t.Errorf("COMPLETE: Missing Stream %d From %d, want an incomplete stream and its first missing element (5.2)", c.Ack.MissingStream, c.Ack.MissingFrom)
		}
		finding(t, "missing_stream_furthest_behind", fMissingStream, c.Ack.MissingStream == 2 && c.Ack.MissingFrom == 363,
			"stream 1 lacks elements from 726, stream 2 from 363; COMPLETE named Missing Stream %d from %d; 5.2 says the CONTRIBUTOR stream with the lowest first missing element (stream 2 from 363)", c.Ack.MissingStream, c.Ack.MissingFrom)
	}
	// ABORT, then the identity is retired: the same or a lower generation is
	// STALE_GENERATION, a higher one stages (3).
	e.am.expectAck(t, "ABORT", e.am.cmd(id, cmdAbort), stOK, osAborted)
	st := e.stageOf(o).encode()
	r := e.am.must(t, control{ID: id, Cmd: cmdStage, Body: st})
	if r.C.Status != stStaleGen {
		t.Errorf("STAGE after ABORT with the same generations: status %d, want STALE_GENERATION(5)", r.C.Status)
	}
	lower := id
	lower.OpGen--
	r = e.am.must(t, control{ID: lower, Cmd: cmdStage, Body: st})
	if r.C.Status != stStaleGen {
		t.Errorf("STAGE after ABORT with a lower Operation Generation: status %d, want STALE_GENERATION(5)", r.C.Status)
	}
	higher := id
	higher.OpGen++
	e.am.expectAck(t, "STAGE with a higher Operation Generation", control{ID: higher, Cmd: cmdStage, Body: st}, stOK, osStaged)
	e.am.expectAck(t, "COMMIT of the new generation", e.am.cmd(higher, cmdCommit), stOK, osActive)
	// DATA of the old generation while the new one is installed matches no
	// context: `unknown_operation`, answered PROGRESS UNKNOWN_OPERATION (3, 7).
	ms := e.metrics()
	from = e.h1.mark()
	old := s0.frame(in[0], 726, []int{363}, 0)
	s0.send(t, old)
	reply, answered := e.h1.waitFor(&from, 150*time.Millisecond, anyProgress(1))
	ma := e.metrics()
	status := -1
	if answered {
		status = int(reply.Payload[2+38])
	}
	finding(t, "stale_generation_data", fStaleData, answered && status == psUnknownOp && drops(ma, "unknown_operation")-drops(ms, "unknown_operation") == 1,
		"DATA of generation %d while generation %d is ACTIVE: answered %v (PROGRESS status %d); counters changed: %s; want PROGRESS UNKNOWN_OPERATION and one `unknown_operation` drop (3, 7)",
		id.OpGen, higher.OpGen, answered, status, dropDiff(ms, ma))
	e.am.expectAck(t, "ABORT of the new generation", e.am.cmd(higher, cmdAbort), stOK, osAborted)
	higherGroup := id
	higherGroup.GroupGen++
	e.am.expectAck(t, "STAGE with a higher Group Generation", control{ID: higherGroup, Cmd: cmdStage, Body: st}, stOK, osStaged)
	// One generation of an Operation ID is installed at a time: STAGE of a
	// newer one is BAD_STATE with the installed context's state, and ABORT
	// of the newer one frees the installed one too; both generations are
	// then retired (5). This is how an AM clears what an AM before it left.
	newer := higherGroup
	newer.OpGen += 10
	e.am.expectAck(t, "STAGE of a newer generation while one is installed", control{ID: newer, Cmd: cmdStage, Body: st}, stBadState, osStaged)
	e.am.expectAck(t, "ABORT of that newer generation", e.am.cmd(newer, cmdAbort), stOK, osAborted)
	// The node keeps the newest retired generation: the older one it freed
	// answers STALE_GENERATION, no longer STAGED.
	e.am.expectAck(t, "COMPLETE of the installed generation after ABORT of a newer one", e.am.cmd(higherGroup, cmdComplete), stStaleGen, osNone)
	r = e.am.must(t, control{ID: newer, Cmd: cmdStage, Body: st})
	if r.C.Status != stStaleGen {
		t.Errorf("STAGE of the aborted newer generation: status %d, want STALE_GENERATION(5)", r.C.Status)
	}
	newest := newer
	newest.OpGen++
	e.am.expectAck(t, "STAGE of the next generation", control{ID: newest, Cmd: cmdStage, Body: st}, stOK, osStaged)
	e.am.expectAck(t, "ABORT of the next generation", e.am.cmd(newest, cmdAbort), stOK, osAborted)
}

// testControlDrops: requests from a source that is not an AM, malformed
// framing and an ACK sent to the node are dropped without reply (5).
func (e *env) testControlDrops(t *testing.T, id ident) {
	anyControl := func(txn uint32) func(rxFrame) bool {
		return func(f rxFrame) bool {
			p := f.Payload
			return len(p) >= 2+controlHdr && p[1] == classControl && be.Uint32(p[2+18:]) == txn
		}
	}
	// CAPS_QUERY from a MAC that is no configured AM.
	m0 := e.metrics()
	q := control{Cmd: cmdCapsQuery, Body: []byte{0, 0, 0, 0}, Txn: e.am.nextTxn(), SrcEP: 0xFFFE, DstEP: 1, FragCount: 1}
	from := e.h1.mark()
	if err := e.h1.sendFrom(mac{0x02, 0xba, 0xd0, 0, 0, 1}, e.nodeMAC, q.encode()); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h1, from, 150*time.Millisecond, "CAPS_QUERY from an untrusted source", anyControl(q.Txn))
	m1 := e.metrics()
	if got := drops(m1, "untrusted_source") - drops(m0, "untrusted_source"); got != 1 {
		t.Errorf("CAPS_QUERY from an untrusted source: untrusted_source +%g, want +1 (5); counters changed: %s", got, dropDiff(m0, m1))
	}
	// COMMIT with a 4-byte body (C10): no reply, `bad_length`.
	c := control{ID: id, Cmd: cmdCommit, Body: []byte{0, 0, 0, 0}, Txn: e.am.nextTxn(), SrcEP: 0xFFFE, DstEP: 1, FragCount: 1}
	from = e.h1.mark()
	if err := e.h1.send(e.nodeMAC, c.encode()); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h1, from, 150*time.Millisecond, "COMMIT with a body (C10)", anyControl(c.Txn))
	m2 := e.metrics()
	finding(t, "c10_counted_bad_length", fDropLabels, drops(m2, "bad_length")-drops(m1, "bad_length") == 1,
		"COMMIT with Body Length 4 should count `bad_length` (C10); prismd's counters changed: %s", dropDiff(m1, m2))
	// An ACK addressed to the node: `unexpected_command`, no reply.
	a := control{ID: id, Cmd: cmdAck, Body: ack{Acked: cmdCommit, State: osActive, Detail: 0xFFFF, MissingStream: 0xFFFF}.encode(),
		Txn: e.am.nextTxn(), SrcEP: 0xFFFE, DstEP: 1, FragCount: 1}
	from = e.h1.mark()
	if err := e.h1.send(e.nodeMAC, a.encode()); err != nil {
		t.Fatal(err)
	}
	noReply(t, e.h1, from, 150*time.Millisecond, "ACK sent to a node", anyControl(a.Txn))
	m3 := e.metrics()
	if got := drops(m3, "unexpected_command") - drops(m2, "unexpected_command"); got != 1 {
		t.Errorf("ACK sent to a node: unexpected_command +%g, want +1 (5); counters changed: %s", got, dropDiff(m2, m3))
	}
}
