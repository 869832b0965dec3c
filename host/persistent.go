// This file owns persistent collectives: one collective created once and
// run many times over the same buffers, as MPI-4's MPI_Allreduce_init and
// MPI_Start. An ordinary collective costs a runtime-channel round trip to
// the AM (the barrier and grant) and the AM's CONTROL exchange with every
// switch (STAGE, COMMIT, COMPLETE, RELEASE); for a small vector that was
// nearly all of its time and most of the CPU it cost everyone. A persistent
// collective is one granted operation whose vector holds K invocations of
// n elements: invocation i is elements [i*n, (i+1)*n), each rank's last
// DATA frame of an invocation carries PUSH (docs/protocol.md section 6.1)
// so the switches forward that short tail at once and do not time the rank
// out while it rests, and a keepalive tells the AM the rank still lives.
// After K invocations the next Start sets up a fresh operation, which every
// rank does at the same invocation because K depends only on n.

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

// maxPersistentLen bounds the vector of a persistent collective's
// operation (K*n elements): the switches' default capability limit.
const maxPersistentLen = 1 << 31

// maxInvocations bounds K, so that a long-lived job still renews its
// operation (and its Operation ID generation) now and then. A variable so
// that tests can renew after a few invocations.
var maxInvocations uint32 = 1 << 20

// Persistent is a collective bound to its buffers, run with Start or Run
// as often as needed and freed with Close. Create it with AllReduceInit or
// ReduceInit on every rank; like every collective of a Comm, ranks must
// create and run persistent collectives in the same order. One invocation
// runs at a time; the application fills send before Start and reads recv
// after the invocation completed.
type Persistent struct {
	c    *Comm
	coll string
	root int
	send elems
	recv elems
	opts Options
	n    uint32
	k    uint32 // invocations one operation holds
	// auto: the Comm's automatic persistence runs it (auto.go): its
	// invocations are separate calls, each with its own context.
	auto bool

	mu  sync.Mutex // the fields below
	op  *opRun     // nil: none granted (before the first Start, after K)
	inv uint32     // invocations run on op
	// reserved counts the invocations Start (or the Comm's automatic
	// persistence) took, at call time: every K-th sets up an operation.
	reserved uint64
	total    int // invocations started, over every operation
	running  bool
	err      error // sticky: a failed invocation ends the collective
	closed   bool
	stopKA   chan struct{} // closes the current operation's keepalive loop
	kaDone   chan struct{}
	// last is the operation's counters after the previous invocation: the
	// loop reports them cumulated over the operation.
	last opResult
}

// AllReduceInit creates a persistent AllReduce of send into recv (same type
// and length; recv may be send). It returns at once: the first Start sets
// up the operation with every rank.
func (c *Comm) AllReduceInit(send, recv any, opts *Options) (*Persistent, error) {
	return c.initPersistent("allreduce", send, recv, 0, opts)
}

// ReduceInit creates a persistent Reduce of send into recv at rank root
// (other ranks may pass a nil recv).
func (c *Comm) ReduceInit(send, recv any, root int, opts *Options) (*Persistent, error) {
	return c.initPersistent("reduce", send, recv, root, opts)
}

