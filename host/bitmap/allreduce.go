// This file owns bitmap AllReduce on a host: the worker (chunks out as
// DATA + EXT, RESULT in, retransmission on timeout or on request) and the
// root (parameter server role: exact sum of what arrives plus its own
// endpoints, PARTIAL detection, selective retransmission requests to the
// miss set, the result multicast, failure naming the missing endpoints).

package bitmap

import (
	"context"
	"fmt"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// Options tune AllReduce; nil means defaults.
type Options struct {
	// Timeout: how long the root waits on a chunk that has started
	// arriving before it asks the missing endpoints to retransmit; a worker
	// waits three times as long for a chunk's result before it retransmits
	// (0 = twice the plan's longest context timeout + 2 base timeouts +
	// 20 ms: by then a PARTIAL, or a lone retransmission that every node
	// above holds until its own timeout, has had time to arrive).
	Timeout time.Duration
	// Rounds bounds retransmission rounds per chunk before the operation
	// fails naming the missing endpoints (0 = 5).
	Rounds int
	// Window is how many chunks a worker keeps in flight (0 = 64; the
	// switches hold one completion per chunk in flight).
	Window int
	// ChunkElements overrides the elements per chunk (0 = the most a
	// switch can merge in one frame; a larger chunk, up to what one FP32
	// frame holds, is summed exactly but passes the switches unmerged).
	ChunkElements int
	// Linger is how long the root keeps answering stragglers (re-sending
	// results they lost) after it completed (0 = 3 x (Rounds+4) x Timeout).
	Linger time.Duration
}

func (o *Options) norm(plan *bitmapam.Plan) Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Timeout == 0 {
		r.Timeout = defaultTimeout(plan)
	}
	if r.Rounds == 0 {
		r.Rounds = 5
	}
	if r.Window == 0 {
		r.Window = 64
	}
	if r.Linger == 0 {
		// As long as a worker keeps retransmitting a chunk whose result it
		// lost (Rounds+2 retransmissions, Timeout apart), plus one.
		r.Linger = 3 * time.Duration(r.Rounds+4) * r.Timeout
	}
	return r
}

// Stats describe one AllReduce on one host.
type Stats struct {
	Chunks      int
	Frames      uint64 // DATA frames sent (worker) or RESULT frames sent (root)
	Retransmits uint64 // DATA frames re-sent (worker) or results re-sent to stragglers (root)
	// Root only:
	Partials       uint64 // PARTIAL contributions received
	RepairRequests uint64 // zero-group RESULTs asking a miss set to retransmit
	Missed         []int  // endpoints that were asked to retransmit at least once
}

// defaultTimeout: a lone retransmitted contribution waits out the timeout
// of every node above it that expects more (at most the sum along a path,
// bounded here by twice the longest), plus margin.
func defaultTimeout(plan *bitmapam.Plan) time.Duration {
	return 2*plan.MaxTimeout() + 2*plan.BaseTimeout() + 20*time.Millisecond
}

// abortToken marks the root's failure notice: a RESULT whose FP32 values
// are the missing endpoint IDs (exact below 2^24 = bitmapfwd.MaxBits).
const abortToken = uint64(1) << 63

// chunking returns the elements per chunk: what one frame holds next to the
// largest set the job's frames carry, as FP32 from a host and, so that the
// switches can merge it, as the exact partial a switch emits (one Kulisch
// value of the context's width per element). A larger chunk still sums
// exactly, but switches pass it through unmerged.
func chunking(w *wire, k int) int {
	fp32 := (w.frameBudget(k) - parser.GroupDescLen) / 4
	return min(fp32, mergeable(w, k))
}

func chunkLen(w *wire, o Options) int {
	k := len(w.plan.Spec.Endpoints)
	if o.ChunkElements > 0 {
		return min(o.ChunkElements, (w.frameBudget(k)-parser.GroupDescLen)/4)
	}
	return chunking(w, k)
}

