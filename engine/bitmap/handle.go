// This file owns the per-frame path of a BITMAP context: admission (binding,
// tenant, auth tag), the multicast direction (RESULT + EXT: BIFT
// replication, C-BM installation) and the aggregation direction (DATA + EXT:
// merging against the A-BM or an installed C-BM, or forwarding toward the
// parent). Nothing here allocates.

package bitmap

import (
	"errors"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

func (c *ctx) drop(d Drop) {
	c.s.m.drop(d)
	c.stats.Drops++
}

func (c *ctx) handle(now int64, in int, frame []byte, tx dataplane.Sender) {
	m := c.s.m
	d := &c.s.d
	// Frame rules before state rules (protocol section 6).
	if err := d.Decode(frame, parser.Limits{VectorLen: c.vecLen, KulischBytes: c.kbytes, MTU: c.mtu, ListCap: c.listCap}); err != nil {
		m.decodeDrop(err)
		c.stats.Drops++
		return
	}
	if c.state != parser.StateActive {
		c.drop(DropNotActive)
		return
	}
	// A BITMAP context takes only frames with the endpoint-set extension
	// (section 8.4).
	if d.Flags&parser.FlagExt == 0 {
		c.drop(DropBadEndpoint)
		return
	}
	kind := parser.KindContributor
	if d.Class == parser.ClassResult {
		kind = parser.KindResultIn
	}
	bi := c.match(kind, in, frame, d)
	if bi < 0 {
		c.drop(DropBadEndpoint)
		return
	}
	// Tenant before any state (8.5), then the tag (8.6).
	if d.Ext.Tenant != c.tenant {
		c.drop(DropTenantMismatch)
		return
	}
	c.refreshAuth()
	if c.auth != nil && (d.Ext.XFlags&parser.XFlagAuth == 0 || c.auth.Verify(frame) != nil) {
		c.drop(DropAuthFailed)
		return
	}
	m.Frames[d.Class].Add(1)
	if d.Class == parser.ClassResult {
		c.replicate(now, c.bind[bi].back, frame, d, tx)
		return
	}
	c.aggregate(now, frame, d, tx)
}

// match returns the incoming binding of kind the frame arrived on (stream,
// endpoints, port and source MAC all equal, section 5.1), or -1.
func (c *ctx) match(kind parser.BindingKind, in int, frame []byte, d *parser.Data) int {
	src := [6]byte(frame[6:12])
	for i := range c.bind {
		b := &c.bind[i]
		if b.kind == kind && b.stream == d.Stream && b.localEP == d.DstEP && b.peerEP == d.SrcEP && b.port == in && b.mac == src {
			return i
		}
	}
	return -1
}

// xflags returns the extension flags of a derived frame: keep, then AUTH
// when this job signs.
func (c *ctx) xflags(keep uint8) uint8 {
	keep &^= parser.XFlagAuth
	if c.auth != nil {
		keep |= parser.XFlagAuth
	}
	return keep
}

// ---- multicast direction ----

// replicate sends a RESULT+EXT (an admitted frame, or the root's own result)
// to every RESULT_OUT whose mask meets the D-BM, never to BIFT port back, and
// installs the C-BM when INSTALL makes this node a branch.
func (c *ctx) replicate(now int64, back int, frame []byte, d *parser.Data, tx dataplane.Sender) {
	m := c.s.m
	outside := decodeSet(d.Ext.Encoding, d.Ext.Set, &c.pbm)
	c.cur.d, c.cur.frame, c.cur.tx, c.cur.p = d, frame, tx, paramsOf(d.Ext.Encoding, d.Ext.Set)
	if c.hasBnd && d.Ext.XFlags&parser.XFlagInstall == 0 && c.pbm.Intersects(&c.bnd) {
		// A result for this boundary's identity (8.10): the node is the
		// root of its domain, so the D-BM becomes its A-BM, encoded as the
		// A-BM is (the upper domain's encoding cannot name lower endpoints).
		// Any other bit of the D-BM is no endpoint of this domain.
		c.tmp.AndNot(&c.pbm, &c.bnd)
		outside += c.tmp.Count()
		c.pbm.Copy(&c.abm)
		c.cur.p = c.abmEnc
		m.Expansions.Add(1)
	}
	// INSTALL rides on to every branch node; PARTIAL says the result lacks
	// contributions, which every receiver must learn.
	c.cur.xf = c.xflags(d.Ext.XFlags & (parser.XFlagInstall | parser.XFlagPartial))
	c.cur.sent = 0
	r := c.bift.Replicate(&c.pbm, back, &c.scr, c.emitFn)
	c.cur.d, c.cur.frame, c.cur.tx = nil, nil, nil
	if c.cur.sent != 0 {
		m.Copies.Add(uint64(c.cur.sent))
		m.FramesSent[parser.ClassResult].Add(uint64(c.cur.sent))
		c.stats.Copies += uint64(c.cur.sent)
	}
	unrouted := r.Unrouted + outside
	if unrouted != 0 {
		m.UnroutedBits.Add(uint64(unrouted))
		c.drop(DropBadEndpoint) // once per frame (8.8)
	}
	if r.Looped != 0 {
		m.LoopedBits.Add(uint64(r.Looped))
	}
	if r.Copies == 0 {
		m.EmptySets.Add(1)
		return
	}
	if d.Ext.XFlags&parser.XFlagInstall == 0 || r.Copies < 2 {
		return
	}
	// Branch node: C-BM = the union of what went downstream.
	c.bift.Forwarded(&c.tmp, &c.pbm, back)
	_, existed := c.soft.t.Lookup(0, d.Ext.Token)
	slot, err := c.soft.t.Install(0, d.Ext.Token, &c.tmp, now)
	switch {
	case err == nil && existed:
		// The dispatch was retransmitted: same C-BM, state kept.
	case err == nil:
		c.soft.units[slot] = unit{enc: c.cur.p, opened: now, last: now}
		m.Installs.Add(1)
		c.stats.Installs++
	case errors.Is(err, bitmapfwd.ErrQuota):
		m.InstallNoRoom.Add(1) // no_credit: the combine passes through unmerged
	default:
		m.InstallClash.Add(1)
	}
}

// emitCopy is Replicate's callback: one copy for BIFT port (RESULT_OUT
// outs[port]) carrying subset.
func (c *ctx) emitCopy(port int, subset *bitmapfwd.Set) {
	d, tx := c.cur.d, c.cur.tx
	b := &c.bind[c.outs[port]]
	out := c.s.out[:]
	c.rewrite(out, c.cur.frame, b, tx)
	end, ok := c.putExt(out, c.cur.xf, d.Ext.Token, subset, c.cur.p)
	if ok && c.finish(out, end, d.Body, b, tx) {
		c.cur.sent++
	}
}

// rewrite copies the Ethernet, control word and DATA/RESULT header of src
// into out and replaces what changes per hop: MACs, endpoints, stream,
// Packet ID; RETRANSMIT is cleared (a new hop's first send) and the version
// is written as this node speaks it.
func (c *ctx) rewrite(out, src []byte, b *binding, tx dataplane.Sender) {
	copy(out[:parser.DataBodyOff], src[:parser.DataBodyOff])
	eh := parser.EthHeader(out)
	eh.SetDst(b.mac)
	eh.SetSrc(tx.PortMAC(b.port))
	out[parser.CWOff] = parser.Version
	h := parser.DataHeader(out[parser.HdrOff:parser.DataBodyOff])
	h.SetSrcEP(b.localEP)
	h.SetDstEP(b.peerEP)
	b.pid++
	if b.pid == 0 {
		b.pid = 1 // Packet ID 0 is never used
	}
	h.SetPacketID(b.pid)
	h.SetFlags(h.Flags()&^parser.FlagRetransmit | parser.FlagExt)
	h.SetStream(b.stream)
}

// putExt writes the extension with set encoded by p and returns where the
// body starts; false if it would not fit.
func (c *ctx) putExt(out []byte, xf uint8, token uint64, set *bitmapfwd.Set, p encParams) (int, bool) {
	n := setLen(set, p)
	el := parser.ExtHdrLen + n
	if xf&parser.XFlagAuth != 0 {
		el += parser.TagLen
	}
	if parser.DataBodyOff+el > parser.EthLen+c.mtu {
		c.drop(DropTooLarge)
		return 0, false
	}
	x := parser.ExtHeader(out[parser.DataBodyOff:])
	x.SetLen(uint16(el))
	x.SetEncoding(p.enc)
	x.SetXFlags(xf)
	x.SetTenant(c.tenant)
	x.SetToken(token)
	putSet(out[parser.DataBodyOff+parser.ExtHdrLen:], set, p)
	end := parser.DataBodyOff + el
	if xf&parser.XFlagAuth != 0 {
		clear(out[end-parser.TagLen : end])
	}
	return end, true
}

// putExtRaw is putExt for a set body copied as it is.
func (c *ctx) putExtRaw(out []byte, xf uint8, token uint64, enc uint8, set []byte) (int, bool) {
	el := parser.ExtHdrLen + len(set)
	if xf&parser.XFlagAuth != 0 {
		el += parser.TagLen
	}
	if parser.DataBodyOff+el > parser.EthLen+c.mtu {
		c.drop(DropTooLarge)
		return 0, false
	}
	x := parser.ExtHeader(out[parser.DataBodyOff:])
	x.SetLen(uint16(el))
	x.SetEncoding(enc)
	x.SetXFlags(xf)
	x.SetTenant(c.tenant)
	x.SetToken(token)
	copy(out[parser.DataBodyOff+parser.ExtHdrLen:], set)
	end := parser.DataBodyOff + el
	if xf&parser.XFlagAuth != 0 {
		clear(out[end-parser.TagLen : end])
	}
	return end, true
}

// finish appends body at end, signs when the job has a key, and sends on b.
// It reports false (counted) when the frame would exceed the MTU.
func (c *ctx) finish(out []byte, end int, body []byte, b *binding, tx dataplane.Sender) bool {
	if end+len(body) > parser.EthLen+c.mtu {
		c.drop(DropTooLarge)
		return false
	}
	copy(out[end:], body)
	parser.DataHeader(out[parser.HdrOff:parser.DataBodyOff]).SetBodyLen(uint16(len(body)))
	fr := out[:end+len(body)]
	if c.auth != nil {
		_ = c.auth.Sign(fr)
	}
	c.s.send(tx, b.port, fr)
	return true
}

// ---- aggregation direction ----

func (c *ctx) aggregate(now int64, frame []byte, d *parser.Data, tx dataplane.Sender) {
	outside := decodeSet(d.Ext.Encoding, d.Ext.Set, &c.pbm)
	token := d.Ext.Token
	if c.hasBnd && c.pbm.Intersects(&c.bnd) {
		// Only this node speaks for its boundary set (8.10): from below,
		// those bits would be passed up as the whole domain's aggregate.
		c.drop(DropBadEndpoint)
		return
	}
	// A C-BM installed for this token makes this node a merge point.
	if slot, ok := c.soft.t.Lookup(0, token); ok {
		target := c.soft.t.Completion(slot).Target()
		if !c.pbm.Intersects(target) {
			c.forward(frame, d, tx) // another subtree's: not merged here
			return
		}
		if outside != 0 {
			c.drop(DropBadEndpoint)
			return
		}
		if int(d.Count) > c.fits(setLen(target, c.soft.units[slot].enc)) {
			c.passThrough(frame, d, tx, false)
			return
		}
		c.admit(now, &c.soft, slot, frame, d, false, tx)
		return
	}
	if c.hasABM {
		if !c.pbm.Intersects(&c.abm) {
			c.forward(frame, d, tx) // not ours: toward the root
			return
		}
		if outside != 0 || !c.pbm.SubsetOf(&c.abm) {
			c.drop(DropBadEndpoint) // foreign bits (8.7)
			return
		}
		if int(d.Count) > c.fits(c.upSetLen()) {
			c.passThrough(frame, d, tx, c.hasBnd)
			return
		}
		if slot, ok := c.agg.t.Lookup(0, token); ok {
			c.admit(now, &c.agg, slot, frame, d, false, tx)
			return
		}
		seen, at := c.rec.find(token)
		target := &c.abm
		if seen != nil && c.hasBnd {
			// A boundary already sent this token up as its whole identity:
			// above it, any further contribution could only be a duplicate
			// of the boundary set, so repairs do not cross a boundary
			// (8.10). Bits that went up are a duplicate here; new ones are
			// late and can no longer reach the result.
			if c.pbm.Intersects(seen) {
				c.duplicate()
			} else {
				c.drop(DropLate)
			}
			return
		}
		if seen != nil {
			// A repair round for a token this node already emitted (a
			// PARTIAL, or a retransmission after completion): what went up
			// then is not sent again, so this round's target is only what
			// is still missing, and it completes as soon as that arrives.
			if c.pbm.Intersects(seen) {
				// Bits this node already sent up: that frame may have been
				// lost above, so the retransmission goes up unmerged.
				c.lateForward(now, at, frame, d, tx)
				return
			}
			c.tmp.AndNot(&c.abm, seen)
			target = &c.tmp
		}
		slot, err := c.agg.t.Install(0, token, target, now)
		if err != nil {
			// No slot: the contribution goes up unmerged; its P-BM still
			// says exactly whose values it carries, so the parent merges it.
			c.s.m.AggNoRoom.Add(1)
			c.unmerged(&c.agg, frame, d, tx)
			return
		}
		c.agg.units[slot] = unit{enc: c.abmEnc, opened: now, last: now}
		c.admit(now, &c.agg, slot, frame, d, true, tx)
		return
	}
	if seen, at := c.rec.find(token); seen != nil && c.pbm.Intersects(seen) {
		c.lateForward(now, at, frame, d, tx)
		return
	}
	c.forward(frame, d, tx)
}

// lateForward handles a contribution for a token this node already emitted
// (merged and sent up, or PARTIAL) whose P-BM meets what went up. It is not
// merged again here (that could count a value twice), and it is not dropped
// either: the merged frame may have been lost above this node, and then the
// hosts' retransmissions are the only way those bits can still reach the
// root. So it goes up unmerged on PARENT; the next merge point that still
// waits merges it (a duplicate there is recognised by its covered bits), and
// a root host ORs P-BMs, so an extra copy is harmless. A root switch has
// nowhere to send it: there it is a duplicate.
//
// Within lateGuardNs of the emission it is still a duplicate: a copy
// forwarded that soon could overtake the merged frame on its way up, and a
// merge point above that took the lone copy first would then have to reject
// the merged frame as an overlap. Host retransmissions come tens of
// milliseconds apart, so a lost merged frame is still repaired by the next
// one.
func (c *ctx) lateForward(now, at int64, frame []byte, d *parser.Data, tx dataplane.Sender) {
	if c.parent < 0 || now-at < lateGuardNs {
		c.duplicate()
		return
	}
	c.s.m.LateForward.Add(1)
	c.forward(frame, d, tx)
}

// fits is the largest Element Count a merged frame whose P-BM body takes
// setBytes can carry in this node's emit format (partial toward a parent,
// output at the root): KULISCH width under KULISCH_FIXED with KULISCH or
// AUTO, since an exact sum rarely fits a narrower format.
func (c *ctx) fits(setBytes int) int {
	ext := parser.ExtHdrLen + setBytes
	if c.auth != nil {
		ext += parser.TagLen
	}
	w := c.outWidth
	if c.parent >= 0 {
		w = c.upWidth
	}
	return (kulisch.BodyBudget(c.mtu, ext) - parser.GroupDescLen) / w
}

// upSetLen is the body length of the P-BM this node's A-BM aggregates carry:
// the boundary set at a domain boundary, else the A-BM in its own encoding.
func (c *ctx) upSetLen() int {
	if c.hasBnd {
		return len(c.bndBody)
	}
	return setLen(&c.abm, c.abmEnc)
}

// passThrough forwards a contribution too large to merge into one frame:
// unmerged, its P-BM still says whose values it holds, and the next merge
// point (or the root host) adds it exactly. The in-network reduction is
// lost for that token, the result is not. A root has nowhere to send it,
// and neither has a boundary (noUp): above it nobody knows the endpoints of
// its domain.
func (c *ctx) passThrough(frame []byte, d *parser.Data, tx dataplane.Sender, noUp bool) {
	c.s.m.PassThrough.Add(1)
	if c.parent < 0 || noUp {
		c.drop(DropTooLarge)
		return
	}
	c.forward(frame, d, tx)
}

// unmerged sends up a contribution this node has no room to merge (no
// slot, no accumulator memory): its P-BM says whose values it holds, so
// the next merge point adds it. At a boundary the A-BM's endpoints mean
// nothing above, so there it is dropped (no_credit) and the aggregation
// ends PARTIAL without it.
func (c *ctx) unmerged(tb *table, frame []byte, d *parser.Data, tx dataplane.Sender) {
	if tb == &c.agg && c.hasBnd {
		c.drop(DropNoRoom)
		return
	}
	c.forward(frame, d, tx)
}

func (c *ctx) duplicate() {
	c.s.m.Duplicates.Add(1)
	c.stats.Duplicates++
}

// admit merges one contribution into slot. fresh: the slot was opened for it
// and is given back if the contribution is rejected.
func (c *ctx) admit(now int64, tb *table, slot int, frame []byte, d *parser.Data, fresh bool, tx dataplane.Sender) {
	u := &tb.units[slot]
	comp := tb.t.Completion(slot)
	reject := func(r Drop) {
		c.drop(r)
		if fresh {
			tb.t.Release(slot)
			tb.units[slot] = unit{}
		}
	}
	inexact := d.Flags&parser.FlagInexact != 0
	if u.started && !inexact && (d.Count != u.count || d.Count != 0 && d.First != u.first) {
		reject(DropRange)
		return
	}
	if d.Count != 0 && c.tuple.Acc != kulisch.KulischFixed {
		var it parser.GroupIter
		for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
			if g.Format == parser.FormatKulisch {
				reject(DropFormat)
				return
			}
		}
	}
	if d.Count != 0 && !inexact && tb.banks[slot] == nil && !c.allocBank(tb, slot) {
		// No accumulator memory: the contribution goes up unmerged (its
		// P-BM says whose values it holds), exactly as without state.
		c.s.m.AggNoRoom.Add(1)
		if fresh {
			tb.t.Release(slot)
			tb.units[slot] = unit{}
		}
		c.unmerged(tb, frame, d, tx)
		return
	}
	st := comp.Admit(&c.pbm)
	if st == bitmapfwd.AdmitOverlap && d.Count == 0 && u.count == 0 {
		// Zero-group frames carry no values to double-count: an ACK's P-BM
		// is a pure OR, so only its new bits matter.
		c.tmp.AndNot(&c.pbm, comp.Received())
		st = comp.Admit(&c.tmp)
	}
	switch st {
	case bitmapfwd.AdmitNew:
	case bitmapfwd.AdmitDuplicate:
		c.duplicate()
		return
	case bitmapfwd.AdmitOverlap:
		reject(DropOverlap)
		return
	default:
		reject(DropBadEndpoint)
		return
	}
	if !u.started && !inexact {
		u.started, u.first, u.count = true, d.First, d.Count
		if d.Count == 0 {
			u.first = 0
		}
	}
	u.last = now
	u.merged++
	if d.Ext.XFlags&parser.XFlagPartial != 0 {
		u.partial = true
	}
	if inexact {
		u.inexact = true
	} else if d.Count != 0 && !u.inexact {
		bank := tb.banks[slot]
		var it parser.GroupIter
		for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
			if bank.Add(int(g.First-u.first), kulisch.Format(g.Format), g.Values) != nil {
				u.inexact = true
				break
			}
		}
	}
	c.s.m.Merged.Add(1)
	c.stats.Merged++
	if comp.Complete() {
		c.complete(now, tb, slot, false, tx)
		tb.t.Release(slot)
	}
}

