// This file owns the dissector test: one frame of every kind built by package
// parser's encoders (plus hand-corrupted frames), decoded by tshark with
// prismd.lua, each decoded field compared with the value the test encoded.

package wireshark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prismd/prismd/parser"
)

var (
	testEth = parser.Eth{Dst: [6]byte{0x02, 0, 0, 0, 0, 0x01}, Src: [6]byte{0x02, 0, 0, 0, 0, 0x02}}
	testOp  = parser.OpKey{Job: 0x0123456789ABCDEF, Group: 7, GroupGen: 2, Op: 3, OpGen: 0x10000001}
	le      = binary.LittleEndian
)

// tcase is one frame and what tshark must show for it.
type tcase struct {
	name  string
	frame []byte
	// valid frames must decode with package parser and show no prismd expert
	// item; malformed ones must show every expert in experts.
	valid   bool
	experts []string
	// message, if set, must be a substring of one expert message.
	message string
	check   func(t *testing.T, p *packet)
}

// ---- assertion helpers (values are compared parsed, not as tshark spells them)

func eqU(t *testing.T, p *packet, name string, want ...uint64) {
	t.Helper()
	got := p.values(name)
	if len(got) != len(want) {
		t.Errorf("%s: got %d values %q, want %v", name, len(got), got, want)
		return
	}
	for i, s := range got {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil || v != want[i] {
			t.Errorf("%s[%d] = %q, want %d", name, i, s, want[i])
		}
	}
}

func eqI(t *testing.T, p *packet, name string, want ...int64) {
	t.Helper()
	got := p.values(name)
	if len(got) != len(want) {
		t.Errorf("%s: got %d values %q, want %v", name, len(got), got, want)
		return
	}
	for i, s := range got {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil || v != want[i] {
			t.Errorf("%s[%d] = %q, want %d", name, i, s, want[i])
		}
	}
}

func eqS(t *testing.T, p *packet, name string, want ...string) {
	t.Helper()
	if got := p.values(name); !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", name, got, want)
	}
}

// eqL compares value-string names ("STAGE", "FP32", ...).
func eqL(t *testing.T, p *packet, name string, want ...string) {
	t.Helper()
	if got := p.labels(name); !slices.Equal(got, want) {
		t.Errorf("%s labels = %q, want %q", name, got, want)
	}
}

// eqF32 compares floats at binary32 precision: every FP16/BF16/FP32 value is
// exactly a float32, and tshark prints doubles with enough digits to round-trip
// one. NaN matches NaN; the sign of zero must match.
func eqF32(t *testing.T, p *packet, name string, want ...float32) {
	t.Helper()
	got := p.values(name)
	if len(got) != len(want) {
		t.Errorf("%s: got %d values %q, want %v", name, len(got), got, want)
		return
	}
	for i, s := range got {
		w := want[i]
		if math.IsNaN(float64(w)) {
			if !strings.EqualFold(strings.TrimLeft(s, "+-"), "nan") {
				t.Errorf("%s[%d] = %q, want NaN", name, i, s)
			}
			continue
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || float32(v) != w || math.Signbit(v) != math.Signbit(float64(w)) {
			t.Errorf("%s[%d] = %q, want %v (bits %#08x)", name, i, s, w, math.Float32bits(w))
		}
	}
}

// eqF64 compares the KULISCH_F64 values of p with the binary64 bit
// patterns want, twice: the number tshark shows, which Wireshark 4.0 prints
// with 15 significant digits (DBL_DIG: not enough to round-trip a binary64,
// and the largest one rounds up past the double range), so it is compared
// with want rounded to 15 digits (NaN matches NaN, the sign of zero must
// match); and the bit pattern the dissector appends to the label, which
// pins every bit, NaN payloads included.
func eqF64(t *testing.T, p *packet, want ...uint64) {
	t.Helper()
	const name = "prismd.ng.value_f64"
	// parse reads a number as tshark or Go spells it; a value past the
	// double range reads as the infinity it rounds to.
	parse := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if errors.Is(err, strconv.ErrRange) {
			err = nil
		}
		return v, err
	}
	var fs []field
	for _, f := range p.Fields {
		if f.Name == name {
			fs = append(fs, f)
		}
	}
	if len(fs) != len(want) {
		t.Errorf("%s: got %d values, want %d", name, len(fs), len(want))
		return
	}
	for i, f := range fs {
		w := math.Float64frombits(want[i])
		w15, _ := parse(strconv.FormatFloat(w, 'g', 15, 64))
		v, err := parse(f.Show)
		switch {
		case err != nil:
			t.Errorf("%s[%d] = %q: %v", name, i, f.Show, err)
		case math.IsNaN(w):
			if !math.IsNaN(v) {
				t.Errorf("%s[%d] = %q, want NaN", name, i, f.Show)
			}
		case v != w15 || math.Signbit(v) != math.Signbit(w):
			t.Errorf("%s[%d] = %q, want %v (bits %#016x)", name, i, f.Show, w, want[i])
		}
		if bits := fmt.Sprintf("(0x%016X)", want[i]); !strings.Contains(f.ShowName, bits) {
			t.Errorf("%s[%d] label %q lacks the bit pattern %s", name, i, f.ShowName, bits)
		}
	}
}

func eqBytes(t *testing.T, p *packet, name string, want ...[]byte) {
	t.Helper()
	got := p.values(name)
	if len(got) != len(want) {
		t.Errorf("%s: got %d values %q, want %d", name, len(got), got, len(want))
		return
	}
	for i, s := range got {
		if w := fmt.Sprintf("%x", want[i]); strings.ReplaceAll(s, ":", "") != w {
			t.Errorf("%s[%d] = %q, want %s", name, i, s, w)
		}
	}
}

func eqOpIdentity(t *testing.T, p *packet) {
	t.Helper()
	eqU(t, p, "prismd.version_major", 1)
	eqU(t, p, "prismd.version_minor", 0)
	eqU(t, p, "prismd.job", testOp.Job)
	eqU(t, p, "prismd.group", uint64(testOp.Group))
	eqU(t, p, "prismd.group_gen", uint64(testOp.GroupGen))
	eqU(t, p, "prismd.op", uint64(testOp.Op))
	eqU(t, p, "prismd.op_gen", uint64(testOp.OpGen))
}

// ---- encoders used by the cases (all through package parser)

func encControl(t *testing.T, c parser.Control) []byte {
	t.Helper()
	c.Op = testOp
	if c.FragCount == 0 {
		c.FragCount = 1
	}
	buf := make([]byte, parser.EthLen+c.Len())
	n, err := c.Encode(buf, testEth)
	if err != nil {
		t.Fatalf("encode %v: %v", c.Cmd, err)
	}
	return buf[:n]
}

func encData(t *testing.T, h parser.DataFields, ext *parser.Ext, groups ...parser.Group) []byte {
	t.Helper()
	h.Eth, h.Op = testEth, testOp
	f, err := parser.AppendData(nil, &h, ext, groups...)
	if err != nil {
		t.Fatalf("encode data: %v", err)
	}
	return f
}

func encProgress(t *testing.T, g parser.Progress, holes ...parser.Hole) []byte {
	t.Helper()
	g.Op = testOp
	g.NHoles = copy(g.Holes[:], holes)
	buf := make([]byte, parser.EthLen+g.Len())
	n, err := g.Encode(buf, testEth)
	if err != nil {
		t.Fatalf("encode progress: %v", err)
	}
	return buf[:n]
}

