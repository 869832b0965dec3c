// This file owns the communicator: its socket, the receive loop that hands
// frames to the operation they belong to, and the collective calls.

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// Options tune one collective call; nil means defaults.
type Options struct {
	// Acc is the accumulator policy: "kulisch" (KULISCH_FIXED, exact, the
	// default) or "fp32" (FP32_ARRIVAL, rounded in arrival order; FP32
	// input only).
	Acc string
	// Partial is the switch-to-switch partial format ("" = kulisch: auto,
	// fp32: fp32).
	Partial string
	// Output is the RESULT format ("" = the input format).
	Output string
	// KulischWidth in bits (0 = enough for Size exact terms).
	KulischWidth int
	// MTU is 576, 1500 or 9000 (0 = 1500).
	MTU int
	// Timeout is the inactivity bound of the operation: how long a
	// contributor, the leaf or the RESULT may stay silent (0 = the AM's
	// default, 5s).
	Timeout time.Duration
	// OpID pins the Operation ID (nil = the AM chooses).
	OpID *uint16
}

// Stats describe one finished collective.
type Stats struct {
	Grant       *am.Grant
	Setup       time.Duration // POST /v1/begin until the grant (barrier + setup)
	Transfer    time.Duration // grant until this rank's part completed
	Frames      uint64        // DATA frames sent (first transmissions)
	Retransmits uint64        // DATA frames retransmitted
	ResultDups  uint64        // duplicate RESULT frames received
}

// Conn is how a Comm moves frames: am.PacketConn on a real interface, a
// pipe in tests.
type Conn = am.Conn

// Comm is one rank's communicator. Its methods are safe for concurrent use;
// collectives started concurrently are matched across ranks in call order.
type Comm struct {
	cfg    Config
	conn   Conn
	client *am.Client
	mac    [6]byte
	seq    atomic.Uint64

	mu     sync.Mutex
	ops    map[parser.OpKey]*opRun
	closed bool
	done   chan struct{}
	rxErr  error
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
	conn, err := am.OpenConn(cfg.Iface)
	if err != nil {
		if strings.Contains(err.Error(), "is down") {
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
	if _, err := cl.Ops(ctx); err != nil {
		return nil, fmt.Errorf("host: rank %d: %w", cfg.Rank, err)
	}
	c := &Comm{cfg: cfg, conn: conn, client: cl, ops: map[parser.OpKey]*opRun{}, done: make(chan struct{})}
	copy(c.mac[:], conn.MAC())
	go c.readLoop()
	return c, nil
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.cfg.Rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.cfg.Size }

// Close stops the Comm. Running collectives fail with ErrClosed.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.done
	return err
}

// frameBufSize holds the largest frame: Ethernet header + jumbo MTU.
const frameBufSize = parser.EthLen + parser.MTUJumbo

// framePool holds frame buffers handed from the reader to an operation;
// the slice length is the frame length, the capacity frameBufSize.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, frameBufSize); return &b }}

func (c *Comm) readLoop() {
	defer close(c.done)
	buf := make([]byte, frameBufSize+64)
	for {
		n, err := c.conn.ReadFrame(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				c.fail(ErrClosed)
				return
			}
			if errors.Is(err, syscall.ENETDOWN) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV) {
				c.fail(fmt.Errorf("%w: %s: %v", ErrInterfaceDown, c.cfg.Iface, err))
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if n < parser.HdrOff+parser.OpIDLen || n > frameBufSize {
			continue
		}
		key, ok := parser.PeekOpKey(buf[parser.EthLen:n])
		if !ok {
			continue
		}
		c.mu.Lock()
		op := c.ops[key]
		c.mu.Unlock()
		if op == nil {
			continue
		}
		bp := framePool.Get().(*[]byte)
		*bp = (*bp)[:n]
		copy(*bp, buf[:n])
		select {
		case op.in <- bp:
		default:
			// The operation is not keeping up: a drop, which the stream
			// windows recover like any loss.
			framePool.Put(bp)
		}
	}
}

// fail ends every running operation with err (socket gone).
func (c *Comm) fail(err error) {
	c.mu.Lock()
	c.rxErr = err
	ops := make([]*opRun, 0, len(c.ops))
	for _, op := range c.ops {
		ops = append(ops, op)
	}
	c.mu.Unlock()
	for _, op := range ops {
		op.abort(err)
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
	c.ops[op.key] = op
	return nil
}

func (c *Comm) unregister(op *opRun) {
	c.mu.Lock()
	if c.ops[op.key] == op {
		delete(c.ops, op.key)
	}
	c.mu.Unlock()
}

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
// send; recv may be send itself).
func (c *Comm) AllReduce(ctx context.Context, send, recv any, opts *Options) error {
	return c.AllReduceAsync(ctx, send, recv, opts).Wait()
}

// Reduce sums send over all ranks into recv at rank root; other ranks may
// pass a nil recv.
func (c *Comm) Reduce(ctx context.Context, send, recv any, root int, opts *Options) error {
	return c.ReduceAsync(ctx, send, recv, root, opts).Wait()
}

// AllReduceAsync starts an AllReduce; Wait on the Request.
func (c *Comm) AllReduceAsync(ctx context.Context, send, recv any, opts *Options) *Request {
	return c.start(ctx, "allreduce", send, recv, 0, opts)
}

// ReduceAsync starts a Reduce; Wait on the Request.
func (c *Comm) ReduceAsync(ctx context.Context, send, recv any, root int, opts *Options) *Request {
	return c.start(ctx, "reduce", send, recv, root, opts)
}

func (c *Comm) start(ctx context.Context, coll string, send, recv any, root int, opts *Options) *Request {
	// The sequence number is taken at call time: ranks match collectives
	// in call order, as in MPI.
	seq := c.seq.Add(1) - 1
	r := &Request{done: make(chan struct{})}
	if opts == nil {
		opts = &Options{}
	}
	go func() {
		defer close(r.done)
		r.stats, r.err = c.run(ctx, seq, coll, send, recv, root, *opts)
	}()
	return r
}