// forward sends a DATA on PARENT unchanged but for the hop's header fields.
func (c *ctx) forward(frame []byte, d *parser.Data, tx dataplane.Sender) {
	if c.parent < 0 {
		c.drop(DropBadEndpoint)
		return
	}
	b := &c.bind[c.parent]
	out := c.s.out[:]
	c.rewrite(out, frame, b, tx)
	end, ok := c.putExtRaw(out, c.xflags(d.Ext.XFlags&parser.XFlagPartial), d.Ext.Token, d.Ext.Encoding, d.Ext.Set)
	if ok && c.finish(out, end, d.Body, b, tx) {
		c.s.m.FramesSent[parser.ClassData].Add(1)
		c.s.m.Forwarded.Add(1)
		c.stats.Forwarded++
	}
}

// complete emits slot's aggregate: one DATA on PARENT with P-BM = what was
// received (at a domain boundary: its boundary set), or at the root a
// RESULT multicast to the received set, rounded once to the output format;
// PARTIAL when it timed out (timedOut) or merged a PARTIAL. It resets the
// slot's accumulators; the caller releases the slot.
func (c *ctx) complete(now int64, tb *table, slot int, timedOut bool, tx dataplane.Sender) {
	u := &tb.units[slot]
	comp := tb.t.Completion(slot)
	_, token, _ := tb.t.Key(slot)
	recv := comp.Received()
	bank := tb.banks[slot]
	partial := timedOut || u.partial
	if c.parent >= 0 {
		c.emitUp(token, u, recv, bank, partial, tb == &c.agg && c.hasBnd, tx)
	} else {
		c.disseminate(now, token, u, recv, bank, partial, tx)
	}
	c.rec.add(token, recv, now)
	if timedOut {
		c.s.m.Partials.Add(1)
		c.stats.Partials++
	} else {
		c.s.m.Completed.Add(1)
		c.stats.Completed++
	}
	if u.count != 0 {
		if bank != nil {
			_ = bank.ResetRange(0, int(u.count))
		}
	}
	*u = unit{}
}