func fp32Values(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		le.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func u16Values(vs ...uint16) []byte {
	b := make([]byte, 2*len(vs))
	for i, v := range vs {
		le.PutUint16(b[2*i:], v)
	}
	return b
}

// kulischValue is the state byte and the kbytes-byte little-endian two's
// complement of v, built with math/big (independent of package kulisch).
func kulischValue(state uint8, v *big.Int, kbytes int) []byte {
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*kbytes))
	x := new(big.Int).Mod(v, mod) // two's complement for negatives
	be := x.FillBytes(make([]byte, kbytes))
	out := []byte{state}
	for i := kbytes - 1; i >= 0; i-- {
		out = append(out, be[i])
	}
	return out
}

// ---- the cases

func validCases(t *testing.T) []tcase {
	var cs []tcase

	// CONTROL STAGE with bindings, one set record of each encoding and a
	// boundary set record (0xFE, endpoint 65536).
	flat := parser.AppendFlatSet(nil, 2, 1, 128, 130, 191)
	bnd := parser.AppendFlatSet(nil, 1024, 1, 65536)
	hier := parser.AppendHierSet(nil, 64, 70, 3, 5*64+1, 69*64+63)
	list := parser.AppendListSet(nil, 7, 1000, 70000, 4000000000)
	spec := parser.StageSpec{
		Context: parser.ContextRecord{Role: parser.RoleInternal, Collective: parser.CollBitmap, InputFormat: parser.FormatFP32,
			AccPolicy: parser.AccKulischFixed, PartialPolicy: parser.FormatKulisch, OutputFormat: parser.FormatFP32,
			KulischWidth: 512, VectorLen: 1 << 20, MTU: 9000, WindowIntervals: 16, ReplayDepth: 32,
			WindowBytes: 1 << 22, WindowElements: 1 << 18, MaxTerms: 4096, TimeoutMs: 30000, Tenant: 0xC0FFEE},
		Bindings: []parser.Binding{
			{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: 11, LocalEP: 100, PeerEP: 200, Port: 0, PeerMAC: [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x01}},
			{Kind: parser.KindParent, Stream: 12, LocalEP: 101, PeerEP: 300, Port: 3, PeerMAC: [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x02}},
			{Kind: parser.KindResultIn, Stream: 13, LocalEP: 102, PeerEP: 301, Port: 3, PeerMAC: [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x03}},
			{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank, Stream: 14, LocalEP: 103, PeerEP: 201, Port: 1, PeerMAC: [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x04}},
		},
		Sets: []parser.SetRecord{
			{BindingIndex: parser.OwnSet, Encoding: parser.EncFlat, Set: flat},
			{BindingIndex: parser.BoundarySet, Encoding: parser.EncFlat, Set: bnd},
			{BindingIndex: 0, Encoding: parser.EncHier, Set: hier},
			{BindingIndex: 1, Encoding: parser.EncList, Set: list},
		},
	}
	body := make([]byte, spec.Len())
	if _, err := spec.Encode(body); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, tcase{name: "STAGE", valid: true,
		frame: encControl(t, parser.Control{Txn: 0xABCD0001, SrcEP: 1, DstEP: 2, Cmd: parser.CmdStage, Body: body}),
		check: func(t *testing.T, p *packet) {
			eqOpIdentity(t, p)
			eqL(t, p, "prismd.class", "CONTROL")
			eqU(t, p, "prismd.ctl.txn", 0xABCD0001)
			eqU(t, p, "prismd.ctl.src_ep", 1)
			eqU(t, p, "prismd.ctl.dst_ep", 2)
			eqL(t, p, "prismd.ctl.cmd", "STAGE")
			eqL(t, p, "prismd.ctl.status", "OK")
			eqU(t, p, "prismd.ctl.body_len", uint64(len(body)))
			eqU(t, p, "prismd.ctl.frag_index", 0)
			eqU(t, p, "prismd.ctl.frag_count", 1)
			eqL(t, p, "prismd.stage.role", "INTERNAL")
			eqL(t, p, "prismd.stage.collective", "BITMAP")
			eqL(t, p, "prismd.stage.input_format", "FP32")
			eqL(t, p, "prismd.stage.acc_policy", "KULISCH_FIXED")
			eqL(t, p, "prismd.stage.partial_policy", "KULISCH")
			eqL(t, p, "prismd.stage.output_format", "FP32")
			eqU(t, p, "prismd.stage.kulisch_width", 512)
			eqU(t, p, "prismd.stage.vector_len", 1<<20)
			eqU(t, p, "prismd.stage.mtu", 9000)
			eqU(t, p, "prismd.stage.binding_count", 4)
			eqU(t, p, "prismd.stage.set_count", 4)
			eqU(t, p, "prismd.stage.window_intervals", 16)
			eqU(t, p, "prismd.stage.replay_depth", 32)
			eqU(t, p, "prismd.stage.window_bytes", 1<<22)
			eqU(t, p, "prismd.stage.window_elements", 1<<18)
			eqU(t, p, "prismd.stage.max_terms", 4096)
			eqU(t, p, "prismd.stage.timeout", 30000)
			eqU(t, p, "prismd.stage.tenant", 0xC0FFEE)
			eqL(t, p, "prismd.binding.kind", "CONTRIBUTOR", "PARENT", "RESULT_IN", "RESULT_OUT")
			eqU(t, p, "prismd.binding.flags.rank", 1, 0, 0, 1)
			eqU(t, p, "prismd.binding.stream", 11, 12, 13, 14)
			eqU(t, p, "prismd.binding.local_ep", 100, 101, 102, 103)
			eqU(t, p, "prismd.binding.peer_ep", 200, 300, 301, 201)
			eqU(t, p, "prismd.binding.port", 0, 3, 3, 1)
			eqS(t, p, "prismd.binding.peer_mac", "02:aa:bb:cc:dd:01", "02:aa:bb:cc:dd:02", "02:aa:bb:cc:dd:03", "02:aa:bb:cc:dd:04")
			eqU(t, p, "prismd.setrec.binding_index", 0xFF, 0xFE, 0, 1)
			if l := p.labels("prismd.setrec.binding_index"); len(l) != 4 || !strings.Contains(l[1], "(boundary set") {
				t.Errorf("binding index shown as %q, want the second named the boundary set", l)
			}
			eqU(t, p, "prismd.setrec.length", uint64(4+len(flat)), uint64(4+len(bnd)), uint64(4+len(hier)), uint64(4+len(list)))
			eqL(t, p, "prismd.setrec.encoding", "FLAT", "FLAT", "HIER", "LIST")
			eqU(t, p, "prismd.setrec.set_id", 2, 1024)
			eqU(t, p, "prismd.setrec.word_count", 1, 1)
			eqU(t, p, "prismd.setrec.block_bits", 64)
			eqU(t, p, "prismd.setrec.block_count", 70)
			eqU(t, p, "prismd.setrec.list_count", 4)
			eqU(t, p, "prismd.setrec.member", 128, 130, 191, 65536, 3, 5*64+1, 69*64+63, 7, 1000, 70000, 4000000000)
			eqU(t, p, "prismd.setrec.member_count", 3, 1, 3, 4)
		}})

	// Bodiless commands.
	for _, cmd := range []parser.Command{parser.CmdCommit, parser.CmdComplete, parser.CmdRelease, parser.CmdAbort} {
		cmd := cmd
		cs = append(cs, tcase{name: cmd.String(), valid: true,
			frame: encControl(t, parser.Control{Txn: 0x100 + uint32(cmd), SrcEP: 1, DstEP: 2, Cmd: cmd}),
			check: func(t *testing.T, p *packet) {
				eqOpIdentity(t, p)
				eqL(t, p, "prismd.ctl.cmd", cmd.String())
				eqU(t, p, "prismd.ctl.txn", 0x100+uint64(cmd))
				eqU(t, p, "prismd.ctl.body_len", 0)
			}})
	}

	// ACK with a failure status and every body field.
	ack := parser.Ack{AckedCmd: parser.CmdStage, State: parser.StateFailed, Detail: 14, Completed: 1000, MissingStream: 3,
		FailCause: parser.FailPeer, MissingFrom: 512}
	ab := make([]byte, parser.AckBodyLen)
	if _, err := ack.Encode(ab); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, tcase{name: "ACK", valid: true,
		frame: encControl(t, parser.Control{Txn: 0xABCD0001, SrcEP: 2, DstEP: 1, Cmd: parser.CmdAck, Status: parser.StatusInvalidBinding, Body: ab}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.ctl.cmd", "ACK")
			eqL(t, p, "prismd.ctl.status", "INVALID_BINDING")
			eqL(t, p, "prismd.ack.cmd", "STAGE")
			eqL(t, p, "prismd.ack.state", "FAILED")
			eqU(t, p, "prismd.ack.detail", 14)
			eqU(t, p, "prismd.ack.completed", 1000)
			eqU(t, p, "prismd.ack.missing_stream", 3)
			eqL(t, p, "prismd.ack.fail_cause", "PEER_FAILED")
			eqU(t, p, "prismd.ack.missing_from", 512)
		}})
	ack2 := parser.Ack{AckedCmd: parser.CmdComplete, State: parser.StateComplete, Detail: parser.NoDetail, Completed: 1 << 20, MissingStream: parser.NoDetail}
	ab2 := make([]byte, parser.AckBodyLen)
	if _, err := ack2.Encode(ab2); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, tcase{name: "ACK-OK", valid: true,
		frame: encControl(t, parser.Control{Txn: 9, Cmd: parser.CmdAck, Body: ab2}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.ctl.status", "OK")
			eqL(t, p, "prismd.ack.cmd", "COMPLETE")
			eqL(t, p, "prismd.ack.state", "COMPLETE")
			eqU(t, p, "prismd.ack.detail", 0xFFFF)
			eqU(t, p, "prismd.ack.missing_stream", 0xFFFF)
		}})

	// CAPS_QUERY and a CAPS_RESPONSE page (fragment 1 of 3) with two records.
	qb := make([]byte, parser.CapsQueryLen)
	if _, err := parser.EncodeCapsQuery(qb, 2); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, tcase{name: "CAPS_QUERY", valid: true,
		frame: encControl(t, parser.Control{Txn: 77, Cmd: parser.CmdCapsQuery, Body: qb}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.ctl.cmd", "CAPS_QUERY")
			eqU(t, p, "prismd.capsq.page", 2)
		}})
	page := parser.CapsPage{PortCount: 4, MaxMTU: 9000, MaxOps: 256, NRecords: 2}
	page.Records[0] = parser.CapRecord{InputFormat: parser.FormatFP32, AccPolicy: parser.AccFP32Arrival, PartialPolicy: parser.FormatFP32,
		OutputFormat: parser.FormatFP32, MaxVectorLen: 1 << 30, MaxTerms: 1 << 16, MaxMTU: 9000, MaxBindings: 64,
		MaxWindowIntervals: 1024, MaxReplayDepth: 512, MaxWindowBytes: 1 << 26, MaxWindowElements: 1 << 24}
	page.Records[1] = parser.CapRecord{InputFormat: parser.FormatBF16, AccPolicy: parser.AccKulischFixed, PartialPolicy: parser.FormatKulisch,
		OutputFormat: parser.FormatAuto, MinKulischWidth: 280, MaxKulischWidth: 4096, MaxVectorLen: 1 << 28, MaxTerms: 1 << 20,
		MaxMTU: 1500, MaxBindings: 32, MaxWindowIntervals: 64, MaxReplayDepth: 128, MaxWindowBytes: 1 << 20, MaxWindowElements: 1 << 19}
	pb := make([]byte, page.Len())
	if _, err := page.Encode(pb); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, tcase{name: "CAPS_RESPONSE", valid: true,
		frame: encControl(t, parser.Control{Txn: 77, Cmd: parser.CmdCapsResponse, FragIndex: 1, FragCount: 3, Body: pb}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.ctl.cmd", "CAPS_RESPONSE")
			eqU(t, p, "prismd.ctl.frag_index", 1)
			eqU(t, p, "prismd.ctl.frag_count", 3)
			eqU(t, p, "prismd.caps.record_count", 2)
			eqU(t, p, "prismd.caps.port_count", 4)
			eqU(t, p, "prismd.caps.max_mtu", 9000)
			eqU(t, p, "prismd.caps.max_ops", 256)
			eqL(t, p, "prismd.cap.input_format", "FP32", "BF16")
			eqL(t, p, "prismd.cap.acc_policy", "FP32_ARRIVAL", "KULISCH_FIXED")
			eqL(t, p, "prismd.cap.partial_policy", "FP32", "KULISCH")
			eqL(t, p, "prismd.cap.output_format", "FP32", "AUTO")
			eqU(t, p, "prismd.cap.min_kulisch_width", 0, 280)
			eqU(t, p, "prismd.cap.max_kulisch_width", 0, 4096)
			eqU(t, p, "prismd.cap.max_vector_len", 1<<30, 1<<28)
			eqU(t, p, "prismd.cap.max_terms", 1<<16, 1<<20)
			eqU(t, p, "prismd.cap.max_mtu", 9000, 1500)
			eqU(t, p, "prismd.cap.max_bindings", 64, 32)
			eqU(t, p, "prismd.cap.max_window_intervals", 1024, 64)
			eqU(t, p, "prismd.cap.max_replay_depth", 512, 128)
			eqU(t, p, "prismd.cap.max_window_bytes", 1<<26, 1<<20)
			eqU(t, p, "prismd.cap.max_window_elements", 1<<24, 1<<19)
		}})

	// DATA with one group of every format.
	int8s := []int8{127, -128, -1, 0, 5}
	i8 := make([]byte, len(int8s))
	for i, v := range int8s {
		i8[i] = byte(v)
	}
	// FP16 bit patterns and their exact values (IEEE binary16 tables).
	fp16Bits := []uint16{0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x0400, 0x7C00, 0x8000, 0x7E00}
	fp16Want := []float32{1, -2, 0.333251953125, 65504, 5.9604644775390625e-08, 6.103515625e-05, float32(math.Inf(1)), float32(math.Copysign(0, -1)), float32(math.NaN())}
	// BF16 is the top half of a binary32.
	bf16From := []float32{1.5, -3.140625, 1e30, 1e-39, float32(math.Inf(-1))}
	bf16Bits := make([]uint16, len(bf16From))
	bf16Want := make([]float32, len(bf16From))
	for i, v := range bf16From {
		bf16Bits[i] = uint16(math.Float32bits(v) >> 16)
		bf16Want[i] = math.Float32frombits(uint32(bf16Bits[i]) << 16)
	}
	fp32s := []float32{3.14159274, -1e-20, 0.1, 16777216, math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.Copysign(0, -1))}
	const kb = 36 // Kulisch-288
	kv := []*big.Int{new(big.Int).Lsh(big.NewInt(12345), 200), big.NewInt(-2), new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 287)), big.NewInt(0)}
	kstate := []uint8{parser.KulischFinite, parser.KulischFinite, parser.KulischFinite, parser.KulischPosInf}
	var kvals []byte
	for i, v := range kv {
		kvals = append(kvals, kulischValue(kstate[i], v, kb)...)
	}
	groups := []parser.Group{
		{Format: parser.FormatINT8, Count: uint16(len(i8)), Values: i8},
		{Format: parser.FormatFP16, Count: uint16(len(fp16Bits)), Values: u16Values(fp16Bits...)},
		{Format: parser.FormatBF16, Count: uint16(len(bf16Bits)), Values: u16Values(bf16Bits...)},
		{Format: parser.FormatFP32, Count: uint16(len(fp32s)), Values: fp32Values(fp32s...)},
		{Format: parser.FormatKulisch, KBytes: kb, Count: uint16(len(kv)), Values: kvals},
	}
	total := 0
	bodyLen := 0
	var positions []uint64
	for _, g := range groups {
		positions = append(positions, uint64(1000+total))
		total += int(g.Count)
		bodyLen += 4 + (int(g.Count)*g.Format.Width(int(g.KBytes))+3)/4*4
	}
	cs = append(cs, tcase{name: "DATA-all-formats", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassData, SrcEP: 10, DstEP: 20, PacketID: 4242, First: 1000, Stream: 5}, nil, groups...),
		check: func(t *testing.T, p *packet) {
			eqOpIdentity(t, p)
			eqL(t, p, "prismd.class", "DATA")
			eqU(t, p, "prismd.data.src_ep", 10)
			eqU(t, p, "prismd.data.dst_ep", 20)
			eqU(t, p, "prismd.data.packet_id", 4242)
			eqU(t, p, "prismd.data.first", 1000)
			eqU(t, p, "prismd.data.count", uint64(total))
			eqU(t, p, "prismd.data.groups", uint64(len(groups)))
			eqU(t, p, "prismd.data.flags", 0)
			eqU(t, p, "prismd.data.flags.last", 0)
			eqU(t, p, "prismd.data.body_len", uint64(bodyLen))
			eqU(t, p, "prismd.data.stream", 5)
			eqU(t, p, "prismd.ng.count", uint64(len(i8)), uint64(len(fp16Bits)), uint64(len(bf16Bits)), uint64(len(fp32s)), uint64(len(kv)))
			eqL(t, p, "prismd.ng.format", "INT8", "FP16", "BF16", "FP32", "KULISCH")
			eqU(t, p, "prismd.ng.kulisch_bytes", 0, 0, 0, 0, kb)
			eqU(t, p, "prismd.ng.position", positions...)
			want8 := make([]int64, len(int8s))
			for i, v := range int8s {
				want8[i] = int64(v)
			}
			eqI(t, p, "prismd.ng.value_int8", want8...)
			eqF32(t, p, "prismd.ng.value_fp16", fp16Want...)
			eqF32(t, p, "prismd.ng.value_bf16", bf16Want...)
			eqF32(t, p, "prismd.ng.value_fp32", fp32s...)
			eqL(t, p, "prismd.ng.kulisch_state", "FINITE", "FINITE", "FINITE", "+inf")
			var wantK []string
			for _, v := range kv {
				wantK = append(wantK, fmt.Sprintf("%#x", v))
			}
			eqS(t, p, "prismd.ng.kulisch_int", wantK...)
		}})

	// DATA with KULISCH_SCALED partials: B = 3 at Shift 0, a plain KULISCH
	// group, B = 9 at Shift 4000 (Shift + 8B = 4072 <= 4096).
	sv1 := []*big.Int{big.NewInt(1), big.NewInt(-8388608), big.NewInt(0), big.NewInt(0x123456)}
	st1 := []uint8{parser.KulischFinite, parser.KulischFinite, parser.KulischNegZero, parser.KulischFinite}
	sv3 := []*big.Int{new(big.Int).Lsh(big.NewInt(-1), 71), big.NewInt(0)}
	st3 := []uint8{parser.KulischFinite, parser.KulischNaN}
	var s1, s3 []byte
	for i, v := range sv1 {
		s1 = append(s1, kulischValue(st1[i], v, 3)...)
	}
	for i, v := range sv3 {
		s3 = append(s3, kulischValue(st3[i], v, 9)...)
	}
	kOne := kulischValue(parser.KulischFinite, new(big.Int).Lsh(big.NewInt(3), 150), kb)
	scaledGroups := []parser.Group{
		{Format: parser.FormatKulischScaled, KBytes: 3, Shift: 0, Count: uint16(len(sv1)), Values: s1},
		{Format: parser.FormatKulisch, KBytes: kb, Count: 1, Values: kOne},
		{Format: parser.FormatKulischScaled, KBytes: 9, Shift: 4000, Count: uint16(len(sv3)), Values: s3},
	}
	cs = append(cs, tcase{name: "DATA-scaled", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassData, SrcEP: 3, DstEP: 4, PacketID: 17, First: 500, Stream: 6}, nil, scaledGroups...),
		check: func(t *testing.T, p *packet) {
			eqU(t, p, "prismd.data.count", uint64(len(sv1)+1+len(sv3)))
			// descriptor + Scale Word + values + padding, per group
			eqU(t, p, "prismd.data.body_len", uint64((4+4+4*4)+(4+(1+kb+3)/4*4)+(4+4+(2*10+3)/4*4)))
			eqL(t, p, "prismd.ng.format", "KULISCH_SCALED", "KULISCH", "KULISCH_SCALED")
			eqU(t, p, "prismd.ng.kulisch_bytes", 3, kb, 9)
			eqU(t, p, "prismd.ng.position", 500, 504, 505)
			eqU(t, p, "prismd.ng.scale_shift", 0, 4000)
			eqU(t, p, "prismd.ng.scale_reserved", 0, 0)
			eqL(t, p, "prismd.ng.kulisch_state", "FINITE", "FINITE", "-0", "FINITE", "FINITE", "FINITE", "NaN")
			var want []string
			for _, v := range append(slices.Clone(sv1), sv3...) {
				want = append(want, fmt.Sprintf("%#x", v))
			}
			eqS(t, p, "prismd.ng.scaled_int", want...)
			eqS(t, p, "prismd.ng.kulisch_int", fmt.Sprintf("%#x", new(big.Int).Lsh(big.NewInt(3), 150)))
		}})

	// DATA with a KULISCH_F64 partial between two FP32 groups: the specials
	// (signed zeros and infinities, the one NaN pattern from section 6), the
	// Kulisch unit 2^-149, the finest odd multiple (53 significant bits whose
	// lowest is 2^-149), and the largest binary64, legal where W is unknown.
	f64Bits := []uint64{math.Float64bits(1), math.Float64bits(-1.5 * math.Ldexp(1, -148)), 0, math.Float64bits(math.Copysign(0, -1)),
		math.Float64bits(math.Ldexp(1, -149)), math.Float64bits(math.Inf(-1)), math.Float64bits(math.Inf(1)), 0x7FF8000000000000,
		math.Float64bits(math.Ldexp(1<<53-1, -149)), math.Float64bits(math.MaxFloat64), math.Float64bits(-math.Ldexp(3, 200))}
	f64Vals := make([]byte, 8*len(f64Bits))
	for i, b := range f64Bits {
		le.PutUint64(f64Vals[8*i:], b)
	}
	cs = append(cs, tcase{name: "DATA-f64", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassData, SrcEP: 3, DstEP: 4, PacketID: 18, First: 600, Stream: 6}, nil,
			parser.Group{Format: parser.FormatFP32, Count: 1, Values: fp32Values(0.5)},
			parser.Group{Format: parser.FormatKulischF64, Count: uint16(len(f64Bits)), Values: f64Vals},
			parser.Group{Format: parser.FormatFP32, Count: 1, Values: fp32Values(-4)}),
		check: func(t *testing.T, p *packet) {
			eqOpIdentity(t, p)
			eqU(t, p, "prismd.data.count", uint64(len(f64Bits)+2))
			// descriptor + 8 bytes per value, no Scale Word, no padding
			eqU(t, p, "prismd.data.body_len", uint64(8+4+8*len(f64Bits)+8))
			eqL(t, p, "prismd.ng.format", "FP32", "KULISCH_F64", "FP32")
			eqU(t, p, "prismd.ng.kulisch_bytes", 0, 0, 0)
			eqU(t, p, "prismd.ng.position", 600, 601, 601+uint64(len(f64Bits)))
			eqU(t, p, "prismd.ng.scale_shift")
			eqU(t, p, "prismd.ng.kulisch_state")
			eqF32(t, p, "prismd.ng.value_fp32", 0.5, -4)
			eqF64(t, p, f64Bits...)
		}})

	// The worked example of docs/protocol.md section 12.17, as package parser
	// generates it, against the values its prose states.
	for _, e := range parser.Examples() {
		if e.Marker != "data-f64" {
			continue
		}
		cs = append(cs, tcase{name: "example-data-f64", valid: true, frame: e.Frame,
			check: func(t *testing.T, p *packet) {
				eqL(t, p, "prismd.class", "DATA")
				eqU(t, p, "prismd.data.packet_id", 12)
				eqU(t, p, "prismd.data.first", 25)
				eqU(t, p, "prismd.data.count", 5)
				eqU(t, p, "prismd.data.body_len", 44)
				eqU(t, p, "prismd.ng.format_word", 0x8000)
				eqL(t, p, "prismd.ng.format", "KULISCH_F64")
				eqF64(t, p, 0x3FF0000000000000, 0xB6B8000000000000, 0, 0x36A0000000000000, 0xFFF0000000000000)
			}})
	}

	// RESULT with a FLAT endpoint-set extension (INSTALL, AUTH, signed tag).
	extFlat := &parser.Ext{Encoding: parser.EncFlat, XFlags: parser.XFlagInstall | parser.XFlagAuth, Tenant: 99, Token: 0x1122334455667788,
		Set: parser.AppendFlatSet(nil, 3, 2, 3*128, 3*128+64, 3*128+127)}
	rf := encData(t, parser.DataFields{Class: parser.ClassResult, SrcEP: 1, DstEP: 2, PacketID: 8, First: 0, Flags: parser.FlagLast, Stream: 9}, extFlat,
		parser.Group{Format: parser.FormatFP32, Count: 2, Values: fp32Values(1.5, -2.25)})
	if err := parser.NewAuthenticator([]byte("job key")).Sign(rf); err != nil {
		t.Fatal(err)
	}
	tagOff := parser.DataBodyOff + extFlat.Len() - parser.TagLen
	tag := slices.Clone(rf[tagOff : tagOff+parser.TagLen])
	cs = append(cs, tcase{name: "RESULT-ext-FLAT-auth", valid: true, frame: rf,
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.class", "RESULT")
			eqU(t, p, "prismd.data.flags", uint64(parser.FlagLast|parser.FlagExt))
			eqU(t, p, "prismd.data.flags.last", 1)
			eqU(t, p, "prismd.data.flags.ext", 1)
			eqU(t, p, "prismd.data.flags.inexact", 0)
			eqU(t, p, "prismd.ext.length", uint64(extFlat.Len()))
			eqL(t, p, "prismd.ext.encoding", "FLAT")
			eqU(t, p, "prismd.ext.xflags", uint64(parser.XFlagInstall|parser.XFlagAuth))
			eqU(t, p, "prismd.ext.xflags.install", 1)
			eqU(t, p, "prismd.ext.xflags.partial", 0)
			eqU(t, p, "prismd.ext.xflags.auth", 1)
			eqU(t, p, "prismd.ext.tenant", 99)
			eqU(t, p, "prismd.ext.token", 0x1122334455667788)
			eqU(t, p, "prismd.ext.set_id", 3)
			eqU(t, p, "prismd.ext.word_count", 2)
			eqU(t, p, "prismd.ext.member", 384, 448, 511)
			eqU(t, p, "prismd.ext.member_count", 3)
			eqBytes(t, p, "prismd.ext.auth_tag", tag)
			eqF32(t, p, "prismd.ng.value_fp32", 1.5, -2.25)
		}})

	// DATA with a HIER extension and no payload (empty bitmap packet), PARTIAL.
	extHier := &parser.Ext{Encoding: parser.EncHier, XFlags: parser.XFlagPartial, Tenant: 5, Token: 77,
		Set: parser.AppendHierSet(nil, 128, 130, 0, 127, 128*129+5)}
	cs = append(cs, tcase{name: "DATA-ext-HIER-empty", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassData, SrcEP: 1, DstEP: 2, PacketID: 9, Stream: 1}, extHier),
		check: func(t *testing.T, p *packet) {
			eqU(t, p, "prismd.data.groups", 0)
			eqU(t, p, "prismd.data.count", 0)
			eqU(t, p, "prismd.data.body_len", 0)
			eqL(t, p, "prismd.ext.encoding", "HIER")
			eqU(t, p, "prismd.ext.xflags.partial", 1)
			eqU(t, p, "prismd.ext.block_bits", 128)
			eqU(t, p, "prismd.ext.block_count", 130)
			eqU(t, p, "prismd.ext.member", 0, 127, 128*129+5)
			eqU(t, p, "prismd.ng.count")
		}})

	// RESULT with a LIST extension and an INT8 group, RETRANSMIT, PARTIAL
	// (a result that lacks contributions, protocol 8.7).
	extList := &parser.Ext{Encoding: parser.EncList, XFlags: parser.XFlagPartial, Tenant: 1, Token: 2, Set: parser.AppendListSet(nil, 1, 65536, 4294967295)}
	cs = append(cs, tcase{name: "RESULT-ext-LIST", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassResult, PacketID: 10, First: 64, Flags: parser.FlagRetransmit, Stream: 2}, extList,
			parser.Group{Format: parser.FormatINT8, Count: 3, Values: []byte{1, 2, 0xFE}}),
		check: func(t *testing.T, p *packet) {
			eqU(t, p, "prismd.data.flags.retransmit", 1)
			eqU(t, p, "prismd.ext.xflags.partial", 1)
			eqL(t, p, "prismd.ext.encoding", "LIST")
			eqU(t, p, "prismd.ext.list_count", 3)
			eqU(t, p, "prismd.ext.member", 1, 65536, 4294967295)
			eqI(t, p, "prismd.ng.value_int8", 1, 2, -2)
			eqU(t, p, "prismd.ng.position", 64)
		}})

	// DATA that ends a persistent collective's invocation (PUSH).
	cs = append(cs, tcase{name: "DATA-push", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassData, PacketID: 12, First: 10, Flags: parser.FlagPush, Stream: 3}, nil,
			parser.Group{Format: parser.FormatFP32, Count: 1, Values: []byte{0, 0, 0x80, 0x3f}}),
		check: func(t *testing.T, p *packet) {
			eqU(t, p, "prismd.data.flags", uint64(parser.FlagPush))
			eqU(t, p, "prismd.data.flags.push", 1)
			eqU(t, p, "prismd.data.flags.last", 0)
			eqU(t, p, "prismd.data.flags.reserved", 0)
			eqF32(t, p, "prismd.ng.value_fp32", 1)
		}})

	// ACCUMULATION_INEXACT terminal.
	cs = append(cs, tcase{name: "DATA-inexact", valid: true,
		frame: encData(t, parser.DataFields{Class: parser.ClassResult, PacketID: 11, First: 4096, Flags: parser.FlagLast | parser.FlagInexact, Stream: 2}, nil),
		check: func(t *testing.T, p *packet) {
			eqU(t, p, "prismd.data.flags.last", 1)
			eqU(t, p, "prismd.data.flags.inexact", 1)
			eqU(t, p, "prismd.data.groups", 0)
		}})

	// PROGRESS with holes, and a complete one without.
	cs = append(cs, tcase{name: "PROGRESS-holes", valid: true,
		frame: encProgress(t, parser.Progress{SrcEP: 20, DstEP: 10, Stream: 5, PacketID: 4242, Committed: 1000, IntervalCredits: 8,
			ByteCredits: 65536, Status: parser.ProgressStatusNoCredit, Flags: parser.ProgressFlagResult},
			parser.Hole{Start: 1036, End: 1100}, parser.Hole{Start: 1100, End: 1101}, parser.Hole{Start: 2000, End: 4096}),
		check: func(t *testing.T, p *packet) {
			eqOpIdentity(t, p)
			eqL(t, p, "prismd.class", "PROGRESS")
			eqU(t, p, "prismd.prog.src_ep", 20)
			eqU(t, p, "prismd.prog.dst_ep", 10)
			eqU(t, p, "prismd.prog.stream", 5)
			eqU(t, p, "prismd.prog.packet_id", 4242)
			eqU(t, p, "prismd.prog.committed", 1000)
			eqU(t, p, "prismd.prog.interval_credits", 8)
			eqU(t, p, "prismd.prog.byte_credits", 65536)
			eqL(t, p, "prismd.prog.status", "NO_CREDIT")
			eqU(t, p, "prismd.prog.flags.result", 1)
			eqU(t, p, "prismd.prog.flags.complete", 0)
			eqU(t, p, "prismd.prog.holes", 3)
			eqU(t, p, "prismd.prog.hole.start", 1036, 1100, 2000)
			eqU(t, p, "prismd.prog.hole.end", 1100, 1101, 4096)
		}})
	cs = append(cs, tcase{name: "PROGRESS-failed-cause", valid: true,
		frame: encProgress(t, parser.Progress{Stream: 7, Committed: 300, Status: parser.ProgressStatusFailed,
			FailCause: parser.FailLinkDown, FailHops: 2}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.prog.status", "FAILED")
			eqL(t, p, "prismd.prog.fail_cause", "LINK_DOWN")
			eqU(t, p, "prismd.prog.fail_hops", 2)
		}})
	cs = append(cs, tcase{name: "PROGRESS-complete", valid: true,
		frame: encProgress(t, parser.Progress{Stream: 6, Committed: 4096, Status: parser.ProgressStatusOK, Flags: parser.ProgressFlagComplete}),
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.prog.status", "OK")
			eqU(t, p, "prismd.prog.flags.complete", 1)
			eqU(t, p, "prismd.prog.holes", 0)
			eqU(t, p, "prismd.prog.hole.start")
		}})

	// A short frame padded to the 60-byte Ethernet minimum: padding is not data.
	padded := append(encControl(t, parser.Control{Txn: 5, Cmd: parser.CmdCommit}), make([]byte, 12)...)
	cs = append(cs, tcase{name: "COMMIT-padded", valid: true, frame: padded,
		check: func(t *testing.T, p *packet) {
			eqL(t, p, "prismd.ctl.cmd", "COMMIT")
			eqBytes(t, p, "prismd.padding", make([]byte, 12))
		}})
	return cs
}

