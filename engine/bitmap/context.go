// This file owns one BITMAP context: what STAGE installs (bindings, A-BM,
// BIFT masks, the arithmetic tuple), its aggregation slots and their
// accumulator memory, and the setup-time checks that need node state.

package bitmap

import (
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// binding is one STAGE binding resolved for the hot path.
type binding struct {
	kind    parser.BindingKind
	rank    bool
	stream  uint16
	localEP uint16
	peerEP  uint16
	port    int
	mac     [6]byte
	pid     uint32 // outgoing: last Packet ID sent on this binding
	// back (RESULT_IN only): BIFT port (index into ctx.outs) of the
	// RESULT_OUT that leads back to the same peer, or -1: a copy never goes
	// back out the binding it came in on.
	back int
	mask int // RESULT_OUT only: index of its set record, -1 = no mask
}

// unit is the payload side of one aggregation slot: the range its token
// covers, and how to encode what it emits.
type unit struct {
	started bool // a contribution fixed first/count
	inexact bool // a contribution was ACCUMULATION_INEXACT or could not be added
	// partial: a merged contribution carried PARTIAL, so what this slot
	// emits does too (section 8.7): below a domain boundary a PARTIAL's
	// P-BM names the whole block, and only the flag says values are missing.
	partial bool
	first   uint32
	count   uint16
	enc     encParams // the P-BM encoding of what this slot emits
	opened  int64
	last    int64
	merged  uint32
}

// table is one family of aggregation slots: the A-BM aggregations opened by
// the first contribution of a token, or the C-BM soft state INSTALL opens.
// Slot i's accumulators (per elements) are banks[i], allocated the first
// time the slot carries values and reused ever after: SoftTable hands out
// freed slots first, so memory follows the tokens really in flight, not
// Window Intervals (512 in the AM's plans) times the largest frame.
type table struct {
	t     *bitmapfwd.SoftTable
	units []unit
	banks []kulisch.Bank
	name  string
	exp   func(slot int, job, token uint64, missing, received *bitmapfwd.Set)
}

// recent remembers what the last completed (or timed-out) tokens covered, so
// that a late duplicate of an already merged contribution is recognised
// instead of opening an aggregation that could only time out. It is a
// direct-mapped cache (one entry per hash bucket, a newer token evicts an
// older one): O(1) per frame, and a lost entry costs at most a redundant
// PARTIAL upstream, which OR-idempotence makes harmless.
type recent struct {
	tokens []uint64
	valid  []bool
	at     []int64 // when the token was last emitted (ns): see lateGuardNs
	sets   []bitmapfwd.Set
	mask   uint64
}

// recentBytes bounds the cache's sets per context.
const recentBytes = 4 << 20

func newRecent(want, bits int) recent {
	n := 1
	for n < want && (2*n)*(bits/8) <= recentBytes {
		n *= 2
	}
	r := recent{tokens: make([]uint64, n), valid: make([]bool, n), at: make([]int64, n), sets: make([]bitmapfwd.Set, n), mask: uint64(n - 1)}
	for i := range r.sets {
		r.sets[i] = bitmapfwd.MakeSet(bits)
	}
	return r
}

func (r *recent) bucket(token uint64) int {
	x := token
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	return int(x & r.mask)
}

// find returns what token covered and when it was last emitted, or nil.
func (r *recent) find(token uint64) (*bitmapfwd.Set, int64) {
	i := r.bucket(token)
	if r.valid[i] && r.tokens[i] == token {
		return &r.sets[i], r.at[i]
	}
	return nil, 0
}

func (r *recent) add(token uint64, s *bitmapfwd.Set, now int64) {
	i := r.bucket(token)
	r.at[i] = now
	if r.valid[i] && r.tokens[i] == token {
		r.sets[i].Or(&r.sets[i], s)
		return
	}
	r.tokens[i], r.valid[i] = token, true
	r.sets[i].Copy(s)
}

// ctx is one installed BITMAP context.
type ctx struct {
	s                  *Shard
	op                 parser.OpKey
	state              parser.OpState
	role               parser.Role
	tenant             uint32
	tuple              kulisch.Tuple
	w                  int // Kulisch width in bits
	kbytes             int // W/8 for decode limits and KULISCH groups (0 = none)
	vecLen             uint32
	mtu                int
	listCap            int
	timeout            int64
	bits               int
	stagedAt, activeAt int64

	bind   []binding
	outs   []int // BIFT port p is binding outs[p] (RESULT_OUT bindings)
	parent int   // binding index of PARENT, -1 at the root

	bift   *bitmapfwd.BIFT
	masks  []bitmapfwd.Set // per set record with a binding index (snapshot)
	abm    bitmapfwd.Set
	hasABM bool
	abmEnc encParams
	// The boundary set (record 0xFE, section 8.10): this node's identity
	// in the enclosing domain. What it aggregates against its A-BM goes up
	// with bndBody (the record's set body, copied: the STAGE frame is
	// reused) as P-BM, and a RESULT naming bnd is re-expanded to the A-BM.
	hasBnd  bool
	bnd     bitmapfwd.Set
	bndEnc  uint8
	bndBody []byte

	agg  table // A-BM aggregations (units nil without A-BM)
	soft table // C-BM soft state
	per  int   // accumulator elements per slot
	// upWidth and outWidth are the byte widths a merged value takes in the
	// partial (toward PARENT) and output (root) formats; see fits.
	upWidth, outWidth int
	bankBytes         int // accumulator memory allocated so far
	rec               recent

	// scratch, reused by every frame
	pbm, tmp, scr bitmapfwd.Set
	sets          []kulisch.FormatSet
	groups        []kulisch.Group
	setBuf        []byte
	ext           parser.Ext

	// auth: rebuilt when the keyring changes
	keyVer uint64
	auth   *parser.Authenticator

	// per-frame state for the Replicate callback (bound once at STAGE)
	emitFn func(port int, subset *bitmapfwd.Set)
	cur    struct {
		d     *parser.Data
		frame []byte
		tx    dataplane.Sender
		p     encParams
		xf    uint8
		sent  int
	}
	curTx  dataplane.Sender // for the Expire callbacks (Tick)
	curNow int64

	stats CtxStats
	miss  []MissRecord // last PARTIALs, for the snapshot (Tick only)
}

// CtxStats are per-context counters for the snapshot (worker-owned).
type CtxStats struct {
	Copies, Installs, Merged, Duplicates, Forwarded, Completed, Partials, Drops uint64
}

// MissRecord names the endpoints a PARTIAL was missing.
type MissRecord struct {
	Token   uint64 `json:"token"`
	Missing string `json:"missing"`
	AtNs    int64  `json:"at_ns"`
}

const maxMissRecords = 8

// stageCtx validates a STAGE against node state and builds the context. It
// returns a status other than OK with its Detail on failure.
func (s *Shard) stageCtx(now int64, op parser.OpKey, st *parser.Stage, ports int) (*ctx, parser.Status, uint16) {
	cr := &st.Context
	bad := func(stt parser.Status, det int) (*ctx, parser.Status, uint16) { return nil, stt, uint16(det) }
	if cr.Collective != parser.CollBitmap {
		return bad(parser.StatusUnsupported, parser.NoDetail)
	}
	tuple := kulisch.Tuple{Input: kulisch.Format(cr.InputFormat), Acc: kulisch.Policy(cr.AccPolicy),
		Partial: kulisch.Format(cr.PartialPolicy), Output: kulisch.Format(cr.OutputFormat)}
	if err := tuple.ValidateStage(int(cr.KulischWidth), cr.MaxTerms); err != nil {
		return bad(parser.StatusUnsupported, parser.NoDetail)
	}
	c := &ctx{s: s, op: op, state: parser.StateStaged, role: cr.Role, tenant: cr.Tenant, tuple: tuple,
		w: int(cr.KulischWidth), vecLen: cr.VectorLen, mtu: int(cr.MTU), listCap: int(cr.MaxTerms),
		timeout: int64(time.Duration(cr.TimeoutMs) * time.Millisecond), parent: -1, stagedAt: now}
	if c.w != 0 {
		c.kbytes = c.w / 8
	}
	// Bindings.
	nb := st.NBindings()
	c.bind = make([]binding, nb)
	for i := 0; i < nb; i++ {
		b := st.Binding(i)
		off := parser.ContextRecordLen + i*parser.BindingLen
		if ports > 0 && int(b.Port) >= ports {
			return bad(parser.StatusInvalidBinding, off+8)
		}
		if b.PeerMAC == ([6]byte{}) || b.PeerMAC[0]&1 != 0 {
			return bad(parser.StatusInvalidBinding, off+10)
		}
		for j := 0; j < i; j++ {
			o := &c.bind[j]
			if o.kind == b.Kind && o.stream == b.Stream {
				return bad(parser.StatusInvalidBinding, off+2)
			}
			inc := func(k parser.BindingKind) bool { return k == parser.KindContributor || k == parser.KindResultIn }
			if inc(o.kind) && inc(b.Kind) && o.localEP == b.LocalEP {
				return bad(parser.StatusInvalidBinding, off+4)
			}
		}
		c.bind[i] = binding{kind: b.Kind, rank: b.Flags&parser.BindingFlagRank != 0, stream: b.Stream,
			localEP: b.LocalEP, peerEP: b.PeerEP, port: int(b.Port), mac: b.PeerMAC, back: -1, mask: -1}
		switch b.Kind {
		case parser.KindParent:
			if c.parent >= 0 {
				return bad(parser.StatusInvalidBinding, off)
			}
			c.parent = i
		case parser.KindResultOut:
			c.outs = append(c.outs, i)
		}
	}
	// ROOT and SINGLE have no parent (5.1). A LEAF or INTERNAL node without
	// one is accepted: a dissemination-only node of an AllReduce whose
	// multicast tree differs from its VAT, or the only switch of a job.
	// Whether a PARENT binding exists, not the role, decides between
	// "emit up" and "disseminate".
	if (c.role == parser.RoleRoot || c.role == parser.RoleSingle) && c.parent >= 0 {
		return bad(parser.StatusInvalidBinding, 14)
	}
	// Set records: first the bit space, then the sets.
	var it parser.SetRecordIter
	maxEP := int64(-1)
	for {
		r, ok := st.NextSet(&it)
		if !ok {
			break
		}
		maxEP = max(maxEP, maxEndpoint(r.Encoding, r.Set))
	}
	c.bits = capacityFor(maxEP)
	if c.bits > s.cfg.MaxBits {
		return bad(parser.StatusUnsupported, parser.NoDetail)
	}
	bift, err := bitmapfwd.NewBIFT(c.bits, len(c.outs))
	if err != nil {
		return bad(parser.StatusUnsupported, parser.NoDetail)
	}
	c.bift = bift
	c.abm = bitmapfwd.MakeSet(c.bits)
	it = parser.SetRecordIter{}
	roff := parser.ContextRecordLen + nb*parser.BindingLen
	bndOff := -1
	for {
		r, ok := st.NextSet(&it)
		if !ok {
			break
		}
		if r.BindingIndex == parser.OwnSet {
			decodeSet(r.Encoding, r.Set, &c.abm)
			c.hasABM, c.abmEnc = true, paramsOf(r.Encoding, r.Set)
		} else if r.BindingIndex == parser.BoundarySet {
			c.bnd = bitmapfwd.MakeSet(c.bits)
			decodeSet(r.Encoding, r.Set, &c.bnd)
			c.hasBnd, c.bndEnc, c.bndBody, bndOff = true, r.Encoding, append([]byte(nil), r.Set...), roff
		} else {
			bi := int(r.BindingIndex)
			if c.bind[bi].kind != parser.KindResultOut {
				return bad(parser.StatusInvalid, roff)
			}
			m := bitmapfwd.MakeSet(c.bits)
			decodeSet(r.Encoding, r.Set, &m)
			port := -1
			for p, o := range c.outs {
				if o == bi {
					port = p
				}
			}
			if err := c.bift.SetMask(port, &m); err != nil {
				return bad(parser.StatusInvalid, roff) // masks must be disjoint
			}
			c.bind[bi].mask = len(c.masks)
			c.masks = append(c.masks, m)
		}
		roff += r.Len()
	}
	// A boundary stands for its A-BM toward a parent (8.10): without either
	// it would mean nothing, and an endpoint that is both a member below
	// and the node's own identity above (or routed by one of its masks)
	// would make a D-BM ambiguous between the two domains.
	if c.hasBnd {
		if !c.hasABM || c.parent < 0 || c.bnd.Intersects(&c.abm) {
			return bad(parser.StatusInvalid, bndOff)
		}
		for i := range c.masks {
			if c.bnd.Intersects(&c.masks[i]) {
				return bad(parser.StatusInvalid, bndOff)
			}
		}
	}
	// The RESULT_OUT leading back to a RESULT_IN's peer.
	for i := range c.bind {
		b := &c.bind[i]
		if b.kind != parser.KindResultIn {
			continue
		}
		for p, o := range c.outs {
			if ob := &c.bind[o]; ob.port == b.port && ob.mac == b.mac {
				b.back = p
			}
		}
	}
	// Aggregation slots; their accumulators come on first use.
	slots := int(cr.WindowIntervals)
	c.per = int(min(uint32(parser.MaxPacketElements(c.mtu)), c.vecLen))
	width := func(f kulisch.Format) int {
		if f == kulisch.AUTO {
			f = tuple.Acc.Base()
		}
		return f.Width(c.w)
	}
	c.upWidth, c.outWidth = width(tuple.Partial), width(tuple.Output)
	if _, err := kulisch.NewBank(tuple.Acc, 1, c.w); err != nil {
		return bad(parser.StatusUnsupported, parser.NoDetail)
	}
	mk := func(tb *table, name string) parser.Status {
		t, err := bitmapfwd.NewSoftTable(bitmapfwd.SoftTableConfig{Slots: slots, Bits: c.bits, Timeout: time.Duration(c.timeout)})
		if err != nil || t.SetQuota(0, slots) != nil {
			return parser.StatusNoResources
		}
		*tb = table{t: t, units: make([]unit, slots), banks: make([]kulisch.Bank, slots), name: name}
		tb.exp = func(slot int, _, token uint64, missing, received *bitmapfwd.Set) {
			c.expire(tb, slot, token, missing, received)
		}
		return parser.StatusOK
	}
	if stt := mk(&c.soft, "cbm"); stt != parser.StatusOK {
		return bad(stt, parser.NoDetail)
	}
	if c.hasABM {
		if stt := mk(&c.agg, "abm"); stt != parser.StatusOK {
			return bad(stt, parser.NoDetail)
		}
	}
	c.rec = newRecent(slots, c.bits)
	c.pbm, c.tmp, c.scr = bitmapfwd.MakeSet(c.bits), bitmapfwd.MakeSet(c.bits), bitmapfwd.MakeSet(c.bits)
	c.sets = make([]kulisch.FormatSet, c.per)
	c.groups = make([]kulisch.Group, 0, parser.MaxGroups)
	c.setBuf = make([]byte, parser.MTUJumbo)
	c.emitFn = c.emitCopy
	return c, parser.StatusOK, parser.NoDetail
}

// slotBytes estimates one slot's accumulator memory (as engine.RingBytes).
func (c *ctx) slotBytes() int {
	per := 4
	if c.tuple.Acc == kulisch.KulischFixed {
		per = 8*((c.w+31)/32+2) + 1
	}
	return c.per * per
}

// allocBank gives slot its accumulators, within the shard's MaxBankBytes.
// It runs once per slot for the life of the context (not per token).
func (c *ctx) allocBank(tb *table, slot int) bool {
	n := c.slotBytes()
	if c.s.bankBytes+n > c.s.cfg.MaxBankBytes {
		return false
	}
	b, err := kulisch.NewBank(c.tuple.Acc, c.per, c.w)
	if err != nil {
		return false
	}
	tb.banks[slot] = b
	c.s.bankBytes += n
	c.bankBytes += n
	return true
}

// refreshAuth picks up a key the runtime channel installed or removed.
func (c *ctx) refreshAuth() {
	v := c.s.cfg.Keys.Version()
	if v == c.keyVer {
		return
	}
	c.keyVer = v
	if k := c.s.cfg.Keys.Get(c.op.Job); k != nil {
		c.auth = parser.NewAuthenticator(k)
	} else {
		c.auth = nil
	}
}

// live reports whether any aggregation or soft state is open.
func (c *ctx) live() int {
	n := c.soft.t.Len()
	if c.agg.t != nil {
		n += c.agg.t.Len()
	}
	return n
}
