// This file owns the CONTROL sequences of one operation: CAPS matching,
// STAGE and COMMIT of every node, the ABORT rollback, the COMPLETE check and
// RELEASE, and the failure diagnosis built from COMPLETE answers.

package am

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// forEach runs f for every node of the plan concurrently: setup latency is
// one round trip, not one per node.
func (m *Manager) forEach(names []string, f func(name string) error) map[string]error {
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(n); err != nil {
				mu.Lock()
				errs[n] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// firstErr picks the error of the first node in order, for a stable message.
func firstErr(order []string, errs map[string]error) (string, error) {
	for _, n := range order {
		if e, ok := errs[n]; ok {
			return n, e
		}
	}
	return "", nil
}

// nodeCaps returns a node's capability pages, cached for capsTTL.
func (m *Manager) nodeCaps(ctx context.Context, np *nodePlan) ([]capsPage, error) {
	m.mu.Lock()
	c, ok := m.capsCache[np.node.Name]
	m.mu.Unlock()
	if ok && time.Since(c.at) < m.cfg.CapsTTL {
		return c.pages, nil
	}
	pages, err := m.ctl.caps(ctx, np.node.Name, np.node.MAC)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.capsCache[np.node.Name] = capsEntry{pages: pages, at: time.Now()}
	m.mu.Unlock()
	return pages, nil
}

// matchCaps checks that one record covers the whole tuple and every limit.
func matchCaps(pages []capsPage, c contextRecord, nBindings int) error {
	if len(pages) == 0 {
		return errors.New("no capability pages")
	}
	if pages[0].MaxMTU != 0 && int(c.MTU) > int(pages[0].MaxMTU) {
		// The MTU comes from the ranks (--mtu, Config.MTU, 1500 by
		// default): say what to ask for instead.
		return fmt.Errorf("MTU %d above the node's maximum %d (its interfaces' MTU): ask for at most %d (prismctl --mtu, host Options.MTU: 576, 1500 or 9000) or raise the switch's port MTU",
			c.MTU, pages[0].MaxMTU, pages[0].MaxMTU)
	}
	tuple := fmt.Sprintf("(%v, %v, %v, %v)", c.Input, c.Acc, c.Partial, c.Output)
	var why []string
	for _, p := range pages {
		for _, r := range p.Records {
			if r.Input != c.Input || r.Acc != c.Acc || r.Partial != c.Partial || r.Output != c.Output {
				continue
			}
			switch {
			case c.KulischWidth != 0 && (c.KulischWidth < r.MinKW || c.KulischWidth > r.MaxKW):
				why = append(why, fmt.Sprintf("Kulisch width %d outside %d..%d", c.KulischWidth, r.MinKW, r.MaxKW))
			case c.VectorLen > r.MaxVector:
				why = append(why, fmt.Sprintf("vector length %d above %d", c.VectorLen, r.MaxVector))
			case c.MaxTerms > r.MaxTerms:
				why = append(why, fmt.Sprintf("%d terms above %d", c.MaxTerms, r.MaxTerms))
			case c.MTU > r.MaxMTU:
				why = append(why, fmt.Sprintf("MTU %d above %d", c.MTU, r.MaxMTU))
			case nBindings > int(r.MaxBindings):
				why = append(why, fmt.Sprintf("%d bindings above %d", nBindings, r.MaxBindings))
			case c.Intervals > r.MaxIntervals || c.ReplayDepth > r.MaxReplay || c.WindowBytes > r.MaxWinBytes || c.WindowElems > r.MaxWinElem:
				why = append(why, fmt.Sprintf("window %d intervals/%d replay/%d bytes/%d elements above %d/%d/%d/%d",
					c.Intervals, c.ReplayDepth, c.WindowBytes, c.WindowElems, r.MaxIntervals, r.MaxReplay, r.MaxWinBytes, r.MaxWinElem))
			default:
				return nil
			}
		}
	}
	if len(why) == 0 {
		return fmt.Errorf("no capability record for tuple %s (input, accumulator, partial, output)", tuple)
	}
	return fmt.Errorf("tuple %s is advertised but %s", tuple, strings.Join(why, "; "))
}

// fitWindow lowers the plan's window to what every node's matching record
// allows (the request's window is a wish, the CAPS a bound).
func fitWindow(w Window, pages []capsPage, c contextRecord) Window {
	for _, p := range pages {
		for _, r := range p.Records {
			if r.Input != c.Input || r.Acc != c.Acc || r.Partial != c.Partial || r.Output != c.Output {
				continue
			}
			w.Intervals = min(w.Intervals, r.MaxIntervals)
			w.ReplayDepth = min(w.ReplayDepth, r.MaxReplay)
			w.Bytes = min(w.Bytes, r.MaxWinBytes)
			w.Elements = min(w.Elements, r.MaxWinElem)
			return w
		}
	}
	return w
}

// nodeElements is the most elements one frame can carry on any stream node
// c receives: the input format from ranks, the partial format from child
// switches (KULISCH possibly as KULISCH_SCALED, which packs more per frame
// than KULISCH_F64), the output format on
// RESULT_IN, as the engine bounds each stream (engine frameElements). A
// window of Intervals such frames is what the node's streams can use, and
// it is the size of the node's ring of accumulators: sizing every node for
// INT8 frames made a KULISCH leaf of 64 jumbo FP32 frames hold a 41 MB
// ring, four times what its streams could fill, and its adds miss the
// caches (168 ns a value measured, against 4 in cache).
func nodeElements(c *contextRecord, bs []binding) uint32 {
	n := 1
	for _, b := range bs {
		var f parser.Format
		scaled := false
		switch {
		case b.Kind == parser.KindContributor && b.Flags&parser.BindingFlagRank != 0:
			f = c.Input
		case b.Kind == parser.KindContributor:
			f, scaled = c.Partial, true
		case b.Kind == parser.KindResultIn:
			f = c.Output
		default:
			continue
		}
		n = max(n, kulisch.FrameElements(kulisch.Format(f), int(c.KulischWidth), int(c.MTU), scaled))
	}
	return uint32(n)
}

// capElems is the element window limit of the node's record matching c
// (no limit without one: matchCaps reports that).
func capElems(pages []capsPage, c contextRecord) uint32 {
	for _, p := range pages {
		for _, r := range p.Records {
			if r.Input == c.Input && r.Acc == c.Acc && r.Partial == c.Partial && r.Output == c.Output {
				return r.MaxWinElem
			}
		}
	}
	return math.MaxUint32
}

// setup runs CAPS, STAGE and COMMIT on every node of op. On failure it rolls
// back and returns the API error every rank receives.
func (m *Manager) setup(ctx context.Context, op *operation) *APIError {
	pl := op.plan
	// CAPS, then fit the window to every node, then match.
	caps := map[string][]capsPage{}
	var capsMu sync.Mutex
	errs := m.forEach(pl.order, func(n string) error {
		pages, err := m.nodeCaps(ctx, pl.nodes[n])
		if err != nil {
			return err
		}
		capsMu.Lock()
		caps[n] = pages
		capsMu.Unlock()
		return nil
	})
	if n, err := firstErr(pl.order, errs); err != nil {
		op.setNodeErr(n, err)
		return &APIError{Code: CodeSetupFailed, Node: n, Message: fmt.Sprintf("capability query: %v", err)}
	}
	w := pl.win
	for _, n := range pl.order {
		w = fitWindow(w, caps[n], pl.nodes[n].ctx)
	}
	pl.win = w
	for _, n := range pl.order {
		np := pl.nodes[n]
		c := &np.ctx
		need := nodeElements(c, np.bindings) // one frame of the densest stream it receives
		e := w.Elements
		if e == 0 {
			e = min(uint32(w.Intervals)*need, capElems(caps[n], *c))
		}
		if p := op.inv.p; p.Persistent && p.invocationLen() < p.VectorLen {
			// A persistent operation's vector is every call's, but its
			// calls sum invocationLen elements each, one after another:
			// room for two lets the next call's frames flow while one
			// ends, and more is memory no call can use. A 1-element
			// call reserved 8 MB of accumulator per switch, and a switch
			// full of them refused the 130th.
			e = uint32(min(uint64(e), 2*uint64(p.invocationLen())))
		}
		// Below one frame the node could not take a packet (and STAGE
		// requires room for the largest INT8 packet): keep that much and
		// let matchCaps name the node whose limit is too low.
		e = max(e, need, uint32(parser.MaxPacketElements(int(c.MTU))))
		c.Intervals, c.ReplayDepth, c.WindowBytes, c.WindowElems = w.Intervals, w.ReplayDepth, w.Bytes, e
	}
	for _, n := range pl.order {
		np := pl.nodes[n]
		if err := matchCaps(caps[n], np.ctx, len(np.bindings)); err != nil {
			op.setNodeErr(n, err)
			return &APIError{Code: CodeUnsupported, Node: n, Message: fmt.Sprintf("node %s: %v", n, err)}
		}
	}

	// STAGE every node.
	staged := m.forEach(pl.order, func(n string) error {
		np := pl.nodes[n]
		body, err := encodeStage(np.ctx, np.bindings)
		if err != nil {
			err = &NodeError{Node: n, Cmd: parser.CmdStage, Err: err}
			op.setNodeErr(n, err)
			return err
		}
		a, err := m.ctl.command(ctx, n, np.node.MAC, op.id, parser.CmdStage, body)
		op.setNodeAck(n, a, err)
		return err
	})
	if n, err := firstErr(pl.order, staged); err != nil {
		cause, older, ending := retryNone, []string(nil), []*operation(nil)
		for _, node := range pl.order {
			var ne *NodeError
			if !errors.As(staged[node], &ne) || ne.Err != nil {
				continue
			}
			switch {
			case ne.Status == parser.StatusStaleGeneration:
				cause = retryStale
			case ne.Status == parser.StatusBadState && ne.State != parser.StateNone:
				older = append(older, fmt.Sprintf("%s (%v)", node, ne.State))
				if cause == retryNone {
					cause = retryOlder
				}
			case ne.Status == parser.StatusNoResources:
				if e := m.endingOn(node, op); len(e) > 0 {
					ending = append(ending, e...)
					if cause == retryNone {
						cause = retryResources
					}
				}
			}
		}
		ae := m.rollback(op, CodeSetupFailed, n, fmt.Sprintf("STAGE: %v", err))
		ae.retry, ae.older, ae.ending = cause, older, ending
		return ae
	}
	committed := m.forEach(pl.order, func(n string) error {
		a, err := m.ctl.command(ctx, n, pl.nodes[n].node.MAC, op.id, parser.CmdCommit, nil)
		op.setNodeAck(n, a, err)
		return err
	})
	if n, err := firstErr(pl.order, committed); err != nil {
		return m.rollback(op, CodeSetupFailed, n, fmt.Sprintf("COMMIT: %v", err))
	}
	return nil
}

// endingOn lists this AM's operations other than self that hold a
// context on node and are ending: completing (RELEASE under way), failing
// or draining.
func (m *Manager) endingOn(node string, self *operation) []*operation {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*operation
	for _, o := range m.ops {
		if o == self || o.plan == nil || o.plan.nodes[node] == nil {
			continue
		}
		o.mu.Lock()
		ending := o.ended.IsZero() && (o.state == "completing" || o.state == "failing" || o.state == "draining")
		o.mu.Unlock()
		if ending {
			out = append(out, o)
		}
	}
	return out
}

// rollback ABORTs every node of op (a node that never saw STAGE retires the
// generation all the same, and one that held an older generation frees that
// too: docs/protocol.md section 5) and reports nodes that never answered.
func (m *Manager) rollback(op *operation, code, node, msg string) *APIError {
	incomplete := m.abortAll(op)
	e := &APIError{Code: code, Node: node, Message: msg, RollbackIncomplete: incomplete}
	if len(incomplete) > 0 {
		e.Code = CodeRollbackIncomplete
		e.Message = msg + "; rollback incomplete: no ABORT acknowledgement from " + strings.Join(incomplete, ", ")
	}
	return e
}

// abortAll sends ABORT to every node with a bounded context of its own (the
// caller's may already be cancelled) and returns the nodes that never ACKed.
func (m *Manager) abortAll(op *operation) []string { return m.abortAllBut(op, nil) }

// quickAbort bounds the ABORT of a node that has just failed to answer a
// whole CONTROL timeout (abortAllBut's short).
const quickAbort = 300 * time.Millisecond

// abortAllBut is abortAll, giving the nodes in short quickAbort instead of
// the CONTROL timeout: a failed operation's diagnosis has just asked every
// node for the whole CONTROL timeout, and one cut off from the AM (behind
// a link that went down) made the ranks wait that long again for the
// ABORT it would not answer either before they heard the verdict. A node
// that does answer in time is ABORTed as usual; one that does not is
// reported as never acknowledging, as before.
func (m *Manager) abortAllBut(op *operation, short map[string]bool) []string {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CtlTimeout+time.Second)
	defer cancel()
	errs := m.forEach(op.plan.order, func(n string) error {
		ctx := ctx
		if short[n] {
			c, cancel := context.WithTimeout(ctx, quickAbort)
			defer cancel()
			ctx = c
		}
		a, err := m.ctl.command(ctx, n, op.plan.nodes[n].node.MAC, op.id, parser.CmdAbort, nil)
		var ne *NodeError
		if errors.As(err, &ne) && ne.Err == nil {
			// Answered: any status means the node holds no live context for
			// this generation any more (BAD_STATE: never staged, already
			// gone). Record what it said.
			op.setNodeAck(n, a, nil)
			op.setNodeState(n, "ABORTED")
			return nil
		}
		if err == nil {
			op.setNodeState(n, "ABORTED")
		} else {
			op.setNodeErr(n, err)
		}
		return err
	})
	var bad []string
	for _, n := range op.plan.order {
		if errs[n] != nil {
			bad = append(bad, n)
		}
	}
	if len(bad) == 0 {
		m.metrics.rollbacks.WithLabelValues("complete").Inc()
	} else {
		m.metrics.rollbacks.WithLabelValues("incomplete").Inc()
	}
	return bad
}

// completeAll polls COMPLETE on every node until each reports COMPLETE or the
// deadline passes; it returns the nodes that did not complete.
func (m *Manager) completeAll(op *operation, deadline time.Time) []string {
	pending := append([]string(nil), op.plan.order...)
	wait := 5 * time.Millisecond
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(m.cfg.CtlTimeout))
		errs := m.forEach(pending, func(n string) error {
			a, err := m.ctl.command(ctx, n, op.plan.nodes[n].node.MAC, op.id, parser.CmdComplete, nil)
			op.setNodeAck(n, a, err)
			if err != nil {
				return err
			}
			if a.State != parser.StateComplete {
				return fmt.Errorf("state %v", a.State)
			}
			return nil
		})
		cancel()
		var still []string
		for _, n := range pending {
			if errs[n] != nil {
				still = append(still, n)
			}
		}
		pending = still
		if len(pending) == 0 || time.Now().Add(wait).After(deadline) {
			return pending
		}
		time.Sleep(wait)
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// releaseAll RELEASEs every node; it returns those that never ACKed.
func (m *Manager) releaseAll(op *operation) []string {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CtlTimeout+time.Second)
	defer cancel()
	errs := m.forEach(op.plan.order, func(n string) error {
		a, err := m.ctl.command(ctx, n, op.plan.nodes[n].node.MAC, op.id, parser.CmdRelease, nil)
		op.setNodeAck(n, a, err)
		return err
	})
	var bad []string
	for _, n := range op.plan.order {
		if errs[n] != nil {
			bad = append(bad, n)
		}
	}
	return bad
}

