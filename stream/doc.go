// Package stream owns the reliability state of one direct PRISM stream (one
// DATA contributor or one RESULT path between two directly bound peers): the
// sender's replay buffer and the receiver's admission window. It is shared by
// the switch engine (package engine) and the host library (ranks).
//
// It knows element ranges, Packet IDs, content hashes, credits and time. It
// must not touch frame bytes beyond storing and handing back encoded frames
// (package parser builds and decodes them), arithmetic (package kulisch),
// operation state (package engine) or sockets (package dataplane). Besides
// the standard library it imports only package parser, for the decoded
// PROGRESS that ApplyProgress reads (one reading of the statuses for the
// engine, the host library and prismd-blast), and golang.org/x/sys/cpu, to
// run Hash's AVX2 kernel where the CPU has one. Nothing here locks: a window belongs to one
// goroutine (one dataplane worker, or one rank's sender loop).
//
// # Time and units
//
// Every time is an int64 of nanoseconds on a monotonic clock chosen by the
// caller (the dataplane passes its own "now"). Elements are global vector
// positions (uint32, zero based, half-open ranges [first, first+count)).
//
// # SendWindow (sender side)
//
//	w := stream.NewSendWindow(stream.SendConfig{...})
//	buf, pid, ok := w.Reserve(now, first, count, size) // credit check + pooled buffer
//	n := encode(buf, pid)                              // caller writes the frame
//	w.Commit(now, n)                                   // frame now awaits ACK
//	tx.Send(port, w.Frame(pid))                        // or the caller's copy of buf[:n]
//	...
//	w.OnProgress(now, pid, committed, holes, intervalCredits, byteCredits)
//	for { f, ok := w.NextRetransmit(now); if !ok { break }; tx.Send(port, f) }
//	if err := w.Check(now); err != nil { /* peer silent: *SilentError */ }
//
// Buffers are allocated once per window (ReplayDepth of them, FrameSize each)
// and reused, so steady-state sending does not allocate; an owner that runs
// window after window of one shape passes the last one's Buffer() as the next
// one's SendConfig.Buffer and allocates nothing at all. A frame is released
// when the peer's committed watermark covers it (first+count <= committed).
// Retransmission is driven by evidence, not by one timer per frame (a busy
// peer whose queue delays answers past the RTO must not be sent its whole
// window again, which is how a slow root used to collapse a tree): a frame
// the peer reports holding above a hole (its PROGRESS named it, or it lies
// below the last hole's end outside every hole) is never resent; a frame is
// resent at once when the peer has since processed a frame transmitted after
// it (time-ordered loss inference, RFC 8985 style; FIFO path and processing);
// and when the peer made no progress for one RTO, only the oldest
// transmission not known to be held is resent (a probe) and the RTO doubles
// up to MaxRTO until the peer progresses again. The RTO is SRTT + 4 RTTVAR
// (RFC 6298, samples from frames sent once only), never below
// SendConfig.RTO. New frames are admitted while: unacked frames < ReplayDepth, frames
// and bytes sent since the last PROGRESS that reflected them fit the credits
// the peer advertised, and the frame ends within Elements of the peer's
// committed watermark (0 = unbounded).
//
// A PROGRESS costs the frames it releases, not the window: the replay
// buffer is a ring in Packet ID order, and while a stream is sent in element
// order with no resent frame outstanding (every switch's and rank's stream
// without loss) what it releases, and what it can mark held or lost, is a
// prefix; otherwise it takes the general pass over every frame in flight.
//
// # RecvWindow (receiver side)
//
//	r := stream.NewRecvWindow(stream.RecvConfig{...})
//	switch v := r.Admit(pid, first, count, bytes, hash); v { case stream.Accepted: apply ... }
//	r.Release(upTo)   // consumer freed storage below upTo (engine: the op frontier)
//	r.Committed(), r.Holes(dst), r.Credits(), r.Done()
//
// Full API (stable):
//
//	type Hole struct{ Start, End uint32 }
//	const MaxHoles = 32
//	type SendConfig struct{ Name string; ReplayDepth, FrameSize, Intervals, Bytes int; Elements uint32;
//	    RTO, MaxRTO, MinRetransmitGap, Deadline int64; FirstPacketID uint32; Buffer []byte }
//	func NewSendWindow(cfg SendConfig) *SendWindow
//	func (w *SendWindow) CanSend(now int64, end uint32, size int) bool
//	func (w *SendWindow) Reserve(now int64, first, count uint32, size int) (buf []byte, pid uint32, ok bool)
//	func (w *SendWindow) Commit(now int64, n int) []byte
//	func (w *SendWindow) OnProgress(now int64, pid, committed uint32, holes []Hole, intervalCredits, byteCredits int)
//	func (w *SendWindow) OnRejected(pid uint32)
//	func (w *SendWindow) NextRetransmit(now int64) (frame []byte, ok bool)
//	func (w *SendWindow) Check(now int64) error // *SilentError wrapping ErrPeerSilent
//	func (w *SendWindow) Frame(pid uint32) ([]byte, bool)
//	func (w *SendWindow) Idle() bool; Free() int; Unacked() (frames, bytes int); Outstanding() (from, to uint32)
//	func (w *SendWindow) Committed() uint32; Credits() (intervals, bytes int); Room() (frames, bytes int); Stats() (retransmits, timeouts uint64)
//	func (w *SendWindow) NextPacketID() uint32; Name() string; FrameSize() int; Buffer() []byte; RTO() int64; SRTT() int64
//	type RecvConfig struct{ Name string; VectorLen uint32; Intervals, Bytes int; Elements uint32;
//	    MaxFrame int; MinRoom uint32; History int }
//	type Verdict uint8 // Accepted, Duplicate, Invalid, NoCredit
//	func NewRecvWindow(cfg RecvConfig) *RecvWindow
//	func (r *RecvWindow) Admit(pid, first, count uint32, bytes int, hash uint64) Verdict
//	func (r *RecvWindow) Release(upTo uint32)
//	func (r *RecvWindow) Committed() uint32; Released() uint32; HighestEnd() uint32; Pending() int
//	func (r *RecvWindow) Holes(dst []Hole) int; Credits() (intervals int, bytes uint32); Intervals() int; Done() bool
//	func Hash(b []byte) uint64
//
// Admit keeps metadata only for the active window: pending out-of-order
// intervals above the committed watermark and a bounded history of recently
// committed intervals used to recognise identical duplicates. A frame wholly
// below the watermark that is not in the history is a stale duplicate: ACKed,
// never applied again. Overlap under a new Packet ID, or a known Packet ID
// with a different range or content hash, is Invalid.
//
// Credits: interval and byte credits bound the pending out-of-order
// intervals (committed data belongs to the consumer, which has already
// absorbed it); the element span bounds how far past the release point (the
// consumer's Release) any interval may end, which is what bounds the
// consumer's storage. Out-of-order admission always leaves room for one
// interval and one MaxFrame, so the frame that closes the first hole is
// always admissible and the window cannot deadlock. Credits grants at most
// (free element span)/MinRoom intervals, MinRoom being the most elements one
// frame can carry, so a sender that respects credit never sends a frame the
// element bound refuses; when that reaches zero the consumer sends a window
// update once Release opens room again. A sender told NO_CREDIT calls
// OnRejected(pid): the frame is resent, not after its timeout but as soon as
// a later PROGRESS shows more room than the refusing one (a higher
// watermark, more interval credit, or a window update with Packet ID 0),
// oldest refused frames first and no more of them than that PROGRESS's
// credit left after the frames in flight; while refused frames wait, no new
// frame is admitted (it would be refused for the same reason). Re-arming on
// every PROGRESS that grants credit resent the whole refused set once per
// refusal and per one-frame window update (measured: 11800 resends of a
// rank's 2900 frames behind a slow KULISCH leaf).
//
// Completion (Done) means the watermark reached the vector length; LAST
// alone proves nothing.
//
// A sender whose frames leave in another order than their elements (a
// result relay) is supported: OnProgress frees every frame the cumulative
// watermark covers, not only the oldest, and Free reports the slots left so
// the relay can keep one for the frame that closes its first hole.
//
// Hash gives the content hash callers pass to Admit (hash the NumberGroup body,
// not the header, so a RETRANSMIT flag does not change it).
package stream
