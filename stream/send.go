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
	// MinRetransmitGap is the least time between two transmissions of one
	// frame for loss-driven retransmission (default 0). Loss is inferred only
	// from a PROGRESS naming a frame sent after the lost one's last
	// transmission, which already waits one round trip: every arriving
	// packet triggers a PROGRESS repeating the same holes, and this rule
	// (not a fixed gap) is what keeps one hole from being resent per
	// PROGRESS.
	MinRetransmitGap int64
	// Deadline: Check reports a SilentError when frames await ACK and the
	// peer has been silent longer than this (default DefaultDeadline; < 0
	// disables).
	Deadline int64
	// FirstPacketID is the first Packet ID assigned (default 1; Packet ID 0
	// is reserved for timer-driven PROGRESS).
	FirstPacketID uint32
	// Buffer, when it holds at least ReplayDepth*FrameSize bytes, is used
	// for the replay buffers instead of a new allocation: an owner that
	// runs stream after stream of one shape (a switch, operation after
	// operation) hands back the previous window's Buffer(). Its contents
	// do not matter: a frame is written whole before it is sent.
	Buffer []byte
}

type sendEntry struct {
	buf        []byte
	n          int
	pid        uint32
	first, end uint32
	sentAt     int64  // last transmission
	tx         uint64 // transmission sequence of the last transmission
	firstTx    uint64 // transmission sequence of the first transmission
	sends      uint32
	lost       bool // to be retransmitted (inferred loss or credit returned)
	sacked     bool // the peer holds it above a hole: never resend
	rejected   bool // the peer refused it for lack of credit
	// rejCommitted, rejCredits: the peer's watermark and interval credits
	// in the PROGRESS that refused it; it is resent only once the peer
	// shows more room than that.
	rejCommitted uint32
	rejCredits   int
}

// SendWindow is the replay buffer of one sending direct stream. Not safe for
// concurrent use.
type SendWindow struct {
	cfg SendConfig
	// ring is circular: at(0)..at(n-1) are the unacknowledged frames in
	// Packet ID order, the other slots are free. Acknowledged frames at the
	// front are released by moving head; others (a relay sends frames out of
	// element order, so acknowledged frames are not always the oldest) by
	// compacting, swapping entries and so their pooled buffers, never
	// copying frame bytes.
	ring    []sendEntry
	head    int
	n       int
	nextPID uint32

	// ordered: the outstanding frames' ends rise with their Packet IDs (a
	// stream sent in element order), so what a watermark releases is a
	// prefix. resentN counts outstanding frames sent more than once: while
	// it is 0 transmission order is Packet ID order too. With both, a
	// PROGRESS touches only the frames up to the one it names instead of
	// the whole window (measured: the window scans were 6% of a switch's
	// CPU in an FP32 ALLREDUCE at 256 frames in flight). anyLost: some
	// frame may be marked lost (NextRetransmit's scan would find one).
	// general turns the shortcuts off (tests compare the two).
	ordered bool
	resentN int
	anyLost bool
	general bool

	reserved bool
	resFirst uint32
	resEnd   uint32

	committed uint32 // peer's committed watermark
	// sentHi is the largest end of any frame sent (sentAny: one was):
	// no PROGRESS can truthfully acknowledge beyond it (ApplyProgress).
	sentHi    uint32
	sentAny   bool
	reflected uint32 // newest Packet ID a PROGRESS named
	creditI   int    // interval credits from the newest PROGRESS (<0 = unlimited)
	creditB   int    // byte credits (<0 = unlimited)
	// peerHole: the newest PROGRESS reported a hole at the watermark, so
	// the peer keeps room for the frame that closes it (CanSend).
	peerHole   bool
	afterN     int // unacked frames sent after reflected
	afterBytes int
	// rejectedN counts frames the peer refused for credit and that wait for
	// room: while any does, no new frame is admitted (it would be refused
	// for the same reason, and the refused ones are older).
	rejectedN int

	unackedBytes int
	lastHeard    int64
	scan         int

	// Retransmission timing (RFC 6298 estimator, Karn's rule; RACK-style
	// time-ordered loss inference, RFC 8985). tx numbers transmissions;
	// rackTx is the newest transmission the peer has been seen to process:
	// an unacknowledged frame transmitted before it was lost (the path and
	// the peer's processing are FIFO).
	tx         uint64
	rackTx     uint64
	srtt       int64 // 0 = no sample yet
	rttvar     int64
	backoff    uint  // doublings of the RTO since the peer last made progress
	timerStart int64 // the retransmission timer runs from here

	retransmits uint64
	timeouts    uint64
}

