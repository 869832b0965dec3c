// This file owns the sender side of a direct stream: the replay buffer of
// encoded frames awaiting acknowledgement, credit accounting and the
// retransmission timers.

package stream

import (
	"errors"
	"fmt"
)

// Hole is a missing half-open element range [Start, End) reported in PROGRESS.
type Hole struct {
	Start, End uint32
}

// MaxHoles is the number of holes one PROGRESS frame carries (docs/protocol.md
// section 7).
const MaxHoles = 32

// Defaults for SendConfig fields left zero. The RTO default is well above a
// worker's 1 ms tick and a LAN round trip, so a healthy stream never
// retransmits on timeout; MaxRTO caps backoff so a stalled peer is probed at
// least every 200 ms and a stream recovers quickly once the peer returns.
const (
	DefaultRTO      = int64(20e6)  // 20 ms
	DefaultMaxRTO   = int64(200e6) // 200 ms
	DefaultDeadline = int64(5e9)   // 5 s
)

// ErrPeerSilent is wrapped by SilentError.
var ErrPeerSilent = errors.New("stream: peer silent")

// SilentError reports a peer that sent no PROGRESS for longer than the
// deadline while frames were awaiting acknowledgement.
type SilentError struct {
	Stream   string // SendConfig.Name
	From, To uint32 // unacknowledged element range [From, To)
	Frames   int    // unacknowledged frames
	SilentNs int64  // time since the last PROGRESS (or the first send)
}

func (e *SilentError) Error() string {
	return fmt.Sprintf("stream %s: peer silent for %d ms with %d unacknowledged frames covering elements [%d, %d)",
		e.Stream, e.SilentNs/1e6, e.Frames, e.From, e.To)
}

func (e *SilentError) Unwrap() error { return ErrPeerSilent }

// SendConfig configures a SendWindow. Zero values take the documented default.
type SendConfig struct {
	// Name identifies the stream in errors, e.g. "job 7 op 3 parent stream 12".
	Name string
	// ReplayDepth is the maximum number of frames awaiting ACK (>= 1).
	ReplayDepth int
	// FrameSize is the size of each pooled buffer: the largest frame the
	// stream sends (14-byte Ethernet header + MTU).
	FrameSize int
	// Intervals and Bytes are the credits assumed before the first PROGRESS:
	// the peer's configured window (0 = unlimited until the peer says).
	Intervals int
	Bytes     int
	// Elements bounds a new frame's end relative to the peer's committed
	// watermark (0 = unbounded): the peer's element window.
	Elements uint32
	// RTO is the first retransmission timeout; each timeout doubles it for
	// that frame up to MaxRTO. Defaults DefaultRTO and DefaultMaxRTO.
	RTO, MaxRTO int64
	// MinRetransmitGap rate-limits hole-driven retransmission of one frame
	// (default RTO/2): every arriving packet triggers a PROGRESS that repeats
	// the same holes, and one retransmission per round trip is enough.
	MinRetransmitGap int64
	// Deadline: Check reports a SilentError when frames await ACK and the
	// peer has been silent longer than this (default DefaultDeadline; < 0
	// disables).
	Deadline int64
	// FirstPacketID is the first Packet ID assigned (default 1; Packet ID 0
	// is reserved for timer-driven PROGRESS).
	FirstPacketID uint32
}

type sendEntry struct {
	buf          []byte
	n            int
	pid          uint32
	first, end   uint32
	sentAt       int64
	rto          int64
	sends        uint32
	holeFlagged  bool
	rejected     bool // the peer refused it for lack of credit
	afterReflect bool // sent after the newest PROGRESS that reflected it
}

// SendWindow is the replay buffer of one sending direct stream. Not safe for
// concurrent use.
type SendWindow struct {
	cfg SendConfig
	// ring[:n] are the unacknowledged frames in Packet ID order; ring[n:]
	// are free slots. Releasing compacts by swapping entries (and so their
	// pooled buffers), never copying frame bytes: a relay sends frames out
	// of element order, so acknowledged frames are not always the oldest.
	ring    []sendEntry
	n       int
	nextPID uint32

	reserved bool
	resFirst uint32
	resEnd   uint32

	committed  uint32 // peer's committed watermark
	reflected  uint32 // newest Packet ID a PROGRESS named
	creditI    int    // interval credits from the newest PROGRESS (<0 = unlimited)
	creditB    int    // byte credits (<0 = unlimited)
	afterN     int    // unacked frames sent after reflected
	afterBytes int

	unackedBytes int
	lastHeard    int64
	scan         int

	retransmits uint64
	timeouts    uint64
}

