package control

import (
	"bytes"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// recorder is a dataplane.Sender that keeps every frame with its port.
type recorder struct {
	ports  []int
	frames [][]byte
	mtu    int // PortMTU of every port; 0: not a dataplane.MTUReporter answer
	// others are the frames nodeRig.do set apart (not CONTROL), with
	// their ports.
	others     [][]byte
	otherPorts []int
}

// PortMTU implements dataplane.MTUReporter.
func (r *recorder) PortMTU(int) int { return r.mtu }

// PortLink implements dataplane.LinkReporter: port i is "swp<i>", up.
func (r *recorder) PortLink(port int) (string, dataplane.LinkState, time.Time) {
	return "swp" + strconv.Itoa(port), dataplane.LinkUp, time.Time{}
}

func (r *recorder) Send(port int, frame []byte) bool {
	r.ports = append(r.ports, port)
	r.frames = append(r.frames, append([]byte(nil), frame...))
	return true
}
func (r *recorder) PortMAC(port int) [6]byte { return swMAC(9, port) }
func (r *recorder) NumPorts() int            { return 4 }

type nodeRig struct {
	t   *testing.T
	w   *Worker
	tx  *recorder
	now int64
	txn uint32 // last Transaction ID nextTxn handed out
}

// nextTxn is a fresh Transaction ID.
func (r *nodeRig) nextTxn() uint32 { r.txn++; return r.txn }

// cmd is a bodiless command for key under a fresh Transaction ID.
func (r *nodeRig) cmd(key parser.OpKey, c parser.Command) []byte {
	return controlFrame(r.t, key, c, nil, r.nextTxn())
}

// expect sends f and checks the ACK's status and state.
func (r *nodeRig) expect(f []byte, st parser.Status, state parser.OpState) parser.Ack {
	r.t.Helper()
	gs, a := r.ack(f)
	if gs != st || a.State != state {
		r.t.Fatalf("got %v state %v, want %v state %v", gs, a.State, st, state)
	}
	return a
}

func newNodeRig(t *testing.T, cfg NodeConfig) *nodeRig {
	if cfg.AMMACs == nil {
		cfg.AMMACs = [][6]byte{amMAC}
	}
	cfg.Logger = quietLogger()
	return &nodeRig{t: t, w: NewNode(cfg).NewWorker(0, 1), tx: &recorder{}, now: 1e9}
}

// do sends a CONTROL frame in on port 2 and returns the raw replies (the
// CONTROL frames sent; others, such as the PROGRESS FAILED an ABORT of an
// active context sends its peers, are left in r.tx.others).
func (r *nodeRig) do(frame []byte) [][]byte {
	r.tx.ports, r.tx.frames, r.tx.others, r.tx.otherPorts = nil, nil, nil, nil
	r.w.Handle(r.now, 2, frame, r.tx)
	ports, frames := r.tx.ports[:0], r.tx.frames[:0]
	for i, f := range r.tx.frames {
		if parser.Class(f[parser.CWOff+1]) == parser.ClassControl {
			ports, frames = append(ports, r.tx.ports[i]), append(frames, f)
		} else {
			r.tx.others, r.tx.otherPorts = append(r.tx.others, f), append(r.tx.otherPorts, r.tx.ports[i])
		}
	}
	r.tx.ports, r.tx.frames = ports, frames
	for i, p := range r.tx.ports {
		if p != 2 {
			r.t.Fatalf("reply out of port %d, want the ingress port 2", p)
		}
		if [6]byte(r.tx.frames[i][0:6]) != [6]byte(frame[6:12]) {
			r.t.Fatalf("reply to %x, want the requester %x", r.tx.frames[i][0:6], frame[6:12])
		}
		// From the MAC the request was addressed to, so that bridges
		// between the AM and the node learn where that MAC is.
		if [6]byte(r.tx.frames[i][6:12]) != [6]byte(frame[0:6]) {
			r.t.Fatalf("reply from %x, want the MAC the request addressed, %x", r.tx.frames[i][6:12], frame[0:6])
		}
	}
	return r.tx.frames
}

func (r *nodeRig) ack(frame []byte) (parser.Status, parser.Ack) {
	r.t.Helper()
	out := r.do(frame)
	if len(out) != 1 {
		r.t.Fatalf("%d replies, want 1 ACK", len(out))
	}
	var c parser.Control
	if err := c.Decode(out[0], parser.Limits{}); err != nil || c.Cmd != parser.CmdAck {
		r.t.Fatalf("reply is not an ACK: %v", err)
	}
	return c.Status, c.Ack()
}

var ruleKey = parser.OpKey{Job: 42, Group: 1, GroupGen: 1, Op: 5, OpGen: 10}

func goodCtx() parser.ContextRecord {
	return parser.ContextRecord{Role: parser.RoleSingle, Collective: parser.CollAllReduce, InputFormat: parser.FormatFP32,
		AccPolicy: parser.AccKulischFixed, PartialPolicy: parser.FormatKulisch, OutputFormat: parser.FormatFP32,
		KulischWidth: 288, VectorLen: 1000, MTU: 1500, WindowIntervals: 8, ReplayDepth: 8, WindowBytes: 8 * 1514,
		WindowElements: 2904, MaxTerms: 2, TimeoutMs: 1000}
}

func goodBindings() []parser.Binding {
	return []parser.Binding{
		{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: 1, LocalEP: 10, PeerEP: 100, Port: 0, PeerMAC: rankMAC(0)},
		{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: 2, LocalEP: 11, PeerEP: 101, Port: 1, PeerMAC: rankMAC(1)},
		{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank, Stream: 3, LocalEP: 12, PeerEP: 100, Port: 0, PeerMAC: rankMAC(0)},
	}
}

func stageFrame(t *testing.T, key parser.OpKey, txn uint32, ctx parser.ContextRecord, bs []parser.Binding) []byte {
	return controlFrame(t, key, parser.CmdStage, stageBody(t, ctx, bs), txn)
}

func TestControlStageStatuses(t *testing.T) {
	type tc struct {
		name   string
		ctx    func(*parser.ContextRecord)
		bind   func([]parser.Binding) []parser.Binding
		body   func([]byte) // raw corruption after encoding
		status parser.Status
		detail uint16
	}
	cases := []tc{
		{name: "ok", status: parser.StatusOK, detail: parser.NoDetail},
		{name: "mtu", ctx: func(c *parser.ContextRecord) { c.MTU = 1000 }, status: parser.StatusInvalid, detail: 12},
		{name: "vector length", ctx: func(c *parser.ContextRecord) { c.VectorLen = 0 }, status: parser.StatusInvalid, detail: 8},
		{name: "timeout", ctx: func(c *parser.ContextRecord) { c.TimeoutMs = 0 }, status: parser.StatusInvalid, detail: 32},
		{name: "width too small for terms", ctx: func(c *parser.ContextRecord) { c.KulischWidth = 64 }, status: parser.StatusInvalid, detail: 6},
		{name: "policy 0x02", body: func(b []byte) { b[3] = 2 }, status: parser.StatusInvalid, detail: 3},
		{name: "reserved", body: func(b []byte) { b[39] = 1 }, status: parser.StatusInvalid, detail: 36},
		{name: "binding kind", body: func(b []byte) { b[40+16] = 9 }, status: parser.StatusInvalid, detail: 56},
		{name: "tuple not advertised", ctx: func(c *parser.ContextRecord) {
			c.AccPolicy, c.PartialPolicy, c.KulischWidth, c.InputFormat = parser.AccFP32Arrival, parser.FormatFP32, 0, parser.FormatFP16
		}, status: parser.StatusUnsupported, detail: parser.NoDetail},
		{name: "arrival with kulisch partial", ctx: func(c *parser.ContextRecord) { c.AccPolicy = parser.AccFP32Arrival }, status: parser.StatusUnsupported, detail: parser.NoDetail},
		{name: "window beyond caps", ctx: func(c *parser.ContextRecord) { c.WindowElements = 1<<20 + 1 }, status: parser.StatusUnsupported, detail: parser.NoDetail},
		{name: "port", bind: func(b []parser.Binding) []parser.Binding { b[1].Port = 7; return b }, status: parser.StatusInvalidBinding, detail: 40 + 16 + 8},
		{name: "zero mac", bind: func(b []parser.Binding) []parser.Binding { b[2].PeerMAC = [6]byte{}; return b }, status: parser.StatusInvalidBinding, detail: 40 + 32 + 10},
		{name: "duplicate stream", bind: func(b []parser.Binding) []parser.Binding { b[1].Stream = 1; return b }, status: parser.StatusInvalidBinding, detail: 40 + 16 + 2},
		{name: "duplicate endpoint", bind: func(b []parser.Binding) []parser.Binding { b[1].LocalEP = 10; return b }, status: parser.StatusInvalidBinding, detail: 40 + 16 + 4},
		// Only incoming bindings must differ in Local Endpoint (5.1).
		{name: "outgoing shares an endpoint", bind: func(b []parser.Binding) []parser.Binding { b[2].LocalEP = 10; return b }, status: parser.StatusOK, detail: parser.NoDetail},
		{name: "single with parent", bind: func(b []parser.Binding) []parser.Binding {
			return append(b, parser.Binding{Kind: parser.KindParent, Stream: 9, LocalEP: 19, PeerEP: 1, Port: 3, PeerMAC: swMAC(1, 1)})
		}, status: parser.StatusInvalidBinding, detail: 14},
		{name: "no result path", bind: func(b []parser.Binding) []parser.Binding { return b[:2] }, status: parser.StatusInvalidBinding, detail: 14},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newNodeRig(t, NodeConfig{})
			ctx, bs := goodCtx(), goodBindings()
			if c.ctx != nil {
				c.ctx(&ctx)
			}
			if c.bind != nil {
				bs = c.bind(bs)
			}
			f := stageFrame(t, ruleKey, 1, ctx, bs)
			if c.body != nil {
				c.body(f[parser.ControlBodyOff:])
			}
			st, a := r.ack(f)
			if st != c.status || a.Detail != c.detail || a.AckedCmd != parser.CmdStage {
				t.Fatalf("got %v detail %d, want %v detail %d", st, a.Detail, c.status, c.detail)
			}
			_, installed := r.w.Engine().Status(ruleKey)
			if installed != (c.status == parser.StatusOK) {
				t.Fatalf("context installed = %v after %v", installed, st)
			}
		})
	}
}