func (c *Comm) initPersistent(coll string, send, recv any, root int, opts *Options) (*Persistent, error) {
	oe := func(err error) error { return &OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin", Err: err} }
	if err := c.usable(); err != nil {
		return nil, oe(err)
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.OpID != nil {
		return nil, oe(errors.New("a persistent collective cannot pin its Operation ID (Options.OpID): it renews its operation after many invocations"))
	}
	sv, rv, err := c.checkBuffers(coll, send, recv, root, opts)
	if err != nil {
		return nil, oe(err)
	}
	p := c.newPersistent(coll, root, sv, rv, *opts)
	if p == nil {
		return nil, oe(fmt.Errorf("%w: %d elements leave no room for a second invocation in one operation (at most %d)", ErrType, sv.n, maxPersistentLen/2))
	}
	return p, nil
}

// newPersistent is a persistent collective over checked buffers, or nil if
// one operation cannot hold two invocations of them.
func (c *Comm) newPersistent(coll string, root int, sv, rv elems, o Options) *Persistent {
	if sv.n > maxPersistentLen/2 {
		return nil
	}
	n := uint32(sv.n)
	k := uint32(1) // n = 0: every Start is a no-op (Start)
	if n > 0 {
		k = min(maxInvocations, maxPersistentLen/n)
	}
	return &Persistent{c: c, coll: coll, root: root, send: sv, recv: rv, opts: o, n: n, k: k}
}

// Run runs one invocation and waits for it.
func (p *Persistent) Run(ctx context.Context) error { return p.Start(ctx).Wait() }

// Start runs one invocation. Until its Request is done the invocation owns
// the buffers, as an MPI request does: send is read as the send window
// admits it and recv is written as results arrive. An invocation that
// fails, or whose context is cancelled, ends the persistent collective:
// later Starts return that error, or ErrEarlierCancelled after a
// cancelled one (their own contexts were not cancelled, so they do not
// match context.Canceled). A Start on a closed Comm fails at once
// with ErrClosed, after p.Close with ErrPersistentClosed.
func (p *Persistent) Start(ctx context.Context) *Request {
	// A closed Comm refuses the Start before anything is sent (its
	// loop is gone; a setup would wait at the AM's barrier for nothing).
	cerr := p.c.usable()
	p.mu.Lock()
	err := p.err
	switch {
	case cerr != nil:
		err = &OpError{Collective: p.coll, Rank: p.c.cfg.Rank, Stage: "begin", Err: cerr}
	case p.closed:
		err = p.closedError()
	case p.running:
		err = &OpError{Collective: p.coll, Rank: p.c.cfg.Rank, Stage: "begin", Err: fmt.Errorf("%w: Wait for it before the next Start", ErrBusy)}
	case p.n == 0 && err == nil:
		// Count 0: a no-op, as an ordinary call of 0 elements.
		p.mu.Unlock()
		return failedRequest(nil)
	}
	if err != nil {
		if cerr == nil && !p.closed && (p.running || p.err != nil) {
			// Ended by a failed invocation, or started again before the
			// previous one finished here (whether that is so differs
			// between ranks with their timing): a call all the same,
			// which takes its sequence number and its invocation
			// (reserve) as the other ranks' Start does, whether theirs
			// is refused too or runs (and fails without this rank). The
			// AM hears that this rank will not come for it.
			_, seq, nth := p.reserve()
			p.mu.Unlock()
			r := &Request{done: make(chan struct{}), err: err}
			go func() {
				defer close(r.done)
				p.abandonInvocation(seq, nth, err)
			}()
			return r
		}
		p.mu.Unlock()
		return failedRequest(err)
	}
	p.running = true
	renew, seq, nth := p.reserve()
	send, recv := p.send, p.recv
	p.mu.Unlock()
	r := &Request{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.stats, r.err = p.runInvocation(ctx, renew, seq, nth, send, recv)
		r.err = ownEnd(ctx, r.err)
	}()
	return r
}

// closedError is the error of a call on p after p.Close: the Comm's
// ErrClosed if the Comm was closed too (Close closes its persistent
// collectives), else ErrPersistentClosed, which does not say the Comm is.
func (p *Persistent) closedError() error {
	err := ErrPersistentClosed
	if p.c.usable() != nil {
		err = ErrClosed
	}
	return &OpError{Collective: p.coll, Rank: p.c.cfg.Rank, Stage: "begin", Err: err}
}

// reserve takes the next invocation at call time, under p.mu: whether it
// sets up a new operation (first Start, after K), then its sequence
// number, taken now like every collective's, and its number (from 1, over
// every operation).
//
// Every invocation takes a sequence number, also one that runs on the
// operation it has with no AM round trip: ranks match setups by sequence
// number, and a rank can run a call on its persistent collective while
// another runs the same call through the AM (it called another shape, or
// its collective of the shape failed and the other's did not). Numbered
// only at setups, such ranks drifted apart for good: later calls met the
// others' earlier calls and, of one shape, summed them without an error.
// An invocation that does not complete tells the AM it abandons its
// number (abandonInvocation), so a rank that waits there for it hears at
// once.
func (p *Persistent) reserve() (renew bool, seq uint64, nth int) {
	renew = p.reserved%uint64(p.k) == 0
	p.reserved++
	seq = p.c.seq.Add(1) - 1
	return renew, seq, int(p.reserved)
}

// abandonInvocation tells the AM (protocol 9.8, stage persistent) that
// this rank will not come to the barrier of seq: it ran that call as
// invocation nth of this collective, with no AM round trip, and the
// invocation failed with err (or was not run). The body is the ordinary
// request of the shape, so a rank waiting there with another shape hears
// how the calls differ. A renewing invocation needs none: it asked the AM
// (begin abandons it when its context ends first).
func (p *Persistent) abandonInvocation(seq uint64, nth int, err error) {
	p.mu.Lock()
	sv := p.send
	p.mu.Unlock()
	req := p.c.beginRequest(seq, p.coll, sv, p.root, p.opts)
	reason := fmt.Sprintf("it ran this call as invocation %d of its persistent %s of %d %s elements, which did not complete: %v",
		nth, p.coll, p.n, am.FormatName(sv.format), err)
	const most = 400 // the AM quotes it in every waiting rank's error
	if len(reason) > most {
		reason = strings.ToValidUTF8(reason[:most], "") + "..."
	}
	p.c.abandonAt(req, am.AbandonPersistent, reason)
}

// abandonment is abandonInvocation of one invocation, run at most once in
// the background: a failed invocation starts it when it fails, before its
// diagnosis, since both wait for the AM and, run one after the other, a
// rank cut off from the AM waited for the sum of their bounds (5 s more
// than the diagnosis alone) before its call returned.
type abandonment struct {
	p    *Persistent
	seq  uint64
	nth  int
	once sync.Once
	done chan struct{}
}

// start begins telling the AM, with err as the reason, if not begun yet.
func (a *abandonment) start(err error) {
	a.once.Do(func() {
		a.done = make(chan struct{})
		// Worded now: the diagnosis goes on adding to err meanwhile.
		reason := errors.New(err.Error())
		go func() {
			defer close(a.done)
			a.p.abandonInvocation(a.seq, a.nth, reason)
		}()
	})
}

// finish starts it if it has not started (err is the reason then) and
// waits until the AM heard it or its bound passed.
func (a *abandonment) finish(err error) {
	a.start(err)
	<-a.done
}

// runInvocation runs one reserved invocation over send and recv (the
// buffers bound at init; a shape's buffers of the call for automatic
// persistence) and records a failure as the collective's sticky error.
func (p *Persistent) runInvocation(ctx context.Context, renew bool, seq uint64, nth int, send, recv elems) (st Stats, err error) {
	var ab *abandonment
	if !renew {
		ab = &abandonment{p: p, seq: seq, nth: nth}
		defer func() {
			if err != nil && !errors.Is(err, ErrClosed) {
				ab.finish(err)
			}
		}()
	}
	p.mu.Lock()
	if err := p.err; err != nil {
		p.running = false
		p.mu.Unlock()
		return Stats{}, err
	}
	if p.closed || !renew && p.op == nil {
		// Closed (by its Comm, or evicted) while this call waited for its
		// turn.
		p.running = false
		p.mu.Unlock()
		return Stats{}, p.closedError()
	}
	p.running = true
	p.send, p.recv = send, recv
	p.mu.Unlock()
	st, err = p.invoke(ctx, renew, seq, ab)
	p.mu.Lock()
	p.running = false
	if err != nil && p.err == nil {
		p.err = err
		if cause := ctx.Err(); cause != nil {
			// This call's own context ended it: the calls after it (the
			// shape's queued calls, or an explicit Persistent's later
			// Starts) were not cancelled, and must not look as if they
			// were (errors.Is(err, context.Canceled) would tell a caller
			// its own context ended). They fail all the same: the other
			// ranks' invocation failed with this one.
			p.err = &OpError{Collective: p.coll, Rank: p.c.cfg.Rank, Stage: "begin",
				Err: fmt.Errorf("%w: invocation %d was cancelled (%v), which fails it on every rank: the collective cannot go on", ErrEarlierCancelled, nth, cause)}
		}
	}
	p.mu.Unlock()
	return st, err
}

// invoke runs the next invocation, setting up the operation first if
// renew. ab, if not nil, is the invocation's abandonment, started as soon
// as the invocation fails so that it runs alongside the diagnosis.
func (p *Persistent) invoke(ctx context.Context, renew bool, seq uint64, ab *abandonment) (Stats, error) {
	c := p.c
	var st Stats
	if renew {
		p.mu.Lock()
		old := p.op
		p.op, p.inv = nil, 0
		p.mu.Unlock()
		if old != nil {
			p.retire(old, nil)
		}
		req := c.beginRequest(seq, p.coll, p.send, p.root, p.opts)
		req.Persistent, req.VectorLen, req.InvocationLen = true, p.n*p.k, p.n
		t0 := time.Now()
		g, err := c.begin(ctx, req)
		if err != nil {
			return st, &OpError{Collective: p.coll, Rank: c.cfg.Rank, Stage: "begin", Err: err}
		}
		st.Setup = time.Since(t0)
		if !g.Persistent || g.VectorLen != req.VectorLen {
			return st, &OpError{Collective: p.coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "begin",
				Err: fmt.Errorf("the coordinator granted a non-persistent operation (persistent %v, vector_len %d, want %d): is it older than this library?", g.Persistent, g.VectorLen, req.VectorLen)}
		}
		op, err := newOp(c, g, p.send, p.recv)
		if err != nil {
			return st, &OpError{Collective: p.coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "begin", Err: err}
		}
		op.n = p.n
		if err := c.register(op); err != nil {
			return st, &OpError{Collective: p.coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "begin", Err: err}
		}
		p.mu.Lock()
		p.op, p.last = op, opResult{}
		p.stopKA, p.kaDone = make(chan struct{}), make(chan struct{})
		op.aliveNow = make(chan struct{}, 1)
		go p.keepalive(op, p.stopKA, p.kaDone)
		p.mu.Unlock()
		c.mu.Lock()
		if c.persistents == nil {
			c.persistents = map[*Persistent]struct{}{}
		}
		c.persistents[p] = struct{}{}
		c.mu.Unlock()
	}
	p.mu.Lock()
	op, inv := p.op, p.inv
	p.inv++
	p.total++
	number := p.total
	op.bufs.Store(&opBufs{send: p.send, recv: p.recv})
	p.mu.Unlock()
	st.Grant = op.g
	drops0 := c.kernelDrops()
	t1 := time.Now()
	op.startReq.Store(inv + 1)
	c.kick()
	res := c.await(ctx, op)
	st.Transfer = time.Since(t1)
	p.mu.Lock()
	st.Frames, st.Retransmits, st.ResultDups = res.frames-p.last.frames, res.retransmits-p.last.retransmits, res.dups-p.last.dups
	st.WireSent, st.WireReceived = res.wireTx-p.last.wireTx, res.wireRx-p.last.wireRx
	p.last = res
	p.mu.Unlock()
	st.KernelDrops = c.kernelDrops() - drops0
	if res.err == nil {
		op.completed.Store(uint32(inv + 1))
		if op.draining.Load() {
			select {
			case op.aliveNow <- struct{}{}:
			default:
			}
		}
		return st, nil
	}
	e := c.opError(p.coll, op.g, res.err)
	e.Invocation = number
	if ab != nil && !errors.Is(res.err, ErrClosed) {
		// Both wait for the AM: side by side, a rank cut off from it
		// waits for one bound, not their sum.
		ab.start(e)
	}
	p.retire(op, e)
	return st, e
}

// retire ends op: the keepalive stops and the AM hears done (ok, which
// ABORTs every switch's context) in the background, or the failure, whose
// diagnosis it waits for and adds to failed.
func (p *Persistent) retire(op *opRun, failed *OpError) {
	c := p.unregister()
	if failed != nil {
		// The loop already dropped a failed operation.
		c.diagnose(op.g, failed, op.completed.Load())
		return
	}
	p.letGo(op, am.DoneRequest{Rank: c.cfg.Rank, OK: true})
}

// retireCancelled frees a resting operation whose invocation nth this rank
// cancelled before it ran (skipInvocation). The other ranks run that
// invocation without this one, so it reports a local failure, with the
// invocations it completed: once the other ranks report as many (they
// may still be receiving the last one's RESULT), or a bound passes, the
// AM ABORTs the operation and the switches' announcement fails the
// others' invocation. Reported done ok, it left them to their switches'
// timeout, and the AM then named this rank as one that stopped
// contributing.
func (p *Persistent) retireCancelled(op *opRun, nth int, cause error) {
	c := p.unregister()
	p.letGo(op, am.DoneRequest{Rank: c.cfg.Rank, OK: false, Local: true, Invocations: op.completed.Load(),
		Error: fmt.Sprintf("invocation %d was cancelled before it ran on this rank: %v", nth, cause)})
}

// unregister stops the operation's keepalive and forgets p on its Comm.
func (p *Persistent) unregister() *Comm {
	p.mu.Lock()
	stop, kaDone := p.stopKA, p.kaDone
	p.stopKA, p.kaDone = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-kaDone
	}
	c := p.c
	c.mu.Lock()
	delete(c.persistents, p)
	c.mu.Unlock()
	return c
}

// letGo hands a resting operation back to the loop and reports it to the
// AM (done). Resting between invocations: nothing is in flight; the
// replay buffers can serve the next collective once the loop let go.
func (p *Persistent) letGo(op *opRun, report am.DoneRequest) {
	c := p.c
	err := ErrClosed
	op.cancel.Store(&err)
	c.kick()
	c.report(doneReport{id: op.g.ID, coll: p.coll, req: report})
}

// keepalive tells the AM every g.KeepaliveMS that this rank still runs the
// operation, and how many of its invocations completed here, until stop
// closes. While the AM says the operation drains (another rank failed
// locally and the AM waits for this one to finish the invocations that
// rank completed), a completed invocation is reported at once. A
// keepalive the AM refuses is not fatal here: if the AM gave up on the
// operation, the switches were ABORTed and the next invocation fails with
// the AM's diagnosis.
func (p *Persistent) keepalive(op *opRun, stop, done chan struct{}) {
	defer close(done)
	g := op.g
	every := time.Duration(g.KeepaliveMS) * time.Millisecond
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	// A keepalive in flight ends when stop closes: unregister waits for
	// this goroutine, and a failed invocation's error waited up to a
	// whole keepalive period (2.5 s at the default timeout) for a request
	// to an AM the failure had cut off.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	go func() {
		<-stop
		cancelBase()
	}()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-op.aliveNow:
		}
		ctx, cancel := context.WithTimeout(base, every)
		n := op.completed.Load()
		st, err := p.c.client.Alive(ctx, g.ID, am.AliveRequest{Rank: p.c.cfg.Rank, Invocations: n})
		cancel()
		if err == nil {
			op.draining.Store(st.State == "draining")
			if st.State == "draining" && op.completed.Load() > n {
				// One completed while the AM answered: say so now.
				select {
				case op.aliveNow <- struct{}{}:
				default:
				}
			}
		}
	}
}

// Close frees the persistent collective: the AM releases the switches'
// contexts once every rank closed it. It fails if an invocation is still
// running.
func (p *Persistent) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if p.running {
		p.mu.Unlock()
		return &OpError{Collective: p.coll, Rank: p.c.cfg.Rank, Stage: "done", Err: fmt.Errorf("%w: Wait for it before Close", ErrBusy)}
	}
	p.closed = true
	op, failed := p.op, p.err != nil
	p.op = nil
	p.mu.Unlock()
	if op != nil && !failed {
		p.retire(op, nil)
	}
	return nil
}

// Invocations returns how many invocations one operation of p carries
// before p sets up the next.
func (p *Persistent) Invocations() int { return int(p.k) }
