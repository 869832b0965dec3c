// This file owns the communicator: its socket, the event loop that moves
// every frame of every running collective, and the collective calls.

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/host/internal/rawio"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// Options tune one collective call; nil means defaults.
type Options struct {
	// Acc is the accumulator policy: "kulisch" (KULISCH_FIXED, exact, the
	// default) or "fp32" (FP32_ARRIVAL, rounded in arrival order; FP32
	// input and FP32 output only: the switches advertise no other tuple
	// for it, and the AM refuses the call with ErrSetup). Case does not
	// matter ("FP32" is "fp32").
	//
	// Under "kulisch" every element of recv is the exact sum rounded once
	// to the output format, nearest, ties to even, whatever the tree or
	// the arrival order (package kulisch): a NaN term gives the canonical
	// quiet NaN (FP32 0x7FC00000, FP16 0x7E00, BF16 0x7FC0), +Inf and -Inf
	// together give it too, an exact sum of 0 is -0 only when every term
	// was -0, and a sum beyond the format's range is ±Inf. An INT8 output
	// holds only exact integers in -128..127: one element whose sum is
	// outside, or not an integer (FP32 input into Output "int8"), fails the
	// whole call with ErrInexact (no wrapping, no clamping); sum INT8 into
	// Output "fp32" to keep such sums.
	Acc string
	// Partial is the switch-to-switch partial format: "" takes the
	// accumulator's default ("auto" under "kulisch", "fp32" under
	// "fp32"). Under "kulisch" prismd's switches take "auto" or
	// "kulisch"; under "fp32" only "fp32". Any other name the protocol
	// lists ("int8", "fp16", "bf16", or "auto" with "fp32") is a tuple no
	// prismd switch advertises, and the AM refuses the call with ErrSetup
	// once every rank has arrived.
	Partial string
	// Output is the RESULT format ("" = the input format): "int8", "fp16",
	// "bf16" or "fp32", the element type recv must have. Every rank sets
	// the same. Summing INT8 into "fp32" keeps sums INT8 cannot hold.
	Output string
	// KulischWidth in bits (0 = enough for Size exact terms).
	KulischWidth int
	// MTU is 576, 1500 or 9000 (0 = 1500).
	MTU int
	// Timeout is the inactivity bound of the operation: how long a
	// contributor, the leaf or the RESULT may stay silent. It travels to
	// the AM in whole milliseconds (rounded down), so it is 0 (the AM's
	// default: prismctl am --timeout-ms, 5s unless set) or within
	// MinTimeout..MaxTimeout; a call with any other value fails before
	// anything is sent. It does not bound the wait at the AM's barrier
	// for the other ranks (prismctl am --barrier-timeout, 2 minutes by
	// default): bound a whole call with its context.
	Timeout time.Duration
	// OpID pins the Operation ID (nil = the AM chooses). A call with one
	// is never run on a persistent collective (Config.PersistentShapes).
	OpID *uint16
	// Ordinary runs the call as an ordinary collective through the AM even
	// when its shape was called before (Config.PersistentShapes), and does
	// not count it as a call of its shape. Every rank sets the same.
	Ordinary bool

	// repeatsPersistent: the shape's next call will run on a persistent
	// collective (autoStart saw it for the first time), which the begin
	// request tells the AM (am.BeginRequest.RepeatsPersistent).
	repeatsPersistent bool
}

// The range of Options.Timeout besides 0. The AM counts the timeout in
// milliseconds, and 0 milliseconds asks for its default: a shorter
// positive Timeout would silently become that default. MaxTimeout is the
// AM's bound (it refuses a timeout_ms above 600000).
const (
	MinTimeout = time.Millisecond
	MaxTimeout = 10 * time.Minute
)

