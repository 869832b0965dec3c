// This file owns automatic persistence. An ordinary collective pays a
// runtime-channel round trip to the AM (barrier and grant) and its share of
// the AM's CONTROL exchange with every switch; for a small vector that is
// nearly all its time (2 FP32: 3-17 ms against 0.3-0.8 ms for an
// invocation of a persistent collective in the spine-leaf-jumbo lab). Jobs
// call the same shapes again and again (a training step's buckets), so the
// Comm runs the second call of a shape, and every later one, as the next
// invocation of a persistent collective it keeps for that shape, over that
// call's buffers: no AM round trip once it is set up.
//
// Every rank must take the same decision for every call, or ranks would
// wait on different operations. So the decision depends on the call
// sequence alone, never on timing: the shape is made of what the AM
// requires all ranks to agree on (collective, root, input format, length,
// Options), a shape becomes persistent at its second call, the
// least recently called shape gives its place when Config.PersistentShapes
// are kept, and calls of one shape run one after another in call order,
// each waiting for the previous to finish (two calls of one shape in
// flight at once would otherwise take invocations in whichever order they
// happened to start). The one divergence left is a failure that some ranks
// see and others do not: the failed shape starts over on those ranks, the
// others' next call of it fails by timeout, naming the missing ranks, and
// from then on all ranks agree again.

package host

import (
	"context"
	"fmt"
	"time"

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

// autoShapes is the Comm's automatic persistence, under mu.
type autoShapes struct {
	seen  map[shape]bool
	slots map[shape]*autoSlot
	clock uint64
}

// autoStart runs the call on its shape's persistent collective and returns
// its Request, or returns nil: the call runs as an ordinary collective;
// repeats then says whether the shape's next call will run on a
// persistent collective (true on its first call: the AM need not prepare
// an ordinary operation for that one). It takes every decision now, at
// call time, under c.mu.
func (c *Comm) autoStart(ctx context.Context, coll string, send, recv any, root int, o Options) (r *Request, repeats bool) {
	limit := c.cfg.PersistentShapes
	if limit == 0 {
		limit = defaultPersistentShapes
	}
	if limit < 0 || o.OpID != nil || o.Ordinary {
		return nil, false
	}
	sv, rv, err := c.checkBuffers(coll, send, recv, root, &o)
	if err != nil || sv.n > maxPersistentLen/2 {
		return nil, false // the ordinary path reports it, or runs it
	}
	sh := shapeOf(coll, root, sv, o)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false
	}
	a := &c.auto
	a.clock++
	slot := a.slots[sh]
	if slot == nil {
		if !a.seen[sh] {
			if a.seen == nil || len(a.seen) >= maxSeenShapes {
				a.seen = map[shape]bool{}
			}
			a.seen[sh] = true
			c.mu.Unlock()
			return nil, true
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
		a.slots[sh] = slot
	}
	slot.used = a.clock
	p := slot.p
	p.mu.Lock()
	renew, seq := p.reserve()
	p.mu.Unlock()
	prev, next := slot.tail, make(chan struct{})
	slot.tail = next
	c.mu.Unlock()

	r = &Request{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer close(next)
		select {
		case <-prev:
		case <-ctx.Done():
			// The invocation this call reserved will never run here: the
			// shape's collective cannot go on (ranks would count
			// invocations differently).
			r.err = &OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin",
				Err: fmt.Errorf("cancelled while an earlier call of the same shape ran: %w", ctx.Err())}
			p.mu.Lock()
			if p.err == nil {
				p.err = r.err
			}
			p.mu.Unlock()
			c.dropSlot(sh, slot)
			return
		}
		r.stats, r.err = p.runInvocation(ctx, renew, seq, sv, rv)
		r.stats.AutoPersistent = true
		if r.err != nil {
			c.dropSlot(sh, slot)
		}
	}()
	return r, false
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