// NewSendWindow allocates the window's buffers; it is the only allocation a
// stream's sender makes.
func NewSendWindow(cfg SendConfig) *SendWindow {
	if cfg.ReplayDepth < 1 {
		cfg.ReplayDepth = 1
	}
	if cfg.FrameSize < 64 {
		cfg.FrameSize = 14 + 1500
	}
	if cfg.RTO <= 0 {
		cfg.RTO = DefaultRTO
	}
	if cfg.MaxRTO < cfg.RTO {
		cfg.MaxRTO = max(DefaultMaxRTO, cfg.RTO)
	}
	if cfg.MinRetransmitGap <= 0 {
		cfg.MinRetransmitGap = cfg.RTO / 2
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = DefaultDeadline
	}
	if cfg.FirstPacketID == 0 {
		cfg.FirstPacketID = 1
	}
	w := &SendWindow{cfg: cfg, ring: make([]sendEntry, cfg.ReplayDepth)}
	pool := make([]byte, cfg.ReplayDepth*cfg.FrameSize)
	for i := range w.ring {
		w.ring[i].buf = pool[i*cfg.FrameSize : (i+1)*cfg.FrameSize : (i+1)*cfg.FrameSize]
	}
	w.nextPID = cfg.FirstPacketID
	w.creditI, w.creditB = -1, -1
	if cfg.Intervals > 0 {
		w.creditI = cfg.Intervals
	}
	if cfg.Bytes > 0 {
		w.creditB = cfg.Bytes
	}
	return w
}

// Name returns SendConfig.Name.
func (w *SendWindow) Name() string { return w.cfg.Name }

// FrameSize returns the size of each replay buffer.
func (w *SendWindow) FrameSize() int { return w.cfg.FrameSize }

// CanSend reports whether a new frame of size bytes covering [first, end)
// would be admitted now.
func (w *SendWindow) CanSend(now int64, end uint32, size int) bool {
	if w.n >= len(w.ring) || size > w.cfg.FrameSize {
		return false
	}
	if w.cfg.Elements > 0 && uint64(end) > uint64(w.committed)+uint64(w.cfg.Elements) {
		return false
	}
	ok := (w.creditI < 0 || w.afterN < w.creditI) && (w.creditB < 0 || w.afterBytes+size <= w.creditB)
	if !ok && w.n == 0 && now-w.lastHeard >= w.cfg.RTO {
		// Probe: with nothing outstanding the peer has no reason to send a
		// window update we might have missed; one frame restarts feedback.
		ok = true
	}
	return ok
}

// Reserve checks credits for a new frame covering [first, first+count) of at
// most size bytes and returns the pooled buffer to encode it into (len =
// FrameSize) and the Packet ID it must carry. The frame is not outstanding
// until Commit. Calling Reserve again without Commit returns the same buffer.
func (w *SendWindow) Reserve(now int64, first, count uint32, size int) (buf []byte, pid uint32, ok bool) {
	end := first + count
	if !w.CanSend(now, end, size) {
		return nil, 0, false
	}
	w.reserved, w.resFirst, w.resEnd = true, first, end
	return w.ring[w.n].buf, w.nextPID, true
}

// Commit records the reserved frame (its first n bytes) as sent at now and
// returns it for transmission.
func (w *SendWindow) Commit(now int64, n int) []byte {
	if !w.reserved {
		panic("stream: Commit without Reserve")
	}
	w.reserved = false
	if w.n == 0 {
		w.lastHeard = now // the silence clock starts with the first outstanding frame
	}
	e := &w.ring[w.n]
	e.n, e.pid, e.first, e.end = n, w.nextPID, w.resFirst, w.resEnd
	e.sentAt, e.rto, e.sends = now, w.cfg.RTO, 1
	e.holeFlagged, e.rejected, e.afterReflect = false, false, true
	w.n++
	w.nextPID++
	if w.nextPID == 0 {
		w.nextPID = 1
	}
	w.unackedBytes += n
	w.afterN++
	w.afterBytes += n
	return e.buf[:n]
}

// Frame returns the stored bytes of an unacknowledged frame.
func (w *SendWindow) Frame(pid uint32) ([]byte, bool) {
	for i := 0; i < w.n; i++ {
		if e := &w.ring[i]; e.pid == pid {
			return e.buf[:e.n], true
		}
	}
	return nil, false
}

