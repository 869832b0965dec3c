// This file owns automatic persistence. An ordinary collective pays a
// runtime-channel round trip to the AM (barrier and grant) and its share of
// the AM's CONTROL exchange with every switch; for a small vector that is
// nearly all its time (2 FP32: 3-17 ms against 0.3-0.8 ms for an
// invocation of a persistent collective in the spine-leaf-jumbo lab). Jobs
// call the same shapes again and again (a training step's buckets), so the
// Comm runs the second call of an AllReduce shape, and every later one, as
// the next invocation of a persistent collective it keeps for that shape,
// over that call's buffers: no AM round trip once it is set up. Reduce
// calls are left to the AM (autoStart says why).
//
// Every rank must take the same decision for every call, or ranks would
// wait on different operations. So the decision depends on the call
// sequence (and the AM's answers, which are the same for every rank),
// never on timing: the shape is made of what the AM
// requires all ranks to agree on (collective, root, input format, length,
// Options), a shape becomes persistent at its second call unless its
// first got no grant (the AM refuses an invocation to every rank alike, so
// every rank takes the shape's mark back: Comm.unsee), the
// least recently called shape gives its place when Config.PersistentShapes
// are kept, and calls of one shape run one after another in call order,
// each waiting for the previous to finish (two calls of one shape in
// flight at once would otherwise take invocations in whichever order they
// happened to start). A call cancelled while it waits for its turn fails
// the shape's collective for the calls queued behind it (skipInvocation),
// as the other ranks' invocation without it fails theirs. Every call takes
// a sequence number (Persistent.reserve), an invocation as much as an
// ordinary call, so a rank that makes a call one way and another rank the
// other way still pair their later calls. The divergences left are a
// failure that some ranks see and others do not (the failed shape starts
// over on those ranks, the others' next invocation of it fails on the
// failed operation and tells the AM, so the ones setting it up fail too,
// and from then on all ranks agree again), and a first call refused by the
// AM while a later call of its shape was already made (async): that later
// call counted the shape as seen on the ranks that made it before the
// refusal came; if ranks differ there, it fails as a mismatch on all of
// them, which takes every mark back, and the next call agrees. A first
// call granted on some ranks only (one rank's deadline ended after the
// AM's barrier completed) leaves the marks differing the same way: the
// next call of the shape is an ordinary first call on that rank and a
// persistent setup on the others, refused as a mismatch, which takes back
// the marks on every rank (forgetSeenOnMismatch), and the call after agrees.

package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// defaultPersistentShapes is how many shapes a Comm keeps persistent when
// Config.PersistentShapes is 0. Each holds one context on every switch of
// its tree and a replay buffer on the rank while the Comm lives.
const defaultPersistentShapes = 4

// maxSeenShapes bounds the shapes a Comm remembers having called once; it
// forgets them all past that (the same on every rank).
const maxSeenShapes = 1024

// shape is what makes two calls the same collective for the AM.
type shape struct {
	coll         string
	root         int
	format       parser.Format
	n            int
	acc, partial string
	output       string
	kulischWidth int
	mtu          int
	timeout      time.Duration
}

// shapeOf normalizes the defaults a rank may spell either way.
func shapeOf(coll string, root int, sv elems, o Options) shape {
	s := shape{coll: coll, format: sv.format, n: sv.n, acc: o.Acc, partial: o.Partial, output: o.Output,
		kulischWidth: o.KulischWidth, mtu: o.MTU, timeout: o.Timeout}
	if coll == "reduce" {
		s.root = root
	}
	if s.acc == "" {
		s.acc = "kulisch"
	}
	if s.mtu == 0 {
		s.mtu = 1500
	}
	return s
}

// autoSlot is one shape's persistent collective and its queue of calls.
type autoSlot struct {
	p    *Persistent
	tail chan struct{} // closed when the last call queued on the slot finished
	used uint64        // the Comm's call clock at the slot's last call
}

// seenMark is the first call of a shape, recorded in autoShapes.seen: a
// call that gets no grant takes its mark back (Comm.unsee).
type seenMark struct{ sh shape }

// autoShapes is the Comm's automatic persistence, under mu.
type autoShapes struct {
	seen  map[shape]*seenMark
	slots map[shape]*autoSlot
	clock uint64
}

