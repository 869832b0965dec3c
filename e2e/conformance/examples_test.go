package conformance

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// specPath is docs/protocol.md, read at test time so the comparison is
// always against the document as it stands.
const specPath = "../../docs/protocol.md"

// specExample is one fenced `prism-example:NAME` block of section 12 with
// the prose before it.
type specExample struct {
	Section string // "12.1"
	Name    string // "control-stage"
	Prose   string
	Frame   []byte
}

func loadExamples(t *testing.T) map[string]specExample {
	t.Helper()
	f, err := os.Open(specPath)
	if err != nil {
		t.Fatalf("open the spec: %v", err)
	}
	defer f.Close()
	out := map[string]specExample{}
	var cur specExample
	var prose strings.Builder
	inBlock := false
	head := regexp.MustCompile(`^### (12\.\d+) `)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inBlock && strings.HasPrefix(line, "```"):
			inBlock = false
			out[cur.Name] = cur
		case inBlock:
			fs := strings.Fields(line)
			if len(fs) == 0 {
				continue
			}
			off, err := strconv.ParseUint(fs[0], 16, 32)
			if err != nil || int(off) != len(cur.Frame) {
				t.Fatalf("example %s: bad hex line %q (offset %d expected)", cur.Name, line, len(cur.Frame))
			}
			for _, h := range fs[1:] {
				v, err := strconv.ParseUint(h, 16, 8)
				if err != nil {
					t.Fatalf("example %s: bad byte %q", cur.Name, h)
				}
				cur.Frame = append(cur.Frame, byte(v))
			}
		case strings.HasPrefix(line, "```text prism-example:"):
			inBlock = true
			cur.Name = strings.TrimPrefix(line, "```text prism-example:")
			cur.Prose = prose.String()
			cur.Frame = nil
		default:
			if m := head.FindStringSubmatch(line); m != nil {
				cur = specExample{Section: m[1]}
				prose.Reset()
			}
			prose.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The common values of section 12's preamble.
var (
	exDst = mac{2, 0, 0, 0, 0, 1}
	exSrc = mac{2, 0, 0, 0, 0, 2}
	exID  = ident{Job: 0x0102030405060708, Group: 1, GroupGen: 1, Op: 7, OpGen: 1}
)

func pow2(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }

// The STAGE of 12.1. The prose states role, collective, formats, W, vector
// length, MTU and the two bindings' kinds/streams/ports; Transaction ID,
// endpoints, peer MACs, windows, Max Terms and Timeout are not stated in
// the prose and are the values the hex shows (finding: the examples do not
// state every field they encode).
func example121() stage {
	return stage{
		Ctx: stageCtx{Role: roleSingle, Collective: collReduce, In: fmtFP32, Acc: accKulischFixed,
			Partial: fmtKulisch, Out: fmtFP32, W: 280, VecLen: 1024, MTU: 1500, NBind: 2, NSet: 0,
			WI: 8, RD: 8, WB: 12000, WE: 2904, MaxTerms: 2, Timeout: 1000},
		Bindings: []binding{
			{Kind: bkContributor, Flags: bfRank, Stream: 1, Local: 0x0010, Peer: 0x0100, Port: 0, MAC: mac{2, 0, 0, 0, 1, 0}},
			{Kind: bkResultOut, Flags: bfRank, Stream: 1, Local: 0x0011, Peer: 0x0101, Port: 1, MAC: mac{2, 0, 0, 0, 1, 1}},
		},
	}
}

func example1216() stage {
	s := example121()
	s.Ctx.Role, s.Ctx.Collective, s.Ctx.MaxTerms, s.Ctx.Tenant = roleInternal, collBitmap, 4, 7
	s.Ctx.NBind, s.Ctx.NSet = 4, 3
	lower, upper := mac{2, 0, 0, 0, 2, 0}, mac{2, 0, 0, 0, 2, 1}
	s.Bindings = []binding{
		{Kind: bkContributor, Stream: 2, Local: 0x20, Peer: 0x200, Port: 0, MAC: lower},
		{Kind: bkResultOut, Stream: 2, Local: 0x21, Peer: 0x201, Port: 0, MAC: lower},
		{Kind: bkParent, Stream: 3, Local: 0x22, Peer: 0x300, Port: 1, MAC: upper},
		{Kind: bkResultIn, Stream: 3, Local: 0x23, Peer: 0x301, Port: 1, MAC: upper},
	}
	s.Sets = []setRecord{
		{Index: 0xFF, Encoding: encFlat, Set: flatSet(0, 1, 0, 1, 2, 3)},
		{Index: 0xFE, Encoding: encFlat, Set: flatSet(1024, 1, 65536)},
		{Index: 1, Encoding: encFlat, Set: flatSet(0, 1, 0, 1, 2, 3)},
	}
	return s
}

type builtExample struct {
	frame  []byte // whole Ethernet frame
	fields any    // what the decoder must return for it
	op     opCtx  // receiver context for DATA/RESULT/PROGRESS decode
	check  func(t *testing.T, payload []byte)
}

func controlExample(c control, body any) builtExample {
	p := c.encode()
	return builtExample{frame: ethFrame(exDst, exSrc, p), fields: [2]any{c, body}}
}

func buildExamples() map[string]builtExample {
	m := map[string]builtExample{}
	st := example121()
	m["control-stage"] = controlExample(control{ID: exID, Txn: 0x11, SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdStage, FragCount: 1,
		Body: st.encode()}, st)
	m["control-commit"] = controlExample(control{ID: exID, Txn: 0x12, SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdCommit, FragCount: 1,
		Body: []byte{}}, nil)
	a := ack{Acked: cmdCommit, State: osActive, Detail: 0xFFFF, Completed: 0, MissingStream: 0xFFFF, MissingFrom: 0}
	m["control-ack"] = controlExample(control{ID: exID, Txn: 0x12, SrcEP: 1, DstEP: 0xFFFE, Cmd: cmdAck, Status: stOK, FragCount: 1,
		Body: a.encode()}, a)
	m["control-abort"] = controlExample(control{ID: exID, Txn: 0x13, SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdAbort, FragCount: 1,
		Body: []byte{}}, nil)
	m["control-caps-query"] = controlExample(control{Txn: 0x14, SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdCapsQuery, FragCount: 1,
		Body: []byte{0, 0, 0, 0}}, nil)
	cp := capsPage{PortCount: 4, MaxMTU: 9000, MaxOps: 64, Records: []capRecord{{In: fmtFP32, Acc: accKulischFixed,
		Partial: fmtAuto, Out: fmtFP32, MinW: 280, MaxW: 4096,
		// Not stated in the prose; the values the hex shows:
		MaxVector: 1 << 24, MaxTerms: 65536, MaxMTU: 9000, MaxBindings: 64, MaxWI: 64, MaxRD: 64,
		MaxWB: 1 << 20, MaxWE: 1 << 18}}}
	m["control-caps-response"] = controlExample(control{Txn: 0x14, SrcEP: 1, DstEP: 0xFFFE, Cmd: cmdCapsResponse, FragIdx: 0,
		FragCount: 1, Body: cp.encode()}, cp)

	op := opCtx{MTU: 1500, VecLen: 1024, W: 280}
	data := func(d dataFrame) builtExample {
		p := d.encode()
		for _, g := range d.Groups {
			d.ElemCount += g.Count
		}
		return builtExample{frame: ethFrame(exDst, exSrc, p), fields: d, op: op}
	}
	m["data-fp32"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x100, DstEP: 0x10, PacketID: 1, First: 0, Stream: 1,
		Groups: []group{fp32Group([]float32{1, 2, 3, 4})}})
	m["data-mixed"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x200, DstEP: 0x20, PacketID: 9, First: 10, Stream: 3,
		Groups: []group{fp32Group([]float32{0.5, 0.25}), kulischGroup(35, []kulischVal{{0, pow2(149)}}),
			fp32Group([]float32{8, -2})}})
	m["data-scaled"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x200, DstEP: 0x20, PacketID: 11, First: 20, Stream: 3,
		Groups: []group{scaledGroup(4, 126, []kulischVal{{0, pow2(23)}, {0, new(big.Int).Neg(new(big.Int).Mul(big.NewInt(3), pow2(21)))},
			{1, big.NewInt(0)}, {0, big.NewInt(1)}, {4, big.NewInt(0)}})}})
	// 12.17: exact 1.0, -1.5 x 2^-148 (-3 units), +0, 2^-149 (one unit),
	// -inf as binary64 (6, KULISCH_F64).
	m["data-f64"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x200, DstEP: 0x20, PacketID: 12, First: 25, Stream: 3,
		Groups: []group{f64Group([]uint64{0x3FF0000000000000, 0xB6B8000000000000, 0, 0x36A0000000000000, 0xFFF0000000000000})}})
	m["data-inexact"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x200, DstEP: 0x20, PacketID: 10, First: 0, Stream: 3,
		Flags: dfLast | dfInexact})
	m["result-last"] = data(dataFrame{Class: classResult, ID: exID, SrcEP: 0x11, DstEP: 0x101, PacketID: 256, First: 1020,
		Stream: 1, Flags: dfLast, Groups: []group{fp32Group([]float32{10, 20, 30, 40})}})
	pr := progress{ID: exID, SrcEP: 0x10, DstEP: 0x100, Stream: 1, PacketID: 5, Committed: 100, IntervalCredits: 6,
		ByteCredits: 9000, Holes: []hole{{200, 300}, {400, 450}}}
	m["progress-holes"] = builtExample{frame: ethFrame(exDst, exSrc, pr.encode()), fields: pr, op: op}
	// 12.18: a failure announcement (Packet ID 0): LINK_DOWN, one hop.
	pf := progress{ID: exID, SrcEP: 0x10, DstEP: 0x100, Stream: 1, Committed: 300, IntervalCredits: 6,
		ByteCredits: 9000, Status: 5, FailCause: 4, FailHops: 1}
	m["progress-failed"] = builtExample{frame: ethFrame(exDst, exSrc, pf.encode()), fields: pf, op: op}

	m["data-flat-ext"] = data(dataFrame{Class: classData, ID: exID, SrcEP: 0x300, DstEP: 0x30, PacketID: 3, First: 0, Stream: 1,
		Flags: dfExt, Ext: &extension{Encoding: encFlat, Tenant: 7, Token: 42, Set: flatSet(0, 1, 0, 1)},
		Groups: []group{fp32Group([]float32{1.5, -1.5})}})
	m["result-install-list"] = data(dataFrame{Class: classResult, ID: exID, SrcEP: 0x400, DstEP: 0x40, PacketID: 77, First: 0,
		Stream: 2 /* not in the prose */, Flags: dfExt, Ext: &extension{Encoding: encList, XFlags: xfInstall, Tenant: 7, Token: 0x1234,
			Set: listSet(1, 2, 5, 6)},
		Groups: []group{bf16Group([]uint16{0x3f80, 0xbf80, 0x3f00, 0x4000})}})
	{
		d := dataFrame{Class: classData, ID: exID, SrcEP: 0x500, DstEP: 0x50, PacketID: 12, First: 0, Stream: 4,
			Flags: dfExt, Ext: &extension{Encoding: encHier, XFlags: xfAuth, Tenant: 7, Token: 99,
				Set: hierSet(64, 4, 3, 130, 131)}}
		p := d.encode()
		signFrame(p, []byte("prism-example-key"))
		el := int(be.Uint16(p[2+dataHdr:]))
		d.Ext.Tag = append([]byte(nil), p[2+dataHdr+el-16:2+dataHdr+el]...)
		m["data-hier-ext"] = builtExample{frame: ethFrame(exDst, exSrc, p), fields: d, op: op}
	}
	sb := example1216()
	m["control-stage-boundary"] = controlExample(control{ID: exID, Txn: 0x15, SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdStage,
		FragCount: 1, Body: sb.encode()}, sb)
	return m
}