// askAll asks every node of op for its state (COMPLETE, which changes
// nothing) and records the answers.
func (m *Manager) askAll(op *operation) { m.ask(op, op.plan.order) }

// ask is askAll of the nodes named.
func (m *Manager) ask(op *operation, nodes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CtlTimeout)
	defer cancel()
	m.forEach(nodes, func(n string) error {
		a, err := m.ctl.command(ctx, n, op.plan.nodes[n].node.MAC, op.id, parser.CmdComplete, nil)
		op.setNodeAck(n, a, err)
		return err
	})
}

// elementAt names element e of op's vector as its ranks count: a
// persistent operation's vector is every invocation's, and "from element
// 30711804" of a 200000-element call left the user to divide.
func (op *operation) elementAt(e uint32) string {
	p := op.inv.p
	if l := p.invocationLen(); p.Persistent && l > 0 && l < p.VectorLen {
		return fmt.Sprintf("element %d of invocation %d (%d in the operation)", e%l, e/l+1, e)
	}
	return fmt.Sprintf("element %d", e)
}

// diagnose asks every node for its state once and explains the failure:
// which node failed, which contributor is missing and from which element.
// A non-nil blame is the culprit the caller established (a silent rank of
// a persistent operation): the nodes' Missing Streams do not override it.
func (m *Manager) diagnose(op *operation, blame *int) (diag string, culprit *int, origin string) {
	m.askAll(op)
	if blame == nil {
		// A rank whose own timer fired first (its leaf went silent, its
		// link went down; it says timed_out) reports before any node
		// has failed, and the
		// nodes, all ACTIVE, only say what they still wait for: the
		// diagnosis followed that chain and blamed the rank, when its
		// leaf was about to fail with the cause (LINK_DOWN, or a
		// TIMEOUT naming another peer). The nodes' timers run on the
		// same Timeout (a quarter more for switch peers, half more for
		// a RESULT owed: 1.5 s after a rank's own RESULT deadline of
		// Timeout + 1 s at the default 5 s), so asking again for a
		// while lets their verdict in.
		//
		// Only the nodes that answered are asked again: one that did not
		// answer a whole CONTROL timeout just now will not be heard
		// within the grace either, and asking it again cost a CONTROL
		// timeout per round. With the AM's own leaf killed, no node
		// answered, and a rank next to the AM heard the verdict 6.5 s
		// after it reported (two more rounds), 3.5 s after the ranks that
		// could not reach the AM at all.
		grace := min(time.Duration(op.inv.p.TimeoutMS)*time.Millisecond/2+200*time.Millisecond, 4*time.Second)
		for end := time.Now().Add(grace); op.treeUnaware() && time.Now().Before(end); {
			live := op.answering()
			if len(live) == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
			m.ask(op, live)
		}
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	var parts []string
	culprit = blame
	culpritAcks := false // the culprit's stream that stood is its RESULT (it stopped acknowledging)
	// Where the failure started first: a node FAILED on a timeout (its
	// Missing Stream is the peer that went silent), then nodes FAILED
	// because a peer told them (PEER_FAILED: a FAILED node announces it to
	// its peers, so one silent rank fails the whole tree within
	// milliseconds), then the others; deepest first within each: a leaf
	// missing a rank explains its parent missing the leaf's subtree. An
	// ACTIVE node's Missing Stream is only its least advanced stream, often
	// a healthy rank a few frames behind, and a PEER_FAILED node's is the
	// peer that told it, so neither names a culprit while a timed-out node
	// does; without one, holdingRank follows the chain from the root.
	order := append([]string(nil), op.plan.order...)
	sw := m.stoppedSwitches(op)
	tier := func(n string) int {
		switch ns := op.nodes[n]; {
		case ns.localSend:
			// The AM's own host refused to send to it: nothing
			// known about the node.
			return 3
		case sw.behind[n] != "":
			// Silent, but the AM reaches it only through a switch
			// that stopped: probably not where the failure began.
			return 3
		case sw.leads(n):
			// Stopped answering, and other nodes' reports (a timeout
			// on it, silence beyond it) point at it: it comes before
			// the nodes that only felt it.
			return 0
		case ns.State == "FAILED" && ns.FailCause != "PEER_FAILED", ns.State == parser.StateNone.String(),
			ns.State == "UNREACHABLE" && ns.answered:
			// A node that no longer holds a granted operation (its
			// prismd restarted), or that stopped answering after it
			// acknowledged the setup (its prismd died), is where the
			// failure began as surely as one that timed out.
			return 1
		case ns.State == "FAILED":
			return 2
		}
		return 3
	}
	sort.SliceStable(order, func(i, j int) bool {
		if ti, tj := tier(order[i]), tier(order[j]); ti != tj {
			return ti < tj
		}
		return op.plan.nodes[order[i]].node.Depth > op.plan.nodes[order[j]].node.Depth
	})
	if len(order) > 0 && tier(order[0]) <= 1 {
		origin = order[0] // the node where the failure started (9.4 "node")
	}
	anyFailed, toldBy, lostLink := false, map[int]bool{}, ""
	for _, n := range order {
		ns := op.nodes[n]
		if ns.State == "COMPLETE" || ns.State == "RELEASED" {
			continue
		}
		if ns.State == "FAILED" {
			anyFailed = true
			if ns.FailCause == "PEER_FAILED" && ns.MissingStream != nil {
				if r, ok := op.plan.nodes[n].ownerRank[uint16(*ns.MissingStream)]; ok {
					toldBy[r] = true
				}
			}
		}
		if ns.localSend {
			parts = append(parts, fmt.Sprintf("the AM could not ask node %s: %s", n, ns.LastError))
			continue
		}
		if ns.State == "UNREACHABLE" && ns.answered {
			// The no-acknowledgement error's hints (node_mac, am_sources,
			// the lab's topology file) are for a node never reached.
			switch {
			case sw.leads(n):
				parts = append(parts, sw.lead(n))
			case sw.behind[n] != "":
				parts = append(parts, fmt.Sprintf("node %s does not answer CONTROL, but %s: probably not at fault itself", n, ns.behind))
			default:
				parts = append(parts, fmt.Sprintf("node %s stopped answering CONTROL after it acknowledged this operation's setup "+
					"(its prismd may have stopped, or the path from the AM to it failed)", n))
			}
			continue
		}
		if ns.State == parser.StateNone.String() && ns.LastError != "" {
			// It answered, without the operation: BAD_STATE NONE.
			parts = append(parts, fmt.Sprintf("node %s no longer holds the operation (its prismd restarted, "+
				"or it expired the context: its log says which)", n))
			continue
		}
		s := fmt.Sprintf("node %s is %s", n, ns.State)
		if ns.MissingStream != nil {
			who := ns.MissingFromWhom
			if who == "" {
				who = fmt.Sprintf("stream %d", *ns.MissingStream)
			}
			// A RESULT_OUT stream waits for its receiver's PROGRESS,
			// not its data: "timed out on rank 1 from element 0" told
			// of a rank that had sent everything and stopped
			// acknowledging RESULT.
			acks := op.plan.nodes[n].kindOf(uint16(*ns.MissingStream)) == parser.KindResultOut
			verb, what := "waiting for", ""
			switch {
			case ns.FailCause == "PEER_FAILED":
				verb = "told FAILED by"
			case ns.FailCause == "LINK_DOWN":
				verb = "lost its link to"
			case ns.State == "FAILED":
				verb = "timed out on"
			}
			if acks && ns.FailCause != "PEER_FAILED" && ns.FailCause != "LINK_DOWN" {
				what = " to acknowledge RESULT"
				if ns.State == "FAILED" {
					what = " acknowledging RESULT"
				}
			}
			at := op.elementAt(ns.MissingFrom)
			if ns.FailCause == "LINK_DOWN" && op.plan.nodes[n].kindOf(uint16(*ns.MissingStream)) == parser.KindResultIn {
				// A link goes to a switch, not to its RESULT: "node l1
				// lost its link to the RESULT from s1" read oddly.
				if p, ok := op.plan.nodes[n].ownerSwitch[uint16(*ns.MissingStream)]; ok {
					who = "the parent " + p
				}
			}
			owner, owned := op.plan.nodes[n].ownerRank[uint16(*ns.MissingStream)]
			switch {
			case ns.State == "ACTIVE" && blame != nil && (!owned || owner != *blame):
				// The culprit is known (a rank gone): "node e1 is ACTIVE,
				// waiting for rank 0" named a live rank that was merely
				// furthest behind when asked, beside the rank that died.
				s += fmt.Sprintf(" (%s was furthest behind there when asked, at %s)", who, op.elementAt(ns.MissingFrom))
			case ns.FailCause == "PEER_FAILED":
				s += fmt.Sprintf(", %s %s", verb, who) // where its stream stood says nothing
			case ns.FailCause == "LINK_DOWN":
				s += fmt.Sprintf(", %s %s (its port toward it is set down or has no carrier) from %s", verb, who, at)
			default:
				s += fmt.Sprintf(", %s %s%s from %s", verb, who, what, at)
			}
			if owned && culprit == nil && tier(n) <= 1 {
				rr := owner
				culprit = &rr
				culpritAcks = acks
			}
			if ns.FailCause == "LINK_DOWN" && lostLink == "" && tier(n) <= 1 {
				// The rank (or switch) behind a dead link may be
				// alive: the head names the link, not "stopped
				// contributing".
				lostLink = fmt.Sprintf("node %s lost its link to %s", n, who)
			}
		}
		if ns.LastError != "" {
			s += " (" + ns.LastError + ")"
		}
		parts = append(parts, s)
	}
	// headFail: no node timed out or lost its context, and none failed
	// but on this rank's word, so the rank that first reported a local
	// failure (it was cancelled) ended its part and the tree stood waiting
	// for it: it heads the message as the culprit. ACTIVE nodes' Missing
	// Streams then name whichever healthy stream was least advanced, and
	// following them (holdingRank) blamed a healthy rank. A rank that
	// gave up waiting ("no RESULT for 5s") is not local: the chain finds
	// whom it waited for.
	headFail := culprit == nil && origin == "" && op.firstFail != nil && (!anyFailed || toldBy[*op.firstFail])
	var notDone []string
	for r := 0; r < op.size; r++ {
		if _, ok := op.done[r]; !ok {
			notDone = append(notDone, fmt.Sprintf("%d (%s)", r, op.tree.Ranks[r].Host))
		}
	}
	if len(notDone) > 0 {
		// Frozen with the message: ranks whose failure reports arrive
		// after it (every live rank's, a moment later) are in
		// ranks_done, not here; "never reported" read as a contradiction.
		parts = append(parts, "ranks that had not reported when it failed: "+strings.Join(notDone, ", "))
	}
	// Ranks that report the same words are listed once ("ranks 1 2 3:
	// ..."): every rank of an ACCUMULATION_INEXACT operation says the same
	// thing, and the message repeated it per rank.
	var texts []string
	byText := map[string][]string{}
	for r := 0; r < op.size; r++ {
		if d, ok := op.done[r]; ok && !d.OK && (!headFail || r != *op.firstFail) {
			if _, seen := byText[d.Error]; !seen {
				texts = append(texts, d.Error)
			}
			byText[d.Error] = append(byText[d.Error], strconv.Itoa(r))
		}
	}
	var reports []string
	for _, text := range texts {
		who := "rank " + byText[text][0]
		if rs := byText[text]; len(rs) > 1 {
			who = "ranks " + strings.Join(rs, " ")
		}
		reports = append(reports, who+": "+text)
	}
	if len(reports) > 0 {
		parts = append(parts, "reported by "+strings.Join(reports, "; "))
	}
	if headFail {
		r := *op.firstFail
		head := fmt.Sprintf("rank %d (%s) reported failure first: %s", r, op.tree.Ranks[r].Host, op.done[r].Error)
		return strings.Join(append([]string{head}, parts...), "; "), &r, origin
	}
	if culprit == nil && lostLink == "" {
		// A lost link between two switches blames no rank: whoever
		// the chain from the root reached would be healthy.
		culprit = op.holdingRank()
	}
	switch {
	case lostLink != "" && blame == nil:
		parts = append([]string{lostLink}, parts...)
	case culprit != nil && blame == nil:
		stopped := "stopped contributing"
		if culpritAcks {
			stopped = "stopped acknowledging RESULT"
		}
		parts = append([]string{fmt.Sprintf("rank %d (%s) %s", *culprit, op.tree.Ranks[*culprit].Host, stopped)}, parts...)
	}
	return strings.Join(parts, "; "), culprit, origin
}

// treeUnaware reports whether the nodes' verdict is still to come: no
// rank's local failure (a cancelled call is diagnosed at once), a rank's
// own timer ended it (DoneRequest.TimedOut) or a node does not answer, and
// every node that answers says it is ACTIVE or COMPLETE. A node that
// stopped answering does not end the wait: a dead switch and one cut off
// by a dead link are both silent, and only their neighbours' verdicts
// (TIMEOUT on it, LINK_DOWN toward it) tell them apart.
// answering lists the nodes of op whose last ask was answered (those not
// UNREACHABLE).
func (op *operation) answering() []string {
	op.mu.Lock()
	defer op.mu.Unlock()
	var live []string
	for _, n := range op.plan.order {
		if op.nodes[n].State != "UNREACHABLE" {
			live = append(live, n)
		}
	}
	return live
}

func (op *operation) treeUnaware() bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.firstFail != nil {
		return false
	}
	// A rank's own timer races the switches' timers; a node that does
	// not answer may have failed where the AM cannot see it (its ranks
	// were told: "leaf l2 reports the operation FAILED") while its
	// neighbours' verdicts are still to come. Otherwise (an INEXACT sum,
	// which every rank reports while the tree is COMPLETE) there is
	// nothing to wait for: it waited out the whole grace, a second per
	// call.
	wait := false
	for _, d := range op.done {
		wait = wait || !d.OK && d.TimedOut
	}
	for _, n := range op.plan.order {
		switch op.nodes[n].State {
		case "ACTIVE", "COMPLETE":
		case "UNREACHABLE":
			wait = true
		default:
			return false
		}
	}
	return wait
}

