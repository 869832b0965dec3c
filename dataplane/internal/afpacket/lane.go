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
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

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
	return mustAssemble(append([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtLen},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: classOff + 1, SkipTrue: classTestLen + 1},
		bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: prismEtherType, SkipTrue: classTestLen - 1},
	}, classTest(classOff, mask, in, out)...))
}

// classTestLen is len(classTest(...)).
const classTestLen = 9

// classTest is the tail of classFilter and fanoutProg: return in if the
// class byte at off is in mask, else out (a class byte past maxLaneClass
// is in no mask: 1<<36 would wrap to bit 4). Jumping past its first
// len-1 instructions returns out.
func classTest(off uint32, mask uint16, in, out uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: off, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: maxLaneClass, SkipTrue: 6},
		bpf.TAX{},
		bpf.LoadConstant{Dst: bpf.RegA, Val: 1},
		bpf.ALUOpX{Op: bpf.ALUOpShiftLeft},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: uint32(mask)},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
		bpf.RetConstant{Val: in},
		bpf.RetConstant{Val: out},
	}
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

// Fanout: the ring socket and the lane share one PACKET_FANOUT group whose
// classic BPF program returns 1 (the lane, second member) for the lane's
// frames and 0 (the ring) for the rest. The kernel runs the group's program
// once per frame and hands the frame to exactly one member, so the program
// can be swapped (PACKET_FANOUT_DATA, one setsockopt) while traffic flows
// without a frame reaching both sockets or neither: two per-socket filters
// swapped one after the other would duplicate or lose the frames that came
// between the two calls. This is what lets the lane widen to every PRISM
// frame while traffic is sparse (SetLaneAll).
const (
	// fanoutFlags: a classic BPF group with a kernel-chosen id, and the
	// group skips the port's own transmissions, as PACKET_IGNORE_OUTGOING
	// does for a socket outside a group (the group's hook replaces the
	// sockets' own).
	fanoutFlags = unix.PACKET_FANOUT_CBPF | unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING
)

// fanoutProg is the group's program: for all, laneIdx (the lane's index
// in the group) for every frame; otherwise classFilter's test for the
// classes in mask, returning a member index. The kernel runs a fanout program on the frame as the
// protocol handlers see it, past the Ethernet header (a socket filter sees
// the header), so the EtherType comes from skb->protocol and the class
// byte is at offset classOff-14.
func fanoutProg(mask uint16, all bool, laneIdx uint32) []bpf.RawInstruction {
	if all {
		return mustAssemble([]bpf.Instruction{bpf.RetConstant{Val: laneIdx}})
	}
	const off = classOff - 14
	return mustAssemble(append([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtProto},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: prismEtherType, SkipTrue: classTestLen + 1},
		bpf.LoadExtension{Num: bpf.ExtLen},
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: off + 1, SkipTrue: classTestLen - 1},
	}, classTest(off, mask, laneIdx, 1-laneIdx)...))
}

// openLane opens the lane for the classes in mask on ifi with a receive
// buffer of bufSize bytes, in a fanout group with the ring socket ringRC
// when the kernel allows it (fanout reports whether it did), taking every
// frame if all is set; otherwise
// bound to the PRISM EtherType with a filter of its own, beside the ring
// socket's complementary filter.
func openLane(ifi *net.Interface, ringRC syscall.RawConn, mask uint16, bufSize, maxBatch int, all bool) (l *lane, fanout bool, err error) {
	if l, err = joinLane(ifi, ringRC, mask, bufSize, maxBatch, all); err == nil {
		return l, true, nil
	}
	if l, err = listenLane(ifi, prismEtherType, laneFilter(mask), bufSize, maxBatch); err != nil {
		return nil, false, err
	}
	return l, false, nil
}

// listenLane opens a lane socket bound to etherType with filter.
func listenLane(ifi *net.Interface, etherType int, filter []bpf.RawInstruction, bufSize, maxBatch int) (*lane, error) {
	conn, err := packet.Listen(ifi, packet.Raw, etherType, &packet.Config{Filter: filter})
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
	return &lane{conn: conn, rc: rc, rx: mmsg.NewRecvAux(maxBatch)}, nil // PACKET_AUXDATA (setRecvOpts)
}

// joinLane opens the lane as the second member of a fanout group with the
// ring socket. Until it has joined, the lane's filter drops everything (a
// frame it read before would also have reached the ring); once it has, the
// group's program alone decides and the filter goes.
// On failure nothing is left changed but the ring socket's group, which
// the caller's fallback does not mind: a group of one hands everything to
// its one member, whose own filter still applies.
func joinLane(ifi *net.Interface, ringRC syscall.RawConn, mask uint16, bufSize, maxBatch int, all bool) (*lane, error) {
	l, err := listenLane(ifi, ethPAll, classFilter(0, 0, 0), bufSize, maxBatch)
	if err != nil {
		return nil, err
	}
	var id int
	serr := control(ringRC, func(fd int) error {
		if v, e := unix.GetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT); e == nil && v != 0 {
			id = v & 0xffff // already in the group (a second lane is not opened; kept for safety)
			return nil
		}
		if e := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT,
			(fanoutFlags|unix.PACKET_FANOUT_FLAG_UNIQUEID)<<16); e != nil {
			return os.NewSyscallError("setsockopt PACKET_FANOUT", e)
		}
		v, e := unix.GetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT)
		if e != nil {
			return os.NewSyscallError("getsockopt PACKET_FANOUT", e)
		}
		id = v & 0xffff
		return setFanoutProg(fd, mask, all, 1)
	})
	if serr == nil {
		serr = control(l.rc, func(fd int) error {
			if e := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, id|fanoutFlags<<16); e != nil {
				return os.NewSyscallError("setsockopt PACKET_FANOUT (lane)", e)
			}
			return nil
		})
	}
	if serr == nil {
		serr = control(l.rc, detachFilter)
	}
	if serr != nil {
		_ = l.conn.Close()
		return nil, serr
	}
	return l, nil
}

