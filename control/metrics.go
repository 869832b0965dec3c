// This file owns the node's CONTROL counters (plain atomics) and their
// prometheus.Collector.

package control

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prismd/prismd/parser"
)

type dropReason uint8

const (
	reasonUntrusted  dropReason = iota // source MAC is not a configured AM
	reasonMalformed                    // parser rejected the framing
	reasonUnexpected                   // ACK or CAPS_RESPONSE sent to a node
	numReasons
)

var reasonNames = [numReasons]string{"untrusted_source", "malformed", "unexpected_command"}

// Metrics are the CONTROL counters of one node.
type Metrics struct {
	drops [numReasons]atomic.Uint64
	// decode counts the malformed drops by parser reason (FieldError.Reason):
	// the rule of docs/protocol.md section 5 a frame failed.
	decode   [len(parser.Reasons)]atomic.Uint64
	commands [9]atomic.Uint64 // by parser.Command
	statuses [8]atomic.Uint64 // ACKs sent by parser.Status
	replays  atomic.Uint64    // recorded ACKs resent for a retried transaction
	txFull   atomic.Uint64
}

func (m *Metrics) drop(r dropReason) { m.drops[r].Add(1) }

// malformed counts a frame the parser rejected, under its reason too.
func (m *Metrics) malformed(err error) { m.malformedAs(parser.Reason(err)) }

// malformedAs counts a malformed frame under parser reason r.
func (m *Metrics) malformedAs(r string) {
	m.drops[reasonMalformed].Add(1)
	for i, n := range parser.Reasons {
		if n == r {
			m.decode[i].Add(1)
			return
		}
	}
}

func (m *Metrics) cmd(c parser.Command) {
	if int(c) < len(m.commands) {
		m.commands[c].Add(1)
	}
}

func (m *Metrics) status(s parser.Status) {
	if int(s) < len(m.statuses) {
		m.statuses[s].Add(1)
	}
}

// DecodeDrops returns the malformed drops counted under parser reason r.
func (m *Metrics) DecodeDrops(r string) uint64 {
	for i, n := range parser.Reasons {
		if n == r {
			return m.decode[i].Load()
		}
	}
	return 0
}

// Drops returns the drop count for a reason label (tests, introspection).
func (m *Metrics) Drops(reason string) uint64 {
	for i, n := range reasonNames {
		if n == reason {
			return m.drops[i].Load()
		}
	}
	return 0
}

var (
	descCtlDrops  = prometheus.NewDesc("prismd_control_drops_total", "CONTROL frames dropped without reply, by reason.", []string{"reason"}, nil)
	descCtlDecode = prometheus.NewDesc("prismd_control_decode_drops_total", "CONTROL frames dropped as malformed, by parser reason (the rule they failed).", []string{"reason"}, nil)
	descCtlCmds   = prometheus.NewDesc("prismd_control_requests_total", "CONTROL requests received from a trusted AM, by command.", []string{"command"}, nil)
	descCtlAcks   = prometheus.NewDesc("prismd_control_acks_total", "CONTROL ACKs sent, by status.", []string{"status"}, nil)
	descCtlReplay = prometheus.NewDesc("prismd_control_replayed_acks_total", "Recorded ACKs resent for a retried transaction.", nil, nil)
	descCtlTxFull = prometheus.NewDesc("prismd_control_tx_full_total", "CONTROL replies the dataplane refused (TX queue full).", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCtlDrops, descCtlDecode, descCtlCmds, descCtlAcks, descCtlReplay, descCtlTxFull} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for i := range m.drops {
		c(descCtlDrops, m.drops[i].Load(), reasonNames[i])
	}
	for i, r := range parser.Reasons {
		c(descCtlDecode, m.decode[i].Load(), r)
	}
	for cmd := parser.CmdStage; cmd <= parser.CmdCapsResponse; cmd++ {
		c(descCtlCmds, m.commands[cmd].Load(), cmd.String())
	}
	for s := parser.StatusOK; s <= parser.StatusInvalidBinding; s++ {
		c(descCtlAcks, m.statuses[s].Load(), s.String())
	}
	c(descCtlReplay, m.replays.Load())
	c(descCtlTxFull, m.txFull.Load())
}

var descContexts = prometheus.NewDesc("prismd_engine_contexts",
	"Operation contexts the switch holds now, by state (STAGED, ACTIVE, COMPLETE, FAILED): a FAILED or COMPLETE context waits for "+
		"its AM's RELEASE or ABORT, or for its expiry. Read from the workers' introspection snapshots, at most 100 ms old.",
	[]string{"state"}, nil)

var (
	descAccBytes = prometheus.NewDesc("prismd_engine_accumulator_bytes",
		"Accumulator memory the worker's operation contexts reserve now (their element windows); a STAGE that would take it past "+
			"prismd_engine_accumulator_limit_bytes is refused NO_RESOURCES.", []string{"worker"}, nil)
	descAccLimit = prometheus.NewDesc("prismd_engine_accumulator_limit_bytes",
		"The accumulator memory a worker's contexts may reserve.", []string{"worker"}, nil)
	descCtxLimit = prometheus.NewDesc("prismd_engine_contexts_limit",
		"The operation contexts a worker may hold; a STAGE past it is refused NO_RESOURCES (an operation's contexts go to one "+
			"worker, chosen by its identity).", []string{"worker"}, nil)
)

// contextStates are the states prismd_engine_contexts always exports,
// zero or not: the states a context is held in.
var contextStates = []parser.OpState{parser.StateStaged, parser.StateActive, parser.StateComplete, parser.StateFailed}

// contextCollector counts the node's contexts by state at scrape time.
type contextCollector struct{ n *Node }

// ContextMetrics returns the collector of prismd_engine_contexts: how many
// operation contexts the node holds, by state. A switch that kept FAILED
// contexts its AM never released, or whose ACTIVE count only grows, shows
// it here before its memory does.
func (n *Node) ContextMetrics() prometheus.Collector { return contextCollector{n} }

// Describe implements prometheus.Collector.
func (c contextCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descContexts
	ch <- descAccBytes
	ch <- descAccLimit
	ch <- descCtxLimit
}

// Collect implements prometheus.Collector.
func (c contextCollector) Collect(ch chan<- prometheus.Metric) {
	count := map[string]int{}
	for _, st := range contextStates {
		count[st.String()] = 0
	}
	for _, snap := range c.n.Snapshots() {
		if snap == nil {
			continue
		}
		for i := range snap.Ops {
			count[snap.Ops[i].State]++
		}
		w := strconv.Itoa(snap.Worker)
		ch <- prometheus.MustNewConstMetric(descAccBytes, prometheus.GaugeValue, float64(snap.AccumulatorBytes), w)
		ch <- prometheus.MustNewConstMetric(descAccLimit, prometheus.GaugeValue, float64(snap.AccumulatorLimitBytes), w)
		ch <- prometheus.MustNewConstMetric(descCtxLimit, prometheus.GaugeValue, float64(snap.MaxContexts), w)
	}
	for state, v := range count {
		ch <- prometheus.MustNewConstMetric(descContexts, prometheus.GaugeValue, float64(v), state)
	}
}
