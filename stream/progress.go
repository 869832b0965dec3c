// This file owns applying a decoded PROGRESS frame to a SendWindow: which
// statuses prove the named frame held, which refuse it, so the engine, the
// host library and prismd-blast read a status the same way.

package stream

import "github.com/prismd/prismd/parser"

// ProgressVerdict is what ApplyProgress did with a PROGRESS.
type ProgressVerdict uint8

const (
	Applied ProgressVerdict = iota
	// Stale: its Committed is below the watermark already heard (a later
	// PROGRESS moved it past): ignored entirely.
	Stale
	// Ahead: it acknowledges elements this window never sent (Committed,
	// or a hole's end, above the end of every frame sent on the stream):
	// no receiver can hold them, so it is forged or from another stream's
	// state, and it is ignored entirely. Accepted, one such PROGRESS
	// moved the watermark past everything, and every genuine one after it
	// was then stale: the stream failed, blaming a healthy peer.
	Ahead
)

// ApplyProgress applies a PROGRESS the caller has validated and matched to
// this window's stream: OnProgressAccepted for OK and DUPLICATE (the named
// frame is held), OnProgress otherwise, then OnRejected for NO_CREDIT.
// Statuses that end the transfer (INVALID, UNKNOWN_OPERATION, FAILED) are
// the caller's to act on; it may still apply them here for the credits and
// watermark they carry. holes is scratch for the converted hole list, so
// nothing is allocated. A Stale or Ahead PROGRESS changes nothing.
func (w *SendWindow) ApplyProgress(now int64, p *parser.Progress, holes *[MaxHoles]Hole) ProgressVerdict {
	if p.Committed < w.committed {
		// Stale (docs/protocol.md section 7): a later PROGRESS already
		// moved the watermark past it, so its credits and holes describe
		// a window that no longer exists. Ignored entirely.
		return Stale
	}
	if w.sentAny && (p.Committed > w.sentHi || p.NHoles > 0 && p.Holes[p.NHoles-1].End > w.sentHi) {
		// Before the first frame a receiver's keepalive may carry a
		// watermark from an earlier use of the stream (a persistent
		// collective's next invocation), so only a window that sent
		// something can tell.
		return Ahead
	}
	h := holes[:p.NHoles]
	for i := range h {
		h[i] = Hole(p.Holes[i])
	}
	ic, bc := int(p.IntervalCredits), int(p.ByteCredits)
	if p.Status == parser.ProgressStatusOK || p.Status == parser.ProgressStatusDuplicate {
		w.OnProgressAccepted(now, p.PacketID, p.Committed, h, ic, bc)
	} else {
		w.OnProgress(now, p.PacketID, p.Committed, h, ic, bc)
	}
	if p.Status == parser.ProgressStatusNoCredit {
		w.OnRejected(p.PacketID)
	}
	return Applied
}