func hexDiff(got, want []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "got %d bytes, want %d\n", len(got), len(want))
	n := max(len(got), len(want))
	for i := 0; i < n; i++ {
		var g, w string = "--", "--"
		if i < len(got) {
			g = fmt.Sprintf("%02x", got[i])
		}
		if i < len(want) {
			w = fmt.Sprintf("%02x", want[i])
		}
		if g != w {
			fmt.Fprintf(&b, "  offset %#04x: got %s want %s\n", i, g, w)
		}
	}
	return b.String()
}

// newExamples are examples added to section 12 after 12.16: an encoder
// case here whose block is not (yet) in the spec is skipped, not an error.
var newExamples = map[string]string{"data-f64": "12.17"}

// TestWorkedExamples rebuilds every example of section 12 with this
// package's encoder and compares the bytes; then decodes the printed bytes
// and compares the fields; then checks the prose's byte count and layout.
func TestWorkedExamples(t *testing.T) {
	ex := loadExamples(t)
	built := buildExamples()
	if len(ex) < 16 {
		t.Errorf("the spec has %d worked examples, want at least 16 (12.1-12.16)", len(ex))
	}
	for name, sec := range newExamples {
		if _, ok := ex[name]; !ok {
			t.Logf("example %s (%s) is not in the spec yet: skipped", name, sec)
			delete(built, name)
		}
	}
	for name := range ex {
		if _, ok := built[name]; !ok {
			t.Errorf("spec example %s (%s) has no encoder case here", name, ex[name].Section)
		}
	}
	plainRE := regexp.MustCompile(`As plain KULISCH-(\d+) the same values take (\d+) body bytes`)
	sizeRE := regexp.MustCompile(`(\d+) bytes\.\s*$`)
	layoutRE := regexp.MustCompile(`(\d+)-(\d+)\.?\s*$`)
	for name, b := range built {
		e, ok := ex[name]
		if !ok {
			t.Errorf("example %s is not in the spec", name)
			continue
		}
		t.Run(e.Section+"_"+name, func(t *testing.T) {
			if !bytes.Equal(b.frame, e.Frame) {
				t.Errorf("encoder output differs from the spec's hex:\n%s\ngot:\n%s", hexDiff(b.frame, e.Frame), hex.Dump(b.frame))
			}
			eh, payload, err := splitEth(e.Frame)
			if err != nil || eh.Dst != exDst || eh.Src != exSrc || eh.Type != etherType {
				t.Fatalf("Ethernet header %+v, %v", eh, err)
			}
			switch payload[1] {
			case classControl:
				c, err := decodeControl(payload)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				want := b.fields.([2]any)
				wc := want[0].(control)
				if !reflect.DeepEqual(c, wc) {
					t.Errorf("decoded CONTROL header\n got %+v\nwant %+v", c, wc)
				}
				var got any
				switch c.Cmd {
				case cmdStage:
					s, _, err := decodeStage(c.Body)
					if err != nil {
						t.Fatalf("decode STAGE: %v", err)
					}
					got = s
				case cmdAck:
					got, err = decodeAck(c.Body)
				case cmdCapsResponse:
					got, err = decodeCapsPage(c.Body)
				}
				if err != nil {
					t.Fatalf("decode body: %v", err)
				}
				if want[1] != nil && !reflect.DeepEqual(got, want[1]) {
					t.Errorf("decoded body\n got %+v\nwant %+v", got, want[1])
				}
			case classData, classResult:
				d, err := decodeData(payload, b.op)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !reflect.DeepEqual(d, b.fields) {
					t.Errorf("decoded\n got %+v\nwant %+v", d, b.fields)
				}
				checkExampleExact(t, d, b.op)
				if d.Ext != nil && d.Ext.XFlags&xfAuth != 0 {
					// Verify the printed tag with the key of the example.
					p := append([]byte(nil), payload...)
					signFrame(p, []byte("prism-example-key"))
					if !bytes.Equal(p, payload) {
						t.Errorf("the printed AUTH tag does not verify under HMAC-SHA256/128 (8.6)")
					}
				}
			case classProgress:
				p, err := decodeProgress(payload, b.op.MTU, b.op.VecLen)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !reflect.DeepEqual(p, b.fields) {
					t.Errorf("decoded\n got %+v\nwant %+v", p, b.fields)
				}
			default:
				t.Fatalf("class %d", payload[1])
			}
			// The prose's "N bytes." and the Layout line's last range.
			var size, last int = -1, -1
			for _, l := range strings.Split(e.Prose, "\n") {
				if m := sizeRE.FindStringSubmatch(l); m != nil {
					size, _ = strconv.Atoi(m[1])
				}
				if strings.HasPrefix(l, "Layout:") {
					if m := layoutRE.FindStringSubmatch(l); m != nil {
						last, _ = strconv.Atoi(m[2])
					}
				}
			}
			if size != len(e.Frame) {
				t.Errorf("prose says %d bytes, the hex has %d", size, len(e.Frame))
			}
			if last != len(e.Frame)-1 {
				t.Errorf("layout ends at byte %d, the hex at %d", last, len(e.Frame)-1)
			}
			// "As plain KULISCH-W the same values take N body bytes."
			if m := plainRE.FindStringSubmatch(e.Prose); m != nil {
				w, _ := strconv.Atoi(m[1])
				said, _ := strconv.Atoi(m[2])
				if d, ok := b.fields.(dataFrame); ok {
					if got := 4 + pad4(int(d.ElemCount)*(1+w/8)); got != said {
						t.Errorf("prose: %d values as plain KULISCH-%d take %d body bytes, not %d (6)", d.ElemCount, w, got, said)
					}
				}
			}
		})
	}
}