// Stats describe one finished collective.
type Stats struct {
	Grant       *am.Grant
	Setup       time.Duration // POST /v1/begin until the grant (barrier + setup)
	Transfer    time.Duration // grant until this rank's part completed
	Frames      uint64        // DATA frames sent (first transmissions)
	Retransmits uint64        // DATA frames retransmitted
	ResultDups  uint64        // duplicate RESULT frames received
	// WireSent and WireReceived are the bytes of the call's PRISM frames
	// this rank sent and received on its link, Ethernet header on: DATA
	// (retransmissions included) and its PROGRESS for RESULT out; RESULT
	// and the leaf's PROGRESS in. Ideally an ALLREDUCE moves its vector
	// once each way plus headers; a REDUCE's non-root receives only
	// PROGRESS.
	WireSent, WireReceived uint64
	// KernelDrops counts frames the kernel dropped on the rank's socket
	// during the transfer because its receive buffer was full (all
	// operations of the Comm; 0 when the Conn cannot tell).
	KernelDrops uint64
	// AutoPersistent says the Comm ran the call as an invocation of the
	// persistent collective it keeps for the call's shape
	// (Config.PersistentShapes); Setup is then zero but on the calls that
	// set up its operation.
	AutoPersistent bool
}

// Conn is how a Comm moves frames: NewComm's AF_PACKET socket pair on a
// real interface, a pipe in tests. A Conn that also implements BatchConn is
// used a batch at a time.
type Conn = am.Conn

// Comm is one rank's communicator. Its methods may be called from several
// goroutines at once (nothing races), but collectives are matched across
// ranks in the order each rank makes its calls, as in MPI: goroutines that
// race to call on one Comm make their calls in a different order on each
// rank, and calls of one shape are then summed with another goroutine's
// data on the other ranks without any error (calls of different shapes
// fail with ErrMismatch, or wait at the AM's barrier). Issue concurrent
// calls in a fixed order on every rank (one goroutine, or a ticket passed
// between them) and let them overlap in flight (the Async forms), or give
// each goroutine its own Comm (another Group of the job). NCCL asks the
// same of a communicator shared by threads.
//
// One goroutine, the event loop, owns the state of every running
// collective: it reads a batch of frames, applies each where it landed in
// the read buffer, then lets every operation send what its windows admit
// and flushes all of it with one system call. A batch therefore costs one
// wakeup and two system calls, and no frame is handed between goroutines
// (on a virtual machine a thread switch costs more than a frame).
type Comm struct {
	cfg    Config
	conn   Conn
	bconn  BatchConn
	client *am.Client
	mac    [6]byte
	seq    atomic.Uint64
	// session tells the AM this communicator's requests from those of an
	// earlier run of the job, which numbered its collectives from 0 too.
	session uint64

	// ops is the loop's snapshot of the registered operations, replaced
	// (copy on write, under mu) when one starts or ends, so the loop reads
	// it without a lock.
	ops atomic.Pointer[opTable]
	// downSince is when the loop first met the interface down (ENETDOWN on
	// a read or a send; mono time), 0 while frames arrive: a link that
	// flaps is ridden out by retransmission, and an operation that times
	// out meanwhile says the link was down. Owned by the event loop.
	downSince int64
	mu        sync.Mutex
	closed    bool
	rxErr     error
	done      chan struct{}

	// reports carries the done reports of successful collectives to the
	// reporter goroutine (report.go); reportErr is the first one the AM
	// did not take, returned by Close.
	reports       chan doneReport
	reportDone    chan struct{}
	reportMu      sync.RWMutex // senders hold it shared; stopReporter to close reports
	reportsClosed bool         // under reportMu
	reportErr     error        // under mu
	// persistents are the persistent collectives with a granted operation
	// (keepalives running), under mu: Close frees those left open.
	persistents map[*Persistent]struct{}
	// auto is automatic persistence (auto.go), under mu.
	auto autoShapes
	// presenceStop ends the presence stream (presence.go), which closes
	// presenceDone; nil when none runs.
	presenceStop context.CancelFunc
	presenceDone chan struct{}
	presenceUp   atomic.Bool // the AM holds the stream now
	// presenceFirst is closed when the first stream opened or failed
	// (presenceOnce): NewComm waits for it.
	presenceFirst chan struct{}
	presenceOnce  sync.Once

	// slabs holds the DATA replay buffers of finished collectives for the
	// next ones (takeSlab), under slabMu.
	slabMu sync.Mutex
	slabs  stream.BufferPool
}

// maxSlabsPerSize bounds the replay buffers kept per size: enough for a
// few collectives in flight at once.
const maxSlabsPerSize = 4