// mergeable is the most elements a merged (Kulisch) frame can carry.
func mergeable(w *wire, k int) int {
	kw := int(contextOf(w.plan).KulischWidth)
	if kw == 0 {
		return 1 << 30
	}
	return max(1, (w.frameBudget(k)-parser.GroupDescLen)/(1+kw/8))
}

// AllReduce sums, over every endpoint of plan (an AllReduce plan), the
// vectors in, and writes the sum, rounded once to FP32 from the exact value,
// into out. in holds one vector per endpoint of this host (all of the same
// length as out, the plan's vector length). Every host of the plan calls it;
// the root host is the plan's Root.
func AllReduce(ctx context.Context, port *Port, plan *bitmapam.Plan, host string, in map[int][]float32, out []float32, opts *Options) (Stats, error) {
	if plan.Spec.Kind != bitmapam.AllReduce || len(plan.Ops) != 1 {
		return Stats{}, fmt.Errorf("bitmap: AllReduce needs an allreduce plan, not %v", plan.Spec.Kind)
	}
	op := plan.Ops[0]
	hp := op.Hosts[host]
	if hp == nil {
		return Stats{}, fmt.Errorf("%w: %s in operation %d", ErrNotInPlan, host, op.Op.Op)
	}
	n := int(plan.Spec.VectorLen)
	if len(out) != n {
		return Stats{}, fmt.Errorf("bitmap: out has %d elements, the plan %d", len(out), n)
	}
	for _, e := range hp.Endpoints {
		if len(in[e]) != n {
			return Stats{}, fmt.Errorf("bitmap: endpoint %d: input has %d elements, want %d", e, len(in[e]), n)
		}
	}
	if len(in) != len(hp.Endpoints) {
		return Stats{}, fmt.Errorf("bitmap: %d inputs for endpoints %v of host %s", len(in), hp.Endpoints, host)
	}
	o := opts.norm(plan)
	w := newWire(port, plan, op.Op)
	if host == op.Root {
		return runRoot(ctx, w, op, hp, in, out, o)
	}
	return runWorker(ctx, w, op, hp, in, out, o)
}

type chunkRange struct{ first, n int }

func chunksOf(n, per int) []chunkRange {
	var r []chunkRange
	for f := 0; f < n; f += per {
		r = append(r, chunkRange{f, min(per, n-f)})
	}
	return r
}

