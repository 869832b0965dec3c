// This file owns MoE expert-parallel dispatch and combine on a host
// (bitmap-framework section 4, docs/protocol.md 8.8): the source sends each
// token once as RESULT + EXT + INSTALL with D-BM = its top-K experts and the
// gating weights next to the hidden state; experts pre-multiply and return
// DATA + EXT with P-BM = their own endpoint; branch switches merge against
// the C-BMs the dispatch installed; the source sums exactly what arrives
// and rounds once. Capacity limits, dropping and normalisation stay here.

package bitmap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// MoEOptions tune a MoE endpoint; nil means defaults.
type MoEOptions struct {
	// Timeout: how long a source waits on a token before re-dispatching it
	// to the experts that did not return (0 = as AllReduce's default).
	Timeout time.Duration
	// Rounds bounds re-dispatch rounds per token (0 = 5).
	Rounds int
	// Capacity is the most tokens one expert takes per Dispatch (0 = no
	// limit); selections beyond it are dropped, in token order.
	Capacity int
	// Normalize rescales each token's surviving gate weights to sum to 1
	// after capacity dropping.
	Normalize bool
	// Unicast sends one copy per selected expert (D-BM = that expert, no
	// INSTALL), so nothing merges in the network: the reference the
	// bitmap dispatch is compared with.
	Unicast bool
	// ChunkElements overrides the hidden values per chunk (0 = the most a
	// switch can merge in one return frame).
	ChunkElements int
	// Cache bounds how many returned (token, expert) outputs an expert keeps
	// to answer a re-dispatch whose return was lost (0 = 65536).
	Cache int
	// Window bounds the tokens one Dispatch keeps in flight (sent to remote
	// experts, not yet combined); the next goes out when one combines or
	// times out into a re-dispatch, which then no longer counts
	// (0 = DefaultMoEWindow, negative = no bound: every token at once).
	Window int
}

// DefaultMoEWindow is the default MoEOptions.Window. Every host of a job is
// a source at once, so the switches see hosts x window x chunks dispatch
// frames at a time, replicated toward the experts, plus the returns. With
// 64 tokens at once from each of 8 hosts a switch worker's rings overflowed
// whenever it was descheduled on a loaded 2-core VM, and every overflow
// cost a re-dispatch timeout (1.6 s in spine-leaf) during which the token
// held its place. In the spine-leaf lab 8 tokens in flight per source gave
// the most tokens/s (32 lost more to re-dispatch than it gained); it still
// covers a round trip: tokens/s is about window / RTT.
const DefaultMoEWindow = 8

// ExpertToken is one (token, expert) pair an expert host must compute.
type ExpertToken struct {
	Source string    // the token's source host
	Token  uint64    // the token's identifier at its source (dispatch << 32 | index)
	Expert int       // the expert's endpoint ID
	Weight float32   // the gating weight: Return weight * f(Hidden)
	Hidden []float32 // the token's hidden state (shared by the token's experts on this host)
	op     int       // operation index in the plan
}

// MoE is one host's endpoint of a MoE job: a token source (Dispatch,
// Combine) and the host of its experts (Receive, Return) at once.
type MoE struct {
	port    *Port
	plan    *bitmapam.Plan
	host    string
	opts    MoEOptions
	hidden  int
	k       int
	per     int // hidden elements per chunk
	chunks  int
	wires   []*wire
	srcIdx  int // this host's operation as a source (-1: not a source)
	sub     *sub
	hostMap map[int]string

	mu       sync.Mutex
	inbox    []ExpertToken
	inboxSig chan struct{}
	asm      map[asmKey]*assembly
	cache    map[retKey][][]byte // returned frames per chunk
	cacheQ   []retKey
	handles  map[uint64]*Handle
	seq      uint64
	closed   bool
	done     chan struct{}
	err      error

	lastFrame atomic.Int64 // unix ns of the last frame of this job (Idle)
}

type asmKey struct {
	op int
	id uint64
}

type retKey struct {
	op     int
	id     uint64
	expert int
}