// build writes slot's aggregate into buf as one DATA or RESULT frame for b
// (b nil: a template whose addressing does not matter) with values in f and
// the set body set of encoding enc (P-BM or D-BM).
func (c *ctx) build(buf []byte, cl parser.Class, b *binding, tx dataplane.Sender, token uint64, u *unit, enc uint8, set []byte,
	bank kulisch.Bank, xf uint8, f kulisch.Format) ([]byte, bool) {
	c.ext = parser.Ext{Encoding: enc, XFlags: xf, Tenant: c.tenant, Token: token, Set: set}
	h := parser.DataFields{Class: cl, Op: c.op, First: u.first}
	if b != nil {
		b.pid++
		if b.pid == 0 {
			b.pid = 1
		}
		h.Eth = parser.Eth{Dst: b.mac, Src: tx.PortMAC(b.port)}
		h.SrcEP, h.DstEP, h.PacketID, h.Stream = b.localEP, b.peerEP, b.pid, b.stream
	}
	if u.count != 0 && u.first+uint32(u.count) == c.vecLen {
		h.Flags = parser.FlagLast
	}
	inexact := u.inexact
	for attempt := 0; attempt < 2; attempt++ {
		if inexact {
			h.Flags = parser.FlagLast | parser.FlagInexact
		}
		bd := &c.s.b
		if bd.Reset(buf, &h, &c.ext, c.mtu) != nil {
			c.drop(DropTooLarge)
			return nil, false
		}
		if inexact || u.count == 0 || c.addGroups(bd, bank, int(u.count), f) == nil {
			fr := bd.Finish()
			if inexact {
				c.s.m.Inexact.Add(1)
			}
			if c.auth != nil {
				_ = c.auth.Sign(fr)
			}
			return fr, true
		}
		inexact = true // overflow, INT8 out of range, or too large for one frame
	}
	return nil, false
}