func runWorker(ctx context.Context, w *wire, op *bitmapam.OpPlan, hp *bitmapam.HostPlan, in map[int][]float32, out []float32, o Options) (Stats, error) {
	if hp.Up == nil || hp.Down == nil {
		return Stats{}, fmt.Errorf("%w: %s has no links in operation %d", ErrNotInPlan, hp.Host, op.Op.Op)
	}
	sub := w.port.subscribe(op.Op.Job)
	defer w.port.unsubscribe(sub)
	chunks := chunksOf(len(out), chunkLen(w, o))
	st := Stats{Chunks: len(chunks)}
	type cstate struct {
		frames [][]byte // one per local endpoint, kept for retransmission
		sent   time.Time
		tries  int
		done   bool
	}
	cs := make([]cstate, len(chunks))
	next, doneN := 0, 0
	build := func(c int) error {
		cr := chunks[c]
		cs[c].frames = cs[c].frames[:0]
		for _, e := range hp.Endpoints {
			bodies, enc, err := w.setBodies(setOf(w.bits, e))
			if err != nil {
				return err
			}
			f, err := w.frame(parser.ClassData, hp.Up, enc, bodies[0], 0, uint64(c), uint32(cr.first), 0, 0,
				values{parser.FormatFP32, cr.n, fp32Bytes(in[e][cr.first : cr.first+cr.n])})
			if err != nil {
				return err
			}
			cs[c].frames = append(cs[c].frames, f)
		}
		return nil
	}
	sendChunk := func(c int, only *bitmapfwd.Set) error {
		for i, f := range cs[c].frames {
			if only != nil && !only.Contains(hp.Endpoints[i]) {
				continue
			}
			if cs[c].tries > 0 {
				if f[parser.HdrOff+33]&parser.FlagRetransmit == 0 {
					// The flag is covered by the tag (8.6): sign again.
					f[parser.HdrOff+33] |= parser.FlagRetransmit
					if err := w.port.sign(f); err != nil {
						return err
					}
				}
				st.Retransmits++
			} else {
				st.Frames++
			}
			if err := w.port.write(f); err != nil {
				return err
			}
		}
		cs[c].sent = time.Now()
		cs[c].tries++
		return nil
	}
	tick := time.NewTicker(max(o.Timeout/8, time.Millisecond))
	defer tick.Stop()
	for doneN < len(chunks) {
		for next < len(chunks) && next-doneN < o.Window {
			if !cs[next].done && cs[next].frames == nil {
				if err := build(next); err != nil {
					return st, err
				}
				if err := sendChunk(next, nil); err != nil {
					return st, err
				}
			}
			next++
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case f, ok := <-sub.ch:
			if !ok {
				return st, ErrClosed
			}
			r, ok := w.accept(f, parser.ClassResult, hp.Down)
			if !ok || !containsAny(r.set, hp.Endpoints) {
				continue
			}
			tok := r.d.Ext.Token
			switch {
			case tok&abortToken != 0:
				return st, abortError(r, w.plan, tok&^abortToken)
			case tok >= uint64(len(chunks)):
				continue
			case r.d.Groups == 0:
				// The root asks the miss set to retransmit this chunk.
				c := int(tok)
				if cs[c].done {
					continue
				}
				if cs[c].frames == nil {
					// Asked for a chunk beyond our window: the others are
					// ahead of us. Send it now rather than stall the root.
					if err := build(c); err != nil {
						return st, err
					}
				}
				if err := sendChunk(c, r.set); err != nil {
					return st, err
				}
			default:
				c := int(tok)
				if cs[c].done || !copyResult(r, chunks[c], out) {
					continue
				}
				cs[c].done, cs[c].frames = true, nil
			}
		case now := <-tick.C:
			for c := doneN; c < next; c++ {
				// The root drives repairs (its requests reset sent); a
				// worker retransmits on its own only when nothing at all
				// came back, three root timeouts later.
				if cs[c].done || now.Sub(cs[c].sent) < 3*o.Timeout {
					continue
				}
				if cs[c].tries > o.Rounds+2 {
					return st, fmt.Errorf("%w: host %s: no result for chunk %d (elements %d..%d) after %d transmissions",
						ErrFailed, hp.Host, c, chunks[c].first, chunks[c].first+chunks[c].n, cs[c].tries)
				}
				if err := sendChunk(c, nil); err != nil {
					return st, err
				}
			}
		}
		// Chunks complete out of order: doneN is the window's base.
		doneN = countDone(cs, func(c cstate) bool { return c.done }, doneN)
	}
	return st, nil
}

// countDone keeps doneN the number of done chunks below the first open one
// (the window's base): chunks completed out of order are skipped once the
// base reaches them.
func countDone[T any](cs []T, done func(T) bool, from int) int {
	for from < len(cs) && done(cs[from]) {
		from++
	}
	return from
}

func containsAny(s *bitmapfwd.Set, ids []int) bool {
	for _, id := range ids {
		if s.Contains(id) {
			return true
		}
	}
	return false
}

// copyResult copies a RESULT chunk (FP32, as the root sends it) into out.
func copyResult(r *rx, cr chunkRange, out []float32) bool {
	if int(r.d.First) != cr.first || int(r.d.Count) != cr.n {
		return false
	}
	var it parser.GroupIter
	pos := cr.first
	for g, ok := r.d.NextGroup(&it); ok; g, ok = r.d.NextGroup(&it) {
		if g.Format != parser.FormatFP32 {
			return false
		}
		for i := 0; i < int(g.Count); i++ {
			out[pos] = getF32(g.Values[4*i:])
			pos++
		}
	}
	return true
}