// takeSlab returns the replay buffers of a finished collective's DATA
// window of n bytes, or nil (the window then allocates its own). On a
// virtual machine, faulting in a new window's 64 jumbo buffers (577 KB)
// cost a rank 8 ms per collective, a tenth of a 1M-element ALLREDUCE.
func (c *Comm) takeSlab(n int) []byte {
	c.slabMu.Lock()
	defer c.slabMu.Unlock()
	return c.slabs.Take(n)
}

// putSlab keeps b for takeSlab; the window it served must not be used
// to send again.
func (c *Comm) putSlab(b []byte) {
	c.slabMu.Lock()
	defer c.slabMu.Unlock()
	c.slabs.Put(b)
}

// NewComm opens the rank's interface and checks that the coordinator
// answers.
func NewComm(ctx context.Context, cfg Config) (*Comm, error) {
	if !littleEndian() {
		return nil, errors.New("host: big-endian hosts are not supported (values are sent in memory order)")
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conn, err := openPacketConn(cfg.Iface)
	if err != nil {
		if errors.Is(err, rawio.ErrDown) {
			return nil, fmt.Errorf("%w: %v", ErrInterfaceDown, err)
		}
		return nil, fmt.Errorf("host: %w", err)
	}
	c, err := NewCommConn(ctx, cfg, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewCommConn is NewComm over an already open Conn (tests, custom sockets).
// The Comm owns conn and closes it.
func NewCommConn(ctx context.Context, cfg Config, conn Conn) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl := am.NewClient(cfg.Coordinator)
	cl.RetryFor = cfg.ConnectTimeout
	// Any answer proves an AM listens; this job's barriers are the least
	// it can send (the whole list grows with every finished operation).
	job, group := cfg.Job, cfg.Group
	if _, err := cl.OpsWhere(ctx, am.OpsFilter{Job: &job, Group: &group, NoOps: true}); err != nil {
		return nil, fmt.Errorf("host: rank %d: %w", cfg.Rank, err)
	}
	c := newComm(cfg, conn, cl)
	c.startPresence()
	go c.loop()
	return c, nil
}

func newComm(cfg Config, conn Conn, cl *am.Client) *Comm {
	c := &Comm{slabs: stream.BufferPool{MaxPerSize: maxSlabsPerSize}, cfg: cfg, conn: conn, bconn: asBatch(conn), client: cl, done: make(chan struct{}),
		reports: make(chan doneReport, reportQueue), reportDone: make(chan struct{}), session: am.NewSession()}
	c.ops.Store(&opTable{})
	go c.reporter()
	copy(c.mac[:], conn.MAC())
	return c
}

func (c *Comm) kernelDrops() uint64 {
	if d, ok := c.conn.(dropCounter); ok {
		return d.KernelDrops()
	}
	return 0
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.cfg.Rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.cfg.Size }

// Close stops the Comm. Running collectives fail with ErrClosed, and
// persistent collectives left open are closed. It waits for the done
// reports of finished collectives to reach the AM (each bounded by
// reportTimeout) and returns the first that did not.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	open := make([]*Persistent, 0, len(c.persistents))
	for p := range c.persistents {
		open = append(open, p)
	}
	c.mu.Unlock()
	// A resting one is freed now (its done report is among those waited
	// for below); one whose invocation runs fails with the loop, and its
	// failure report stops its keepalive.
	for _, p := range open {
		_ = p.Close()
	}
	err := c.conn.Close()
	<-c.done
	c.stopReporter()
	c.stopPresence()
	c.client.CloseIdleConnections() // its done reports are sent: nothing more to ask
	c.mu.Lock()
	rerr := c.reportErr
	c.mu.Unlock()
	return errors.Join(err, rerr)
}

// loop is the event loop (see Comm).
func (c *Comm) loop() {
	defer close(c.done)
	l := newLoop(c)
	for {
		err := l.iterate()
		if err == nil {
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			err = ErrClosed
		}
		c.fail(err)
		return
	}
}

// evLoop is the event loop's state: its read buffers, the batch views of
// them and the transmit queue every operation shares.
type evLoop struct {
	c     *Comm
	bufs  [rxBatch][frameBufSize]byte
	views [rxBatch][]byte
	sizes [rxBatch]int
	tx    txQueue
	// readErrs counts consecutive read errors that are neither a closed
	// socket nor a dead interface (retried, bounded).
	readErrs int
}

// maxReadErrs bounds consecutive unexplained read errors before the Comm
// gives up (each is followed by a 1 ms pause).
const maxReadErrs = 1000

func newLoop(c *Comm) *evLoop {
	l := &evLoop{c: c, tx: newTxQueue(c.bconn, c.cfg.Iface)}
	l.tx.down = func() { c.linkDown(mono()) }
	for i := range l.bufs {
		l.views[i] = l.bufs[i][:]
	}
	return l
}

// iterate is one turn of the loop: service every operation (cancel, send,
// retransmit, complete, expire) and flush, then wait for a batch (or the
// next tick while operations run) and apply it. It allocates nothing.
func (l *evLoop) iterate() error {
	c := l.c
	// While collectives run the read wakes at least every tick for their
	// timers. A collective registering (or being cancelled) kicks the
	// loop by moving the deadline to the past. So that no kick is lost,
	// the table is read again after the deadline is set: a change before
	// that read is seen here (and the deadline set for it), one after it
	// kicks the read below.
	tab := c.ops.Load()
	for {
		if err := c.bconn.SetReadDeadline(wakeAt(*tab)); err != nil {
			return err
		}
		t2 := c.ops.Load()
		if t2 == tab {
			break
		}
		tab = t2
	}
	ops := *tab
	now := mono()
	started := false
	for _, op := range ops {
		paused := op.state == opPaused
		op.service(now, &l.tx)
		started = started || paused && op.state == opRunning
	}
	if started {
		// A persistent collective's invocation began after the read
		// deadline was set from its resting state (no timers): give the
		// new invocation its tick. A Start that comes after this kicks
		// the read as usual.
		if err := c.bconn.SetReadDeadline(time.Now().Add(tick)); err != nil {
			return err
		}
		for _, op := range ops {
			if op.state == opPaused && op.startReq.Load() != 0 {
				c.kick()
				break
			}
		}
	}
	if err := l.tx.flush(); err != nil {
		return err
	}
	n, err := c.bconn.ReadBatch(l.views[:], l.sizes[:])
	if err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil
		case errors.Is(err, net.ErrClosed):
			return err
		case errors.Is(err, syscall.ENETDOWN):
			// The kernel reports a link going down once per socket (the
			// socket receives again when it comes back up): frames lost
			// meanwhile are retransmitted, and the operations' timeouts
			// bound how long a link may stay down.
			c.linkDown(mono())
			time.Sleep(time.Millisecond)
			return nil
		case errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV):
			return fmt.Errorf("%w: %s: %v", ErrInterfaceDown, c.cfg.Iface, err)
		}
		if l.readErrs++; l.readErrs > maxReadErrs {
			return fmt.Errorf("host: reading %s failed %d times in a row: %w", c.cfg.Iface, l.readErrs, err)
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	l.readErrs = 0
	if n > 0 {
		c.downSince = 0
	}
	l.dispatch(ops, n, mono())
	return nil
}