// checkExampleExact: every exact partial group of a DATA example
// (KULISCH, KULISCH_SCALED, KULISCH_F64) stands for the same Kulisch values
// in each of the three encodings (6): re-encoded as plain KULISCH of the
// example's W, as KULISCH_SCALED with the canonical Shift and B, and as
// KULISCH_F64 where binary64 holds every value, each decodes to the same
// states and integers in units of 2^-149.
func checkExampleExact(t *testing.T, d dataFrame, op opCtx) {
	t.Helper()
	for gi, g := range d.Groups {
		if g.Format != fmtKulisch && g.Format != fmtScaled && g.Format != fmtF64 {
			continue
		}
		xs := trGroupVals(g)
		alts := map[string]group{"KULISCH": trKulischGroup(op.W, xs)}
		if s, b, ok := trScaledCanon(op.W, xs); ok {
			alts["KULISCH_SCALED"] = trScaledGroup(b, s, xs)
		} else {
			alts["KULISCH_SCALED"] = trScaledGroup(1, 0, xs)
		}
		f64 := true
		for _, x := range xs {
			f64 = f64 && trF64Exact(x)
		}
		if f64 {
			alts["KULISCH_F64"] = trF64Group(xs)
		}
		for name, a := range alts {
			e := dataFrame{Class: classData, ID: d.ID, SrcEP: d.SrcEP, DstEP: d.DstEP, PacketID: d.PacketID, First: d.First,
				Stream: d.Stream, Groups: []group{a}}
			got, err := decodeData(e.encode(), opCtx{MTU: op.MTU, W: op.W})
			if err != nil {
				t.Errorf("group %d re-encoded as %s: %v", gi, name, err)
				continue
			}
			ys := trGroupVals(got.Groups[0])
			for i := range xs {
				if !xs[i].equal(ys[i]) {
					t.Errorf("group %d value %d: %v, as %s %v (6: the same Kulisch value)", gi, i, xs[i], name, ys[i])
				}
			}
		}
	}
}