func TestControlLifecycle(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx, bs := goodCtx(), goodBindings()
	k := ruleKey
	txn := uint32(100)
	next := func() uint32 { txn++; return txn }
	expect := func(f []byte, st parser.Status, state parser.OpState) parser.Ack {
		t.Helper()
		gs, a := r.ack(f)
		if gs != st || a.State != state {
			t.Fatalf("got %v state %v, want %v state %v", gs, a.State, st, state)
		}
		return a
	}
	cmd := func(key parser.OpKey, c parser.Command) []byte { return controlFrame(t, key, c, nil, next()) }

	// Unknown operation.
	expect(cmd(k, parser.CmdCommit), parser.StatusBadState, parser.StateNone)
	expect(cmd(k, parser.CmdComplete), parser.StatusBadState, parser.StateNone)
	// STAGE, retried with identical bytes: the recorded ACK, byte for byte.
	sf := stageFrame(t, k, next(), ctx, bs)
	first := r.do(sf)
	again := r.do(sf)
	if len(first) != 1 || len(again) != 1 || !bytes.Equal(first[0], again[0]) {
		t.Fatal("retried STAGE did not return the recorded ACK")
	}
	// Same Transaction ID, different bytes.
	ctx2 := ctx
	ctx2.VectorLen++
	cf := stageFrame(t, k, parser.ControlHeader(sf[parser.HdrOff:]).Txn(), ctx2, bs)
	expect(cf, parser.StatusConflict, parser.StateStaged) // the state it is in (5.2)
	// A second STAGE of the installed identity under a new transaction.
	expect(stageFrame(t, k, next(), ctx, bs), parser.StatusBadState, parser.StateStaged)
	// A newer generation while the old one is installed.
	k2 := k
	k2.OpGen++
	expect(stageFrame(t, k2, next(), ctx, bs), parser.StatusBadState, parser.StateStaged)
	// COMMIT, COMPLETE (active, nothing received yet), RELEASE refused while active.
	expect(cmd(k, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	a := expect(cmd(k, parser.CmdComplete), parser.StatusOK, parser.StateActive)
	if a.Completed != 0 || a.MissingStream != 1 || a.MissingFrom != 0 {
		t.Fatalf("COMPLETE body %+v", a)
	}
	expect(cmd(k, parser.CmdRelease), parser.StatusBadState, parser.StateActive)
	// Rank 0's first DATA frame: the context holds its data now.
	var db parser.DataBuilder
	df := make([]byte, parser.EthLen+1500)
	if err := db.Reset(df, &parser.DataFields{Eth: parser.Eth{Dst: swMAC(9, 0), Src: bs[0].PeerMAC}, Class: parser.ClassData, Op: k,
		SrcEP: bs[0].PeerEP, DstEP: bs[0].LocalEP, PacketID: 1, Stream: bs[0].Stream}, nil, 1500); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddGroup(parser.FormatFP32, 0, 4); err != nil {
		t.Fatal(err)
	}
	r.w.Engine().HandleData(r.now, int(bs[0].Port), db.Finish(), r.tx)
	if m := r.w.Engine().Metrics(); m.Frames[parser.ClassData].Load() != 1 {
		t.Fatalf("rank 0's DATA not admitted (%d DATA frames)", m.Frames[parser.ClassData].Load())
	}
	// ABORT tears down; the generation is retired. The active context
	// first tells each contributor (PROGRESS FAILED, out of its port, to
	// its MAC), so a rank waiting for its RESULT fails at once.
	expect(cmd(k, parser.CmdAbort), parser.StatusOK, parser.StateAborted)
	told := map[uint16]bool{}
	for i, f := range r.tx.others {
		var p parser.Progress
		if err := p.Decode(f, parser.Limits{VectorLen: ctx.VectorLen}); err != nil || p.Status != parser.ProgressStatusFailed {
			t.Fatalf("ABORT sent %x (%v), want PROGRESS FAILED", f, err)
		}
		b := bs[p.Stream-1]
		if r.tx.otherPorts[i] != int(b.Port) || [6]byte(f[0:6]) != b.PeerMAC {
			t.Fatalf("PROGRESS FAILED for stream %d out of port %d to %x, want port %d, %x", p.Stream, r.tx.otherPorts[i], f[0:6], b.Port, b.PeerMAC)
		}
		told[p.Stream] = true
	}
	if len(told) != 2 || !told[1] || !told[2] {
		t.Fatalf("ABORT of the active context told streams %v, want both contributors (1, 2)", told)
	}
	if _, ok := r.w.Engine().Status(k); ok {
		t.Fatal("context survived ABORT")
	}
	expect(cmd(k, parser.CmdComplete), parser.StatusOK, parser.StateAborted)
	expect(stageFrame(t, k, next(), ctx, bs), parser.StatusStaleGeneration, parser.StateNone)
	kOld := k
	kOld.OpGen--
	expect(stageFrame(t, kOld, next(), ctx, bs), parser.StatusStaleGeneration, parser.StateNone)
	// A strictly newer generation is accepted, staged, released.
	expect(stageFrame(t, k2, next(), ctx, bs), parser.StatusOK, parser.StateStaged)
	expect(cmd(k, parser.CmdCommit), parser.StatusStaleGeneration, parser.StateNone)
	expect(cmd(k2, parser.CmdRelease), parser.StatusOK, parser.StateReleased)
	expect(cmd(k2, parser.CmdCommit), parser.StatusStaleGeneration, parser.StateNone)
	expect(stageFrame(t, k2, next(), ctx, bs), parser.StatusStaleGeneration, parser.StateNone)
	// A newer group generation also counts as newer.
	k3 := k
	k3.GroupGen++
	k3.OpGen = 1
	expect(stageFrame(t, k3, next(), ctx, bs), parser.StatusOK, parser.StateStaged)
	// ABORT of a never-staged generation retires it.
	k4 := k3
	k4.OpGen = 50
	expect(cmd(k4, parser.CmdAbort), parser.StatusOK, parser.StateAborted)
	if _, ok := r.w.Engine().Status(k3); ok {
		t.Fatal("older installed generation survived ABORT of a newer one")
	}
	expect(stageFrame(t, k4, next(), ctx, bs), parser.StatusStaleGeneration, parser.StateNone)
}

func TestControlNoResources(t *testing.T) {
	r := newNodeRig(t, NodeConfig{Engine: engine.Config{MaxOps: 1}})
	ctx, bs := goodCtx(), goodBindings()
	if st, _ := r.ack(stageFrame(t, ruleKey, 1, ctx, bs)); st != parser.StatusOK {
		t.Fatal(st)
	}
	k := ruleKey
	k.Op++
	if st, _ := r.ack(stageFrame(t, k, 2, ctx, bs)); st != parser.StatusNoResources {
		t.Fatalf("second op: %v", st)
	}
}

func TestControlUntrustedAndMalformed(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	f := stageFrame(t, ruleKey, 1, goodCtx(), goodBindings())
	evil := append([]byte(nil), f...)
	copy(evil[6:12], []byte{2, 0xee, 0, 0, 0, 1})
	if out := r.do(evil); len(out) != 0 {
		t.Fatal("replied to an untrusted source")
	}
	if _, ok := r.w.Engine().Status(ruleKey); ok {
		t.Fatal("untrusted STAGE changed state")
	}
	if r.w.n.cm.Drops("untrusted_source") != 1 {
		t.Fatal("untrusted drop not counted")
	}
	short := append([]byte(nil), f[:parser.ControlBodyOff-3]...)
	if out := r.do(short); len(out) != 0 {
		t.Fatal("replied to a truncated frame")
	}
	badCmd := append([]byte(nil), f...)
	badCmd[parser.HdrOff+26] = 99
	if out := r.do(badCmd); len(out) != 0 {
		t.Fatal("replied to an unknown command")
	}
	bodyOnCommit := controlFrame(t, ruleKey, parser.CmdCommit, []byte{0, 0, 0, 0}, 6) // rule C10
	if out := r.do(bodyOnCommit); len(out) != 0 {
		t.Fatal("replied to a COMMIT with a body")
	}
	if r.w.n.cm.Drops("malformed") != 3 {
		t.Fatalf("malformed drops %d", r.w.n.cm.Drops("malformed"))
	}
	// Each under the reason of the rule it failed (protocol.md section 5).
	for reason, want := range map[string]uint64{"truncated": 1, "out_of_range": 1, "bad_length": 1} {
		if got := r.w.n.cm.DecodeDrops(reason); got != want {
			t.Fatalf("decode drops %s = %d, want %d", reason, got, want)
		}
	}
	// An ACK sent to a node is unexpected.
	ack := controlFrame(t, ruleKey, parser.CmdAck, make([]byte, parser.AckBodyLen), 5)
	parser.ControlHeader(ack[parser.HdrOff:]).SetCommand(parser.CmdAck)
	ack[parser.ControlBodyOff] = byte(parser.CmdStage)
	if out := r.do(ack); len(out) != 0 {
		t.Fatal("replied to an ACK")
	}
	if r.w.n.cm.Drops("unexpected_command") != 1 || r.w.n.cm.commands[parser.CmdAck].Load() != 0 {
		t.Fatalf("ACK to a node: unexpected_command %d, requests %d; want a drop, not a request",
			r.w.n.cm.Drops("unexpected_command"), r.w.n.cm.commands[parser.CmdAck].Load())
	}
	// Rule C1: longer than the ingress link's MTU (its sender's MTU
	// raised) is over_mtu, however sound, and installs nothing.
	r.tx.mtu = 1500
	big := append(append([]byte(nil), f...), make([]byte, parser.EthLen+1502-len(f))...)
	if out := r.do(big); len(out) != 0 {
		t.Fatal("replied to a STAGE longer than the link MTU")
	}
	if _, ok := r.w.Engine().Status(ruleKey); ok || r.w.n.cm.DecodeDrops("over_mtu") != 1 {
		t.Fatalf("STAGE over the link MTU: over_mtu %d, context installed %v", r.w.n.cm.DecodeDrops("over_mtu"), ok)
	}
	r.tx.mtu = 9000
	if st, _ := r.ack(big); st != parser.StatusOK {
		t.Fatalf("the same STAGE on a 9000-byte link: %v, want OK", st)
	}
}

func TestControlCaps(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	var got []parser.CapRecord
	pagesSeen := 0
	for page := 0; ; page++ {
		body := make([]byte, parser.CapsQueryLen)
		if _, err := parser.EncodeCapsQuery(body, uint8(page)); err != nil {
			t.Fatal(err)
		}
		out := r.do(controlFrame(t, parser.OpKey{}, parser.CmdCapsQuery, body, uint32(900+page)))
		if len(out) != 1 {
			t.Fatalf("page %d: %d replies", page, len(out))
		}
		var c parser.Control
		if err := c.Decode(out[0], parser.Limits{}); err != nil || c.Cmd != parser.CmdCapsResponse {
			t.Fatalf("page %d: %v %v", page, err, c.Cmd)
		}
		p := c.CapsPage()
		if int(c.FragIndex) != page || p.PortCount != 4 || p.MaxMTU != 9000 {
			t.Fatalf("page %d: index %d of %d, ports %d mtu %d", page, c.FragIndex, c.FragCount, p.PortCount, p.MaxMTU)
		}
		got = append(got, p.Records[:p.NRecords]...)
		pagesSeen++
		if page+1 == int(c.FragCount) {
			break
		}
	}
	// The oracle: FP32_ARRIVAL FP32/FP32/{FP32,AUTO} and KULISCH_FIXED
	// {INT8,FP16,BF16,FP32}/{KULISCH,AUTO}/{FP32,FP16,BF16,INT8,KULISCH,AUTO}.
	want := map[[4]parser.Format]bool{}
	for _, out := range []parser.Format{parser.FormatFP32, parser.FormatAuto} {
		want[[4]parser.Format{parser.FormatFP32, parser.Format(parser.AccFP32Arrival), parser.FormatFP32, out}] = true
	}
	for in := parser.FormatINT8; in <= parser.FormatFP32; in++ {
		for _, p := range []parser.Format{parser.FormatKulisch, parser.FormatAuto} {
			for out := parser.FormatINT8; out <= parser.FormatAuto; out++ {
				want[[4]parser.Format{in, parser.Format(parser.AccKulischFixed), p, out}] = true
			}
		}
	}
	if len(got) != len(want) || pagesSeen != (len(want)+15)/16 {
		t.Fatalf("%d records in %d pages, want %d", len(got), pagesSeen, len(want))
	}
	staged := 0
	for _, rec := range got {
		k := [4]parser.Format{rec.InputFormat, parser.Format(rec.AccPolicy), rec.PartialPolicy, rec.OutputFormat}
		if !want[k] {
			t.Fatalf("unexpected record %+v", rec)
		}
		delete(want, k)
		tu := kulisch.Tuple{Input: kulisch.Format(k[0]), Acc: kulisch.Policy(k[1]), Partial: kulisch.Format(k[2]), Output: kulisch.Format(k[3])}
		if err := tu.Validate(); err != nil {
			t.Fatalf("advertised tuple is not valid: %v", err)
		}
		if rec.AccPolicy == parser.AccKulischFixed {
			// Min is the least W a STAGE of the tuple with one term
			// passes: this node STAGEs it at Min and refuses 8 bits
			// less (INVALID, Detail 6, the Kulisch Width).
			if rec.MaxKulischWidth != 4096 {
				t.Fatalf("widths %+v", rec)
			}
			for i, w := range []uint16{rec.MinKulischWidth, rec.MinKulischWidth - 8} {
				ctx := goodCtx()
				ctx.InputFormat, ctx.PartialPolicy, ctx.OutputFormat = rec.InputFormat, rec.PartialPolicy, rec.OutputFormat
				ctx.KulischWidth, ctx.MaxTerms = w, 1
				staged++
				key := parser.OpKey{Job: 77, Group: 1, GroupGen: 1, Op: uint16(staged), OpGen: 1}
				st, a := r.ack(stageFrame(t, key, uint32(5000+staged), ctx, goodBindings()))
				if i == 0 && st != parser.StatusOK || i == 1 && (st != parser.StatusInvalid || a.Detail != 6) {
					t.Fatalf("%+v: STAGE at W %d: %v detail %d", rec, w, st, a.Detail)
				}
				if st == parser.StatusOK {
					r.ack(controlFrame(t, key, parser.CmdAbort, nil, uint32(9000+staged)))
				}
			}
		}
	}
}

// TestControlBitmapLifecycle: a BITMAP STAGE goes to the worker's
// engine/bitmap shard, with the same transaction and generation rules.
func TestControlBitmapLifecycle(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx := goodCtx()
	ctx.Collective = parser.CollBitmap
	txn := uint32(1)
	do := func(f []byte, want parser.Status, state parser.OpState) {
		t.Helper()
		st, a := r.ack(f)
		if st != want || a.State != state {
			t.Fatalf("got %v state %v, want %v state %v", st, a.State, want, state)
		}
	}
	cmd := func(c parser.Command) []byte { txn++; return controlFrame(t, ruleKey, c, nil, txn) }
	do(stageFrame(t, ruleKey, txn, ctx, goodBindings()), parser.StatusOK, parser.StateStaged)
	if !r.w.bm.Owns(ruleKey) {
		t.Fatal("BITMAP context not installed in the bitmap shard")
	}
	if _, ok := r.w.Engine().Status(ruleKey); ok {
		t.Fatal("BITMAP context installed in the REDUCE engine")
	}
	do(cmd(parser.CmdCommit), parser.StatusOK, parser.StateActive)
	do(cmd(parser.CmdComplete), parser.StatusOK, parser.StateActive)
	do(cmd(parser.CmdRelease), parser.StatusOK, parser.StateReleased)
	if r.w.bm.Owns(ruleKey) {
		t.Fatal("RELEASE left the BITMAP context")
	}
	txn++
	do(stageFrame(t, ruleKey, txn, ctx, goodBindings()), parser.StatusStaleGeneration, parser.StateNone)
}

// TestControlBoundaryStatuses: STAGEs with a boundary set record (0xFE,
// docs/protocol.md 8.10) answered end to end through the node: the ACK
// status and Detail of each rule, and nothing installed on refusal.
func TestControlBoundaryStatuses(t *testing.T) {
	flat := func(idx uint8, setID uint16, eps ...uint32) parser.SetRecord {
		return parser.SetRecord{BindingIndex: idx, Encoding: parser.EncFlat, Set: parser.AppendFlatSet(nil, setID, 1, eps...)}
	}
	abm, mask, bnd := flat(parser.OwnSet, 0, 0, 1), flat(2, 0, 0), flat(parser.BoundarySet, 1, 64)
	// Set records start after the context record and 4 bindings; each is 20 bytes.
	rec := func(i int) uint16 { return uint16(parser.ContextRecordLen + 4*parser.BindingLen + 20*i) }
	for _, c := range []struct {
		name   string
		coll   parser.Collective
		sets   []parser.SetRecord
		status parser.Status
		detail uint16
	}{
		{"ok", parser.CollBitmap, []parser.SetRecord{abm, mask, bnd}, parser.StatusOK, parser.NoDetail},
		{"boundary twice", parser.CollBitmap, []parser.SetRecord{bnd, abm, bnd}, parser.StatusInvalid, rec(2)},
		{"boundary outside BITMAP", parser.CollAllReduce, []parser.SetRecord{bnd}, parser.StatusInvalid, 15},
		{"boundary overlaps the A-BM", parser.CollBitmap, []parser.SetRecord{abm, mask, flat(parser.BoundarySet, 0, 1)}, parser.StatusInvalid, rec(2)},
		{"boundary without A-BM", parser.CollBitmap, []parser.SetRecord{mask, bnd}, parser.StatusInvalid, rec(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newNodeRig(t, NodeConfig{})
			ctx := goodCtx()
			ctx.Role, ctx.Collective = parser.RoleLeaf, c.coll
			bs := append(goodBindings(), parser.Binding{Kind: parser.KindParent, Stream: 9, LocalEP: 19, PeerEP: 1, Port: 3, PeerMAC: swMAC(1, 1)})
			spec := parser.StageSpec{Context: ctx, Bindings: bs, Sets: c.sets}
			body := make([]byte, spec.Len())
			if _, err := spec.Encode(body); err != nil {
				t.Fatal(err)
			}
			st, a := r.ack(controlFrame(t, ruleKey, parser.CmdStage, body, 1))
			if st != c.status || a.Detail != c.detail {
				t.Fatalf("got %v detail %d, want %v detail %d", st, a.Detail, c.status, c.detail)
			}
			if r.w.bm.Owns(ruleKey) != (c.status == parser.StatusOK) {
				t.Fatalf("installed = %v after %v", r.w.bm.Owns(ruleKey), st)
			}
		})
	}
}

type discard struct{}

func (discard) Send(int, []byte) bool { return true }
func (discard) PortMAC(p int) [6]byte { return swMAC(9, p) }
func (discard) NumPorts() int         { return 4 }

// TestHandleAllocs: dispatch through the Worker (bitmap shard first, then
// the engine) adds no allocation to the DATA path.
func TestHandleAllocs(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	r.ack(stageFrame(t, ruleKey, 1, goodCtx(), goodBindings()))
	r.ack(controlFrame(t, ruleKey, parser.CmdCommit, nil, 2))
	vals := make([]byte, 4*100)
	f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: swMAC(9, 0), Src: rankMAC(0)}, Class: parser.ClassData,
		Op: ruleKey, SrcEP: 100, DstEP: 10, PacketID: 1, Stream: 1}, nil, parser.Group{Format: parser.FormatFP32, Count: 100, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	r.w.Handle(r.now, 0, f, discard{})
	m := r.w.Engine().Metrics()
	if m.Frames[parser.ClassData].Load() != 1 {
		t.Fatalf("DATA not admitted: %d unknown stream, %d wrong port", m.Drops[engine.DropUnknownStream].Load(), m.Drops[engine.DropWrongPort].Load())
	}
	if a := alloctest.PerRun(1000, func() { r.w.Handle(r.now, 0, f, discard{}) }); a != 0 {
		t.Fatalf("%v allocations per duplicate DATA", a)
	}
	if m.Duplicates.Load() < 1000 {
		t.Fatalf("duplicates %d", m.Duplicates.Load())
	}
}

// TestNodeKeys: a node always has a keyring for the runtime channel to
// fill (one it makes, or the one configured), and it is the one every
// worker's BITMAP shard was built with.
func TestNodeKeys(t *testing.T) {
	n := NewNode(NodeConfig{})
	if n.Keys() == nil {
		t.Fatal("a node without a configured keyring has none")
	}
	kr := bitmap.NewKeyring()
	n = NewNode(NodeConfig{Bitmap: bitmap.Config{Keys: kr}})
	if n.Keys() != kr {
		t.Fatal("the configured keyring was replaced")
	}
	w := n.NewWorker(0, 2)
	if w.bm.Keys() != kr {
		t.Fatal("the worker's shard reads another keyring")
	}
}

// TestAbandonedContextsExpire: a context its AM never ends (STAGED and
// never committed; ACTIVE until its inactivity timeout FAILs it) is retired
// by the node three timeouts plus engine.ExpiryGrace later, exactly as an
// ABORT would: storage freed, the generation remembered (a late COMMIT or
// STAGE of it is stale; COMPLETE answers ABORTED). Not a moment earlier.
func TestAbandonedContextsExpire(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx, bs := goodCtx(), goodBindings()
	ttl := 3*int64(ctx.TimeoutMs)*1e6 + int64(engine.ExpiryGrace)
	expect, cmd, next := r.expect, r.cmd, r.nextTxn
	staged, active := ruleKey, ruleKey
	active.Op++
	expect(stageFrame(t, staged, next(), ctx, bs), parser.StatusOK, parser.StateStaged)
	expect(stageFrame(t, active, next(), ctx, bs), parser.StatusOK, parser.StateStaged)
	expect(cmd(active, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	t0 := r.now
	// The ACTIVE one FAILs at its inactivity timeout (no contributor ever
	// sent), then both wait for an AM that is gone.
	r.now = t0 + 2*int64(ctx.TimeoutMs)*1e6
	r.w.Tick(r.now, r.tx)
	if s, _ := r.w.Engine().Status(active); s.State != parser.StateFailed {
		t.Fatalf("active context after 2 timeouts of silence: %v, want FAILED", s.State)
	}
	failedAt := r.now
	r.now = t0 + ttl - int64(time.Millisecond)
	r.w.Tick(r.now, r.tx)
	for _, k := range []parser.OpKey{staged, active} {
		if _, ok := r.w.Engine().Status(k); !ok {
			t.Fatalf("%v expired before three timeouts plus the grace", k)
		}
	}
	r.now = t0 + ttl + int64(2*time.Second) // past the STAGED one's expiry, not the FAILED one's
	r.w.Tick(r.now, r.tx)
	if _, ok := r.w.Engine().Status(staged); ok {
		t.Fatal("a STAGED context nobody committed survived its expiry")
	}
	if _, ok := r.w.Engine().Status(active); !ok {
		t.Fatal("the FAILED context expired before three timeouts plus the grace after it failed")
	}
	r.now = failedAt + ttl + int64(2*time.Second)
	r.w.Tick(r.now, r.tx)
	if _, ok := r.w.Engine().Status(active); ok {
		t.Fatal("a FAILED context nobody aborted survived its expiry")
	}
	if got := r.w.Engine().Metrics().OpsExpired.Load(); got != 2 {
		t.Fatalf("expired counter %d, want 2", got)
	}
	for _, k := range []parser.OpKey{staged, active} {
		expect(cmd(k, parser.CmdComplete), parser.StatusOK, parser.StateAborted)
		expect(cmd(k, parser.CmdCommit), parser.StatusStaleGeneration, parser.StateNone)
		expect(stageFrame(t, k, next(), ctx, bs), parser.StatusStaleGeneration, parser.StateNone)
	}
}

// TestCapsPastLastPage: a CAPS_QUERY for a page at or past Fragment Count is
// answered ACK INVALID with Detail 0 (the Page byte), not with a page
// (docs/protocol.md 5.3).
func TestCapsPastLastPage(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	np := pages(len(Records(Limits{})))
	for _, page := range []int{np, np + 1, 255} {
		body := make([]byte, parser.CapsQueryLen)
		if _, err := parser.EncodeCapsQuery(body, uint8(page)); err != nil {
			t.Fatal(err)
		}
		st, a := r.ack(controlFrame(t, parser.OpKey{}, parser.CmdCapsQuery, body, uint32(700+page)))
		if st != parser.StatusInvalid || a.Detail != 0 || a.AckedCmd != parser.CmdCapsQuery {
			t.Fatalf("page %d of %d: %v detail %d acked %v, want INVALID detail 0 for CAPS_QUERY", page, np, st, a.Detail, a.AckedCmd)
		}
	}
}

// TestPortMTUBoundsCaps: with ports of MTU 1500 (or 8000) the node
// advertises Max MTU 1500 in every page and record and refuses a STAGE of
// MTU 9000 as UNSUPPORTED, which it accepts with jumbo ports; the bound
// follows the ports when they change.
func TestPortMTUBoundsCaps(t *testing.T) {
	n := NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: quietLogger()})
	r := &nodeRig{t: t, w: n.NewWorker(0, 1), tx: &recorder{}, now: 1e9}
	ctx := goodCtx()
	ctx.MTU, ctx.WindowBytes, ctx.WindowElements, ctx.VectorLen = 9000, 8*9014, 8*2240, 20000
	txn := uint32(800)
	maxMTU := func() uint16 {
		t.Helper()
		body := make([]byte, parser.CapsQueryLen)
		txn++
		out := r.do(controlFrame(t, parser.OpKey{}, parser.CmdCapsQuery, body, txn))
		var c parser.Control
		if len(out) != 1 || c.Decode(out[0], parser.Limits{}) != nil || c.Cmd != parser.CmdCapsResponse {
			t.Fatal("no CAPS_RESPONSE")
		}
		p := c.CapsPage()
		for _, rec := range p.Records[:p.NRecords] {
			if rec.MaxMTU != p.MaxMTU {
				t.Fatalf("record Max MTU %d, page Max MTU %d", rec.MaxMTU, p.MaxMTU)
			}
		}
		return p.MaxMTU
	}
	key := ruleKey
	for _, c := range []struct {
		portMTU int
		want    uint16
		st      parser.Status
	}{{1500, 1500, parser.StatusUnsupported}, {8000, 1500, parser.StatusUnsupported}, {9000, 9000, parser.StatusOK}, {1499, 576, parser.StatusUnsupported}} {
		n.SetPortMTU(c.portMTU)
		if got := maxMTU(); got != c.want {
			t.Fatalf("ports of MTU %d: Max MTU %d, want %d", c.portMTU, got, c.want)
		}
		key.Op++
		txn++
		if st, _ := r.ack(stageFrame(t, key, txn, ctx, goodBindings())); st != c.st {
			t.Fatalf("ports of MTU %d: STAGE of MTU 9000 answered %v, want %v", c.portMTU, st, c.st)
		}
	}
}

// TestAbandonedBitmapContextsExpire: a BITMAP context its registrar STAGEd
// and never committed is retired like a PRISM one, three timeouts plus
// bitmap.ExpiryGrace later (COMPLETE then answers ABORTED, a late COMMIT or
// STAGE is stale), not a moment earlier; an ACTIVE one is forwarding state
// and stays, however long its job is idle.
func TestAbandonedBitmapContextsExpire(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx := goodCtx()
	ctx.Collective = parser.CollBitmap
	if bitmap.ExpiryGrace != engine.ExpiryGrace {
		t.Fatalf("bitmap.ExpiryGrace %v != engine.ExpiryGrace %v: protocol.md gives both one bound", bitmap.ExpiryGrace, engine.ExpiryGrace)
	}
	ttl := 3*int64(ctx.TimeoutMs)*1e6 + int64(bitmap.ExpiryGrace)
	expect, cmd, next := r.expect, r.cmd, r.nextTxn
	staged, active := ruleKey, ruleKey
	active.Op++
	expect(stageFrame(t, staged, next(), ctx, goodBindings()), parser.StatusOK, parser.StateStaged)
	expect(stageFrame(t, active, next(), ctx, goodBindings()), parser.StatusOK, parser.StateStaged)
	expect(cmd(active, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	t0 := r.now
	r.now = t0 + ttl - int64(time.Millisecond)
	r.w.Tick(r.now, r.tx)
	if !r.w.bm.Owns(staged) {
		t.Fatal("the STAGED BITMAP context expired before three timeouts plus the grace")
	}
	r.now = t0 + ttl + int64(2*time.Second)
	r.w.Tick(r.now, r.tx)
	if r.w.bm.Owns(staged) {
		t.Fatal("a STAGED BITMAP context nobody committed survived its expiry")
	}
	r.now += 10 * ttl
	r.w.Tick(r.now, r.tx)
	if !r.w.bm.Owns(active) {
		t.Fatal("an ACTIVE BITMAP context expired")
	}
	if got := r.w.bm.Counters().Expired.Load(); got != 1 {
		t.Fatalf("bitmap expired counter %d, want 1", got)
	}
	expect(cmd(staged, parser.CmdComplete), parser.StatusOK, parser.StateAborted)
	expect(cmd(staged, parser.CmdCommit), parser.StatusStaleGeneration, parser.StateNone)
	expect(stageFrame(t, staged, next(), ctx, goodBindings()), parser.StatusStaleGeneration, parser.StateNone)
	expect(cmd(active, parser.CmdComplete), parser.StatusOK, parser.StateActive)
}

// TestUntrustedSourceLogged: CONTROL from a MAC that is not a configured AM
// was only counted; an operator whose am_sources lacked the AM's MAC saw
// setups time out with nothing in the log. It is logged, naming the
// source, the port it came in on (by interface name) and the trusted
// MACs, at most once per 10 s however many arrive.
func TestUntrustedSourceLogged(t *testing.T) {
	var logs bytes.Buffer
	n := NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	r := &nodeRig{t: t, w: n.NewWorker(0, 1), tx: &recorder{}, now: 1e9}
	f := stageFrame(t, ruleKey, 1, goodCtx(), goodBindings())
	evil := append([]byte(nil), f...)
	copy(evil[6:12], []byte{2, 0xee, 0, 0, 0, 1})
	for i := 0; i < 100; i++ {
		r.now += int64(time.Millisecond)
		r.do(evil)
	}
	if c := strings.Count(logs.String(), "CONTROL dropped: its source is not a configured AM"); c != 1 ||
		!strings.Contains(logs.String(), "src=02:ee:00:00:00:01") || !strings.Contains(logs.String(), net.HardwareAddr(amMAC[:]).String()) ||
		!strings.Contains(logs.String(), "port=swp2") {
		t.Fatalf("%d warnings in 100 ms, want 1 naming the source, its port by name and am_sources:\n%s", c, logs.String())
	}
	r.now += int64(10 * time.Second)
	r.do(evil)
	if c := strings.Count(logs.String(), "CONTROL dropped"); c != 2 {
		t.Fatalf("%d warnings after 10 s more, want 2", c)
	}
	if n.cm.Drops("untrusted_source") != 101 {
		t.Fatalf("%d counted, want every one of 101", n.cm.Drops("untrusted_source"))
	}
}

// TestControlDebugLog: with debug logging each CONTROL request and its
// answer is one line (command, operation, transaction, status, state, the
// AM's MAC and the port by name); a retransmission says it got the
// recorded ACK. --log-level debug said next to nothing of the setup.
func TestControlDebugLog(t *testing.T) {
	var logs bytes.Buffer
	n := NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	r := &nodeRig{t: t, w: n.NewWorker(0, 1), tx: &recorder{}, now: 1e9}
	f := stageFrame(t, ruleKey, 7, goodCtx(), goodBindings())
	r.do(f)
	r.do(f)
	r.do(r.cmd(ruleKey, parser.CmdRelease))
	am := net.HardwareAddr(amMAC[:]).String()
	for _, want := range []string{
		`msg="CONTROL answered" cmd=STAGE op=42-1-1-5-10 txn=7 status=OK state=STAGED from=` + am + ` port=swp2`,
		`msg="prism operation removed" op=42-1-1-5-10 role=`,
		`state=STAGED elements=`,
		`msg="CONTROL answered" cmd=RELEASE op=42-1-1-5-10 txn=`,
		`msg="CONTROL retransmission answered with its recorded ACK" cmd=STAGE op=42-1-1-5-10 txn=7 status=OK state=STAGED from=` + am + ` port=swp2`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in:\n%s", want, logs.String())
		}
	}
	// At info level, nothing.
	var quiet bytes.Buffer
	n = NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: slog.New(slog.NewTextHandler(&quiet, nil))})
	r = &nodeRig{t: t, w: n.NewWorker(0, 1), tx: &recorder{}, now: 1e9}
	r.do(f)
	if quiet.Len() != 0 {
		t.Errorf("logged at info level: %s", quiet.String())
	}
}

// TestAbortOfUntouchedContextIsSilent: ABORT of an ACTIVE context that
// never accepted a frame (an operation the AM prepared ahead and gave up
// unused) tells no peer FAILED: its neighbours, whose own ABORT was on
// its way, failed and logged an error for a job that had succeeded. The
// context is counted as aborted.
func TestAbortOfUntouchedContextIsSilent(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx, bs := goodCtx(), goodBindings()
	k := ruleKey
	r.expect(stageFrame(t, k, r.nextTxn(), ctx, bs), parser.StatusOK, parser.StateStaged)
	r.expect(r.cmd(k, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	r.expect(r.cmd(k, parser.CmdAbort), parser.StatusOK, parser.StateAborted)
	if len(r.tx.others) != 0 {
		t.Fatalf("ABORT of an untouched context sent %d frames, want none", len(r.tx.others))
	}
	m := r.w.Engine().Metrics()
	if m.OpsAborted.Load() != 1 || m.OpsFailed.Load() != 0 {
		t.Fatalf("aborted %d failed %d, want 1 and 0", m.OpsAborted.Load(), m.OpsFailed.Load())
	}
}