type assembly struct {
	pairs  map[int]float32
	hidden []float32
	have   []bool
	left   int
	set    *bitmapfwd.Set // union of the D-BMs seen (this host's experts)
	given  *bitmapfwd.Set // experts already handed to Receive
}

// MoEVectorLen is the vector length a MoE JobSpec needs for hidden size h
// and top-K k: (expert, weight) pairs then the hidden state.
func MoEVectorLen(h, k int) uint32 { return uint32(2*k + h) }

// NewMoE starts host's MoE endpoint on port for plan (a moe plan whose
// ActiveK is the top-K and whose vector length is MoEVectorLen).
func NewMoE(port *Port, plan *bitmapam.Plan, host string, opts *MoEOptions) (*MoE, error) {
	if plan.Spec.Kind != bitmapam.MoE {
		return nil, fmt.Errorf("bitmap: NewMoE needs a moe plan, not %v", plan.Spec.Kind)
	}
	k := plan.Spec.ActiveK
	if k <= 0 {
		return nil, fmt.Errorf("bitmap: the moe plan has no ActiveK (top-K)")
	}
	h := int(plan.Spec.VectorLen) - 2*k
	if h <= 0 {
		return nil, fmt.Errorf("bitmap: vector length %d leaves no hidden state for top-%d (use MoEVectorLen)", plan.Spec.VectorLen, k)
	}
	m := &MoE{port: port, plan: plan, host: host, hidden: h, k: k, srcIdx: -1, hostMap: hostMap(plan),
		inboxSig: make(chan struct{}, 1), asm: map[asmKey]*assembly{}, cache: map[retKey][][]byte{},
		handles: map[uint64]*Handle{}, done: make(chan struct{})}
	if opts != nil {
		m.opts = *opts
	}
	if m.opts.Timeout == 0 {
		m.opts.Timeout = defaultTimeout(plan)
	}
	if m.opts.Rounds == 0 {
		m.opts.Rounds = 5
	}
	if m.opts.Cache == 0 {
		m.opts.Cache = 65536
	}
	if m.opts.Window == 0 {
		m.opts.Window = DefaultMoEWindow
	}
	in := false
	for i, o := range plan.Ops {
		w := newWire(port, plan, o.Op)
		m.wires = append(m.wires, w)
		if o.Root == host {
			m.srcIdx = i
		}
		if _, ok := o.Hosts[host]; ok {
			in = true
		}
	}
	if !in {
		return nil, fmt.Errorf("%w: %s", ErrNotInPlan, host)
	}
	// Chunks of the hidden state: the first frame also carries K pairs.
	capVals := (m.wires[0].frameBudget(k) - 2*parser.GroupDescLen) / 4
	// Returns are merged by the switches as Kulisch values: a chunk larger
	// than a merged frame holds would pass through unmerged.
	m.per = min(capVals-2*k, mergeable(m.wires[0], k))
	if m.opts.ChunkElements > 0 {
		m.per = min(capVals-2*k, m.opts.ChunkElements)
	}
	if m.per < 1 {
		return nil, fmt.Errorf("%w: top-%d pairs leave no room for the hidden state at MTU %d", ErrTooLarge, k, plan.Spec.MTU)
	}
	m.chunks = (h + m.per - 1) / m.per
	if m.chunks > 256 {
		return nil, fmt.Errorf("%w: hidden size %d needs %d chunks, more than 256 (use MTU 9000)", ErrTooLarge, h, m.chunks)
	}
	m.sub = port.subscribe(plan.Spec.Op.Job)
	go m.loop()
	return m, nil
}

// Idle is how long no frame of the job reached this endpoint: an expert
// host whose own tokens are combined can leave once its peers stopped
// re-dispatching to it (they retry every Timeout while a token misses it).
func (m *MoE) Idle() time.Duration {
	t := m.lastFrame.Load()
	if t == 0 {
		return time.Duration(1<<63 - 1)
	}
	return time.Since(time.Unix(0, t))
}

