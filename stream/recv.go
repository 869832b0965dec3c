// This file owns the receiver side of a direct stream: admission of
// out-of-order intervals inside a bounded window, duplicate recognition, the
// committed watermark, holes and credits.

package stream

import ()

// Verdict is Admit's decision.
type Verdict uint8

const (
	_ Verdict = iota
	// Accepted: new data inside the window; the caller applies it.
	Accepted
	// Duplicate: identical to data already accepted; ACK, do not apply.
	Duplicate
	// Invalid: overlaps accepted data under another Packet ID, reuses a
	// Packet ID for other bytes or another range, or lies outside the vector.
	Invalid
	// NoCredit: valid but outside the window's interval, byte or element
	// bounds; the sender retries later.
	NoCredit
)

func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Duplicate:
		return "duplicate"
	case Invalid:
		return "invalid"
	case NoCredit:
		return "no_credit"
	}
	return "verdict(?)"
}

// RecvConfig configures a RecvWindow.
type RecvConfig struct {
	// Name identifies the stream in introspection.
	Name string
	// VectorLen is the operation's vector length (elements, >= 1).
	VectorLen uint32
	// Intervals bounds the out-of-order intervals held above the watermark
	// (>= 1). Committed data is the consumer's (the engine has accumulated
	// it, a rank has copied it), so it holds no interval or byte credit;
	// what it still occupies is bounded by Elements.
	Intervals int
	// Bytes bounds the frame bytes of those intervals (0 = unbounded).
	Bytes int
	// Elements bounds the element span: an interval must end within Elements
	// of the release point (0 = unbounded), which the consumer moves with
	// Release once it has freed the storage below it. It must hold one
	// maximal packet.
	Elements uint32
	// MaxFrame is the largest frame size the stream admits. Out-of-order
	// intervals leave room for one such frame and one interval, so the frame
	// that closes the first hole is always admissible (default 1514).
	MaxFrame int
	// MinRoom is the most elements one frame of this stream can carry:
	// Credits grants at most (free element span)/MinRoom intervals, so a
	// sender that respects the credit never sends a frame the element bound
	// refuses (0 = credits count intervals only).
	MinRoom uint32
	// History is how many committed intervals are remembered to verify
	// duplicates of already committed data (default Intervals). Older ones
	// below the watermark are acknowledged as stale duplicates unverified.
	History int
}

type recvInterval struct {
	first, end uint32
	pid        uint32
	bytes      int32
	hash       uint64
}

// RecvWindow is the receive state of one direct stream. Not safe for
// concurrent use. Its metadata is bounded by the window, never by the vector.
type RecvWindow struct {
	cfg RecvConfig

	pending      []recvInterval // sorted by first, disjoint, all above committed
	pendingBytes int

	// hist is a ring of recently committed intervals, for duplicates.
	hist     []recvInterval
	histHead int // oldest
	histN    int
	// histMaxPID is the largest Packet ID ever pushed into hist: a frame
	// at or above the watermark under a newer Packet ID cannot match any
	// history entry, so the in-order case skips the scan.
	histMaxPID uint32

	committed uint32
	released  uint32
	maxEnd    uint32
}

// NewRecvWindow allocates the window's bounded metadata.
func NewRecvWindow(cfg RecvConfig) *RecvWindow {
	if cfg.Intervals < 1 {
		cfg.Intervals = 1
	}
	if cfg.History <= 0 {
		cfg.History = cfg.Intervals
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = 1514
	}
	return &RecvWindow{
		cfg:     cfg,
		pending: make([]recvInterval, 0, cfg.Intervals),
		hist:    make([]recvInterval, cfg.Intervals+cfg.History),
	}
}

// Name returns RecvConfig.Name.
func (r *RecvWindow) Name() string { return r.cfg.Name }

// Admit decides what to do with a frame carrying [first, first+count) under
// Packet ID pid, of size bytes and content hash hash, and records it when
// Accepted. It never allocates.
func (r *RecvWindow) Admit(pid, first, count uint32, bytes int, hash uint64) Verdict {
	end := first + count
	if count == 0 || end < first || end > r.cfg.VectorLen {
		return Invalid
	}
	for i := range r.pending {
		if v, hit := match(&r.pending[i], pid, first, end, hash); hit {
			return v
		}
	}
	scan := r.histN
	if first >= r.committed && pid > r.histMaxPID {
		scan = 0
	}
	for i := 0; i < scan; i++ {
		if v, hit := match(&r.hist[(r.histHead+i)%len(r.hist)], pid, first, end, hash); hit {
			return v
		}
	}
	if end <= r.committed {
		return Duplicate // older than our history: stale retransmission
	}
	if first < r.committed {
		return Invalid // straddles committed data under an unknown identity
	}
	held := len(r.pending)
	heldBytes := r.pendingBytes
	if first != r.committed {
		// Keep one interval and one frame of room for the frame at the
		// watermark: without it, out-of-order data could fill the window and
		// the hole that blocks the release point could never close.
		held++
		heldBytes += r.cfg.MaxFrame
	}
	if held >= r.cfg.Intervals {
		return NoCredit
	}
	if r.cfg.Bytes > 0 && heldBytes+bytes > r.cfg.Bytes {
		return NoCredit
	}
	if r.cfg.Elements > 0 && uint64(end) > uint64(r.released)+uint64(r.cfg.Elements) {
		return NoCredit
	}
	// Insert sorted.
	iv := recvInterval{first: first, end: end, pid: pid, bytes: int32(bytes), hash: hash}
	i := len(r.pending)
	r.pending = r.pending[:i+1]
	for i > 0 && r.pending[i-1].first > first {
		r.pending[i] = r.pending[i-1]
		i--
	}
	r.pending[i] = iv
	r.pendingBytes += bytes
	r.maxEnd = max(r.maxEnd, end)
	// Advance the watermark over contiguous intervals.
	k := 0
	for k < len(r.pending) && r.pending[k].first == r.committed {
		p := r.pending[k]
		r.committed = p.end
		r.pendingBytes -= int(p.bytes)
		r.pushHist(p)
		k++
	}
	if k > 0 {
		n := copy(r.pending, r.pending[k:])
		r.pending = r.pending[:n]
	}
	return Accepted
}