// wakeAt is when the loop must look at ops again without input: a tick
// away while any runs (timers), at the end of the earliest linger when they
// only linger (an idle rank does not tick), never when there are none.
func wakeAt(ops opTable) time.Time {
	if len(ops) == 0 {
		return time.Time{}
	}
	now := mono()
	next := now + int64(tick)
	soonest := int64(-1)
	for _, op := range ops {
		w := next
		switch op.state {
		case opLingering:
			w = max(op.lingerUntil, now)
		case opPaused:
			continue // a resting persistent collective has no timer
		}
		if soonest < 0 || w < soonest {
			soonest = w
		}
	}
	if soonest < 0 {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(soonest - now))
}

// dispatch applies the first n frames of the batch to their operations,
// in place in the read buffers; answers go to the transmit queue, which is
// flushed at the next turn's service, before anything could release a
// queued DATA buffer.
func (l *evLoop) dispatch(ops opTable, n int, now int64) {
	for i := 0; i < n; i++ {
		sz := l.sizes[i]
		if sz < parser.HdrOff+parser.OpIDLen {
			continue
		}
		f := l.views[i][:sz]
		key, ok := parser.PeekOpKey(f[parser.EthLen:])
		if !ok {
			continue
		}
		if op := ops.find(key); op != nil {
			op.input(now, f, &l.tx)
		}
	}
	for _, op := range ops {
		op.flushAck(now, &l.tx)
	}
}