// addGroups encodes count accumulators from base in f (AUTO: planned).
func (c *ctx) addGroups(bd *parser.DataBuilder, bank kulisch.Bank, count int, f kulisch.Format) error {
	if bank == nil {
		return kulisch.ErrRange
	}
	if f != kulisch.AUTO {
		return c.addGroup(bd, bank, f, 0, count)
	}
	if err := kulisch.AutoSets(bank, 0, c.sets[:count]); err != nil {
		return err
	}
	w := 0
	b := c.tuple.Acc.Base()
	if b == kulisch.KULISCH {
		w = c.w
	}
	gs, used, err := kulisch.PlanAuto(c.groups[:0], c.sets[:count], b, w, kulisch.BodyBudget(c.mtu, c.ext.Len()))
	if err != nil {
		return err
	}
	if used < count {
		return kulisch.ErrBudget
	}
	at := 0
	for _, g := range gs {
		if err := c.addGroup(bd, bank, g.Format, at, g.Count); err != nil {
			return err
		}
		at += g.Count
	}
	return nil
}

func (c *ctx) addGroup(bd *parser.DataBuilder, bank kulisch.Bank, f kulisch.Format, at, n int) error {
	kb := 0
	if f == kulisch.KULISCH {
		kb = c.w / 8
	}
	slot, err := bd.AddGroup(parser.Format(f), kb, n)
	if err != nil {
		return err
	}
	_, err = bank.PutValues(slot, at, n, f)
	return err
}

