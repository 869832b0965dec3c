// This file owns registration over CONTROL: STAGE and COMMIT of every
// planned switch, ABORT rollback on failure, RELEASE at the end. Each request
// is one transaction retransmitted with the same Transaction ID and identical
// bytes until its ACK arrives or the transaction times out
// (docs/protocol.md section 5, exchange rules).

package bitmapam

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// AMEndpoint is the Source Endpoint of the AM's requests (docs/protocol.md
// section 5: prismd's AM uses 0xFFFE by convention).
const AMEndpoint = 0xFFFE

// RegistrarConfig tunes a Registrar; zero fields mean defaults.
type RegistrarConfig struct {
	// RTO is the first retransmission timeout (default 20ms, doubling up to
	// 8x): a lab round trip is well under a millisecond.
	RTO time.Duration
	// Timeout bounds one transaction (default 5s: a loaded lab answers a
	// burst of concurrent STAGEs slowly).
	Timeout time.Duration
	// LinkMTU bounds a STAGE frame (default 9000: the AM checks the real
	// link MTU by the node's answer; a too-long frame is simply not
	// answered).
	LinkMTU int
	// Logf, if set, hears what Register did beyond its plan: the older
	// registration it replaced.
	Logf func(format string, args ...any)
}

// Registrar registers bitmap plans over a CONTROL socket (am.OpenConn in
// production, a pipe in tests). It owns the Conn.
type Registrar struct {
	conn    am.Conn
	cfg     RegistrarConfig
	mu      sync.Mutex
	nextTxn uint32
	pending map[uint32]chan parser.Control
	done    chan struct{}
}

// NewRegistrar starts the receive loop on conn.
func NewRegistrar(conn am.Conn, cfg RegistrarConfig) *Registrar {
	if cfg.RTO == 0 {
		cfg.RTO = 20 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.LinkMTU == 0 {
		cfg.LinkMTU = parser.MTUJumbo
	}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	r := &Registrar{conn: conn, cfg: cfg, pending: map[uint32]chan parser.Control{}, done: make(chan struct{}),
		// A random start keeps a restarted registrar from reusing a
		// Transaction ID a node still remembers.
		nextTxn: binary.BigEndian.Uint32(seed[:]) | 1}
	go r.readLoop()
	return r
}

// Close closes the Conn and stops the receive loop.
func (r *Registrar) Close() error {
	err := r.conn.Close()
	<-r.done
	return err
}

func (r *Registrar) readLoop() {
	defer close(r.done)
	buf := make([]byte, parser.EthLen+parser.MTUJumbo+64)
	mac := r.conn.MAC()
	for {
		n, err := r.conn.ReadFrame(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var c parser.Control
		if c.Decode(buf[:n], parser.Limits{}) != nil || c.Cmd != parser.CmdAck || string(buf[0:6]) != string(mac) {
			continue
		}
		c.Body = append([]byte(nil), c.Body...)
		r.mu.Lock()
		ch := r.pending[c.Txn]
		r.mu.Unlock()
		if ch != nil {
			select {
			case ch <- c:
			default:
			}
		}
	}
}

// command runs one transaction with node (node MAC dst) and checks the ACK.
func (r *Registrar) command(ctx context.Context, node string, dst net.HardwareAddr, op parser.OpKey, cmd parser.Command, body []byte) (parser.Ack, error) {
	ch := make(chan parser.Control, 4)
	r.mu.Lock()
	txn := r.nextTxn
	r.nextTxn++
	if r.nextTxn == 0 {
		r.nextTxn = 1
	}
	r.pending[txn] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, txn)
		r.mu.Unlock()
	}()
	c := parser.Control{Op: op, Txn: txn, SrcEP: AMEndpoint, Cmd: cmd, FragCount: 1, Body: body}
	var eth parser.Eth
	copy(eth.Dst[:], dst)
	copy(eth.Src[:], r.conn.MAC())
	frame := make([]byte, parser.EthLen+c.Len())
	n, err := c.Encode(frame, eth)
	if err != nil {
		return parser.Ack{}, &am.NodeError{Node: node, Cmd: cmd, Err: err}
	}
	frame = frame[:n]
	done, err := am.Expect(r.conn)
	if err != nil {
		return parser.Ack{}, &am.NodeError{Node: node, Cmd: cmd, Err: fmt.Errorf("listen for the reply: %w", err)}
	}
	defer done()
	deadline := time.Now().Add(r.cfg.Timeout)
	rto := r.cfg.RTO
	for attempt := 1; ; attempt++ {
		if err := r.conn.WriteFrame(frame); err != nil {
			return parser.Ack{}, &am.NodeError{Node: node, Cmd: cmd, Err: fmt.Errorf("send: %w", err)}
		}
		t := time.NewTimer(min(rto, max(time.Until(deadline), 0)))
	wait:
		for {
			select {
			case a := <-ch:
				if a.Op != op {
					continue
				}
				t.Stop()
				ack := a.Ack()
				if a.Status != parser.StatusOK {
					return ack, &am.NodeError{Node: node, Cmd: cmd, Status: a.Status, Detail: ack.Detail, State: ack.State}
				}
				return ack, nil
			case <-ctx.Done():
				t.Stop()
				return parser.Ack{}, &am.NodeError{Node: node, Cmd: cmd, Err: ctx.Err()}
			case <-t.C:
				break wait
			}
		}
		if !time.Now().Before(deadline) {
			return parser.Ack{}, &am.NodeError{Node: node, Cmd: cmd,
				Err: fmt.Errorf("%w after %d transmissions in %v (Transaction ID %#x)", am.ErrNoAck, attempt, r.cfg.Timeout, txn)}
		}
		rto = min(2*rto, 8*r.cfg.RTO)
	}
}