// linkDown notes that the interface was found down at now (event loop).
func (c *Comm) linkDown(now int64) {
	if c.downSince == 0 {
		c.downSince = now
	}
}

// withLink adds to an operation's timeout that the interface went down and
// nothing arrived since, or that it has no carrier now (event loop): the
// silence it reports is likely the link's, not the switch's.
func (c *Comm) withLink(now int64, err error) error {
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, errAMFailed) {
		// (The AM's word that it failed the operation can come before
		// this rank's own timer: its own link is still worth saying.)
		return err
	}
	if c.downSince == 0 {
		// A link without carrier (its cable, or the switch port at the
		// far end, is down) reports nothing: the frames sent to it
		// vanish. Its state says so now.
		if ls, ok := c.conn.(linkStater); ok {
			if up, e := ls.Running(); e == nil && !up {
				return fmt.Errorf("%w; interface %s has no carrier (ip link shows NO-CARRIER or DOWN): check its cable and the switch port at its other end",
					err, c.cfg.Iface)
			}
		}
		return err
	}
	return fmt.Errorf("%w; interface %s went down %v ago and no frame has arrived since (ip link shows it; bring it up, or check its cable and the switch port)",
		err, c.cfg.Iface, time.Duration(now-c.downSince).Round(time.Millisecond))
}

// fail ends every running operation with err (socket gone).
func (c *Comm) fail(err error) {
	c.mu.Lock()
	c.rxErr = err
	ops := *c.ops.Load()
	c.ops.Store(&opTable{})
	c.mu.Unlock()
	for _, op := range ops {
		op.finish(err)
	}
}

func (c *Comm) register(op *opRun) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.rxErr != nil {
		if c.rxErr != nil {
			return c.rxErr
		}
		return ErrClosed
	}
	old := *c.ops.Load()
	t := make(opTable, 0, len(old)+1)
	t = append(append(t, old...), op)
	c.ops.Store(&t)
	c.kick()
	return nil
}

func (c *Comm) unregister(op *opRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.ops.Load()
	t := make(opTable, 0, len(old))
	for _, o := range old {
		if o != op {
			t = append(t, o)
		}
	}
	c.ops.Store(&t)
}

// kick makes the loop's current or next read return at once, so it looks
// at the operation table and the cancel flags again.
func (c *Comm) kick() { _ = c.bconn.SetReadDeadline(time.Unix(1, 0)) }

// Request is an asynchronous collective.
type Request struct {
	done  chan struct{}
	err   error
	stats Stats
}

// Wait blocks until the collective finished and returns its error.
func (r *Request) Wait() error {
	<-r.done
	return r.err
}

// Done is closed when the collective finished.
func (r *Request) Done() <-chan struct{} { return r.done }

// Stats returns the finished collective's statistics (zero before Done).
func (r *Request) Stats() Stats {
	select {
	case <-r.done:
		return r.stats
	default:
		return Stats{}
	}
}

// AllReduce sums send over all ranks into recv (same type and length as
// send; recv may be send itself). Results are written into recv as they
// arrive: after an error its contents are unspecified, in part new sums
// and in part what it held (send's values, if recv is send).
func (c *Comm) AllReduce(ctx context.Context, send, recv any, opts *Options) error {
	return c.AllReduceAsync(ctx, send, recv, opts).Wait()
}

// Reduce sums send over all ranks into recv at rank root; other ranks may
// pass a nil recv, and a recv they pass is neither read nor written. As
// for AllReduce, the root's recv is unspecified after an error. As
// MPI_Reduce, a rank other than the root returns once its contribution
// is delivered: a failure that only the root meets after that (ErrInexact
// for a sum its output format cannot hold, or the root's own failure) is
// the root's error alone, and the others' call returns nil. Reduce calls
// are not made persistent automatically (Config.PersistentShapes).
func (c *Comm) Reduce(ctx context.Context, send, recv any, root int, opts *Options) error {
	return c.ReduceAsync(ctx, send, recv, root, opts).Wait()
}

