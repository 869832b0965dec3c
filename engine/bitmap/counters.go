// This file owns the shard counters (plain atomics on the hot path, shared by
// every worker's Shard) and the prometheus.Collector that reads them at
// scrape time, node_exporter style.

package bitmap

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prismd/prismd/parser"
)

// Drop is a bitmap-context drop reason. The names are the state-level reasons
// of docs/protocol.md section 10 where one applies.
type Drop uint8

const (
	DropNotActive      Drop = iota // context STAGED or FAILED
	DropMalformed                  // the parser rejected the frame (see DecodeDrops)
	DropBadEndpoint                // no matching binding, no EXT, P-BM outside A-BM/C-BM, no PARENT to forward on
	DropTenantMismatch             // extension Tenant differs from the context's
	DropAuthFailed                 // AUTH missing or tag wrong for a keyed job
	DropOverlap                    // P-BM partly covered: applying it would count contributions twice
	DropRange                      // a contribution's First/Count differs from its token's
	DropFormat                     // a group format the accumulator policy cannot add
	DropTooLarge                   // a derived frame would exceed the MTU
	DropLate                       // new bits for a token a domain boundary already sent up: repairs do not cross a boundary
	DropNoRoom                     // a boundary had no slot or accumulator memory for a contribution of its A-BM
	dropCount
)

var dropNames = [dropCount]string{"not_active", "malformed", "bad_endpoint", "tenant_mismatch", "auth_failed",
	"overlap", "bad_range", "bad_format", "over_mtu", "late", "no_credit"}

func (d Drop) String() string {
	if d < dropCount {
		return dropNames[d]
	}
	return "unknown"
}

// Counters are shared by every Shard of a node (pass one in Config).
type Counters struct {
	Frames      [5]atomic.Uint64 // admitted by class (index parser.Class)
	Drops       [dropCount]atomic.Uint64
	DecodeDrops [len(parser.Reasons)]atomic.Uint64

	Copies        atomic.Uint64 // multicast copies sent
	EmptySets     atomic.Uint64 // RESULTs whose D-BM had no routable bit: nothing sent
	UnroutedBits  atomic.Uint64 // D-BM bits no BIFT mask holds (counted bad_endpoint once per frame too)
	LoopedBits    atomic.Uint64 // D-BM bits that would go back out the ingress binding
	Installs      atomic.Uint64 // C-BM soft-state entries installed
	InstallNoRoom atomic.Uint64 // INSTALL forwarded without installing: Window Intervals entries in use (no_credit)
	InstallClash  atomic.Uint64 // INSTALL of a known token with a different C-BM: forwarded, not installed
	Merged        atomic.Uint64 // contributions merged into an aggregation
	Duplicates    atomic.Uint64 // contributions already covered: not applied again
	Forwarded     atomic.Uint64 // DATA forwarded unchanged on PARENT (no A-BM/C-BM for it here)
	AggNoRoom     atomic.Uint64 // A-BM contribution forwarded unmerged: no aggregation slot free
	PassThrough   atomic.Uint64 // contribution forwarded unmerged: its merge would not fit one frame
	LateForward   atomic.Uint64 // contribution for a token already emitted here: forwarded unmerged on PARENT
	Completed     atomic.Uint64 // aggregations completed (merged DATA or root RESULT sent)
	Partials      atomic.Uint64 // aggregations emitted as PARTIAL on timeout
	ExpiredEmpty  atomic.Uint64 // soft state that timed out with no contribution: nothing to send
	Inexact       atomic.Uint64 // aggregations that could not be encoded exactly (ACCUMULATION_INEXACT sent)
	BoundaryUp    atomic.Uint64 // aggregates a domain boundary sent up with P-BM = its boundary set
	Expansions    atomic.Uint64 // RESULTs a domain boundary re-expanded from its boundary set to its A-BM
	Expired       atomic.Uint64 // contexts removed STAGED for 3 x Timeout + ExpiryGrace without COMMIT or ABORT
	FramesSent    [5]atomic.Uint64
	TxFull        atomic.Uint64 // Sender.Send returned false
}

// NewCounters returns zeroed counters.
func NewCounters() *Counters { return &Counters{} }

func (m *Counters) drop(d Drop) { m.Drops[d].Add(1) }

func (m *Counters) decodeDrop(err error) {
	m.Drops[DropMalformed].Add(1)
	r := parser.Reason(err)
	for i, n := range parser.Reasons {
		if n == r {
			m.DecodeDrops[i].Add(1)
			return
		}
	}
}

var (
	descFrames = prometheus.NewDesc("prismd_bitmap_frames_total", "PRISM frames of BITMAP contexts admitted, by class.", []string{"class"}, nil)
	descDrops  = prometheus.NewDesc("prismd_bitmap_drops_total", "Frames of BITMAP contexts dropped, by reason.", []string{"reason"}, nil)
	descDecode = prometheus.NewDesc("prismd_bitmap_decode_drops_total", "Frames of BITMAP contexts dropped as malformed, by parser reason.", []string{"reason"}, nil)
	descSent   = prometheus.NewDesc("prismd_bitmap_frames_sent_total", "DATA/RESULT frames sent by BITMAP contexts, by class.", []string{"class"}, nil)
	descEvents = prometheus.NewDesc("prismd_bitmap_events_total", "Bitmap framework events, by kind.", []string{"event"}, nil)
	descBits   = prometheus.NewDesc("prismd_bitmap_dropped_destinations_total", "Destinations (D-BM bits) a RESULT was not replicated to, by reason.", []string{"reason"}, nil)
	descTxFull = prometheus.NewDesc("prismd_bitmap_tx_full_total", "Frames the dataplane refused because its TX queue was full.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Counters) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFrames, descDrops, descDecode, descSent, descEvents, descBits, descTxFull} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Counters) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	c(descFrames, m.Frames[parser.ClassData].Load(), "DATA")
	c(descFrames, m.Frames[parser.ClassResult].Load(), "RESULT")
	for i := range m.Drops {
		c(descDrops, m.Drops[i].Load(), Drop(i).String())
	}
	for i, r := range parser.Reasons {
		c(descDecode, m.DecodeDrops[i].Load(), r)
	}
	c(descSent, m.FramesSent[parser.ClassData].Load(), "DATA")
	c(descSent, m.FramesSent[parser.ClassResult].Load(), "RESULT")
	for _, e := range []struct {
		n string
		v *atomic.Uint64
	}{{"copy", &m.Copies}, {"empty_set", &m.EmptySets}, {"install", &m.Installs}, {"install_no_room", &m.InstallNoRoom},
		{"install_conflict", &m.InstallClash}, {"merged", &m.Merged}, {"duplicate", &m.Duplicates}, {"forwarded", &m.Forwarded},
		{"aggregate_no_room", &m.AggNoRoom}, {"pass_through", &m.PassThrough}, {"late_forward", &m.LateForward}, {"completed", &m.Completed}, {"partial", &m.Partials},
		{"expired_empty", &m.ExpiredEmpty}, {"inexact", &m.Inexact}, {"boundary_up", &m.BoundaryUp}, {"boundary_expand", &m.Expansions}, {"expired", &m.Expired}} {
		c(descEvents, e.v.Load(), e.n)
	}
	c(descBits, m.UnroutedBits.Load(), "unrouted")
	c(descBits, m.LoopedBits.Load(), "looped")
	c(descTxFull, m.TxFull.Load())
}