func abortError(r *rx, plan *bitmapam.Plan, token uint64) error {
	var ids []int
	var it parser.GroupIter
	for g, ok := r.d.NextGroup(&it); ok; g, ok = r.d.NextGroup(&it) {
		if g.Format != parser.FormatFP32 {
			continue
		}
		for i := 0; i < int(g.Count); i++ {
			ids = append(ids, int(getF32(g.Values[4*i:])))
		}
	}
	return &MissingError{Op: "allreduce", Token: token, Endpoints: ids, Hosts: hostsOf(ids, hostMap(plan))}
}

func hostMap(plan *bitmapam.Plan) map[int]string {
	m := map[int]string{}
	for _, e := range plan.Spec.Endpoints {
		m[e.ID] = e.Host
	}
	return m
}

func runRoot(ctx context.Context, w *wire, op *bitmapam.OpPlan, hp *bitmapam.HostPlan, in map[int][]float32, out []float32, o Options) (Stats, error) {
	kw := int(contextOf(w.plan).KulischWidth)
	if kw == 0 {
		kw = kulisch.RequiredWidth(uint32(max(1, len(w.plan.Spec.Endpoints))))
	}
	target := bitmapfwd.NewSet(w.bits)
	for _, e := range w.plan.Spec.Endpoints {
		if e.Host != hp.Host {
			target.Add(e.ID)
		}
	}
	chunks := chunksOf(len(out), chunkLen(w, o))
	st := Stats{Chunks: len(chunks)}
	local := func(cr chunkRange) (*kulisch.Vector, error) {
		v, err := kulisch.NewVector(cr.n, kw)
		if err != nil {
			return nil, err
		}
		for _, e := range hp.Endpoints {
			if err := v.AddFP32LE(0, fp32Bytes(in[e][cr.first:cr.first+cr.n])); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	if target.IsEmpty() {
		for _, cr := range chunks {
			v, err := local(cr)
			if err != nil {
				return st, err
			}
			a := newTokenAgg(0, cr.n, kw, target)
			if err := a.sum(out[cr.first:cr.first+cr.n], v); err != nil {
				return st, err
			}
		}
		return st, nil
	}
	if hp.RootIn == nil || hp.RootOut == nil {
		return st, fmt.Errorf("%w: root %s has no links", ErrNotInPlan, hp.Host)
	}
	sub := w.port.subscribe(op.Op.Job)
	type cstate struct {
		agg      *tokenAgg
		done     bool
		rounds   int
		progress time.Time // last new contribution or request
		asked    time.Time // last repair request
		askedSet *bitmapfwd.Set
		resent   time.Time // last result re-sent to a straggler
	}
	cs := make([]cstate, len(chunks))
	missed := bitmapfwd.NewSet(w.bits)
	hosts := hostMap(w.plan)
	doneN := 0
	sendResult := func(c int, to *bitmapfwd.Set) error {
		cr := chunks[c]
		st.Frames++
		return w.send(parser.ClassResult, hp.RootOut, to, 0, uint64(c), uint32(cr.first), 0,
			values{parser.FormatFP32, cr.n, fp32Bytes(out[cr.first : cr.first+cr.n])})
	}
	request := func(c int, miss *bitmapfwd.Set) error {
		// One request per round: a PARTIAL often arrives as several frames,
		// and a second PARTIAL for the same miss set says nothing new.
		now := time.Now()
		if cs[c].askedSet != nil && miss.SubsetOf(cs[c].askedSet) && now.Sub(cs[c].asked) < o.Timeout {
			return nil
		}
		cs[c].asked, cs[c].askedSet = now, miss
		st.RepairRequests++
		missed.Or(missed, miss)
		cs[c].rounds++
		cs[c].progress = time.Now()
		return w.send(parser.ClassResult, hp.RootOut, miss, 0, uint64(c), 0, 0)
	}
	fail := func(c int, miss *bitmapfwd.Set) error {
		ids := members(miss)
		vals := make([]float32, 0, len(ids))
		for _, id := range ids {
			vals = append(vals, float32(id))
		}
		if len(vals) > len(out) {
			vals = vals[:len(out)]
		}
		_ = w.send(parser.ClassResult, hp.RootOut, target, 0, abortToken|uint64(c), 0, 0,
			values{parser.FormatFP32, len(vals), fp32Bytes(vals)})
		return &MissingError{Op: "allreduce", Token: uint64(c), Endpoints: ids, Hosts: hostsOf(ids, hosts), Rounds: cs[c].rounds}
	}
	handle := func(f []byte, now time.Time) error {
		r, ok := w.accept(f, parser.ClassData, hp.RootIn)
		if !ok || r.d.Ext.Token >= uint64(len(chunks)) {
			return nil
		}
		c := int(r.d.Ext.Token)
		if cs[c].done {
			// A straggler retransmitted: it lost the result.
			if now.Sub(cs[c].resent) > o.Timeout/4 {
				cs[c].resent = now
				st.Retransmits++
				to := bitmapfwd.NewSet(w.bits)
				to.And(r.set, target)
				if !to.IsEmpty() {
					return sendResult(c, to)
				}
			}
			return nil
		}
		if cs[c].agg == nil {
			cs[c].agg = newTokenAgg(chunks[c].first, chunks[c].n, kw, target)
		}
		a := cs[c].agg
		if !a.add(r, now) {
			return nil
		}
		cs[c].progress = now
		if r.d.Ext.XFlags&parser.XFlagPartial != 0 {
			st.Partials++
		}
		if a.complete() {
			v, err := local(chunks[c])
			if err != nil {
				return err
			}
			cr := chunks[c]
			if err := a.sum(out[cr.first:cr.first+cr.n], v); err != nil {
				return err
			}
			cs[c].done, cs[c].agg = true, nil
			return sendResult(c, target)
		}
		if r.d.Ext.XFlags&parser.XFlagPartial != 0 {
			// The PARTIAL's P-BM says exactly who is missing.
			miss := a.missing()
			if cs[c].rounds >= o.Rounds && now.Sub(cs[c].asked) >= o.Timeout {
				return fail(c, miss)
			}
			return request(c, miss)
		}
		return nil
	}
	tick := time.NewTicker(max(o.Timeout/8, time.Millisecond))
	finish := func() {
		// Keep answering stragglers for Linger, then let go.
		go func() {
			defer w.port.unsubscribe(sub)
			defer tick.Stop()
			t := time.NewTimer(o.Linger)
			defer t.Stop()
			for {
				select {
				case f, ok := <-sub.ch:
					if !ok {
						return
					}
					_ = handle(f, time.Now())
				case <-t.C:
					// Not ctx: callers cancel it as soon as AllReduce
					// returns, and stragglers still need answers.
					return
				}
			}
		}()
	}
	for doneN < len(chunks) {
		select {
		case <-ctx.Done():
			w.port.unsubscribe(sub)
			tick.Stop()
			return st, ctx.Err()
		case f, ok := <-sub.ch:
			if !ok {
				return st, ErrClosed
			}
			if err := handle(f, time.Now()); err != nil {
				w.port.unsubscribe(sub)
				tick.Stop()
				return st, err
			}
		case now := <-tick.C:
			for c := doneN; c < len(chunks); c++ {
				if cs[c].done || cs[c].agg == nil || now.Sub(cs[c].progress) < o.Timeout {
					continue
				}
				miss := cs[c].agg.missing()
				if cs[c].rounds >= o.Rounds {
					w.port.unsubscribe(sub)
					tick.Stop()
					return st, fail(c, miss)
				}
				if err := request(c, miss); err != nil {
					return st, err
				}
			}
		}
		doneN = countDone(cs, func(c cstate) bool { return c.done }, doneN)
	}
	st.Missed = members(missed)
	// The copy is taken before the linger goroutine starts, which keeps
	// updating st for stragglers.
	res := st
	finish()
	return res, nil
}