// Close stops the endpoint; pending Receive and Combine calls fail.
func (m *MoE) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.port.unsubscribe(m.sub)
	close(m.done)
	return nil
}

// wireToken packs (dispatch, token index, chunk) into the extension Token.
func wireToken(seq uint64, idx, chunk int) uint64 {
	return (seq<<32|uint64(idx))<<8 | uint64(chunk)
}

func splitToken(t uint64) (id uint64, chunk int) { return t >> 8, int(t & 0xFF) }

func (m *MoE) chunkRange(j int) (first, n int) {
	first = j * m.per
	return first, min(m.per, m.hidden-first)
}

// route applies capacity, dropping and normalisation: the same for the
// network path and the reference.
func route(topk [][]int, weights [][]float32, capacity int, normalize bool) ([][]int, [][]float32) {
	count := map[int]int{}
	rk := make([][]int, len(topk))
	rw := make([][]float32, len(topk))
	for t := range topk {
		var sum float32
		for i, e := range topk[t] {
			if capacity > 0 && count[e] >= capacity {
				continue
			}
			count[e]++
			rk[t] = append(rk[t], e)
			rw[t] = append(rw[t], weights[t][i])
			sum += weights[t][i]
		}
		if normalize && sum != 0 {
			for i := range rw[t] {
				rw[t][i] /= sum
			}
		}
	}
	return rk, rw
}

// Handle is one Dispatch at its source: Combine waits for its outputs.
type Handle struct {
	m      *MoE
	seq    uint64
	toks   []*moeToken
	out    [][]float32
	left   int
	done   chan struct{}
	err    error
	stats  MoEStats
	frames []int // frames sent per token (first transmission)

	// The send window (m.mu): tokens not sent yet, in order, and how many
	// sent ones are not combined; freed wakes watch when one combines.
	pending  []*moeToken
	inflight int
	freed    chan struct{}
}

// MoEStats count one Dispatch.
type MoEStats struct {
	Tokens       int
	Frames       uint64 // dispatch frames sent (first transmissions)
	Redispatches uint64 // re-dispatch frames after a timeout or PARTIAL
	Returns      uint64 // return frames that reached the source
	Partials     uint64 // of them PARTIAL
	MaxInFlight  int    // most tokens in flight at once, re-dispatched ones not counted (bounded by Window)
}

type moeToken struct {
	idx     int
	remote  *bitmapfwd.Set // experts reached through the network
	experts []int          // routed experts, ascending
	weights map[int]float32
	local   *kulisch.Vector // the source's own experts' returns
	localN  int             // local returns still expected
	aggs    []*tokenAgg     // per chunk (nil when no remote experts)
	rounds  int
	last    time.Time
	sent    bool // first dispatch sent (window accounting)
	counted bool // holds a place in the window
	done    bool
}