// AllReduceAsync starts an AllReduce; Wait on the Request. send and recv
// belong to the library until the Request is done: do not write send or
// read recv before (Done, Wait), as with MPI_Iallreduce.
func (c *Comm) AllReduceAsync(ctx context.Context, send, recv any, opts *Options) *Request {
	return c.start(ctx, "allreduce", send, recv, 0, opts)
}

// ReduceAsync starts a Reduce; Wait on the Request. The buffers belong to
// the library until the Request is done, as for AllReduceAsync.
func (c *Comm) ReduceAsync(ctx context.Context, send, recv any, root int, opts *Options) *Request {
	return c.start(ctx, "reduce", send, recv, root, opts)
}

func (c *Comm) start(ctx context.Context, coll string, send, recv any, root int, opts *Options) *Request {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	// A call refused here is no call at all: nothing reaches the AM or
	// the wire and it takes no sequence number, so the rank's next call
	// still meets the other ranks' next one. (A sequence number taken
	// before the buffers were checked put a rank whose call was refused
	// out of step with the others for good.)
	if err := c.usable(); err != nil {
		return failedRequest(&OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin", Err: err})
	}
	sv, rv, err := c.checkBuffers(coll, send, recv, root, &o)
	if err != nil {
		return failedRequest(&OpError{Collective: coll, Rank: c.cfg.Rank, Stage: "begin", Err: err})
	}
	if sv.n == 0 {
		// Count 0 is a no-op, as in MPI and NCCL: every rank passes 0, so
		// none takes a sequence number for it.
		return failedRequest(nil)
	}
	r, mark := c.autoStart(ctx, coll, sv, rv, root, o)
	if r != nil {
		return r
	}
	o.repeatsPersistent = mark != nil
	// The sequence number is taken at call time: ranks match collectives
	// in call order, as in MPI.
	seq := c.seq.Add(1) - 1
	r = &Request{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.stats, r.err = c.run(ctx, seq, coll, sv, rv, root, o, mark)
		r.err = ownEnd(ctx, r.err)
	}()
	return r
}

// failedRequest is a Request already finished with err (nil: a no-op).
func failedRequest(err error) *Request {
	r := &Request{done: make(chan struct{}), err: err}
	close(r.done)
	return r
}

// usable says why the Comm cannot take a call: closed (ErrClosed), or its
// event loop ended (the interface went away).
func (c *Comm) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.rxErr != nil:
		return c.rxErr
	}
	return nil
}

// GiveUpFirstCall tells the coordinator of cfg, for a rank whose Comm
// could not start (NewComm failed: a wrong interface, no permission), that
// it will not come to its first collective, an AllReduce (coll
// "allreduce") or a Reduce to root of send's type and length with opts:
// the other ranks' first call then fails at once, quoting reason, instead
// of waiting out the AM's barrier timeout (2 minutes by default) for this
// rank (protocol 9.8, stage refused). For launchers and CLIs that know the
// first call a rank was to make (prismctl allreduce does); best effort,
// bounded by a few seconds. It returns what the coordinator said.
func GiveUpFirstCall(ctx context.Context, cfg Config, coll string, send any, root int, opts *Options, reason string) error {
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	if err := cfg.Validate(); err != nil {
		// A rank outside its own size (its --size wrong, most likely)
		// can still say it will not come: the AM takes a refusal whose
		// body it would not take as a call (9.8) and tells the others
		// what was wrong with this one.
		if cfg.Coordinator == "" || cfg.Rank < 0 || cfg.Size < 1 || cfg.Rank < cfg.Size {
			return err
		}
	}
	sv, err := view(send)
	if err != nil || sv.n == 0 {
		return fmt.Errorf("host: no first call to give up: %v", err)
	}
	if opts == nil {
		opts = &Options{}
	}
	c := &Comm{cfg: cfg, session: am.NewSession()} // no loop, no Conn: only the request's fields
	req := c.beginRequest(0, coll, sv, root, *opts)
	req.MAC = "" // unknown: the interface did not open; the AM reads the topology's
	cl := am.NewClient(cfg.Coordinator)
	cl.RetryFor = 2 * time.Second
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cl.Abandon(ctx, am.AbandonRequest{BeginRequest: req, Reason: reason, Stage: am.AbandonRefused})
	return err
}