type target struct {
	op  *OpPlan
	sw  *SwitchPlan
	key string
}

func (p *Plan) targets() []target {
	var ts []target
	for _, o := range p.Ops {
		for _, s := range o.Switches {
			ts = append(ts, target{op: o, sw: s, key: fmt.Sprintf("%s (operation %d)", s.Name, o.Op.Op)})
		}
	}
	return ts
}

// each runs f on every target concurrently and returns the errors by key.
func each(ts []target, f func(t target) error) map[string]error {
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(t); err != nil {
				mu.Lock()
				errs[t.key] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// RegisterError is a failed registration: which switches refused or never
// answered, and whether the rollback reached every switch.
type RegisterError struct {
	Phase  string           // "STAGE", "COMMIT" or "ABORT"
	Errs   map[string]error // by target: "<switch> (operation <n>)"
	Orphan []string         // switches that never acknowledged ABORT
}

// Error states each distinct refusal once, with the operations it
// concerns: a job of many operations refused alike by one switch is one
// line, not one per operation.
func (e *RegisterError) Error() string {
	keys := make([]string, 0, len(e.Errs))
	for k := range e.Errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var msgs []string
	ops := map[string][]string{}
	for _, k := range keys {
		m := e.Errs[k].Error()
		if _, seen := ops[m]; !seen {
			msgs = append(msgs, m)
		}
		_, op, _ := strings.Cut(k, " (operation ")
		ops[m] = append(ops[m], strings.TrimSuffix(op, ")"))
	}
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		word := "operation"
		if len(ops[m]) > 1 {
			word = "operations"
		}
		parts[i] = fmt.Sprintf("%s [%s %s]", m, word, strings.Join(ops[m], ", "))
	}
	s := fmt.Sprintf("bitmapam: %s failed: %s", e.Phase, strings.Join(parts, "; "))
	if len(e.Orphan) > 0 {
		s += "; rollback incomplete: no ABORT acknowledgement from " + strings.Join(e.Orphan, ", ")
	}
	return s
}

// heldElsewhere reports why a STAGE failure could be cured by setting up
// again under a newer generation: every refusal is STALE_GENERATION (this
// generation is not newer than one the switch retired; bump 2^20, as the
// AM does) or BAD_STATE with an installed context's state (the switch
// holds an older generation: an earlier registration of the job nobody
// released, or one whose registrar died; bump 1). held lists those
// switches and states. Any other error: bump 0.
func (e *RegisterError) heldElsewhere() (bump uint32, held []string) {
	seen := map[string]bool{}
	for _, err := range e.Errs {
		var ne *am.NodeError
		if !errors.As(err, &ne) || ne.Err != nil {
			return 0, nil
		}
		switch {
		case ne.Status == parser.StatusStaleGeneration:
			bump = max(bump, 1<<20)
		case ne.Status == parser.StatusBadState && ne.State != parser.StateNone:
			bump = max(bump, 1)
			if h := fmt.Sprintf("%s (%v)", ne.Node, ne.State); !seen[h] {
				seen[h] = true
				held = append(held, h)
			}
		default:
			return 0, nil
		}
	}
	sort.Strings(held)
	return bump, held
}

// bumpGen moves every operation of p to a generation bump newer.
func (p *Plan) bumpGen(bump uint32) {
	p.Spec.Op.OpGen += bump
	for _, o := range p.Ops {
		o.Op.OpGen += bump
	}
}

// Register STAGEs every switch of every operation, then COMMITs them; on
// any failure it ABORTs all of them and returns a *RegisterError.
//
// A switch that still holds an older generation of one of the operations
// (the job registered before and never released, or left behind by a
// registrar that died) refuses STAGE with BAD_STATE and that context's
// state; one that retired this generation or a newer one refuses with
// STALE_GENERATION. The rollback's ABORT of the newer generation retires
// the held context too (docs/protocol.md section 5), so Register then sets
// up once more under the next generation (2^20 further after
// STALE_GENERATION), as the Aggregation Manager does (section 9.5), and
// tells Logf which registration it replaced. p then carries the
// generations registered (p.Spec.Op.OpGen included): hosts must plan from
// that spec.
func (r *Registrar) Register(ctx context.Context, p *Plan) error {
	err := r.register(ctx, p)
	var re *RegisterError
	if !errors.As(err, &re) || re.Phase != "STAGE" || len(re.Orphan) > 0 {
		return err
	}
	bump, held := re.heldElsewhere()
	if bump == 0 {
		return err
	}
	p.bumpGen(bump)
	if err := r.register(ctx, p); err != nil {
		return fmt.Errorf("%w (the second attempt, under operation generation %d; the first: %v)", err, p.Spec.Op.OpGen, re)
	}
	if r.cfg.Logf != nil {
		if len(held) > 0 {
			r.cfg.Logf("bitmapam: job %d: replaced an older registration still held by %s", p.Spec.Op.Job, strings.Join(held, ", "))
		} else {
			r.cfg.Logf("bitmapam: job %d: registered under operation generation %d: the switches had retired the first one tried", p.Spec.Op.Job, p.Spec.Op.OpGen)
		}
	}
	return nil
}

func (r *Registrar) register(ctx context.Context, p *Plan) error {
	ts := p.targets()
	bodies := map[string][]byte{}
	for _, t := range ts {
		b, err := p.StageBody(t.sw, r.cfg.LinkMTU)
		if err != nil {
			return err
		}
		bodies[t.key] = b
	}
	if errs := each(ts, func(t target) error {
		_, err := r.command(ctx, t.sw.Name, t.sw.MAC, t.op.Op, parser.CmdStage, bodies[t.key])
		return err
	}); len(errs) > 0 {
		return &RegisterError{Phase: "STAGE", Errs: errs, Orphan: r.abort(p)}
	}
	if errs := each(ts, func(t target) error {
		_, err := r.command(ctx, t.sw.Name, t.sw.MAC, t.op.Op, parser.CmdCommit, nil)
		return err
	}); len(errs) > 0 {
		return &RegisterError{Phase: "COMMIT", Errs: errs, Orphan: r.abort(p)}
	}
	return nil
}

// abort ABORTs every target with a context of its own and returns those that
// never answered (any status is an answer: the node holds nothing).
func (r *Registrar) abort(p *Plan) []string {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout+time.Second)
	defer cancel()
	errs := each(p.targets(), func(t target) error {
		_, err := r.command(ctx, t.sw.Name, t.sw.MAC, t.op.Op, parser.CmdAbort, nil)
		var ne *am.NodeError
		if errors.As(err, &ne) && ne.Err == nil {
			return nil
		}
		return err
	})
	var bad []string
	for k := range errs {
		bad = append(bad, k)
	}
	sort.Strings(bad)
	return bad
}

