// This file owns applying a decoded PROGRESS frame to a SendWindow: which
// statuses prove the named frame held, which refuse it, so the engine, the
// host library and prismd-blast read a status the same way.

package stream

import "github.com/prismd/prismd/parser"

// ApplyProgress applies a PROGRESS the caller has validated and matched to
// this window's stream: OnProgressAccepted for OK and DUPLICATE (the named
// frame is held), OnProgress otherwise, then OnRejected for NO_CREDIT.
// Statuses that end the transfer (INVALID, UNKNOWN_OPERATION, FAILED) are
// the caller's to act on; it may still apply them here for the credits and
// watermark they carry. holes is scratch for the converted hole list, so
// nothing is allocated. It reports false, changing nothing, for a stale
// PROGRESS: one whose Committed is below the watermark already heard.
func (w *SendWindow) ApplyProgress(now int64, p *parser.Progress, holes *[MaxHoles]Hole) bool {
	if p.Committed < w.committed {
		// Stale (docs/protocol.md section 7): a later PROGRESS already
		// moved the watermark past it, so its credits and holes describe
		// a window that no longer exists. Ignored entirely.
		return false
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
	return true
}