// autoStart runs the call on its shape's persistent collective and returns
// its Request, or returns nil: the call runs as an ordinary collective;
// mark is then set if this is the shape's first call (its next one will
// run on a persistent collective unless this one gets no grant: the AM
// need not prepare an ordinary operation for it). It takes every decision
// now, at call time, under c.mu. sv and rv are checked and not empty.
func (c *Comm) autoStart(ctx context.Context, coll string, sv, rv elems, root int, o Options) (r *Request, mark *seenMark) {
	limit := c.cfg.PersistentShapes
	if limit == 0 {
		limit = defaultPersistentShapes
	}
	if limit < 0 || o.OpID != nil || o.Ordinary || sv.n > maxPersistentLen/2 || coll == "reduce" {
		// A REDUCE's ranks other than the root finish a call once their
		// DATA is accepted, and a failure only the root sees (an INT8
		// sum out of range: ErrInexact) leaves them succeeding: run as
		// invocations they went on to the next calls while the root
		// started the shape over, and the ranks' calls paired up wrong
		// until a barrier timed out (2 minutes). Through the AM every
		// call meets at its barrier, whatever the last one did.
		return nil, nil
	}
	sh := shapeOf(coll, root, sv, o)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return failedRequest(&OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin", Err: ErrClosed}), nil
	}
	a := &c.auto
	a.clock++
	slot := a.slots[sh]
	if slot == nil {
		if a.seen[sh] == nil {
			if a.seen == nil || len(a.seen) >= maxSeenShapes {
				a.seen = map[shape]*seenMark{}
			}
			mark = &seenMark{sh: sh}
			a.seen[sh] = mark
			c.mu.Unlock()
			return nil, mark
		}
		if a.slots == nil {
			a.slots = map[shape]*autoSlot{}
		}
		if len(a.slots) >= limit {
			c.evictLRU()
		}
		done := make(chan struct{})
		close(done)
		slot = &autoSlot{tail: done, p: c.newPersistent(coll, root, sv, rv, o)}
		slot.p.auto = true
		a.slots[sh] = slot
	}
	slot.used = a.clock
	p := slot.p
	p.mu.Lock()
	renew, seq, nth := p.reserve()
	p.mu.Unlock()
	prev, next := slot.tail, make(chan struct{})
	slot.tail = next
	c.mu.Unlock()

	r = &Request{done: make(chan struct{})}
	// Whether an earlier call of the shape was still running or queued
	// when this one was made, for the error of a call cancelled before
	// its turn.
	waited := true
	select {
	case <-prev:
		waited = false
	default:
	}
	go func() {
		defer close(r.done)
		select {
		case <-prev:
		case <-ctx.Done():
		}
		if err := ctx.Err(); err != nil {
			// Cancelled before its turn (also when the earlier call
			// ended at the same moment): the call never starts, and
			// says so at once.
			why := "cancelled before it was made"
			if waited {
				why = "cancelled before it ran (an earlier call of the same shape was running or queued)"
			}
			r.err = &OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin", Invocation: nth,
				Err: fmt.Errorf("%s: %w", why, err)}
			r.stats.AutoPersistent = true // as the calls queued behind it say
			c.skipInvocation(sh, slot, renew, seq, nth, prev, next, err)
			return
		}
		defer close(next)
		r.stats, r.err = p.runInvocation(ctx, renew, seq, nth, sv, rv)
		r.err = ownEnd(ctx, r.err)
		r.stats.AutoPersistent = true
		if r.err != nil {
			c.dropSlot(sh, slot)
			if renew {
				// Its setup was refused as a mismatch: another rank made
				// this call some other way (an ordinary first call of the
				// shape, or another shape). The AM refuses every rank
				// alike, and every rank forgets the shapes it has run once
				// (forgetSeenOnMismatch; that rank's first call also
				// unsees its own), so every rank's next call of the shape
				// is a first call. Kept, the ranks met as an ordinary call
				// against a persistent setup at every call of the shape
				// for as long as the Comm lived.
				c.forgetSeenOnMismatch(r.err)
			}
		}
	}()
	return r, nil
}

// forgetShape takes back the mark of shape sh, whichever call set it.
func (c *Comm) forgetShape(sh shape) {
	c.mu.Lock()
	delete(c.auto.seen, sh)
	c.mu.Unlock()
}