// Dispatch sends every token to its routed top-K experts: tokens[t] is the
// hidden state (the plan's hidden size), topk[t] its experts (endpoint IDs),
// weights[t] their gating weights. The result is combined by Combine.
func (m *MoE) Dispatch(ctx context.Context, tokens [][]float32, topk [][]int, weights [][]float32) (*Handle, error) {
	if m.srcIdx < 0 {
		return nil, fmt.Errorf("%w: %s is not a token source", ErrNotInPlan, m.host)
	}
	if len(topk) != len(tokens) || len(weights) != len(tokens) {
		return nil, fmt.Errorf("bitmap: %d tokens, %d top-k rows, %d weight rows", len(tokens), len(topk), len(weights))
	}
	for t := range tokens {
		if len(tokens[t]) != m.hidden {
			return nil, fmt.Errorf("bitmap: token %d has %d values, hidden size is %d", t, len(tokens[t]), m.hidden)
		}
		if len(topk[t]) != len(weights[t]) || len(topk[t]) > m.k {
			return nil, fmt.Errorf("bitmap: token %d: %d experts, %d weights, top-K %d", t, len(topk[t]), len(weights[t]), m.k)
		}
		seen := map[int]bool{}
		for _, e := range topk[t] {
			if _, ok := m.hostMap[e]; !ok || seen[e] {
				return nil, fmt.Errorf("bitmap: token %d: expert %d unknown or selected twice", t, e)
			}
			seen[e] = true
		}
	}
	rk, rw := route(topk, weights, m.opts.Capacity, m.opts.Normalize)
	m.mu.Lock()
	m.seq++
	seq := m.seq
	h := &Handle{m: m, seq: seq, out: make([][]float32, len(tokens)), done: make(chan struct{}), left: len(tokens),
		freed: make(chan struct{}, 1)}
	h.stats.Tokens = len(tokens)
	if len(tokens) == 0 {
		close(h.done) // nothing to combine
	} else {
		m.handles[seq] = h
	}
	m.mu.Unlock()
	w := m.wires[m.srcIdx]
	op := m.plan.Ops[m.srcIdx]
	kw := int(contextOf(m.plan).KulischWidth)
	var local []ExpertToken
	for t := range tokens {
		mt := &moeToken{idx: t, remote: bitmapfwd.NewSet(m.plan.Bits), weights: map[int]float32{}, last: time.Now()}
		order := append([]int(nil), rk[t]...)
		sort.Ints(order)
		for i, e := range rk[t] {
			mt.weights[e] = rw[t][i]
		}
		mt.experts = order
		for _, e := range order {
			if m.hostMap[e] == m.host {
				mt.localN++
				local = append(local, ExpertToken{Source: m.host, Token: seq<<32 | uint64(t), Expert: e, Weight: mt.weights[e], Hidden: tokens[t], op: m.srcIdx})
			} else {
				mt.remote.Add(e)
			}
		}
		v, err := kulisch.NewVector(m.hidden, kw)
		if err != nil {
			return nil, err
		}
		mt.local = v
		if !mt.remote.IsEmpty() {
			for j := 0; j < m.chunks; j++ {
				f, n := m.chunkRange(j)
				mt.aggs = append(mt.aggs, newTokenAgg(f, n, kw, mt.remote))
			}
		}
		h.toks = append(h.toks, mt)
	}
	// Local experts first (no network), then the network.
	m.mu.Lock()
	m.inbox = append(m.inbox, local...)
	m.mu.Unlock()
	m.signal()
	m.mu.Lock()
	for _, mt := range h.toks {
		if mt.remote.IsEmpty() {
			h.maybeDone(mt)
			continue
		}
		h.pending = append(h.pending, mt)
	}
	m.mu.Unlock()
	if err := m.fill(w, op, h, tokens); err != nil {
		m.mu.Lock()
		h.fail(err)
		m.mu.Unlock()
		return nil, err
	}
	go m.watch(h, tokens)
	return h, nil
}

// fill sends pending tokens (every chunk to all its remote experts) while
// the window has room.
func (m *MoE) fill(w *wire, op *bitmapam.OpPlan, h *Handle, tokens [][]float32) error {
	for {
		m.mu.Lock()
		if len(h.pending) == 0 || (m.opts.Window > 0 && h.inflight >= m.opts.Window) {
			m.mu.Unlock()
			return nil
		}
		mt := h.pending[0]
		h.pending = h.pending[1:]
		h.inflight++
		h.stats.MaxInFlight = max(h.stats.MaxInFlight, h.inflight)
		mt.sent, mt.counted, mt.last = true, true, time.Now()
		m.mu.Unlock()
		all := make([]*bitmapfwd.Set, m.chunks)
		for j := range all {
			all[j] = mt.remote
		}
		if err := m.sendToken(w, op, h, mt, tokens[mt.idx], all, false); err != nil {
			return err
		}
	}
}