// match compares a stored interval with a new frame: hit reports that the
// stored interval decides the verdict.
func match(s *recvInterval, pid, first, end uint32, hash uint64) (Verdict, bool) {
	if s.pid == pid {
		if s.first == first && s.end == end && s.hash == hash {
			return Duplicate, true
		}
		return Invalid, true
	}
	if first < s.end && s.first < end {
		return Invalid, true
	}
	return 0, false
}

func (r *RecvWindow) pushHist(iv recvInterval) {
	if r.histN == len(r.hist) {
		r.histHead = (r.histHead + 1) % len(r.hist)
		r.histN--
	}
	r.hist[(r.histHead+r.histN)%len(r.hist)] = iv
	r.histN++
	r.histMaxPID = max(r.histMaxPID, iv.pid)
}

// Release tells the window that the consumer no longer needs data below upTo
// (clamped to the watermark): the element window's base moves to it.
func (r *RecvWindow) Release(upTo uint32) {
	upTo = min(upTo, r.committed)
	if upTo <= r.released {
		return
	}
	r.released = upTo
}

// Committed returns the watermark: every element below it is accepted.
func (r *RecvWindow) Committed() uint32 { return r.committed }

// Released returns the release point (the element window's base).
func (r *RecvWindow) Released() uint32 { return r.released }

// HighestEnd returns the end of the highest accepted interval.
func (r *RecvWindow) HighestEnd() uint32 { return max(r.maxEnd, r.committed) }

// Pending returns the number of out-of-order intervals held above the
// watermark.
func (r *RecvWindow) Pending() int { return len(r.pending) }

// Holes writes up to len(dst) missing ranges between the watermark and the
// highest accepted interval, ascending, and returns how many it wrote.
func (r *RecvWindow) Holes(dst []Hole) int {
	n := 0
	at := r.committed
	for i := range r.pending {
		if n == len(dst) {
			break
		}
		p := &r.pending[i]
		if p.first > at {
			dst[n] = Hole{Start: at, End: p.first}
			n++
		}
		at = p.end
	}
	return n
}

// Credits returns the free intervals and bytes the window can still take (for
// PROGRESS). Bytes is clamped to 0..2^32-1 and is MaxUint32 when unbounded.
func (r *RecvWindow) Credits() (intervals int, bytes uint32) {
	intervals = max(0, r.cfg.Intervals-len(r.pending))
	reserve := 0
	if len(r.pending) > 0 {
		// A hole is open: Admit keeps one interval and one frame of room
		// for the frame that closes it (a retransmission, which needs no
		// credit), so a new frame, above the hole, has that much less.
		// Advertising the reserve let a sender that obeyed the credits send
		// a frame Admit then refused (NO_CREDIT).
		intervals = max(0, intervals-1)
		reserve = r.cfg.MaxFrame
	}
	if r.cfg.Elements > 0 && r.cfg.MinRoom > 0 && r.HighestEnd() < r.cfg.VectorLen {
		// Grant no more frames than the element window can take, each
		// counted at its largest size: a sender that respects the credit
		// never sends a frame the element bound would refuse.
		limit := uint64(r.released) + uint64(r.cfg.Elements)
		room := uint64(0)
		if top := uint64(r.HighestEnd()); limit > top {
			room = limit - top
		}
		intervals = min(intervals, int(room/uint64(r.cfg.MinRoom)))
	}
	if r.cfg.Bytes <= 0 {
		return intervals, ^uint32(0)
	}
	return intervals, uint32(max(0, r.cfg.Bytes-r.pendingBytes-reserve))
}

// Intervals returns the configured interval bound (the most Credits grants).
func (r *RecvWindow) Intervals() int { return r.cfg.Intervals }

// Done reports completion: the watermark reached the vector length with
// nothing pending.
func (r *RecvWindow) Done() bool { return r.committed == r.cfg.VectorLen && len(r.pending) == 0 }

// VectorLen returns RecvConfig.VectorLen.
func (r *RecvWindow) VectorLen() uint32 { return r.cfg.VectorLen }
