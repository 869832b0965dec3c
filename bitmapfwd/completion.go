// This file owns the completion test of an aggregating node: a target set
// (A-BM or C-BM) and the OR of the P-BMs admitted against it.

package bitmapfwd

import "strconv"

// AdmitStatus is the verdict on one P-BM. Zero is invalid.
type AdmitStatus uint8

const (
	admitInvalid AdmitStatus = iota
	// AdmitNew: the P-BM lies inside the target and shares no bit with
	// what was received; it was merged. The only status that changes state
	// and the only one whose payload the engine accumulates.
	AdmitNew
	// AdmitDuplicate: every bit was already received (a retransmission or
	// replay). No change: OR is idempotent, so a duplicate never
	// over-completes. Drop the payload.
	AdmitDuplicate
	// AdmitOverlap: some bits were received and some were not. Accepting it
	// would count the received contributions twice in the payload sum:
	// rejected, no change.
	AdmitOverlap
	// AdmitForeign: the P-BM holds target bits and bits outside the target
	// (not ours, or another subtree's): rejected, no change.
	AdmitForeign
	// AdmitNotOurs: the P-BM shares no bit with the target (A-BM AND P-BM =
	// 0): this node does not aggregate it; forward it toward the root.
	AdmitNotOurs
	// AdmitEmpty: the P-BM has no bit at all: rejected.
	AdmitEmpty
	// AdmitNoState: (SoftTable only) no C-BM is installed for the
	// (job, token): this node is not a merge point; forward upward.
	AdmitNoState
)

func (s AdmitStatus) String() string {
	switch s {
	case AdmitNew:
		return "new"
	case AdmitDuplicate:
		return "duplicate"
	case AdmitOverlap:
		return "overlap"
	case AdmitForeign:
		return "foreign"
	case AdmitNotOurs:
		return "not_ours"
	case AdmitEmpty:
		return "empty"
	case AdmitNoState:
		return "no_state"
	}
	return "AdmitStatus(" + strconv.Itoa(int(s)) + ")"
}

// Completion is the aggregation state against one target: the node's A-BM
// (pre-configured, AllReduce) or C-BM (self-installed, MoE / reliable
// multicast). The zero value is unusable; use NewCompletion.
type Completion struct {
	target   Set
	received Set
	missing  int // |target| - |received|, so Complete is O(1)
}

// NewCompletion returns a Completion over a bit space of capacity bits with
// an empty target (complete until Reset).
func NewCompletion(bits int) *Completion {
	c := MakeCompletion(bits)
	return &c
}

// MakeCompletion is NewCompletion returning a value, for embedding in the
// engine's preallocated per-operation state.
func MakeCompletion(bits int) Completion {
	return Completion{target: MakeSet(bits), received: MakeSet(bits)}
}

// Reset starts a new round against target (copied) with nothing received.
func (c *Completion) Reset(target *Set) {
	c.target.Copy(target)
	c.received.Clear()
	c.missing = c.target.Count()
}

// Restart keeps the target and forgets what was received (next chunk).
func (c *Completion) Restart() {
	c.received.Clear()
	c.missing = c.target.Count()
}

// Target returns the target (a view; do not modify).
func (c *Completion) Target() *Set { return &c.target }

// Received returns the OR of the admitted P-BMs (a view; do not modify). It
// is the P-BM of the merged packet the node emits, and of a PARTIAL one on
// timeout.
func (c *Completion) Received() *Set { return &c.received }

// Admit classifies pbm against the target and what was received and merges
// it when it is AdmitNew. pbm must have the Completion's capacity (else it
// panics, see Set). No allocation.
func (c *Completion) Admit(pbm *Set) AdmitStatus {
	c.target.same(pbm)
	var inside, outside, seen, fresh uint64
	tw, rw := c.target.w, c.received.w[:len(c.target.w)]
	pw := pbm.w[:len(tw)]
	for i, p := range pw {
		inside |= p & tw[i]
		outside |= p &^ tw[i]
		seen |= p & rw[i]
		fresh |= p &^ rw[i]
	}
	switch {
	case inside|outside == 0:
		return AdmitEmpty
	case inside == 0:
		return AdmitNotOurs
	case outside != 0:
		return AdmitForeign
	case fresh == 0:
		return AdmitDuplicate
	case seen != 0:
		return AdmitOverlap
	}
	n := 0
	for i, p := range pw {
		rw[i] |= p
		n += popcount(p)
	}
	c.missing -= n
	return AdmitNew
}

// Complete reports whether the OR of the admitted P-BMs equals the target.
// An empty target is trivially complete.
func (c *Completion) Complete() bool { return c.missing == 0 }

// MissingCount is the number of target bits not yet received.
func (c *Completion) MissingCount() int { return c.missing }

// Missing sets dst = target AND NOT received: the stragglers, and the
// multicast set of a selective retransmission.
func (c *Completion) Missing(dst *Set) { dst.AndNot(&c.target, &c.received) }
