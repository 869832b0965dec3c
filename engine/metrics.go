// This file owns the engine's counters (atomics shared by every worker) and
// the prometheus.Collector that reads them at scrape time. The counters
// every DATA frame moves are counted in the worker's own Engine first and
// added to the shared ones once per batch (tally): perf annotate put 4% of
// a switch's samples in an FP32 ALLREDUCE on the instructions after their
// locked adds, each waiting for the frame's stores before it to drain
// (BenchmarkAbsorbFP32ArrivalByRef: 2% faster per batch than per frame).

package engine

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prismd/prismd/parser"
)

// Drop is an engine drop reason (a bounded label set).
type Drop uint8

const (
	DropUnknownOperation Drop = iota // no context for the identity (incl. generations)
	DropNotActive                    // context staged, failed or torn down
	DropMalformed                    // parser rejected the frame (see decode reasons)
	DropUnknownStream                // no binding of that kind for the stream ID
	DropWrongPort                    // ingress port differs from the binding's
	DropWrongMAC                     // source MAC differs from the binding's peer MAC
	DropWrongEndpoint                // endpoints differ from the binding's
	DropBadFormat                    // group format not allowed for the binding/policy
	DropOverlap                      // overlap under a new Packet ID or changed bytes (spec reason overlap)
	DropNoCredit                     // outside the receive window
	DropArithmetic                   // the accumulator rejected a value (malformed Kulisch)
	DropStaleProgress                // PROGRESS below a watermark already heard: ignored
	DropProgressAhead                // PROGRESS acknowledging elements never sent on the stream: ignored
	dropCount
)

var dropNames = [dropCount]string{"unknown_operation", "not_active", "malformed", "unknown_stream", "wrong_port",
	"wrong_mac", "wrong_endpoint", "bad_format", "overlap", "no_credit", "arithmetic",
	"stale_progress", "progress_ahead"}

func (d Drop) String() string {
	if d < dropCount {
		return dropNames[d]
	}
	return "unknown"
}

// Metrics holds the counters of every worker's engine. One value per
// daemon; pass it in Config. Frames, FramesSent, ElementsDone and
// FormatFrames are published at the end of each batch (Engine.Flush) when
// the engine coalesces (Config.CoalesceProgress), otherwise when each call
// into the engine returns; the others as they happen.
type Metrics struct {
	Frames       [5]atomic.Uint64 // admitted by class (index parser.Class)
	Duplicates   atomic.Uint64
	Drops        [dropCount]atomic.Uint64
	DecodeDrops  [len(parser.Reasons)]atomic.Uint64
	ProgressSent atomic.Uint64
	// UnknownAnswered counts PROGRESS UNKNOWN_OPERATION answers (also in
	// ProgressSent); the frames answered are also unknown_operation drops.
	UnknownAnswered atomic.Uint64
	FramesSent      [5]atomic.Uint64 // new DATA/RESULT frames by class
	Retransmits     atomic.Uint64
	TxFull          atomic.Uint64 // Sender.Send returned false
	OpsStaged       atomic.Uint64
	OpsCompleted    atomic.Uint64
	OpsFailed       atomic.Uint64
	// FailedBy counts OpsFailed by Failure Cause (index: parser.FailCause):
	// a dead link, a silent peer and a failure passed on by a peer read
	// the same in OpsFailed.
	FailedBy   [parser.FailLinkDown + 1]atomic.Uint64
	OpsInexact atomic.Uint64
	OpsExpired atomic.Uint64 // removed by Expire: the AM never ended them
	// OpsAborted counts contexts removed while STAGED or ACTIVE: ABORTed
	// by their AM (a failure elsewhere, a prepared operation unused, the
	// normal end of a persistent collective), or RELEASEd unused. Without it an operation the AM ended was counted
	// nowhere but staged.
	OpsAborted   atomic.Uint64
	ElementsDone atomic.Uint64 // elements completed and handed on
	// FormatFrames counts the DATA/RESULT frames this node encoded by the
	// formats of their NumberGroups (index: format code): a frame counts
	// once for each format it carries, and once however many outputs it
	// is copied to. It shows which partial encoding a switch uses
	// (kulisch_partials: KULISCH_F64 or KULISCH_SCALED, AUTO's choices).
	FormatFrames [formatCodes]atomic.Uint64
}

// formatCodes bounds the NumberGroup format codes (1..8).
const formatCodes = 9

// tally is one engine's share of the per-frame counters of Metrics not yet
// added to them. Only its worker touches it.
type tally struct {
	frames   [5]uint64
	sent     [5]uint64
	elements uint64
	formats  [formatCodes]uint64
	dirty    bool
}

// frame counts a frame of class c admitted.
func (t *tally) frame(c parser.Class) { t.frames[c]++; t.dirty = true }

// sentFrame counts a new frame of class c sent.
func (t *tally) sentFrame(c parser.Class) { t.sent[c]++; t.dirty = true }

// completed counts n elements completed and handed on.
func (t *tally) completed(n uint32) { t.elements += uint64(n); t.dirty = true }

// countFormats adds one frame to every format whose bit is set.
func (t *tally) countFormats(bits uint16) {
	for f := 1; f < formatCodes; f++ {
		if bits&(1<<f) != 0 {
			t.formats[f]++
		}
	}
	t.dirty = true
}