// TestSpecArithmetic checks the numbers the prose derives from the tables.
func TestSpecArithmetic(t *testing.T) {
	// 5.1 Window Elements minimums and 6 Packetisation capacities at MTU 1500.
	for _, c := range []struct{ mtu, want int }{{1500, 1452}, {576, 528}, {9000, 8952}} {
		if got := maxElemsPerFrame(c.mtu); got != c.want {
			t.Errorf("4 x floor((%d-46)/4) = %d, spec says %d", c.mtu, got, c.want)
		}
	}
	fits := func(g group) bool { return 2+dataHdr+g.length() <= 1500 }
	cap1 := func(format uint8, bytes uint16) int {
		n := 0
		for fits(group{Format: format, Bytes: bytes, Count: uint16(n + 1)}) {
			n++
		}
		return n
	}
	for _, c := range []struct {
		name   string
		format uint8
		bytes  uint16
		want   int
	}{{"INT8", fmtINT8, 0, 1452}, {"FP16", fmtFP16, 0, 726}, {"BF16", fmtBF16, 0, 726}, {"FP32", fmtFP32, 0, 363},
		{"Kulisch-280", fmtKulisch, 35, 40}, {"Kulisch-4096", fmtKulisch, 512, 2},
		{"SCALED B=1", fmtScaled, 1, 724}, {"SCALED B=4", fmtScaled, 4, 289}, {"KULISCH_F64", fmtF64, 0, 181}} {
		if got := cap1(c.format, c.bytes); got != c.want {
			t.Errorf("one %s group at MTU 1500 holds %d values, spec (6, Packetisation) says %d", c.name, got, c.want)
		}
	}
	// 5.3: a full CAPS page fits 576.
	if n := 2 + controlHdr + 12 + 16*32; n > 576 {
		t.Errorf("a 16-record page is %d bytes after Ethernet", n)
	}
	// 8.10: the 65 536-worker example's block A-BM is a FLAT body of 516 bytes.
	if n := len(flatSet(0, 64)); n != 516 {
		t.Errorf("FLAT body of 4096 endpoints is %d bytes, spec says 516", n)
	}
	// 4: "a STAGE with 64 bindings and no set records is ... = N bytes
	// after the Ethernet header", N read from the spec.
	t.Run("stage64", func(t *testing.T) {
		raw, err := os.ReadFile(specPath)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`STAGE with 64 bindings and no set records is[^=]*= ([0-9][0-9 ]*[0-9]) bytes`).FindSubmatch(raw)
		if m == nil {
			t.Fatal("section 4 no longer states the size of a 64-binding STAGE")
		}
		said, _ := strconv.Atoi(strings.ReplaceAll(string(m[1]), " ", ""))
		s := example121()
		s.Bindings = nil
		for i := 0; i < 64; i++ {
			s.Bindings = append(s.Bindings, binding{Kind: bkContributor, Flags: bfRank, Stream: uint16(i + 1),
				Local: uint16(i + 1), Peer: 1, MAC: mac{2, 0, 0, 0, 0, byte(i + 1)}})
		}
		n := len(control{Cmd: cmdStage, FragCount: 1, Body: s.encode()}.encode())
		if n != said {
			t.Errorf("(finding %d) a STAGE with 64 bindings is %d bytes after the Ethernet header by the tables of 5 and 5.1; section 4 says %d", fStage64, n, said)
		}
	})
}
