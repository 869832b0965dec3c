// This file owns the rank's presence (docs/protocol.md 9.9): while the Comm
// lives it holds one streaming request open to the AM, so that when this
// process dies (killed, crashed, its host gone) the AM fails the other
// ranks' next call within about a second, naming this rank, instead of
// letting them wait the whole barrier timeout for a call it will never
// make. Close says goodbye (POST /v1/presence/leave) first, so that the
// others learn that this rank left on purpose.

package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prismd/prismd/control/am"
)

// Presence reconnection backoff (variables for tests): the first retry
// comes well within the AM's grace (1 s), so a transient error does not
// make the rank count as gone.
var (
	presenceRetry    = 100 * time.Millisecond
	presenceRetryMax = time.Second
	presenceLeave    = time.Second // how long Close waits for the AM to take its goodbye
)

func (c *Comm) presenceReq() am.PresenceRequest {
	return am.PresenceRequest{Job: c.cfg.Job, Group: c.cfg.Group, Rank: c.cfg.Rank, Size: c.cfg.Size, Node: c.cfg.Node, Session: c.session}
}

// presenceWait bounds how long NewComm waits for the AM to take the
// stream before it returns.
var presenceWait = 2 * time.Second

// startPresence starts the presence goroutine and waits (presenceWait at
// most) until the AM took the stream or it failed once: a rank whose
// stream opened only after its first calls ran was not known to the AM
// as part of their run. stopPresence (Close) ends it.
func (c *Comm) startPresence() {
	ctx, cancel := context.WithCancel(context.Background())
	c.presenceStop = cancel
	c.presenceDone = make(chan struct{})
	c.presenceFirst = make(chan struct{})
	go c.presence(ctx)
	select {
	case <-c.presenceFirst:
	case <-time.After(presenceWait):
	}
}

// presence keeps the stream open until ctx ends, reconnecting after a
// failure; an AM that keeps no presence is not asked again.
func (c *Comm) presence(ctx context.Context) {
	defer close(c.presenceDone)
	req := c.presenceReq()
	backoff := presenceRetry
	for {
		start := time.Now()
		err := c.client.Presence(ctx, req, func() { c.presenceUp.Store(true); c.firstDone() }, c.told)
		c.presenceUp.Store(false)
		c.firstDone()
		if ctx.Err() != nil {
			return
		}
		var ae *am.APIError
		if errors.Is(err, am.ErrNoPresence) || errors.As(err, &ae) {
			// Said once: the job runs, but a rank that dies between
			// calls holds the others for the AM's barrier timeout.
			if n := c.cfg.Notify; n != nil {
				go n(fmt.Sprintf("host: rank %d: the AM keeps no presence for this communicator (%v): a rank that dies between calls "+
					"is noticed only at the AM's barrier timeout", c.cfg.Rank, err))
			}
			return
		}
		if time.Since(start) > 5*presenceRetryMax {
			backoff = presenceRetry // it was up a while: a new failure
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, presenceRetryMax)
	}
}

// firstDone ends startPresence's wait (once).
func (c *Comm) firstDone() { c.presenceOnce.Do(func() { close(c.presenceFirst) }) }

// stopPresence says goodbye to the AM (bounded by presenceLeave; not
// when the stream is down: an AM that cannot be reached would only delay
// Close) and ends the stream.
func (c *Comm) stopPresence() {
	if c.presenceStop == nil {
		return
	}
	if c.presenceUp.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), presenceLeave)
		_ = c.client.PresenceLeave(ctx, c.presenceReq())
		cancel()
	}
	c.presenceStop()
	<-c.presenceDone
}

// told acts on a request line of the presence stream (protocol 9.9):
// "alive" sends that persistent operation's keepalive at once, "failed"
// ends this rank's part of that operation now.
func (c *Comm) told(word, id string) {
	switch word {
	case "alive":
		c.aliveNow(id)
	case "failed":
		c.amFailedOp(id)
	}
}

// errAMFailed marks the error of an operation the AM said it failed.
var errAMFailed = errors.New("the AM failed operation")

// amFailedOp ends operation id, if this rank runs it, with the AM's word
// that it failed: the failure path then asks the AM for its diagnosis,
// as after any failure. An operation that already finished here is left
// alone (its result stands).
func (c *Comm) amFailedOp(id string) {
	for _, op := range *c.ops.Load() {
		if op.g.ID != id {
			continue
		}
		err := fmt.Errorf("%w: %w %s (its presence stream said so)", ErrFailed, errAMFailed, id)
		op.amFailed.CompareAndSwap(nil, &err)
	}
	c.kick()
}

// aliveNow sends the keepalive of persistent operation id at once, as the
// AM asked on the presence stream: it waits for this rank's count of
// completed invocations (a draining operation, protocol 9.7).
func (c *Comm) aliveNow(id string) {
	c.mu.Lock()
	ps := make([]*Persistent, 0, len(c.persistents))
	for p := range c.persistents {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		op := p.op
		p.mu.Unlock()
		if op == nil || op.g.ID != id {
			continue
		}
		op.draining.Store(true) // report each completion from now on too
		select {
		case op.aliveNow <- struct{}{}:
		default:
		}
	}
}