// Abort ABORTs every switch of p.
func (r *Registrar) Abort(p *Plan) []string { return r.abort(p) }

// Release frees every switch's context. A BITMAP context stays ACTIVE (its
// completion is per Token, not per vector), so it is ABORTed, which frees it
// from any state; a switch that already released answers STALE_GENERATION,
// which counts as done (ReleaseReport counts them).
func (r *Registrar) Release(ctx context.Context, p *Plan) error {
	_, err := r.ReleaseReport(ctx, p)
	return err
}

// ReleaseReport is Release, also counting the contexts that were gone
// before: a switch answers ABORT of a generation it already retired with
// STALE_GENERATION, whether this plan was released before or a later
// registration of the job replaced it (that one stays; CONTROL does not
// tell the two apart).
func (r *Registrar) ReleaseReport(ctx context.Context, p *Plan) (gone int, err error) {
	var mu sync.Mutex
	errs := each(p.targets(), func(t target) error {
		_, err := r.command(ctx, t.sw.Name, t.sw.MAC, t.op.Op, parser.CmdAbort, nil)
		var ne *am.NodeError
		if !errors.As(err, &ne) || ne.Err != nil {
			return err
		}
		if ne.Status == parser.StatusStaleGeneration {
			mu.Lock()
			gone++
			mu.Unlock()
		}
		return nil
	})
	if len(errs) > 0 {
		return gone, &RegisterError{Phase: "ABORT", Errs: errs}
	}
	return gone, nil
}