// skipInvocation gives up invocation nth of slot's collective, whose call
// was cancelled before it ran. The other ranks run it all the same (they
// cannot know), without this rank: it fails for them, by the AM's barrier
// (renew: this rank tells the AM it abandons seq, so they fail at once) or
// by their switches' timeout naming this rank (an invocation of a granted
// operation). So the calls queued behind it here fail too, with
// ErrEarlierCancelled, as theirs fail with that invocation's error: ranks
// stay in step, and the shape's next call sets up a new collective on
// every rank. A call of the shape that did not wait (one taking the place
// of the cancelled one) would instead be summed with the others' call
// before it.
func (c *Comm) skipInvocation(sh shape, slot *autoSlot, renew bool, seq uint64, nth int, prev, next chan struct{}, cause error) {
	p := slot.p
	// The slot is no longer the shape's before the cancelled call returns:
	// a call of the shape made after that sets up a new collective, as
	// the other ranks' next call does once their copy of this one failed.
	// Kept until the earlier calls were done (below), a call made at once
	// queued behind this one and failed with it, and abandoned its seq,
	// which failed the other ranks' next call too: whether the next call
	// ran depended on a few microseconds (TestCallRightAfterCancelledOneRuns).
	// The calls already queued behind this one hold the slot and fail
	// with ErrEarlierCancelled as before.
	c.dropSlot(sh, slot)
	if renew {
		req := c.beginRequest(seq, p.coll, p.send, p.root, p.opts)
		req.Persistent, req.VectorLen = true, p.n*p.k
		c.abandon(req, "before it reached it: "+cause.Error())
	} else {
		p.abandonInvocation(seq, nth, fmt.Errorf("cancelled before it ran (%w)", cause))
	}
	go func() {
		defer close(next)
		<-prev
		// The earlier calls are done: the operation rests. It is freed
		// here, reported as this rank's own failure (retireCancelled):
		// the AM ABORTs it once the other ranks finished the invocations
		// before this one, and their copy of this one fails, naming this
		// rank's cancellation.
		// The calls queued behind this one fail from here on, and not
		// before: at once, the error failed an earlier call that had not
		// started yet (the first of three queued calls, when the second
		// was cancelled before it was queued). A call of the shape made
		// after the cancelled one returned found no slot above and set up
		// a new collective; its barrier at the AM waits for the other
		// ranks, whose copy of this invocation fails once the retirement
		// below is reported (the AM drains, then ABORTs).
		p.mu.Lock()
		if p.err == nil {
			p.err = &OpError{Collective: p.coll, Rank: c.cfg.Rank, Stage: "begin",
				Err: fmt.Errorf("%w: invocation %d of this shape's persistent collective was cancelled (%v) before it ran on this rank, and the other ranks run it without this one: "+
					"this call was not run; the shape's next call sets up a new persistent collective", ErrEarlierCancelled, nth, cause)}
		}
		op := p.op
		p.op = nil
		p.mu.Unlock()
		if op != nil {
			p.retireCancelled(op, nth, cause)
		}
	}()
}

// forgetSeenOnMismatch forgets every shape seen once (not the kept
// collectives) when err is the AM's mismatch. The ranks of a mismatch
// made different calls, each a call of its own shape, and each takes back
// only what its own call marked (unsee): a rank whose call
// was another shape than the others' kept the mark the others' shape had
// from an earlier call, while they, whose call of that shape was the
// refused persistent setup, forgot it. Their next matching call met as
// persistent against ordinary and failed too
// (TestMismatchLeavesRanksAgreeing). Every rank gets the mismatch at the
// same point of its call sequence, so every rank forgets alike; a shape's
// next call is then a first call on all of them.
func (c *Comm) forgetSeenOnMismatch(err error) {
	var ae *am.APIError
	if !errors.As(err, &ae) || ae.Code != am.CodeMismatch {
		return
	}
	c.mu.Lock()
	clear(c.auto.seen)
	c.mu.Unlock()
}

// unsee takes back the mark of a shape's first call that got no grant
// (nil: the call was not a first call). The AM fails an invocation for
// every rank alike (9.1), so every rank takes its mark back and their next
// call of the shape is a first call again on all of them. Marked for good
// at call time, a rank whose call failed against another shape (a length
// mismatch) counted this shape as seen and the others did not: their next,
// matching call ran persistent on some ranks only and failed again.
func (c *Comm) unsee(mark *seenMark) {
	if mark == nil {
		return
	}
	c.mu.Lock()
	if c.auto.seen[mark.sh] == mark {
		delete(c.auto.seen, mark.sh)
	}
	c.mu.Unlock()
}

// evictLRU retires the least recently called shape's collective. Under
// c.mu.
func (c *Comm) evictLRU() {
	var (
		old  shape
		slot *autoSlot
	)
	for sh, s := range c.auto.slots {
		if slot == nil || s.used < slot.used {
			old, slot = sh, s
		}
	}
	c.retireSlot(old, slot)
}

// dropSlot forgets a failed shape's collective: its next call sets up a
// new one.
func (c *Comm) dropSlot(sh shape, slot *autoSlot) {
	c.mu.Lock()
	c.retireSlot(sh, slot)
	c.mu.Unlock()
}

// retireSlot takes slot out of the kept shapes (no call queues on it any
// more) and closes its collective once the calls already queued finished.
// Under c.mu.
func (c *Comm) retireSlot(sh shape, slot *autoSlot) {
	if c.auto.slots[sh] == slot {
		delete(c.auto.slots, sh)
	}
	tail := slot.tail
	go func() {
		<-tail
		_ = slot.p.Close()
	}()
}
