package afpacket

// This file owns the control lane: a second receive socket, beside the
// TPACKET_V3 ring, that takes PRISM CONTROL frames out of the ring's path.
//
// A V3 ring hands a block to user space when the block fills or its retire
// timer fires (1 ms, the least the kernel accepts; 0.5-0.9 ms measured on a
// veth). Bulk traffic fills blocks in microseconds, but a CONTROL request is
// alone on the wire: it waited for the timer at every switch on its way and
// its ACK at every switch on the way back, about 0.8 ms a hop. The AM's
// setup of a collective is four such exchanges with every node (STAGE and
// COMMIT, then COMPLETE and RELEASE), each as slow as the farthest node, so
// on a two-level tree a ring port made every operation about 15 ms longer
// however small its vector.
//
// The lane is an ordinary socket bound to EtherType 0x88B5 whose classic BPF
// filter keeps CONTROL frames only; the ring socket's filter keeps
// everything else, so each frame reaches exactly one of them. recvmmsg
// returns a frame as soon as it is queued. Moving CONTROL frames ahead of
// DATA, RESULT or PROGRESS frames that were queued before them reorders
// nothing that matters: a CONTROL exchange is one request and its reply,
// the AM sends one node one request at a time, and no rank sends DATA
// before every node has acknowledged COMMIT.

import (
	"net"
	"syscall"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"

	"github.com/prismd/prismd/internal/mmsg"
)

const (
	// prismEtherType and classOff identify the lane's frames: the EtherType
	// at offset 12 and the class byte of the control word at offset 15.
	// The parser package owns these values (and the class numbers in a
	// lane's class mask); this package only moves bytes and must not
	// import it.
	prismEtherType = 0x88B5
	classControl   = 1
	classProgress  = 4
	classOff       = 15
	// maxLaneClass bounds the class numbers a mask can name (bit c of a
	// uint16); a larger class byte is never a lane frame.
	maxLaneClass = 15
)

// laneFilter keeps the PRISM frames whose class is in mask (bit c for
// class c) and long enough to carry the class byte.
func laneFilter(mask uint16) []bpf.RawInstruction { return classFilter(mask, 1<<18, 0) }

// ringFilter is its complement on the ring socket: everything except the
// lane's frames. A frame too short to hold the class byte stays on the ring
// (a load past the end would abort the filter and drop it unseen), where
// the dataplane counts it as a short frame.
func ringFilter(mask uint16) []bpf.RawInstruction { return classFilter(mask, 0, 1<<18) }

// classFilter returns in (a snap length: 1<<18 keeps the whole frame at any
// MTU, 0 drops it) for PRISM frames whose class is in mask, and out for
// every other frame, short ones included.
func classFilter(mask uint16, in, out uint32) []bpf.RawInstruction {
	return mustAssemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtLen},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: classOff + 1, SkipTrue: 10},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: prismEtherType, SkipTrue: 8},
		bpf.LoadAbsolute{Off: classOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: maxLaneClass, SkipTrue: 6},
		bpf.TAX{},
		bpf.LoadConstant{Dst: bpf.RegA, Val: 1},
		bpf.ALUOpX{Op: bpf.ALUOpShiftLeft},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: uint32(mask)},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
		bpf.RetConstant{Val: in},
		bpf.RetConstant{Val: out},
	})
}

func mustAssemble(p []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(p)
	if err != nil {
		panic("afpacket: filter: " + err.Error()) // a constant program: cannot fail
	}
	return raw
}

// lane is the control lane's socket and its batch reader.
type lane struct {
	conn *packet.Conn
	rc   syscall.RawConn
	rx   *mmsg.Recv
}

// openLane opens the lane for the classes in mask on ifi with a receive
// buffer of bufSize bytes.
func openLane(ifi *net.Interface, mask uint16, bufSize, maxBatch int) (*lane, error) {
	conn, err := packet.Listen(ifi, packet.Raw, prismEtherType, &packet.Config{Filter: laneFilter(mask)})
	if err != nil {
		return nil, err
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) { serr = setRecvOpts(fd, bufSize) })
	if cerr == nil {
		cerr = serr
	}
	if cerr != nil {
		_ = conn.Close()
		return nil, cerr
	}
	_, _ = conn.Stats() // frames dropped before the dataplane started are not its drops
	return &lane{conn: conn, rc: rc, rx: mmsg.NewRecv(maxBatch)}, nil
}

// HasLane reports whether the socket has a control lane (Options.Lane with
// the ring).
func (s *Socket) HasLane() bool { return s.lane != nil }

// RecvLane blocks until at least one lane frame is available and reads up
// to len(bufs) of them, as RecvBatch does. It must be called from one
// goroutine at a time (another than RecvBatch's). Without a lane, or after
// Close, it returns net.ErrClosed.
func (s *Socket) RecvLane(bufs [][]byte, sizes []int) (n, truncated int, err error) {
	l := s.lane
	if l == nil {
		return 0, 0, net.ErrClosed
	}
	return s.recvmmsg(l.rc, l.rx, bufs, sizes)
}