// NewSendWindow allocates the window's buffers (unless SendConfig.Buffer
// provides them); it is the only allocation a stream's sender makes.
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
	if cfg.MinRetransmitGap < 0 {
		cfg.MinRetransmitGap = 0
	}
	if cfg.Deadline == 0 {
		cfg.Deadline = DefaultDeadline
	}
	if cfg.FirstPacketID == 0 {
		cfg.FirstPacketID = 1
	}
	w := &SendWindow{cfg: cfg, ring: make([]sendEntry, cfg.ReplayDepth)}
	pool := cfg.Buffer
	if len(pool) < cfg.ReplayDepth*cfg.FrameSize {
		pool = make([]byte, cfg.ReplayDepth*cfg.FrameSize)
	}
	w.cfg.Buffer = pool[:cfg.ReplayDepth*cfg.FrameSize]
	for i := range w.ring {
		w.ring[i].buf = pool[i*cfg.FrameSize : (i+1)*cfg.FrameSize : (i+1)*cfg.FrameSize]
	}
	w.nextPID = cfg.FirstPacketID
	w.ordered = true
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

// Buffer returns the memory of the replay buffers (ReplayDepth*FrameSize
// bytes), for SendConfig.Buffer of a later window once this one is no
// longer used: after that, this window must not be touched.
func (w *SendWindow) Buffer() []byte { return w.cfg.Buffer }