// stopped is what the nodes of a failed operation say about switches that
// stopped: which ones stopped answering CONTROL after they acknowledged
// the setup, which ones other nodes timed out on, and which silent nodes
// the AM reaches only through one of those. A switch that stops (its
// prismd SIGSTOPped, its host hung) silences every node the AM's CONTROL
// reaches through it: blaming each of them sent the operator to healthy
// switches, and the node that timed out on the real one was a line among
// them.
type stopped struct {
	silent map[string]bool
	// accused lists, per switch, the nodes that timed out on it ("l1
	// timed out on its parent s1").
	accused map[string][]string
	// behind names, for a silent node, the switch on the AM's CONTROL
	// path to it that stopped answering or was timed out on, nearest the
	// AM; shadowed lists the reverse, in tree order.
	behind   map[string]string
	shadowed map[string][]string
	// onTheWay lists, per silent node, the switches outside the tree
	// (forwarders, bridges) that the AM's CONTROL or the frames of the
	// nodes that timed out on it cross to reach it, but not those that
	// carry CONTROL to a node that answered: a forwarder that stops
	// silences the node behind it exactly as the node's own stop would,
	// and the AM blamed the healthy node alone.
	onTheWay map[string][]string
}

// stoppedSwitches (under op.mu) reads op's node states into a stopped,
// and notes on each silent node behind a suspect why it may be healthy
// (NodeStatus.behind, which its LastError then says).
func (m *Manager) stoppedSwitches(op *operation) *stopped {
	sw := &stopped{silent: map[string]bool{}, accused: map[string][]string{}, behind: map[string]string{}, shadowed: map[string][]string{},
		onTheWay: map[string][]string{}}
	accusers := map[string][]string{} // per switch, the nodes that timed out on it
	for _, n := range op.plan.order {
		ns := op.nodes[n]
		if ns.State == "UNREACHABLE" && ns.answered && !ns.localSend {
			sw.silent[n] = true
		}
		if ns.State != "FAILED" || (ns.FailCause != "TIMEOUT" && ns.FailCause != "") || ns.MissingStream == nil {
			continue
		}
		peer, ok := op.plan.nodes[n].ownerSwitch[uint16(*ns.MissingStream)]
		if !ok {
			continue
		}
		rel := "child"
		if tn := op.tree.Node(n); tn != nil && tn.Parent != nil && tn.Parent.Parent == peer {
			rel = "parent"
		}
		sw.accused[peer] = append(sw.accused[peer], fmt.Sprintf("%s timed out on its %s %s", n, rel, peer))
		accusers[peer] = append(accusers[peer], n)
	}
	// A switch on the AM's CONTROL path to a node that answered carries
	// CONTROL: not a suspect.
	carries := map[string]bool{}
	for _, n := range op.plan.order {
		if sw.silent[n] {
			continue
		}
		if via, ok := m.controlPath(n); ok {
			for _, s := range via {
				carries[s] = true
			}
		}
	}
	for n := range sw.silent {
		for _, s := range m.switchesOnTheWay(op, n, accusers[n]) {
			if !carries[s] {
				sw.onTheWay[n] = append(sw.onTheWay[n], s)
			}
		}
	}
	for _, n := range op.plan.order {
		if !sw.silent[n] {
			continue
		}
		path, ok := m.controlPath(n)
		if !ok {
			continue
		}
		for _, s := range path {
			if !sw.silent[s] && len(sw.accused[s]) == 0 {
				continue
			}
			sw.behind[n] = s
			sw.shadowed[s] = append(sw.shadowed[s], n)
			ns := op.nodes[n]
			if sw.silent[s] {
				ns.behind = fmt.Sprintf("the AM reaches it only through %s, which stopped answering too", s)
			} else {
				ns.behind = fmt.Sprintf("the AM reaches it only through %s (%s)", s, strings.Join(sw.accused[s], "; "))
			}
			// askAll recorded the silence before its cause was known.
			if t, ok := strings.CutSuffix(ns.LastError, silenceUnexplained); ok {
				ns.LastError = t + "and " + ns.behind
			}
			break
		}
	}
	// A silent switch that a neighbour lost its link to (LINK_DOWN on
	// their stream) is cut off, not necessarily stopped: when the dead
	// link is also the AM's way to it, its silence is the link's.
	for _, n := range op.plan.order {
		ns := op.nodes[n]
		if ns.State != "FAILED" || ns.FailCause != "LINK_DOWN" || ns.MissingStream == nil {
			continue
		}
		peer, ok := op.plan.nodes[n].ownerSwitch[uint16(*ns.MissingStream)]
		if !ok || !sw.silent[peer] || sw.behind[peer] != "" {
			continue
		}
		sw.behind[peer] = n
		ps := op.nodes[peer]
		ps.behind = fmt.Sprintf("%s lost its link to it (LINK_DOWN)", n)
		if t, ok := strings.CutSuffix(ps.LastError, silenceUnexplained); ok {
			ps.LastError = t + "and " + ps.behind
		}
	}
	return sw
}