// sendToken dispatches one token's chunks: chunk j to ds[j] (a subset of
// the token's remote experts; nil or empty: chunk j is not sent); with
// Unicast one copy per expert.
func (m *MoE) sendToken(w *wire, op *bitmapam.OpPlan, h *Handle, mt *moeToken, x []float32, ds []*bitmapfwd.Set, again bool) error {
	root := op.Hosts[m.host]
	xf := uint8(parser.XFlagInstall)
	if m.opts.Unicast {
		xf = 0
	}
	// The pairs name every routed remote expert: a copy split at a branch
	// still finds its own weight.
	var pairs []float32
	for _, e := range members(mt.remote) {
		pairs = append(pairs, float32(e), mt.weights[e])
	}
	for j := 0; j < m.chunks; j++ {
		d := ds[j]
		if d == nil || d.IsEmpty() {
			continue
		}
		targets := []*bitmapfwd.Set{d}
		if m.opts.Unicast {
			targets = targets[:0]
			for _, e := range members(d) {
				targets = append(targets, setOf(m.plan.Bits, e))
			}
		}
		f, n := m.chunkRange(j)
		hv := values{parser.FormatFP32, n, fp32Bytes(x[f : f+n])}
		for _, to := range targets {
			var err error
			if j == 0 {
				err = w.send(parser.ClassResult, root.RootOut, to, xf, wireToken(h.seq, mt.idx, j), 0, 0,
					values{parser.FormatFP32, len(pairs), fp32Bytes(pairs)}, hv)
			} else {
				err = w.send(parser.ClassResult, root.RootOut, to, xf, wireToken(h.seq, mt.idx, j), uint32(len(pairs)+f), 0, hv)
			}
			if err != nil {
				return err
			}
			m.mu.Lock()
			if again {
				h.stats.Redispatches++
			} else {
				h.stats.Frames++
			}
			m.mu.Unlock()
		}
	}
	return nil
}

// watch re-dispatches tokens that stall and fails those that never finish.
func (m *MoE) watch(h *Handle, tokens [][]float32) {
	tick := time.NewTicker(max(m.opts.Timeout/8, time.Millisecond))
	defer tick.Stop()
	w := m.wires[m.srcIdx]
	op := m.plan.Ops[m.srcIdx]
	for {
		select {
		case <-h.done:
			return
		case <-m.done:
			m.mu.Lock()
			h.fail(ErrClosed)
			m.mu.Unlock()
			return
		case <-h.freed:
			if err := m.fill(w, op, h, tokens); err != nil {
				m.mu.Lock()
				h.fail(err)
				m.mu.Unlock()
				return
			}
		case now := <-tick.C:
			type redo struct {
				mt   *moeToken
				miss []*bitmapfwd.Set // per chunk
			}
			var todo []redo
			m.mu.Lock()
			for _, mt := range h.toks {
				if mt.done || !mt.sent || mt.aggs == nil || now.Sub(mt.last) < m.opts.Timeout {
					continue
				}
				// Each chunk is its own Token and goes again only to what
				// that Token misses (docs/protocol.md 8.9: D-BM AND NOT
				// P-BM). Sending every chunk to the union of the chunks'
				// misses let a branch switch merge an expert the source
				// still needs for chunk j with one it already holds for
				// chunk j: that merged contribution overlaps what the
				// source has, can never be used, and the same re-dispatch
				// produced it again every round. An expert missing for some
				// chunks only has computed the token and answers them from
				// its cache; one that never got the token misses in every
				// chunk and so receives all of them.
				miss := make([]*bitmapfwd.Set, len(mt.aggs))
				union := bitmapfwd.NewSet(m.plan.Bits)
				for j, a := range mt.aggs {
					miss[j] = a.missing()
					union.Or(union, miss[j])
				}
				if union.IsEmpty() {
					continue
				}
				if mt.rounds >= m.opts.Rounds {
					ids := members(union)
					h.fail(&MissingError{Op: "moe", Token: uint64(mt.idx), Endpoints: ids, Hosts: hostsOf(ids, m.hostMap), Rounds: mt.rounds})
					m.mu.Unlock()
					return
				}
				mt.rounds++
				mt.last = now
				todo = append(todo, redo{mt, miss})
				// A token that needs a re-dispatch no longer holds a place
				// in the window (as TCP's lost segments leave the pipe): its
				// repair waits a whole Timeout, the next tokens need not.
				h.release(mt)
			}
			m.mu.Unlock()
			for _, r := range todo {
				if err := m.sendToken(w, op, h, r.mt, tokens[r.mt.idx], r.miss, true); err != nil {
					m.mu.Lock()
					h.fail(err)
					m.mu.Unlock()
					return
				}
			}
		}
	}
}

