package host

import (
	"net"
	"testing"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// nullConn swallows frames (the PROGRESS a RESULT triggers).
type nullConn struct{}

func (nullConn) ReadFrame(b []byte) (int, error) { select {} }
func (nullConn) WriteFrame(b []byte) error       { return nil }
func (nullConn) MAC() net.HardwareAddr           { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (nullConn) Close() error                    { return nil }

// TestHandleAllocs: decoding PROGRESS and RESULT on the rank allocates
// nothing per frame (the decoders are fields of the op, not locals that
// escape).
func TestHandleAllocs(t *testing.T) {
	const n = 1 << 20
	g := &am.Grant{VectorLen: n, MTU: 1500,
		Data:   am.StreamBinding{StreamID: 3, SrcEndpoint: 10, DstEndpoint: 20},
		Result: &am.StreamBinding{StreamID: 4, SrcEndpoint: 21, DstEndpoint: 11}}
	key := parser.OpKey{Job: 1, Group: 1, Op: 1}
	recv := make([]float32, n)
	rv, _ := view(recv)
	op := &opRun{c: &Comm{conn: nullConn{}}, g: g, key: key, recv: rv, width: 4, mtu: 1500,
		sw:          stream.NewSendWindow(stream.SendConfig{ReplayDepth: 64, FrameSize: 1514}),
		rw:          stream.NewRecvWindow(stream.RecvConfig{VectorLen: n, Intervals: 64, MaxFrame: 1514}),
		progressBuf: make([]byte, parser.EthLen+parser.CWLen+parser.ProgressHdrLen+parser.MaxHoles*parser.HoleLen)}
	// A PROGRESS for the DATA stream.
	p := parser.Progress{Op: key, SrcEP: 20, DstEP: 10, Stream: 3, PacketID: 1, Committed: 0, IntervalCredits: 64, ByteCredits: 1 << 20}
	pf := make([]byte, 128)
	pn, err := p.Encode(pf, parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	// RESULT frames, one per run, in order.
	var b parser.DataBuilder
	frames := make([][]byte, 200)
	for i := range frames {
		buf := make([]byte, 1514)
		h := parser.DataFields{Eth: parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}}, Class: parser.ClassResult,
			Op: key, SrcEP: 21, DstEP: 11, PacketID: uint32(i + 1), First: uint32(i * 100), Stream: 4}
		if err := b.Reset(buf, &h, nil, 1500); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddGroup(parser.FormatFP32, 0, 100); err != nil {
			t.Fatal(err)
		}
		frames[i] = b.Finish()
	}
	k := 0
	a := testing.AllocsPerRun(100, func() {
		if err := op.handle(pf[:pn]); err != nil {
			t.Fatal(err)
		}
		if err := op.handle(frames[k]); err != nil {
			t.Fatal(err)
		}
		k++
	})
	if a != 0 {
		t.Fatalf("%v allocations per PROGRESS+RESULT", a)
	}
	if op.rw.Committed() == 0 {
		t.Fatal("RESULT frames were not accepted")
	}
}