// leads reports whether n stopped answering and other nodes' reports
// point at it.
func (sw *stopped) leads(n string) bool {
	return sw.silent[n] && sw.behind[n] == "" && (len(sw.accused[n]) > 0 || len(sw.shadowed[n]) > 0)
}

// lead is the head of the diagnosis for a node that leads: "node s1
// stopped (it stopped answering CONTROL after it acknowledged this
// operation's setup; l1 timed out on its parent s1; l2, reached through
// s1, does not answer either)".
func (sw *stopped) lead(n string) string {
	ev := append([]string{"it stopped answering CONTROL after it acknowledged this operation's setup"}, sw.accused[n]...)
	if sh := sw.shadowed[n]; len(sh) == 1 {
		ev = append(ev, fmt.Sprintf("%s, reached through %s, does not answer either", sh[0], n))
	} else if len(sh) > 1 {
		ev = append(ev, fmt.Sprintf("%s and %s, reached through %s, do not answer either", strings.Join(sh[:len(sh)-1], ", "), sh[len(sh)-1], n))
	}
	or, tail := "", "its prismd may have stopped or hung, or its links failed"
	switch way := sw.onTheWay[n]; len(way) {
	case 0:
	case 1:
		or = fmt.Sprintf(", or switch %s on the way to it did, or a link on that way went down", way[0])
	default:
		or = fmt.Sprintf(", or one of the switches on the way to it did (%s), or a link on that way went down", strings.Join(way, ", "))
	}
	if or != "" {
		// A forwarder's port that went down looks the same from here as
		// a node that stopped: CONTROL says nothing of a port. The
		// switches' logs and 'show ports' do (a walkthrough's cut link
		// behind a forwarder was blamed on the live leaf).
		tail = fmt.Sprintf("the AM cannot tell which, since it reaches %s only that way: the switches' logs and 'prismctl show ports' say", n)
	}
	return fmt.Sprintf("node %s stopped%s (%s): %s", n, or, strings.Join(ev, "; "), tail)
}