// malformedCases corrupt encoder output (or are hand-built) so that exactly one
// rule breaks; each names the expert item it must raise.
func malformedCases(t *testing.T, valid []tcase) []tcase {
	byName := map[string][]byte{}
	for _, c := range valid {
		byName[c.name] = c.frame
	}
	mut := func(name string, f func(b []byte) []byte) []byte { return f(slices.Clone(byName[name])) }
	dataHdr := parser.HdrOff // DATA header offsets below are relative to this
	var cs []tcase
	add := func(name string, frame []byte, experts ...string) {
		cs = append(cs, tcase{name: name, frame: frame, experts: experts})
	}
	// addMsg also names the expert message the frame must raise, where the
	// expert item alone would not show which rule fired.
	addMsg := func(name, message string, frame []byte, experts ...string) {
		cs = append(cs, tcase{name: name, frame: frame, experts: experts, message: message})
	}
	add("DATA-truncated-in-group", mut("DATA-all-formats", func(b []byte) []byte { return b[:len(b)-30] }), "prismd.expert.truncated")
	add("DATA-group-count-too-big", mut("DATA-all-formats", func(b []byte) []byte { b[dataHdr+32]++; return b }), "prismd.expert.length")
	add("DATA-group-count-too-small", mut("DATA-all-formats", func(b []byte) []byte { b[dataHdr+32]--; return b }), "prismd.expert.length")
	add("DATA-element-count-wrong", mut("DATA-all-formats", func(b []byte) []byte {
		be.PutUint16(b[dataHdr+30:], be.Uint16(b[dataHdr+30:])+1)
		return b
	}), "prismd.expert.length")
	add("DATA-body-length-short", mut("DATA-all-formats", func(b []byte) []byte {
		be.PutUint16(b[dataHdr+34:], be.Uint16(b[dataHdr+34:])-4)
		return b
	}), "prismd.expert.length")
	add("DATA-body-length-long", mut("DATA-all-formats", func(b []byte) []byte {
		be.PutUint16(b[dataHdr+34:], be.Uint16(b[dataHdr+34:])+8)
		return append(b, make([]byte, 8)...)
	}), "prismd.expert.length")
	add("DATA-bad-format", mut("RESULT-ext-LIST", func(b []byte) []byte {
		off := parser.DataBodyOff + int(be.Uint16(b[parser.DataBodyOff:]))
		b[off+2] = 0x90 // format 9
		return b
	}), "prismd.expert.unknown")
	add("DATA-reserved-flag", mut("DATA-inexact", func(b []byte) []byte { b[dataHdr+33] |= 0x80; return b }), "prismd.expert.reserved")
	add("EXT-truncated", mut("RESULT-ext-FLAT-auth", func(b []byte) []byte { return b[:parser.DataBodyOff+20] }), "prismd.expert.truncated")
	add("EXT-length-past-end", mut("DATA-ext-HIER-empty", func(b []byte) []byte {
		be.PutUint16(b[parser.DataBodyOff:], be.Uint16(b[parser.DataBodyOff:])+64)
		return b
	}), "prismd.expert.truncated")
	add("EXT-list-count-wrong", mut("RESULT-ext-LIST", func(b []byte) []byte {
		b[parser.DataBodyOff+parser.ExtHdrLen+1]++ // LIST Count
		return b
	}), "prismd.expert.length")
	add("ACK-body-length-wrong", mut("ACK", func(b []byte) []byte {
		be.PutUint16(b[dataHdr+28:], 12)
		return b
	}), "prismd.expert.length")
	add("ACK-body-truncated", mut("ACK", func(b []byte) []byte { return b[:len(b)-6] }), "prismd.expert.truncated")
	add("COMMIT-with-body", handControl(2, 0, 4, 0, 1, []byte{1, 2, 3, 4}), "prismd.expert.length")
	add("STAGE-binding-count-too-big", mut("STAGE", func(b []byte) []byte { b[parser.ControlBodyOff+14] = 40; return b }), "prismd.expert.length")
	add("STAGE-set-length-wrong", mut("STAGE", func(b []byte) []byte {
		off := parser.ControlBodyOff + parser.ContextRecordLen + 4*parser.BindingLen
		be.PutUint16(b[off+2:], be.Uint16(b[off+2:])+8)
		return b
	}), "prismd.expert.length")
	add("CAPS-record-count-wrong", mut("CAPS_RESPONSE", func(b []byte) []byte { b[parser.ControlBodyOff] = 3; return b }), "prismd.expert.length")
	add("CONTROL-frag-index", handControl(8, 0, 12, 3, 3, make([]byte, 12)), "prismd.expert.malformed")
	add("CONTROL-status-not-ack", handControl(2, 4, 0, 0, 1, nil), "prismd.expert.rule")
	add("PROGRESS-hole-count-past-end", handProgress(10, 5, [2]uint32{12, 15}, [2]uint32{20, 30}), "prismd.expert.truncated")
	add("PROGRESS-holes-not-ascending", handProgress(10, 2, [2]uint32{20, 30}, [2]uint32{12, 15}), "prismd.expert.rule")
	add("PROGRESS-hole-below-committed", handProgress(100, 1, [2]uint32{12, 15}), "prismd.expert.rule")
	addMsg("PROGRESS-cause-without-FAILED", "Failure Cause without status FAILED", mut("PROGRESS-complete", func(b []byte) []byte {
		b[parser.HdrOff+42] = 4
		return b
	}), "prismd.expert.reserved")
	addMsg("PROGRESS-hops-without-cause", "Failure Hops without a Failure Cause", mut("PROGRESS-failed-cause", func(b []byte) []byte {
		b[parser.HdrOff+42] = 0
		return b
	}), "prismd.expert.reserved")
	add("PROGRESS-cause-unassigned", mut("PROGRESS-failed-cause", func(b []byte) []byte {
		b[parser.HdrOff+42] = 9
		return b
	}), "prismd.expert.unknown")
	add("KULISCH-zero-bytes", append(handDataHdr(2, 0, 1, 1, 0, 8, 1), group(1, 5, 0, []byte{1})...), "prismd.expert.malformed")
	add("FP16-odd-body", append(handDataHdr(2, 0, 3, 1, 0, 8, 1), group(3, 2, 0, make([]byte, 6))[:8]...), "prismd.expert.length")
	addMsg("EXT-PARTIAL-with-INSTALL", "never rides on an INSTALL", mut("RESULT-ext-LIST", func(b []byte) []byte {
		b[parser.DataBodyOff+3] |= parser.XFlagInstall
		return b
	}), "prismd.expert.rule")
	addMsg("STAGE-set-index-twice", "a second set record", mut("STAGE", func(b []byte) []byte {
		b[parser.ControlBodyOff+parser.ContextRecordLen+4*parser.BindingLen+parser.SetRecordHdrLen+parser.SetPrefixLen+12] = parser.OwnSet // record 1
		return b
	}), "prismd.expert.malformed")
	add("EXT-INSTALL-on-DATA", mut("DATA-ext-HIER-empty", func(b []byte) []byte { b[parser.DataBodyOff+3] |= parser.XFlagInstall; return b }), "prismd.expert.rule")
	add("HIER-upper-bit-beyond-count", mut("DATA-ext-HIER-empty", func(b []byte) []byte {
		b[parser.DataBodyOff+parser.ExtHdrLen+4+140/8] |= 0x80 >> (140 % 8) // Block Count is 130
		return b
	}), "prismd.expert.malformed")
	add("HIER-empty-lower", mut("DATA-ext-HIER-empty", func(b []byte) []byte {
		lower := parser.DataBodyOff + parser.ExtHdrLen + 4 + 24 // after the 24-byte upper bitmap
		clear(b[lower : lower+16])
		return b
	}), "prismd.expert.rule")
	add("STAGE-bad-MTU", mut("STAGE", func(b []byte) []byte { be.PutUint16(b[parser.ControlBodyOff+12:], 1000); return b }), "prismd.expert.rule")
	addMsg("STAGE-tenant-not-bitmap", "Tenant ID must be 0", mut("STAGE", func(b []byte) []byte { b[parser.ControlBodyOff+1] = uint8(parser.CollAllReduce); return b }), "prismd.expert.rule")
	addMsg("STAGE-list-over-cap", "exceeds the job's cap", mut("STAGE", func(b []byte) []byte { be.PutUint32(b[parser.ControlBodyOff+28:], 3); return b }), "prismd.expert.rule")
	add("STAGE-unknown-role", mut("STAGE", func(b []byte) []byte { b[parser.ControlBodyOff] = 9; return b }), "prismd.expert.unknown")
	add("STAGE-set-binding-index", mut("STAGE", func(b []byte) []byte {
		b[parser.ControlBodyOff+parser.ContextRecordLen+4*parser.BindingLen] = 9 // only 4 bindings
		return b
	}), "prismd.expert.malformed")
	add("ACK-acks-ACK", mut("ACK", func(b []byte) []byte { b[parser.ControlBodyOff] = uint8(parser.CmdAck); return b }), "prismd.expert.rule")
	add("KULISCH-finite-zero", append(handDataHdr(2, 0, 1, 1, 0, 16, 1), group(1, 5, 8, make([]byte, 9))...), "prismd.expert.rule")
	addMsg("SCALED-in-RESULT", "legal only in DATA without EXT", mut("DATA-scaled", func(b []byte) []byte { b[parser.CWOff+1] = 3; return b }), "prismd.expert.rule")
	add("SCALED-reserved", mut("DATA-scaled", func(b []byte) []byte { b[parser.DataBodyOff+4+3] = 1; return b }), "prismd.expert.reserved")
	addMsg("SCALED-shift-past-4096", "exceeds the largest Kulisch width", mut("DATA-scaled", func(b []byte) []byte {
		off := parser.DataBodyOff + 24 + 4 + (1+36+3)/4*4 + 4 // third group's Scale Word (Kulisch-288 in between)
		be.PutUint16(b[off:], 4025)
		return b
	}), "prismd.expert.rule")
	add("SCALED-B-zero", append(handDataHdr(2, 0, 1, 1, 0, 12, 1), group(1, 7, 0, []byte{0, 0, 0, 0, 1})...), "prismd.expert.malformed")
	add("SCALED-finite-zero", append(handDataHdr(2, 0, 1, 1, 0, 12, 1), group(1, 7, 1, []byte{0, 0, 0, 0, 0, 0})...), "prismd.expert.rule")
	add("SCALED-scale-word-cut", append(handDataHdr(2, 0, 1, 1, 0, 6, 1), group(1, 7, 1, nil)[:4:4]...), "prismd.expert.length")
	// KULISCH_F64 (DATA-f64: FP32 group of 1, then the F64 descriptor at
	// body offset 8 and its values from 12).
	f64Desc := parser.DataBodyOff + 8
	f64Val := func(i int) int { return f64Desc + 4 + 8*i }
	addMsg("F64-in-RESULT", "KULISCH_F64 groups are legal only in DATA without EXT", mut("DATA-f64", func(b []byte) []byte {
		b[parser.CWOff+1] = uint8(parser.ClassResult)
		return b
	}), "prismd.expert.rule")
	addMsg("F64-bits-11..0", "bits 11..0", mut("DATA-f64", func(b []byte) []byte { b[f64Desc+3] = 1; return b }), "prismd.expert.malformed")
	addMsg("F64-subnormal", "subnormal", mut("DATA-f64", func(b []byte) []byte {
		le.PutUint64(b[f64Val(2):], math.Float64bits(math.SmallestNonzeroFloat64))
		return b
	}), "prismd.expert.rule")
	addMsg("F64-NaN-payload", "not the one NaN encoding", mut("DATA-f64", func(b []byte) []byte {
		le.PutUint64(b[f64Val(7):], math.Float64bits(math.NaN())) // Go's NaN is 0x7FF8000000000001
		return b
	}), "prismd.expert.rule")
	addMsg("F64-negative-NaN", "not the one NaN encoding", mut("DATA-f64", func(b []byte) []byte {
		b[f64Val(7)+7] |= 0x80
		return b
	}), "prismd.expert.rule")
	addMsg("F64-2^-150", "lowest set bit is 2^-150", mut("DATA-f64", func(b []byte) []byte {
		le.PutUint64(b[f64Val(4):], math.Float64bits(math.Ldexp(1, -150)))
		return b
	}), "prismd.expert.rule")
	addMsg("F64-53-bits-too-fine", "lowest set bit is 2^-150", mut("DATA-f64", func(b []byte) []byte {
		le.PutUint64(b[f64Val(8):], math.Float64bits(math.Ldexp(1<<53-1, -150)))
		return b
	}), "prismd.expert.rule")
	// A DATA frame with an endpoint-set extension and one value 1.0 in a
	// KULISCH_F64 group (the encoder refuses to build it).
	extF64 := encData(t, parser.DataFields{Class: parser.ClassData, PacketID: 5, Stream: 1},
		&parser.Ext{Encoding: parser.EncFlat, Tenant: 1, Token: 2, Set: parser.AppendFlatSet(nil, 0, 1, 5)},
		parser.Group{Format: parser.FormatFP32, Count: 2, Values: fp32Values(1, 2)})
	extDesc := len(extF64) - 12
	be.PutUint16(extF64[extDesc:], 1)
	be.PutUint16(extF64[extDesc+2:], uint16(parser.FormatKulischF64)<<12)
	be.PutUint16(extF64[dataHdr+30:], 1) // Element Count
	le.PutUint64(extF64[extDesc+4:], math.Float64bits(1))
	addMsg("F64-with-EXT", "KULISCH_F64 groups are legal only in DATA without EXT", extF64, "prismd.expert.rule")
	add("padding-nonzero", mut("RESULT-ext-LIST", func(b []byte) []byte { b[len(b)-1] = 1; return b }), "prismd.expert.reserved")
	add("bad-version", mut("COMMIT", func(b []byte) []byte { b[parser.CWOff] = 0x21; return b }), "prismd.expert.version")
	add("unknown-class", mut("COMMIT", func(b []byte) []byte { b[parser.CWOff+1] = 9; return b }), "prismd.expert.unknown")
	add("control-word-cut", byName["COMMIT"][:parser.EthLen+1], "prismd.expert.truncated")
	add("CONTROL-header-cut", byName["COMMIT"][:parser.EthLen+20], "prismd.expert.truncated")
	return cs
}