// detachFilter removes the socket filter of fd.
func detachFilter(fd int) error {
	if e := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0); e != nil {
		return os.NewSyscallError("setsockopt SO_DETACH_FILTER", e)
	}
	return nil
}

// setFanoutProg installs the group program through a member's fd.
func setFanoutProg(fd int, mask uint16, all bool, laneIdx uint32) error {
	raw := fanoutProg(mask, all, laneIdx)
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if e := unix.SetsockoptSockFprog(fd, unix.SOL_PACKET, unix.PACKET_FANOUT_DATA, &prog); e != nil {
		return os.NewSyscallError("setsockopt PACKET_FANOUT_DATA", e)
	}
	return nil
}

// control runs f on rc's fd and returns the first error of either.
func control(rc syscall.RawConn, f func(fd int) error) error {
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// CanWidenLane reports whether SetLaneAll can move every frame to the lane
// (a lane in a fanout group with the ring).
func (s *Socket) CanWidenLane() bool { return s.fanout }

// SetLaneAll moves every frame, of any EtherType, to the lane when all is
// set, and back to the ring but for the lane's own classes (Options)
// otherwise. While traffic is sparse a frame on the ring waits for its
// block's timeout, and on the lane it does not: not only PRISM frames
// but the TCP of the ranks' runtime channel crosses the switch. At high
// rates the ring's one wakeup per block is cheaper. Frames already queued
// stay where they are, so frames in flight across a switch may be
// reordered. Safe for concurrent use; without a fanout lane it returns an
// error.
func (s *Socket) SetLaneAll(all bool) error {
	if !s.fanout {
		return errors.New("afpacket: no lane in a fanout group")
	}
	s.wideMu.Lock()
	defer s.wideMu.Unlock()
	if s.isClosed() {
		return net.ErrClosed
	}
	if all == s.wide {
		return nil
	}
	if s.lazy && !s.ringReady.Load() {
		if !all {
			if s.ringFailed {
				return errors.New("afpacket: the receive ring could not be mapped; the lane keeps every frame")
			}
			// The reader maps the ring (preRing) and then installs the
			// program for s.wide; wake it if it waits for frames.
			s.ringWant.Store(true)
			_ = s.conn.SetReadDeadline(time.Now())
		}
		s.wide = all
		return nil
	}
	if err := control(s.rc, func(fd int) error { return setFanoutProg(fd, s.laneMask, all, s.laneIdx) }); err != nil {
		return err
	}
	s.wide = all
	return nil
}

// preRing reads the socket of a lazy ring before the ring exists (ringMu
// held): what is queued on it (frames that came before it joined the
// group), then, once SetLaneAll has asked for the ring, the ring is mapped
// (done false: read it). done with n 0 and a nil error never happens.
func (s *Socket) preRing(bufs [][]byte, sizes []int) (done bool, n, truncated int, err error) {
	if !s.ringWant.Load() {
		n, truncated, err = s.recvmmsg(s.rc, s.rx, bufs, sizes)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false, 0, 0, nil // SetLaneAll woke us
		}
		return true, n, truncated, err
	}
	// Frames queued before the ring would be stranded by it: read them now.
	if len(bufs) > s.rx.Max() {
		bufs = bufs[:s.rx.Max()]
	}
	s.rx.Prepare(bufs)
	_ = s.rc.Control(func(fd uintptr) { s.rx.Read(fd) })
	if k, errno := s.rx.Result(); errno == 0 && k > 0 {
		for i := 0; i < k; i++ {
			if sizes[i] = s.rx.Size(i, len(bufs[i])); sizes[i] == 0 {
				truncated++
			}
		}
		truncated += s.csum.completeAux(s.rx, bufs, sizes, k)
		return true, k, truncated, nil
	}
	s.makeRing()
	return false, 0, 0, nil
}

// MapRing maps a lazy ring at once, for a caller about to narrow the lane
// before anything reads the socket (SetLaneAll(false) otherwise leaves the
// mapping to the reader, and frames keep taking the lane until it has).
// Without a lazy ring it does nothing.
func (s *Socket) MapRing() error {
	s.ringMu.Lock()
	defer s.ringMu.Unlock()
	if !s.lazy || s.ring != nil || s.isClosed() {
		return nil
	}
	s.makeRing()
	if !s.ringReady.Load() {
		return errors.New("afpacket: the receive ring could not be mapped")
	}
	return nil
}

// makeRing maps the lazy ring (reader, ringMu held). On failure the socket
// stays ringless and SetLaneAll(false) reports it.
func (s *Socket) makeRing() {
	s.wideMu.Lock()
	defer s.wideMu.Unlock()
	s.ringWant.Store(false)
	_ = s.conn.SetReadDeadline(time.Time{})
	var r *ring
	err := control(s.rc, func(fd int) (e error) {
		r, e = setupRing(fd, s.ringBytes, s.ringTov, s.ifi.MTU, &s.csum, &s.held)
		return
	})
	if err != nil {
		s.ringFailed, s.wide = true, true
		return
	}
	// Mapping the ring took the socket out of the group and back in at
	// the end (packet_set_ring): the lane is member 0 now. Until the
	// program below says so, lane frames reach the ring, where they are
	// read all the same.
	s.laneIdx = 0
	_ = control(s.rc, func(fd int) error { return setFanoutProg(fd, s.laneMask, s.wide, s.laneIdx) })
	s.ring = r
	s.ringWait = func(uintptr) bool { return r.ready() }
	s.ringReady.Store(true)
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