// switchesOnTheWay lists the switches outside op's tree that CONTROL from
// the AM, or frames from the nodes in from, cross to reach node, nearest
// the AM first, each once (stopped.onTheWay).
func (m *Manager) switchesOnTheWay(op *operation, node string, from []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(via []string) {
		for _, s := range via {
			if !seen[s] && op.tree.Node(s) == nil {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	if via, ok := m.controlPath(node); ok {
		add(via)
	}
	if m.cfg.Topology != nil {
		for _, f := range from {
			hops, err := m.cfg.Topology.Path(f, node)
			if err != nil || len(hops) < 2 {
				continue
			}
			var via []string
			for _, h := range hops[1 : len(hops)-1] {
				via = append(via, h.Node)
			}
			add(via)
		}
	}
	return out
}

// holdingRank (under op.mu) follows, from the root down, what each ACTIVE
// node waits for most (its Missing Stream is its least advanced inbound
// stream) to the rank at the end of that chain: the one holding the whole
// tree back when no node timed out yet (a rank that gave up reports at
// once). A single node's Missing Stream proves nothing: a leaf's is often
// a healthy rank a few frames behind its sibling, while the root's minimum
// runs through the subtree that really stalled. nil when the chain ends
// elsewhere (a node not ACTIVE, a RESULT stream, nothing missing).
func (op *operation) holdingRank() *int {
	r, _ := op.holding()
	return r
}

// holding is holdingRank and the leaf where the chain ended.
func (op *operation) holding() (*int, string) {
	if len(op.plan.order) == 0 {
		return nil, ""
	}
	n := op.plan.order[0]
	for range op.plan.order {
		ns, np := op.nodes[n], op.plan.nodes[n]
		if ns == nil || np == nil || ns.State != "ACTIVE" || ns.MissingStream == nil {
			return nil, ""
		}
		s := uint16(*ns.MissingStream)
		if r, ok := np.ownerRank[s]; ok {
			return &r, n
		}
		child, ok := np.ownerChild[s]
		if !ok {
			return nil, ""
		}
		n = child
	}
	return nil, ""
}
