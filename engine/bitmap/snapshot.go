// This file owns introspection: the per-worker snapshot of every BITMAP
// context (A-BM, masks, open aggregations and soft state, and what each
// waits for), rebuilt in Tick and published through an atomic pointer so
// that readers never touch live state.

package bitmap

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/parser"
)

// Snapshot is one worker's view of its BITMAP contexts.
type Snapshot struct {
	Worker int           `json:"worker"`
	AtNs   int64         `json:"at_ns"`
	Ctxs   []CtxSnapshot `json:"contexts"`
}

// CtxSnapshot describes one context.
type CtxSnapshot struct {
	Job      uint64 `json:"job"`
	Group    uint16 `json:"group"`
	GroupGen uint16 `json:"group_gen"`
	Op       uint16 `json:"op"`
	OpGen    uint32 `json:"op_gen"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Tenant   uint32 `json:"tenant"`
	Tuple    string `json:"tuple"`
	Bits     int    `json:"bits"`
	Auth     bool   `json:"auth"`
	// ABM is the node's registered A-BM ("" without one).
	ABM string `json:"abm,omitempty"`
	// Boundary is the node's boundary set (section 8.10; "" when the node
	// is no domain boundary). Partials then name the missing endpoints of
	// its domain, which the frames above it cannot.
	Boundary string `json:"boundary,omitempty"`
	// Masks are the BIFT masks by RESULT_OUT binding.
	Masks []MaskSnapshot `json:"masks,omitempty"`
	// Slots are the open aggregations (A-BM) and soft-state entries (C-BM).
	Slots []SlotSnapshot `json:"slots,omitempty"`
	// Partials are the last PARTIALs this context emitted and whom they missed.
	Partials []MissRecord `json:"partials,omitempty"`
	Stats    CtxStats     `json:"stats"`
}

// MaskSnapshot is one RESULT_OUT binding and its mask.
type MaskSnapshot struct {
	Stream  uint16 `json:"stream"`
	Port    int    `json:"port"`
	PeerEP  uint16 `json:"peer_endpoint"`
	Rank    bool   `json:"rank"`
	PeerMAC string `json:"peer_mac"`
	Mask    string `json:"mask"`
}

// SlotSnapshot is one open aggregation.
type SlotSnapshot struct {
	Kind     string `json:"kind"` // "abm" or "cbm"
	Token    uint64 `json:"token"`
	Target   string `json:"target"`
	Received string `json:"received"`
	// WaitingFor is target minus received: the endpoints still owed.
	WaitingFor string `json:"waiting_for"`
	First      uint32 `json:"first"`
	Count      uint16 `json:"count"`
	Inexact    bool   `json:"inexact,omitempty"`
	AgeMs      int64  `json:"age_ms"`
}

// Snapshot returns the newest published snapshot (any goroutine).
func (s *Shard) Snapshot() *Snapshot { return s.snap.Load() }

func (s *Shard) publish(now int64) {
	s.lastSnap, s.dirty = now, false
	sn := &Snapshot{Worker: s.cfg.Worker, AtNs: now}
	for _, c := range s.ops {
		sn.Ctxs = append(sn.Ctxs, c.snapshot(now))
	}
	sort.Slice(sn.Ctxs, func(i, j int) bool {
		a, b := &sn.Ctxs[i], &sn.Ctxs[j]
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Op < b.Op
	})
	s.snap.Store(sn)
}

func (c *ctx) snapshot(now int64) CtxSnapshot {
	cs := CtxSnapshot{Job: c.op.Job, Group: c.op.Group, GroupGen: c.op.GroupGen, Op: c.op.Op, OpGen: c.op.OpGen,
		Role: c.role.String(), State: c.state.String(), Tenant: c.tenant, Bits: c.bits, Auth: c.auth != nil,
		Tuple:    fmt.Sprintf("%v/%v/%v/%v W=%d", c.tuple.Input, c.tuple.Acc, c.tuple.Partial, c.tuple.Output, c.w),
		Partials: append([]MissRecord(nil), c.miss...), Stats: c.stats}
	if c.hasABM {
		cs.ABM = c.abm.String()
	}
	if c.hasBnd {
		cs.Boundary = c.bnd.String()
	}
	for _, o := range c.outs {
		b := &c.bind[o]
		ms := MaskSnapshot{Stream: b.stream, Port: b.port, PeerEP: b.peerEP, Rank: b.rank,
			PeerMAC: fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b.mac[0], b.mac[1], b.mac[2], b.mac[3], b.mac[4], b.mac[5])}
		if b.mask >= 0 {
			ms.Mask = c.masks[b.mask].String()
		}
		cs.Masks = append(cs.Masks, ms)
	}
	tmp := bitmapfwd.MakeSet(c.bits)
	for _, tb := range []*table{&c.agg, &c.soft} {
		if tb.t == nil {
			continue
		}
		for slot := range tb.units {
			comp := tb.t.Completion(slot)
			if comp == nil {
				continue
			}
			_, token, _ := tb.t.Key(slot)
			u := &tb.units[slot]
			comp.Missing(&tmp)
			cs.Slots = append(cs.Slots, SlotSnapshot{Kind: tb.name, Token: token, Target: comp.Target().String(),
				Received: comp.Received().String(), WaitingFor: tmp.String(), First: u.first, Count: u.count,
				Inexact: u.inexact, AgeMs: (now - u.opened) / 1e6})
		}
	}
	return cs
}

// String renders a context's identity for logs.
func (cs *CtxSnapshot) String() string {
	return "job " + strconv.FormatUint(cs.Job, 10) + " group " + strconv.Itoa(int(cs.Group)) + " op " + strconv.Itoa(int(cs.Op))
}

var _ = parser.NoDetail