// release gives mt's place in the window back (m.mu held).
func (h *Handle) release(mt *moeToken) {
	if !mt.counted {
		return
	}
	mt.counted = false
	h.inflight--
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// fail ends the handle (m.mu held).
func (h *Handle) fail(err error) {
	select {
	case <-h.done:
		return
	default:
	}
	h.err = err
	delete(h.m.handles, h.seq)
	close(h.done)
}

// maybeDone finishes a token when every chunk and local return is in
// (m.mu held).
func (h *Handle) maybeDone(mt *moeToken) {
	if mt.done || mt.localN > 0 {
		return
	}
	for _, a := range mt.aggs {
		if !a.complete() {
			return
		}
	}
	out := make([]float32, h.m.hidden)
	if len(mt.aggs) == 0 {
		a := newTokenAgg(0, h.m.hidden, int(contextOf(h.m.plan).KulischWidth), bitmapfwd.NewSet(h.m.plan.Bits))
		if err := a.sum(out, mt.local); err != nil {
			h.fail(err)
			return
		}
	} else {
		for j, a := range mt.aggs {
			f, n := h.m.chunkRange(j)
			lv, err := kulisch.NewVector(n, a.w)
			if err != nil {
				h.fail(err)
				return
			}
			buf := make([]byte, kulisch.WireSize(a.w))
			for i := 0; i < n; i++ {
				if err := mt.local.PutWire(buf, f+i); err != nil {
					h.fail(err)
					return
				}
				if err := lv.MergeKulisch(i, buf); err != nil {
					h.fail(err)
					return
				}
			}
			if err := a.sum(out[f:f+n], lv); err != nil {
				h.fail(err)
				return
			}
		}
	}
	mt.done, mt.aggs = true, nil
	h.out[mt.idx] = out
	h.release(mt)
	h.left--
	if h.left == 0 {
		delete(h.m.handles, h.seq)
		close(h.done)
	}
}

// Combine waits until every token of the Dispatch is combined and returns
// one vector per token: the exact sum over its routed experts of
// weight * expert output, rounded once to FP32. A token all of whose
// experts were dropped by capacity combines to zeros.
func (h *Handle) Combine(ctx context.Context) ([][]float32, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if h.err != nil {
		return nil, h.err
	}
	return h.out, nil
}

// Stats returns the Dispatch's counters (final once Combine returned).
func (h *Handle) Stats() MoEStats {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.stats
}

func (m *MoE) signal() {
	select {
	case m.inboxSig <- struct{}{}:
	default:
	}
}

// Receive blocks until tokens for this host's experts arrived and returns
// all that are waiting: one entry per (token, expert).
func (m *MoE) Receive(ctx context.Context) ([]ExpertToken, error) {
	for {
		m.mu.Lock()
		if len(m.inbox) > 0 {
			b := m.inbox
			m.inbox = nil
			m.mu.Unlock()
			return b, nil
		}
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-m.inboxSig:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-m.done:
			return nil, ErrClosed
		}
	}
}