// CanSend reports whether a new frame of size bytes covering [first, end)
// would be admitted now.
//
// A frame that closes the peer's lowest hole (first == Committed while the
// peer reports a hole there) needs no credit: the receiver keeps one
// interval and one full frame of room for it, and its credits leave that
// room out. (With no hole there is no such room: a receiver with nothing
// above its watermark that grants no credit is bound by its element
// window, and refuses.) Only a retransmission used to be let in, but a relay
// forwards the frame that closes its outputs' hole as a new frame: it
// never had it before. Withheld for credit, it never went, the outputs'
// receivers kept their windows full of the frames above the hole, and
// the relay, its outputs out of credit, refused the frame from its parent
// (measured: fat-tree with 5% loss, a hang in 2 of 3 ALLREDUCEs).
func (w *SendWindow) CanSend(now int64, first, end uint32, size int) bool {
	if w.n >= len(w.ring) || size > w.cfg.FrameSize {
		return false
	}
	if w.cfg.Elements > 0 && uint64(end) > uint64(w.committed)+uint64(w.cfg.Elements) {
		return false
	}
	if first == w.committed && end > first && w.peerHole {
		return true
	}
	if w.rejectedN > 0 {
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
	if !w.CanSend(now, first, end, size) {
		return nil, 0, false
	}
	w.reserved, w.resFirst, w.resEnd = true, first, end
	return w.at(w.n).buf, w.nextPID, true
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
		w.timerStart = now
	}
	if w.n == 0 {
		w.ordered = true
	} else if w.resEnd < w.at(w.n-1).end {
		w.ordered = false
	}
	e := w.at(w.n)
	e.n, e.pid, e.first, e.end = n, w.nextPID, w.resFirst, w.resEnd
	w.sentHi, w.sentAny = max(w.sentHi, w.resEnd), true
	w.tx++
	e.sentAt, e.tx, e.firstTx, e.sends = now, w.tx, w.tx, 1
	e.lost, e.sacked, e.rejected = false, false, false
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

// at returns the i-th outstanding frame (i == n: the next free slot).
func (w *SendWindow) at(i int) *sendEntry {
	j := w.head + i
	if j >= len(w.ring) {
		j -= len(w.ring)
	}
	return &w.ring[j]
}

// find returns the index of the outstanding frame with Packet ID pid, or
// -1. Outstanding frames are in Packet ID order (IDs compared modulo 2^32:
// a window is far smaller than 2^31), so it bisects.
func (w *SendWindow) find(pid uint32) int {
	i := w.after(pid - 1)
	if i < w.n && w.at(i).pid == pid {
		return i
	}
	return -1
}

// after returns the index of the first outstanding frame whose Packet ID is
// after pid (w.n if none).
func (w *SendWindow) after(pid uint32) int {
	lo, hi := 0, w.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int32(w.at(m).pid-pid) > 0 {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// Frame returns the stored bytes of an unacknowledged frame.
func (w *SendWindow) Frame(pid uint32) ([]byte, bool) {
	if i := w.find(pid); i >= 0 {
		e := w.at(i)
		return e.buf[:e.n], true
	}
	return nil, false
}

// OnProgress applies one PROGRESS from the peer: pid is the Packet ID that
// triggered it (0 for a timer-driven one), committed the peer's watermark,
// holes the missing ranges above it, and the credits the peer has free.
// Frames with first+count <= committed are released. A frame is resent
// (NextRetransmit) only when loss is evident: it overlaps a hole or is not
// known to be held, and the peer has since processed a frame transmitted
// after it. Frames the peer holds above a hole are never resent. The named
// frame is taken as received; OnRejected corrects that for NO_CREDIT.
func (w *SendWindow) OnProgress(now int64, pid, committed uint32, holes []Hole, intervalCredits, byteCredits int) {
	w.onProgress(now, pid, committed, holes, intervalCredits, byteCredits, false)
}

// OnProgressAccepted is OnProgress for a PROGRESS whose status says frame
// pid was accepted (OK or DUPLICATE). The peer's holes then cover every
// element it lacks below the end of pid's range, unless the list is full
// (MaxHoles: it may stop short), so every frame ending there that overlaps
// no hole is held, not only those below the last hole. Without this, the
// frames accepted between the last hole and pid, sent before pid, looked
// lost and were resent: eleven duplicates per ring_full drop in a
// measured KULISCH run.
func (w *SendWindow) OnProgressAccepted(now int64, pid, committed uint32, holes []Hole, intervalCredits, byteCredits int) {
	w.onProgress(now, pid, committed, holes, intervalCredits, byteCredits, len(holes) < MaxHoles)
}

func (w *SendWindow) onProgress(now int64, pid, committed uint32, holes []Hole, intervalCredits, byteCredits int, heldToPID bool) {
	w.lastHeard = now
	progressed := committed > w.committed
	if progressed {
		w.committed = committed
	}
	// The frame that triggered this PROGRESS: an RTT sample (first
	// transmissions only: an ACK of a resent frame is ambiguous) and the
	// newest transmission the peer is known to have processed.
	var named *sendEntry
	if pid != 0 {
		if i := w.find(pid); i >= 0 {
			named = w.at(i)
		}
	}
	if named != nil {
		e := named
		// Which transmission the peer processed is known only for a
		// frame sent once; otherwise the first is the safe bound (a
		// late answer to the original must not condemn every frame
		// sent before the retransmission).
		tx := e.firstTx
		if e.sends == 1 {
			w.sample(now - e.sentAt)
			tx = e.tx
		}
		w.rackTx = max(w.rackTx, tx)
		if !e.sacked && !e.rejected {
			e.sacked, e.lost = true, false
			progressed = true
		}
	}
	// Above the last hole's end nothing is known; below it every range
	// that is not a hole is held by the peer.
	known := w.committed
	if len(holes) > 0 {
		known = max(known, holes[len(holes)-1].End)
	}
	if heldToPID && named != nil {
		known = max(known, named.end)
	}
	w.release()
	// A PROGRESS reflects every frame up to the one that triggered it; frames
	// sent later are still in flight and consume the new credits.
	if pid != 0 && int32(w.nextPID-pid) > 0 && (w.reflected == 0 || int32(pid-w.reflected) > 0) {
		w.reflected = pid
	}
	w.creditI, w.creditB = intervalCredits, byteCredits
	w.peerHole = len(holes) > 0 && holes[0].Start == w.committed
	// The frames sent after the reflected one are a suffix (Packet ID
	// order); what it leaves out is usually nothing, the frames up to the
	// named one having just been released.
	r := 0
	if w.reflected != 0 {
		r = w.after(w.reflected)
	}
	w.afterN, w.afterBytes = w.n-r, w.unackedBytes
	for i := 0; i < r; i++ {
		w.afterBytes -= w.at(i).n
	}
	// Only frames held below known or transmitted before rackTx change
	// state here. In an ordered stream with no resent frame outstanding
	// both are prefixes, and the loop stops at the first frame that is
	// neither.
	short := !w.general && w.ordered && w.resentN == 0
	for i := 0; i < w.n; i++ {
		e := w.at(i)
		if short && e.end > known && e.tx >= w.rackTx {
			break
		}
		if e.rejected || e.sacked {
			continue // rejected: below, once the credit left for them is known
		}
		inHole := false
		for _, h := range holes {
			if h.Start >= e.end {
				break
			}
			if h.End > e.first {
				inHole = true
				break
			}
		}
		if !inHole && e.end <= known {
			// Held above a hole; its own PROGRESS was lost or is late.
			e.sacked, e.lost = true, false
			progressed = true
			continue
		}
		if e.tx < w.rackTx {
			e.lost = true
			w.anyLost = true
		}
	}
	// Refused for credit, not lost: resend, oldest first and no more than
	// the credit left after the frames in flight, once the peer shows more
	// room than when it refused (its watermark moved, its credits grew, or
	// it sent a window update). Credit alone is not enough: a receiver may
	// advertise credit it cannot use for a refused frame (room it keeps for
	// the frame that closes a hole, an element bound), and each refusal is
	// itself such a PROGRESS. Re-arming every refused frame on every
	// PROGRESS that grants credit resent the whole refused set for each
	// refusal and for each one-frame window update (measured: 11800
	// resends of a rank's 2900 frames behind a slow KULISCH leaf).
	// rejectedN may count frames just released: it is recounted here.
	if w.rejectedN > 0 || w.general {
		budget := intervalCredits - w.afterN
		bytesLeft := byteCredits - w.afterBytes
		w.rejectedN = 0
		for i := 0; i < w.n; i++ {
			e := w.at(i)
			if !e.rejected {
				continue
			}
			more := pid == 0 || w.committed > e.rejCommitted || intervalCredits > e.rejCredits
			if more && budget > 0 && (byteCredits < 0 || e.n <= bytesLeft) {
				// The credit is the resend's from now on: a new frame sent
				// before it would take it and be refused in turn.
				e.rejected, e.lost = false, true
				w.anyLost = true
				budget--
				bytesLeft -= e.n
				w.afterN++
				w.afterBytes += e.n
				continue
			}
			w.rejectedN++
		}
	}
	if progressed {
		// The peer is alive and moving: end backoff, restart the timer.
		w.backoff = 0
		w.timerStart = now
	}
}

// release drops the frames the peer's watermark covers, keeping the rest in
// Packet ID order: from the front by moving head when the stream is
// ordered, else by compaction, which also finds out whether what is left is
// ordered again.
func (w *SendWindow) release() {
	if w.ordered && !w.general {
		k := 0
		for ; k < w.n; k++ {
			e := w.at(k)
			if e.end > w.committed {
				break
			}
			w.unackedBytes -= e.n
			if e.sends > 1 {
				w.resentN--
			}
		}
		if k > 0 {
			w.head += k
			if w.head >= len(w.ring) {
				w.head -= len(w.ring)
			}
			w.n -= k
			w.scan = 0
		}
		return
	}
	k, resent, ordered := 0, 0, true
	for i := 0; i < w.n; i++ {
		e := w.at(i)
		if e.end <= w.committed {
			w.unackedBytes -= e.n
			continue
		}
		if i != k {
			d := w.at(k)
			*e, *d = *d, *e
		}
		d := w.at(k)
		if d.sends > 1 {
			resent++
		}
		if k > 0 && d.end < w.at(k-1).end {
			ordered = false
		}
		k++
	}
	if k != w.n {
		w.n = k
		w.scan = 0
	}
	w.resentN, w.ordered = resent, ordered
}

// sample feeds one round-trip time into the RFC 6298 estimator.
func (w *SendWindow) sample(rtt int64) {
	rtt = max(rtt, 1)
	if w.srtt == 0 {
		w.srtt, w.rttvar = rtt, rtt/2
		return
	}
	d := w.srtt - rtt
	if d < 0 {
		d = -d
	}
	w.rttvar += (d - w.rttvar) / 4
	w.srtt += (rtt - w.srtt) / 8
}

// RTO returns the current retransmission timeout: the estimated round trip
// plus four deviations, at least SendConfig.RTO, doubled per unanswered
// timeout, at most MaxRTO.
func (w *SendWindow) RTO() int64 {
	rto := w.cfg.RTO
	if w.srtt > 0 {
		rto = max(rto, w.srtt+4*w.rttvar)
	}
	for i := uint(0); i < w.backoff && rto < w.cfg.MaxRTO; i++ {
		rto *= 2
	}
	return min(rto, w.cfg.MaxRTO)
}

// SRTT returns the smoothed round-trip time (0 before the first sample).
func (w *SendWindow) SRTT() int64 { return w.srtt }

// OnRejected records that the peer refused frame pid for lack of credit
// (PROGRESS status NO_CREDIT, applied after OnProgress with that PROGRESS):
// it is resent as soon as a later PROGRESS shows more room than that one
// (a higher watermark, more interval credit, or a window update with Packet
// ID 0), instead of after its timeout.
func (w *SendWindow) OnRejected(pid uint32) {
	i := w.find(pid)
	if i < 0 {
		return
	}
	e := w.at(i)
	if !e.rejected {
		w.rejectedN++
	}
	e.rejected = true
	e.sacked, e.lost = false, false
	e.rejCommitted, e.rejCredits = w.committed, max(w.creditI, 0)
}

// NextRetransmit returns the next frame due for retransmission and marks it
// sent at now; call it until ok is false. The caller may set the frame's
// RETRANSMIT flag in place. Due are frames whose loss is evident (see
// OnProgress) and, when the peer has made no progress for RTO, the single
// oldest transmission not known to be held: a probe, after which the timeout
// doubles. A busy peer therefore costs one probe per RTO, not a resent
// window, and a probe's answer reveals the rest of a lost tail.
func (w *SendWindow) NextRetransmit(now int64) (frame []byte, ok bool) {
	if w.scan > 0 || w.anyLost || w.general {
		// A scan from the start clears anyLost; a lost frame it leaves
		// (held back by MinRetransmitGap) sets it again.
		if w.scan == 0 {
			w.anyLost = false
		}
		for ; w.scan < w.n; w.scan++ {
			e := w.at(w.scan)
			if !e.lost {
				continue
			}
			if now-e.sentAt < w.cfg.MinRetransmitGap {
				w.anyLost = true
				continue
			}
			w.scan++
			return w.resend(now, e), true
		}
	}
	w.scan = 0
	if w.n == 0 || now-w.timerStart < w.RTO() {
		return nil, false
	}
	var oldest *sendEntry
	for i := 0; i < w.n; i++ {
		e := w.at(i)
		if !e.sacked && (oldest == nil || e.tx < oldest.tx) {
			oldest = e
		}
	}
	if oldest == nil {
		return nil, false
	}
	w.timeouts++
	w.backoff++
	w.timerStart = now
	return w.resend(now, oldest), true
}

func (w *SendWindow) resend(now int64, e *sendEntry) []byte {
	w.tx++
	e.lost = false
	e.sentAt, e.tx = now, w.tx
	if e.sends == 1 {
		w.resentN++
	}
	e.sends++
	w.retransmits++
	return e.buf[:e.n]
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

// Excuse moves the silence clock on by gap (never past now): the sender's
// process did not run for gap, so the peer's silence then says nothing
// about the peer.
func (w *SendWindow) Excuse(gap, now int64) {
	w.lastHeard = min(w.lastHeard+gap, now)
}

// Free returns the replay slots not holding an unacknowledged frame.
func (w *SendWindow) Free() int { return len(w.ring) - w.n }

// Room returns how many more new frames, and how many bytes, the window
// would send right now: the free replay slots bounded by the peer's
// remaining credits (bytes < 0 when the peer set no byte bound). A relay
// advertises no more than this upstream, so a frame it accepts always has a
// slot to go on in; 0 while refused frames wait for room.
func (w *SendWindow) Room() (frames, bytes int) {
	if w.rejectedN > 0 {
		return 0, 0
	}
	frames, bytes = w.Free(), -1
	if w.creditI >= 0 {
		frames = min(frames, max(w.creditI-w.afterN, 0))
	}
	if w.creditB >= 0 {
		bytes = max(w.creditB-w.afterBytes, 0)
	}
	return frames, bytes
}

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
		e := w.at(i)
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