// OnProgress applies one PROGRESS from the peer: pid is the Packet ID that
// triggered it (0 for a timer-driven one), committed the peer's watermark,
// holes the missing ranges above it, and the credits the peer has free.
// Frames with first+count <= committed are released; frames overlapping a
// hole are scheduled for retransmission.
func (w *SendWindow) OnProgress(now int64, pid, committed uint32, holes []Hole, intervalCredits, byteCredits int) {
	w.lastHeard = now
	advanced := committed > w.committed
	if advanced {
		w.committed = committed
	}
	// Release acknowledged frames, keeping the rest in Packet ID order.
	k := 0
	for i := 0; i < w.n; i++ {
		e := &w.ring[i]
		if e.end <= w.committed {
			w.unackedBytes -= e.n
			continue
		}
		if i != k {
			w.ring[i], w.ring[k] = w.ring[k], w.ring[i]
		}
		k++
	}
	if k != w.n {
		w.n = k
		w.scan = 0
	}
	// A PROGRESS reflects every frame up to the one that triggered it; frames
	// sent later are still in flight and consume the new credits.
	if pid != 0 && int32(w.nextPID-pid) > 0 && (w.reflected == 0 || int32(pid-w.reflected) > 0) {
		w.reflected = pid
	}
	w.creditI, w.creditB = intervalCredits, byteCredits
	w.afterN, w.afterBytes = 0, 0
	for i := 0; i < w.n; i++ {
		e := &w.ring[i]
		e.afterReflect = w.reflected == 0 || int32(e.pid-w.reflected) > 0
		if e.afterReflect {
			w.afterN++
			w.afterBytes += e.n
		}
		if advanced {
			e.rto = w.cfg.RTO // the peer is alive: end backoff
		}
		if e.rejected && intervalCredits > 0 {
			// Refused for credit, not lost: resend as soon as the peer
			// has room, without backoff.
			e.rejected, e.holeFlagged, e.rto = false, true, w.cfg.RTO
			continue
		}
		if now-e.sentAt < w.cfg.MinRetransmitGap {
			continue
		}
		for _, h := range holes {
			if h.Start >= e.end {
				break
			}
			if h.End > e.first {
				e.holeFlagged = true
				break
			}
		}
	}
}

// OnRejected records that the peer refused frame pid for lack of credit
// (PROGRESS status NO_CREDIT, applied after OnProgress): it is resent as soon
// as a PROGRESS grants interval credit, instead of after its timeout.
func (w *SendWindow) OnRejected(pid uint32) {
	for i := 0; i < w.n; i++ {
		if e := &w.ring[i]; e.pid == pid {
			e.rejected = true
			e.holeFlagged = false
			return
		}
	}
}

// NextRetransmit returns the next frame due for retransmission (hole-flagged
// or timed out) and marks it sent at now; call it until ok is false. The
// caller may set the frame's RETRANSMIT flag in place.
func (w *SendWindow) NextRetransmit(now int64) (frame []byte, ok bool) {
	for ; w.scan < w.n; w.scan++ {
		e := &w.ring[w.scan]
		timedOut := now-e.sentAt >= e.rto
		if !e.holeFlagged && !timedOut {
			continue
		}
		if timedOut && !e.holeFlagged {
			e.rto = min(e.rto*2, w.cfg.MaxRTO)
			w.timeouts++
		}
		e.holeFlagged = false
		e.sentAt = now
		e.sends++
		w.retransmits++
		w.scan++
		return e.buf[:e.n], true
	}
	w.scan = 0
	return nil, false
}

// Check returns a *SilentError when frames await ACK and the peer has been
// silent past the deadline.
func (w *SendWindow) Check(now int64) error {
	if w.n == 0 || w.cfg.Deadline < 0 || now-w.lastHeard <= w.cfg.Deadline {
		return nil
	}
	from, to := w.Outstanding()
	return &SilentError{Stream: w.cfg.Name, From: from, To: to, Frames: w.n, SilentNs: now - w.lastHeard}
}

// Free returns the replay slots not holding an unacknowledged frame.
func (w *SendWindow) Free() int { return len(w.ring) - w.n }

// Idle reports whether no frame awaits acknowledgement.
func (w *SendWindow) Idle() bool { return w.n == 0 }

// Unacked returns the number of frames and bytes awaiting acknowledgement.
func (w *SendWindow) Unacked() (frames, bytes int) { return w.n, w.unackedBytes }

// Outstanding returns the element range [from, to) spanned by unacknowledged
// frames (from == to when idle).
func (w *SendWindow) Outstanding() (from, to uint32) {
	if w.n == 0 {
		return w.committed, w.committed
	}
	from, to = ^uint32(0), 0
	for i := 0; i < w.n; i++ {
		e := &w.ring[i]
		from, to = min(from, e.first), max(to, e.end)
	}
	return from, to
}

// Committed returns the peer's committed watermark as last reported.
func (w *SendWindow) Committed() uint32 { return w.committed }

// Credits returns the credits the peer last advertised (-1 = not yet known
// and unlimited by configuration).
func (w *SendWindow) Credits() (intervals, bytes int) { return w.creditI, w.creditB }

// Stats returns cumulative retransmissions and how many were timeout-driven.
func (w *SendWindow) Stats() (retransmits, timeouts uint64) { return w.retransmits, w.timeouts }

// NextPacketID returns the Packet ID the next Reserve will assign.
func (w *SendWindow) NextPacketID() uint32 { return w.nextPID }