func TestDissector(t *testing.T) {
	t.Parallel() // each test runs its own tshark; they share nothing
	valid := validCases(t)
	cases := append(slices.Clone(valid), malformedCases(t, valid)...)

	// The valid frames must be valid for package parser too, or the test
	// would be checking the dissector against frames nobody sends.
	for _, c := range valid {
		var err error
		switch c.frame[parser.CWOff+1] {
		case uint8(parser.ClassControl):
			var x parser.Control
			err = x.Decode(c.frame, parser.Limits{})
		case uint8(parser.ClassData), uint8(parser.ClassResult):
			var x parser.Data
			err = x.Decode(c.frame, parser.Limits{})
		case uint8(parser.ClassProgress):
			var x parser.Progress
			err = x.Decode(c.frame, parser.Limits{})
		}
		if err != nil {
			t.Errorf("%s: parser rejects the test's valid frame: %v", c.name, err)
		}
	}

	frames := make([][]byte, len(cases))
	for i, c := range cases {
		frames[i] = c.frame
	}
	pcap := filepath.Join(t.TempDir(), "prismd.pcap")
	writePcap(t, pcap, frames)
	// PRISMD_SAMPLE_PCAP=path keeps a copy: a sample capture of every frame kind.
	if keep := os.Getenv("PRISMD_SAMPLE_PCAP"); keep != "" {
		writePcap(t, keep, frames)
	}
	pkts, out := runTshark(t, pcap)
	if strings.Contains(out, "Lua Error") {
		t.Errorf("tshark output contains a Lua Error")
	}
	if len(pkts) != len(cases) {
		t.Fatalf("tshark decoded %d packets, want %d", len(pkts), len(cases))
	}
	for i, c := range cases {
		p := &pkts[i]
		t.Run(c.name, func(t *testing.T) {
			if len(p.values("prismd.class")) == 0 && c.name != "control-word-cut" {
				t.Fatalf("frame %d was not dissected as prismd", i+1)
			}
			ex := p.experts()
			if slices.Contains(ex, "prismd.expert.internal") {
				t.Errorf("dissector internal error: %v", p.values("_ws.expert.message"))
			}
			if c.valid && len(ex) != 0 {
				t.Errorf("valid frame shows expert info %v: %q", ex, p.values("_ws.expert.message"))
			}
			for _, e := range c.experts {
				if !slices.Contains(ex, e) {
					t.Errorf("want expert %s, got %v %q", e, ex, p.values("_ws.expert.message"))
				}
			}
			if c.message != "" && !slices.ContainsFunc(p.values("_ws.expert.message"), func(m string) bool { return strings.Contains(m, c.message) }) {
				t.Errorf("no expert message contains %q: %q", c.message, p.values("_ws.expert.message"))
			}
			if c.check != nil {
				c.check(t, p)
			}
		})
	}
}