// emitUp sends slot's aggregate on PARENT with P-BM = what was received, or,
// at a domain boundary (boundary), with P-BM = the boundary set: the
// enclosing domain knows this node only by that identity (8.10), and the
// frame stays as small as one endpoint's whatever the A-BM's size.
func (c *ctx) emitUp(token uint64, u *unit, recv *bitmapfwd.Set, bank kulisch.Bank, partial, boundary bool, tx dataplane.Sender) {
	b := &c.bind[c.parent]
	var xf uint8
	if partial {
		xf = parser.XFlagPartial
	}
	enc, set := c.bndEnc, c.bndBody
	if !boundary {
		enc, set = u.enc.enc, c.setBuf[:putSet(c.setBuf, recv, u.enc)]
	}
	fr, ok := c.build(c.s.out[:], parser.ClassData, b, tx, token, u, enc, set, bank, c.xflags(xf), c.tuple.Partial)
	if ok {
		c.s.send(tx, b.port, fr)
		c.s.m.FramesSent[parser.ClassData].Add(1)
		if boundary {
			c.s.m.BoundaryUp.Add(1)
		}
	}
}

// disseminate is the root's turn from aggregation to multicast: the result,
// rounded once, goes to D-BM = what was received (the A-BM when complete;
// on timeout exactly the contributors whose values it holds), with PARTIAL
// when it timed out or merged a PARTIAL (8.7).
func (c *ctx) disseminate(now int64, token uint64, u *unit, recv *bitmapfwd.Set, bank kulisch.Bank, partial bool, tx dataplane.Sender) {
	var xf uint8
	if partial {
		xf = parser.XFlagPartial
	}
	n := putSet(c.setBuf, recv, u.enc)
	fr, ok := c.build(c.s.tmpl[:], parser.ClassResult, nil, tx, token, u, u.enc.enc, c.setBuf[:n], bank, xf, c.tuple.Output)
	if !ok {
		return
	}
	d := &c.s.d2
	if d.Decode(fr, parser.Limits{VectorLen: c.vecLen, KulischBytes: c.kbytes, MTU: c.mtu, ListCap: c.listCap}) != nil {
		c.drop(DropTooLarge)
		return
	}
	c.replicate(now, -1, fr, d, tx)
}

