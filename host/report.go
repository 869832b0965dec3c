// This file owns the done reports of successful collectives: a rank tells
// the AM it has its part (POST /v1/ops/{id}/done) so the AM can check every
// node and RELEASE, but the rank's result does not depend on it. Sent from
// the collective's goroutine, that HTTP round trip was a sixth of a small
// collective (1.5 ms of 8-10 on a 2-core VM) and delayed the rank's arrival
// at the next barrier; a reporter goroutine now sends them in order while
// the rank goes on.

package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prismd/prismd/control/am"
)

const (
	// reportQueue bounds the reports waiting for the reporter: a full queue
	// makes the next successful collective wait for room (backpressure
	// against an AM that stopped answering).
	reportQueue = 64
	// reportTimeout bounds one report, retries included.
	reportTimeout = 10 * time.Second
)

type doneReport struct {
	id   string
	coll string
	req  am.DoneRequest
}

// report queues r for the reporter, waiting for room if the queue is full.
// After Close it sends r itself: a collective that finished as the Comm
// closed still reports.
func (c *Comm) report(r doneReport) {
	c.reportMu.RLock()
	if !c.reportsClosed {
		c.reports <- r
		c.reportMu.RUnlock()
		return
	}
	c.reportMu.RUnlock()
	c.send(r)
}

// send posts one report and keeps the first error.
func (c *Comm) send(r doneReport) {
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	_, err := c.client.Done(ctx, r.id, r.req)
	cancel()
	var ae *am.APIError
	if errors.As(err, &ae) && ae.Code == am.CodeNotFound {
		// An AM restarted since the grant does not know the operation:
		// nothing for the application to do, and its result is whole. The
		// switches drop the operation when they expire it.
		if n := c.cfg.Notify; n != nil {
			n(fmt.Sprintf("rank %d: the AM no longer knows operation %s (restarted?); its result here is complete, and its switches will expire it",
				c.cfg.Rank, r.id))
		}
		return
	}
	if err != nil {
		c.mu.Lock()
		if c.reportErr == nil {
			c.reportErr = &OpError{Collective: r.coll, Rank: c.cfg.Rank, Op: r.id, Stage: "done", Err: err}
		}
		c.mu.Unlock()
	}
}

// reporter sends the queued reports in order until stopReporter.
func (c *Comm) reporter() {
	defer close(c.reportDone)
	for r := range c.reports {
		c.send(r)
	}
}

// stopReporter waits until every queued report was sent (or timed out).
func (c *Comm) stopReporter() {
	c.reportMu.Lock()
	c.reportsClosed = true
	close(c.reports)
	c.reportMu.Unlock()
	<-c.reportDone
}