// publish adds the tally to m and clears it.
func (t *tally) publish(m *Metrics) {
	if !t.dirty {
		return
	}
	add := func(c *atomic.Uint64, v *uint64) {
		if *v != 0 {
			c.Add(*v)
			*v = 0
		}
	}
	for i := range t.frames {
		add(&m.Frames[i], &t.frames[i])
		add(&m.FramesSent[i], &t.sent[i])
	}
	add(&m.ElementsDone, &t.elements)
	for i := range t.formats {
		add(&m.FormatFrames[i], &t.formats[i])
	}
	t.dirty = false
}

// NewMetrics returns zeroed counters.
func NewMetrics() *Metrics { return &Metrics{} }

func (m *Metrics) drop(d Drop) { m.Drops[d].Add(1) }

func (m *Metrics) decodeDrop(err error) {
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
	descFrames   = prometheus.NewDesc("prismd_engine_frames_total", "PRISM frames admitted by the engine, by class.", []string{"class"}, nil)
	descDups     = prometheus.NewDesc("prismd_engine_duplicates_total", "Identical duplicate DATA/RESULT frames acknowledged and not applied.", nil, nil)
	descDrops    = prometheus.NewDesc("prismd_engine_drops_total", "Frames dropped by the engine, by reason.", []string{"reason"}, nil)
	descDecode   = prometheus.NewDesc("prismd_engine_decode_drops_total", "Frames the engine dropped as malformed, by parser reason.", []string{"reason"}, nil)
	descProgress = prometheus.NewDesc("prismd_engine_progress_sent_total", "PROGRESS frames sent.", nil, nil)
	descSent     = prometheus.NewDesc("prismd_engine_frames_sent_total", "New DATA/RESULT frames sent (not retransmissions), by class.", []string{"class"}, nil)
	descRetx     = prometheus.NewDesc("prismd_engine_retransmits_total", "DATA/RESULT frames retransmitted.", nil, nil)
	descTxFull   = prometheus.NewDesc("prismd_engine_tx_full_total", "Frames the dataplane refused because its TX queue was full.", nil, nil)
	descOps      = prometheus.NewDesc("prismd_engine_operations_total", "Operations: outcome staged counts every STAGE; the others count how contexts ended (completed, failed, inexact, expired, aborted: ABORTed or RELEASEd before they completed or failed, which is also how a persistent collective ends when its ranks free it).", []string{"outcome"}, nil)
	descElems    = prometheus.NewDesc("prismd_engine_elements_completed_total", "Vector elements completed and handed on.", nil, nil)
	descFormats  = prometheus.NewDesc("prismd_engine_frames_encoded_by_format_total", "DATA/RESULT frames this node encoded, by the format of their NumberGroups (a frame counts once for each format it carries).", []string{"format"}, nil)
	descFailed   = prometheus.NewDesc("prismd_engine_failures_total", "Operations that FAILED here, by Failure Cause (TIMEOUT: a peer was silent; LINK_DOWN: the port toward it was down; PEER_FAILED: a peer reported the failure; INTERNAL).", []string{"cause"}, nil)
	descUnknown  = prometheus.NewDesc("prismd_engine_unknown_operation_answers_total", "DATA/RESULT frames for an operation the switch does not know, answered with PROGRESS UNKNOWN_OPERATION (rate-limited).", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFrames, descDups, descDrops, descDecode, descProgress, descSent, descRetx, descTxFull, descOps, descElems, descUnknown, descFormats, descFailed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for cl := parser.ClassData; cl <= parser.ClassProgress; cl++ {
		c(descFrames, m.Frames[cl].Load(), cl.String())
	}
	c(descDups, m.Duplicates.Load())
	for i := range m.Drops {
		c(descDrops, m.Drops[i].Load(), Drop(i).String())
	}
	for i, r := range parser.Reasons {
		c(descDecode, m.DecodeDrops[i].Load(), r)
	}
	c(descProgress, m.ProgressSent.Load())
	c(descSent, m.FramesSent[parser.ClassData].Load(), "DATA")
	c(descSent, m.FramesSent[parser.ClassResult].Load(), "RESULT")
	c(descRetx, m.Retransmits.Load())
	c(descTxFull, m.TxFull.Load())
	c(descOps, m.OpsStaged.Load(), "staged")
	c(descOps, m.OpsCompleted.Load(), "completed")
	c(descOps, m.OpsFailed.Load(), "failed")
	c(descOps, m.OpsInexact.Load(), "inexact")
	c(descOps, m.OpsExpired.Load(), "expired")
	c(descOps, m.OpsAborted.Load(), "aborted")
	for cause := parser.FailTimeout; int(cause) < len(m.FailedBy); cause++ {
		c(descFailed, m.FailedBy[cause].Load(), cause.String())
	}
	c(descElems, m.ElementsDone.Load())
	c(descUnknown, m.UnknownAnswered.Load())
	for f := 1; f < formatCodes; f++ {
		if parser.Format(f) != parser.FormatAuto { // a policy, never on the wire
			c(descFormats, m.FormatFrames[f].Load(), parser.Format(f).String())
		}
	}
}