// ---- timers ----

func (c *ctx) tick(now int64, tx dataplane.Sender) {
	c.curNow, c.curTx = now, tx
	c.soft.t.Expire(now, c.soft.exp)
	if c.agg.t != nil {
		c.agg.t.Expire(now, c.agg.exp)
	}
	c.curTx = nil
}

// expire is the SoftTable timeout callback: emit what arrived as PARTIAL and
// say who is missing; soft state nobody answered just goes.
func (c *ctx) expire(tb *table, slot int, token uint64, missing, received *bitmapfwd.Set) {
	u := &tb.units[slot]
	if received.IsEmpty() {
		c.s.m.ExpiredEmpty.Add(1)
		*u = unit{}
		return
	}
	c.s.log.Warn("bitmap: aggregation timed out; emitting PARTIAL",
		"job", c.op.Job, "op", c.op.Op, "op_gen", c.op.OpGen, "tenant", c.tenant, "token", token,
		"state", tb.name, "received", received.String(), "missing", missing.String())
	if len(c.miss) >= maxMissRecords {
		copy(c.miss, c.miss[1:])
		c.miss = c.miss[:maxMissRecords-1]
	}
	c.miss = append(c.miss, MissRecord{Token: token, Missing: missing.String(), AtNs: c.curNow})
	c.complete(c.curNow, tb, slot, true, c.curTx)
}
