// This file owns what a rank says while the AM's barrier holds it: a begin
// returns only when every rank of the invocation arrived, and a job whose
// last rank never starts (a crashed launcher, a typo in --size) used to
// wait the whole barrier timeout in silence. While its begin is pending,
// the rank asks the AM (GET /v1/ops) which ranks the barrier still waits
// for, tells Config.Notify, and names them in the error if it gives up
// first.

package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prismd/prismd/control/am"
)

// The first notice comes after barrierNotice at the barrier, then one
// every barrierNoticeEvery (variables for tests).
var (
	barrierNotice      = 5 * time.Second
	barrierNoticeEvery = 15 * time.Second
)

// barrierWatch follows one pending begin.
type barrierWatch struct {
	c     *Comm
	req   am.BeginRequest
	mu    sync.Mutex
	timer *time.Timer
	done  bool
	last  *am.Barrier // the last state read, nil if none
}

// begin is client.Begin, watched as above.
func (c *Comm) begin(ctx context.Context, req am.BeginRequest) (*am.Grant, error) {
	w := &barrierWatch{c: c, req: req}
	w.mu.Lock()
	w.timer = time.AfterFunc(barrierNotice, w.check)
	w.mu.Unlock()
	g, err := c.client.Begin(ctx, req)
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	last := w.last
	w.mu.Unlock()
	if err != nil && ctx.Err() != nil && last != nil {
		err = fmt.Errorf("%w; %s", err, describeBarrier(last))
	}
	return g, err
}

// check reads the barrier and reports it, then re-arms.
func (w *barrierWatch) check() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	l, err := w.c.client.Ops(ctx)
	cancel()
	var b *am.Barrier
	if err == nil {
		for i := range l.Barriers {
			x := &l.Barriers[i]
			if x.Job == w.req.Job && x.Group == w.req.Group && x.Seq == w.req.Seq {
				b = x
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if b != nil {
		w.last = b
		if n := w.c.cfg.Notify; n != nil {
			n(fmt.Sprintf("rank %d: %s", w.c.cfg.Rank, describeBarrier(b)))
		}
	}
	w.timer.Reset(barrierNoticeEvery)
}

func describeBarrier(b *am.Barrier) string {
	return fmt.Sprintf("the AM's barrier for job %d group %d seq %d has waited %s", b.Job, b.Group, b.Seq, b.Waited())
}