// Return sends an expert's weighted output (weight * f(hidden), computed by
// the caller) for tok back toward its source.
func (m *MoE) Return(ctx context.Context, tok ExpertToken, weighted []float32) error {
	if len(weighted) != m.hidden {
		return fmt.Errorf("bitmap: output has %d values, hidden size is %d", len(weighted), m.hidden)
	}
	if tok.Source == m.host {
		// A local expert of this source: straight into the combine.
		m.mu.Lock()
		defer m.mu.Unlock()
		h := m.handles[tok.Token>>32]
		idx := int(tok.Token & 0xFFFFFFFF)
		if h == nil || idx >= len(h.toks) || h.toks[idx].localN == 0 {
			return fmt.Errorf("bitmap: no pending dispatch for local token %#x", tok.Token)
		}
		mt := h.toks[idx]
		if err := mt.local.AddFP32LE(0, fp32Bytes(weighted)); err != nil {
			return err
		}
		mt.localN--
		h.maybeDone(mt)
		return nil
	}
	op := m.plan.Ops[tok.op]
	hp := op.Hosts[m.host]
	if hp == nil || hp.Up == nil {
		return fmt.Errorf("%w: %s has no return link toward %s", ErrNotInPlan, m.host, tok.Source)
	}
	w := m.wires[tok.op]
	bodies, enc, err := w.setBodies(setOf(m.plan.Bits, tok.Expert))
	if err != nil {
		return err
	}
	frames := make([][]byte, 0, m.chunks)
	for j := 0; j < m.chunks; j++ {
		f, n := m.chunkRange(j)
		fr, err := w.frame(parser.ClassData, hp.Up, enc, bodies[0], 0, tok.Token<<8|uint64(j), uint32(f), 0, 0,
			values{parser.FormatFP32, n, fp32Bytes(weighted[f : f+n])})
		if err != nil {
			return err
		}
		frames = append(frames, fr)
	}
	// Cached before they are sent: the token was handed to Receive once
	// and never is again, so a re-dispatch can only be answered from here.
	// A frame the socket refused is then a loss like any other.
	m.mu.Lock()
	k := retKey{tok.op, tok.Token, tok.Expert}
	if _, ok := m.cache[k]; !ok {
		m.cacheQ = append(m.cacheQ, k)
	}
	m.cache[k] = frames
	for len(m.cacheQ) > m.opts.Cache {
		delete(m.cache, m.cacheQ[0])
		m.cacheQ = m.cacheQ[1:]
	}
	m.mu.Unlock()
	var first error
	for _, fr := range frames {
		if err := m.port.write(fr); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (m *MoE) loop() {
	for {
		select {
		case <-m.done:
			return
		case f, ok := <-m.sub.ch:
			if !ok {
				m.mu.Lock()
				for _, h := range m.handles {
					h.fail(ErrClosed)
				}
				m.mu.Unlock()
				return
			}
			m.frame(f)
		}
	}
}

func (m *MoE) frame(f []byte) {
	key, ok := parser.PeekOpKey(f[parser.EthLen:])
	if !ok {
		return
	}
	m.lastFrame.Store(time.Now().UnixNano())
	for i, o := range m.plan.Ops {
		if o.Op != key {
			continue
		}
		w := m.wires[i]
		hp := o.Hosts[m.host]
		if hp == nil {
			return
		}
		if i == m.srcIdx {
			if r, ok := w.accept(f, parser.ClassData, hp.RootIn); ok {
				m.sourceFrame(r)
			}
			return
		}
		if r, ok := w.accept(f, parser.ClassResult, hp.Down); ok {
			m.expertFrame(i, o, r)
		}
		return
	}
}

// sourceFrame is a return (merged or not) arriving at the source.
func (m *MoE) sourceFrame(r *rx) {
	id, chunk := splitToken(r.d.Ext.Token)
	seq, idx := id>>32, int(id&0xFFFFFFFF)
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.handles[seq]
	if h == nil || idx >= len(h.toks) || chunk >= m.chunks {
		return
	}
	mt := h.toks[idx]
	if mt.done || mt.aggs == nil {
		return
	}
	if mt.aggs[chunk].add(r, time.Now()) {
		h.stats.Returns++
		if r.d.Ext.XFlags&parser.XFlagPartial != 0 {
			h.stats.Partials++
		}
		mt.last = time.Now()
	}
	h.maybeDone(mt)
}

// expertFrame is a dispatch chunk arriving at an expert host.
func (m *MoE) expertFrame(opIdx int, o *bitmapam.OpPlan, r *rx) {
	id, chunk := splitToken(r.d.Ext.Token)
	if chunk >= m.chunks {
		return
	}
	mine := bitmapfwd.NewSet(m.plan.Bits)
	for _, e := range o.Hosts[m.host].Endpoints {
		if r.set.Contains(e) {
			mine.Add(e)
		}
	}
	if mine.IsEmpty() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Already returned: the return was lost, answer again.
	for _, e := range members(mine) {
		if fr, ok := m.cache[retKey{opIdx, id, e}]; ok && chunk < len(fr) {
			_ = m.port.write(fr[chunk])
			mine.Remove(e)
		}
	}
	if mine.IsEmpty() {
		return
	}
	k := asmKey{opIdx, id}
	a := m.asm[k]
	if a == nil {
		a = &assembly{hidden: make([]float32, m.hidden), have: make([]bool, m.hidden), left: m.hidden,
			set: bitmapfwd.NewSet(m.plan.Bits), given: bitmapfwd.NewSet(m.plan.Bits)}
		m.asm[k] = a
	}
	a.set.Or(a.set, mine)
	var it parser.GroupIter
	first := true
	for g, ok := r.d.NextGroup(&it); ok; g, ok = r.d.NextGroup(&it) {
		if g.Format != parser.FormatFP32 {
			return
		}
		if chunk == 0 && first {
			// The first group of chunk 0: (expert, weight) pairs.
			first = false
			if a.pairs == nil {
				a.pairs = map[int]float32{}
				for i := 0; i+1 < int(g.Count); i += 2 {
					a.pairs[int(getF32(g.Values[4*i:]))] = getF32(g.Values[4*i+4:])
				}
			}
			continue
		}
		// Hidden values are placed by chunk, not by First: the pairs
		// before them vary in length per token.
		f, n := m.chunkRange(chunk)
		if int(g.Count) != n {
			return
		}
		for i := 0; i < n; i++ {
			if !a.have[f+i] {
				a.have[f+i] = true
				a.hidden[f+i] = getF32(g.Values[4*i:])
				a.left--
			}
		}
	}
	if a.left > 0 || a.pairs == nil {
		return
	}
	for _, e := range members(a.set) {
		if a.given.Contains(e) {
			continue
		}
		wgt, ok := a.pairs[e]
		if !ok {
			continue
		}
		a.given.Add(e)
		m.inbox = append(m.inbox, ExpertToken{Source: m.plan.Ops[opIdx].Root, Token: id, Expert: e, Weight: wgt, Hidden: a.hidden, op: opIdx})
	}
	m.signal()
}

// ReferenceMoE is the unicast reference and test oracle: the same routing
// (capacity, dropping, normalisation), every selected expert applied to its
// own copy of the token, weight * f(x) rounded to FP32 as an expert returns
// it, and the exact sum over experts rounded once.
func ReferenceMoE(tokens [][]float32, topk [][]int, weights [][]float32, experts func(e int, x []float32) []float32, opts *MoEOptions) ([][]float32, error) {
	var o MoEOptions
	if opts != nil {
		o = *opts
	}
	rk, rw := route(topk, weights, o.Capacity, o.Normalize)
	out := make([][]float32, len(tokens))
	for t, x := range tokens {
		w := kulisch.RequiredWidth(uint32(max(1, len(rk[t]))))
		v, err := kulisch.NewVector(len(x), w)
		if err != nil {
			return nil, err
		}
		for i, e := range rk[t] {
			y := experts(e, x)
			if len(y) != len(x) {
				return nil, errors.New("bitmap: expert output size differs from the hidden size")
			}
			if err := v.AddFP32LE(0, fp32Bytes(Weighted(rw[t][i], y))); err != nil {
				return nil, err
			}
		}
		out[t] = make([]float32, len(x))
		for i := range x {
			b, err := v.RoundFP32(i)
			if err != nil {
				return nil, err
			}
			out[t][i] = float32frombits(b)
		}
	}
	return out, nil
}

// Weighted returns weight * y in FP32, as an expert pre-multiplies.
func Weighted(weight float32, y []float32) []float32 {
	r := make([]float32, len(y))
	for i, v := range y {
		r[i] = weight * v
	}
	return r
}
