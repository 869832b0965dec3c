// This file owns what a rank says while the AM's barrier holds it: a begin
// returns only when every rank of the invocation arrived, and a job whose
// last rank never starts (a crashed launcher, a typo in --size) used to
// wait the whole barrier timeout in silence. While its begin is pending,
// the rank asks the AM (GET /v1/ops) which ranks the barrier still waits
// for, tells Config.Notify, and names them in the error if it gives up
// first. An AM that stops answering those questions (stopped, hung, its
// host gone) ends the begin with ErrUnreachable: its socket may still take
// the begin, which nothing would ever answer.

package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// barrierLost is how many checks in a row that get no answer from the AM
// end a pending begin (ErrUnreachable); after a check without an answer
// the next comes after barrierRecheck.
var (
	barrierLost    = 3
	barrierRecheck = 2 * time.Second
	barrierAsk     = 2 * time.Second // how long one check waits for its answer
)

// barrierWatch follows one pending begin.
type barrierWatch struct {
	c      *Comm
	req    am.BeginRequest
	cancel context.CancelCauseFunc // ends the begin when the AM stopped answering
	mu     sync.Mutex
	timer  *time.Timer
	done   bool
	last   *am.Barrier // the last state read, nil if none
	failed int         // checks in a row without an answer
}

// begin is client.Begin, watched as above. A Comm closed since the call
// was made asks nothing (the call fails with ErrClosed). A call whose ctx
// ends before its grant tells the AM it abandons the invocation (abandon),
// so the other ranks' calls fail at once instead of at the barrier
// timeout.
func (c *Comm) begin(ctx context.Context, req am.BeginRequest) (*am.Grant, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// Ended before it was made: asked anyway, the begin could
		// complete a barrier the other ranks already waited at, and
		// they were granted an operation this rank never ran (they
		// waited out its timeout). Abandoned instead, the call fails
		// for every rank at once, and none holds a grant for it.
		c.abandon(req, err.Error())
		return nil, err
	}
	// The begin's own context ends when ctx does, but only after the
	// barrier was read once (if no notice read it yet): ended at once,
	// the begin's connection closed and the AM forgot the rank's arrival
	// before it could be asked which ranks the barrier waited for, and a
	// short deadline's error named none.
	bctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	w := &barrierWatch{c: c, req: req, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(barrierNotice, w.check)
	w.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		read := w.last != nil
		w.mu.Unlock()
		if !read {
			if b, _ := w.read(time.Second); b != nil {
				w.mu.Lock()
				w.last = b
				w.mu.Unlock()
			}
		}
		cancel(nil)
	})
	defer stop()
	g, err := c.client.Begin(bctx, req)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
		err = ctx.Err() // bctx was ended for ctx: say why ctx ended
	case err != nil:
		if cause := context.Cause(bctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause // the watch gave up on the AM
		}
	}
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	last := w.last
	w.mu.Unlock()
	var ae *am.APIError
	if errors.As(err, &ae) && ae.Code == am.CodeTopology && strings.Contains(ae.Message, "--node") {
		// The AM's hint speaks prismctl's flags; a program linking the
		// library sets Config fields.
		err = fmt.Errorf("%w (in the host library: Config.Node (prismctl --node, PRISM_NODE), Config.NodeIface (prismctl --node-iface, PRISM_NODE_IFACE))", err)
	}
	if err != nil && ctx.Err() != nil {
		c.abandon(req, ctx.Err().Error())
		if last != nil {
			err = fmt.Errorf("%w; %s", err, describeBarrier(last))
		}
	}
	return g, err
}

// abandonReach bounds how long a cancelled call tries to tell the AM
// (the call returns only after that: its next call must not reach the AM
// first).
const abandonReach = 2 * time.Second

// abandon tells the AM (POST /v1/abandon, docs/protocol.md 9.8) that this
// rank gives up invocation req.Seq before its grant: its context ended,
// or it was cancelled before its turn. The AM fails the invocation for
// every rank at once, naming this one, so all of them leave that sequence
// number with an error and their next calls meet again. Without it the
// AM withdrew the rank's arrival (as for a killed rank), the others waited
// the whole barrier timeout for it, and a retry of this rank took the next
// sequence number while the others still waited at this one. Best effort:
// an AM that does not know the request (404), or that cannot be reached,
// leaves the others to the barrier timeout as before.
func (c *Comm) abandon(req am.BeginRequest, reason string) {
	c.abandonAt(req, "", reason)
}

// abandonAt is abandon with the stage at which the call ended
// (am.AbandonPersistent: it ran on a persistent collective the rank
// already had, and did not complete).
func (c *Comm) abandonAt(req am.BeginRequest, stage, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonReach)
	defer cancel()
	_, _ = c.client.Abandon(ctx, am.AbandonRequest{BeginRequest: req, Reason: reason, Stage: stage})
}

// read reads the barrier of w's begin from the AM, waiting at most d: nil
// if the AM has none.
func (w *barrierWatch) read(d time.Duration) (*am.Barrier, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	job, group, seq := w.req.Job, w.req.Group, w.req.Seq
	l, err := w.c.client.OpsWhere(ctx, am.OpsFilter{Job: &job, Group: &group, Seq: &seq, NoOps: true})
	if err != nil {
		return nil, err
	}
	for i := range l.Barriers {
		x := &l.Barriers[i]
		if x.Job == w.req.Job && x.Group == w.req.Group && x.Seq == w.req.Seq {
			return x, nil
		}
	}
	return nil, nil
}

// check reads the barrier and reports it, then re-arms.
func (w *barrierWatch) check() {
	b, err := w.read(barrierAsk)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if err != nil {
		// A live AM answers GET /v1/ops at once, also while it holds
		// this begin. One that does not, several times in a row, is
		// gone or stopped (SIGSTOP: its socket still accepts, so the
		// begin alone would wait for ever): end the begin, saying so.
		if w.failed++; w.failed >= barrierLost {
			w.cancel(fmt.Errorf("%w: it stopped answering while rank %d waited at the barrier of job %d group %d seq %d (GET /v1/ops, %d times in a row: %v): "+
				"is 'prismctl am' still running, and not stopped?", am.ErrUnreachable, w.c.cfg.Rank, w.req.Job, w.req.Group, w.req.Seq, w.failed, err))
			return
		}
		w.timer.Reset(barrierRecheck)
		return
	}
	w.failed = 0
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