// TestDissectorSnaplen: a valid frame the capture cut (tshark -s 80) is
// not malformed: it carries only the note prismd.expert.snaplen, while a
// frame cut on the wire itself stays truncated.
func TestDissectorSnaplen(t *testing.T) {
	t.Parallel()
	var long []byte
	for _, c := range validCases(t) {
		if len(c.frame) > 200 && (c.frame[parser.CWOff+1] == uint8(parser.ClassData) || c.frame[parser.CWOff+1] == uint8(parser.ClassResult)) {
			long = c.frame
			break
		}
	}
	if long == nil {
		t.Fatal("no DATA or RESULT case longer than 200 bytes")
	}
	dir := t.TempDir()
	cut := filepath.Join(dir, "snap.pcap")
	writePcapSnap(t, cut, [][]byte{long}, 80)
	pkts, out := runTshark(t, cut)
	if strings.Contains(out, "Lua Error") || len(pkts) != 1 {
		t.Fatalf("%d packets, output %q", len(pkts), out)
	}
	if ex := pkts[0].experts(); !slices.Equal(ex, []string{"prismd.expert.snaplen"}) {
		t.Fatalf("cut by the snapshot length: experts %v %q, want only prismd.expert.snaplen", ex, pkts[0].values("_ws.expert.message"))
	}
	// Every valid frame, at several snapshot lengths: a note at most.
	for _, snap := range []int{40, 64, 100} {
		var frames [][]byte
		var names []string
		for _, c := range validCases(t) {
			frames, names = append(frames, c.frame), append(names, c.name)
		}
		p := filepath.Join(dir, fmt.Sprintf("all%d.pcap", snap))
		writePcapSnap(t, p, frames, snap)
		pkts, out := runTshark(t, p)
		if strings.Contains(out, "Lua Error") || len(pkts) != len(frames) {
			t.Fatalf("snap %d: %d packets of %d, output %q", snap, len(pkts), len(frames), out)
		}
		for i := range pkts {
			for _, x := range pkts[i].experts() {
				if x != "prismd.expert.snaplen" {
					t.Errorf("snap %d, %s: expert %s %q on a valid frame the capture cut", snap, names[i], x, pkts[i].values("_ws.expert.message"))
				}
			}
		}
	}
	wire := filepath.Join(dir, "wire.pcap")
	writePcap(t, wire, [][]byte{long[:80]})
	pkts, _ = runTshark(t, wire)
	if len(pkts) != 1 || !slices.Contains(pkts[0].experts(), "prismd.expert.truncated") {
		t.Fatalf("cut on the wire: experts %v, want prismd.expert.truncated", pkts[0].experts())
	}
}
