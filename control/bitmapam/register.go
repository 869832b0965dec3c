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
	Phase  string           // "STAGE" or "COMMIT"
	Errs   map[string]error // by switch
	Orphan []string         // switches that never acknowledged ABORT
}

func (e *RegisterError) Error() string {
	keys := make([]string, 0, len(e.Errs))
	for k := range e.Errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = e.Errs[k].Error()
	}
	s := fmt.Sprintf("bitmapam: %s failed: %s", e.Phase, strings.Join(parts, "; "))
	if len(e.Orphan) > 0 {
		s += "; rollback incomplete: no ABORT acknowledgement from " + strings.Join(e.Orphan, ", ")
	}
	return s
}

// Register STAGEs every switch of every operation, then COMMITs them; on
// any failure it ABORTs all of them and returns a *RegisterError.
func (r *Registrar) Register(ctx context.Context, p *Plan) error {
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
// from any state; a switch that already released answers BAD_STATE, which
// counts as done.
func (r *Registrar) Release(ctx context.Context, p *Plan) error {
	errs := each(p.targets(), func(t target) error {
		_, err := r.command(ctx, t.sw.Name, t.sw.MAC, t.op.Op, parser.CmdAbort, nil)
		var ne *am.NodeError
		if errors.As(err, &ne) && ne.Err == nil {
			return nil
		}
		return err
	})
	if len(errs) > 0 {
		return &RegisterError{Phase: "ABORT", Errs: errs}
	}
	return nil
}
