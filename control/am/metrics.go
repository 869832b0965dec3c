// This file owns the AM's Prometheus metrics, served at GET /metrics on the
// runtime channel's HTTP server: operations begun, granted, completed and
// failed (by reason), rollbacks, CONTROL transactions by command, and the
// operations in flight. Each Manager has its own registry, so several
// Managers in one process (tests) do not collide.

package am

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prismd/prismd/parser"
)

// Failure reasons of prismd_am_operations_failed_total. Setup failures use
// the APIError code every rank received (CodeBadRequest for a bad rank MAC,
// CodeTopology, CodeUnsupported, CodeSetupFailed, CodeRollbackIncomplete);
// failures after the grant use these.
const (
	reasonRankFailed  = "rank_failed"  // a rank reported done with ok=false
	reasonWatchdog    = "watchdog"     // no progress and not every rank reported done
	reasonNotComplete = "not_complete" // every rank reported ok but a node never reached COMPLETE
	reasonKeepalive   = "keepalive"    // a rank of a persistent operation stopped sending keepalives
	ReasonInexact     = "inexact"      // a rank received ACCUMULATION_INEXACT: the sum does not fit the output format
)

var failReasons = []string{CodeBadRequest, CodeTopology, CodeUnsupported, CodeSetupFailed, CodeRollbackIncomplete,
	CodeMismatch, CodeAbandoned, CodeRankGone, reasonRankFailed, reasonWatchdog, reasonNotComplete, reasonKeepalive, ReasonInexact}

// ctlCommands are the commands the AM sends, pre-registered as label values.
var ctlCommands = []parser.Command{parser.CmdStage, parser.CmdCommit, parser.CmdComplete, parser.CmdRelease,
	parser.CmdAbort, parser.CmdCapsQuery}

func cmdLabel(c parser.Command) string { return strings.ToLower(c.String()) }

type amMetrics struct {
	reg *prometheus.Registry

	begun, granted, completed, barrierTimeouts prometheus.Counter
	ranksGone                                  *prometheus.CounterVec
	failed, rollbacks, prepared, setupRetries  *prometheus.CounterVec
	ctlTxns, ctlRetrans, ctlTimeouts           *prometheus.CounterVec
	ctlSendErrors                              *prometheus.CounterVec
}

func newAMMetrics(m *Manager) *amMetrics {
	const ns, sub = "prismd", "am"
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	vec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, []string{label})
	}
	x := &amMetrics{
		reg:             prometheus.NewRegistry(),
		begun:           counter("operations_begun_total", "Collective invocations whose ranks all arrived, so the AM began placing and setting them up."),
		granted:         counter("operations_granted_total", "Operations set up on every node and granted to every rank."),
		completed:       counter("operations_completed_total", "Granted operations that every node completed and that the AM released, or persistent ones every rank freed (ABORTed)."),
		barrierTimeouts: counter("barrier_timeouts_total", "Invocations abandoned because not every rank arrived within the barrier timeout."),
		ranksGone: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prismd_am_ranks_gone_total",
			Help: "Rank processes whose presence stream closed and did not come back within the grace, or that closed their communicator, by effect: waited_for (an invocation gathering its ranks, or a running operation, had it as a rank) or none."}, []string{"effect"}),
		failed: vec("operations_failed_total", "Operations that failed, by reason: the setup error code every rank received "+
			"(bad_request, topology, unsupported, setup_failed, rollback_incomplete; mismatch and abandoned at the barrier), rank_gone (a rank's process went away), "+
			"or after the grant rank_failed, abandoned (the rank named cancelled its call), mismatch (the rank named made another call instead), inexact (the sum does not fit the output format), watchdog, not_complete or keepalive.", "reason"),
		rollbacks: vec("rollbacks_total", "ABORT rounds over every node of an operation, by result: complete (every node acknowledged) or incomplete.", "result"),
		ctlTxns:   vec("control_transactions_total", "CONTROL transactions (requests) the AM sent, by command.", "command"),
		ctlRetrans: vec("control_retransmissions_total", "CONTROL requests sent again (same Transaction ID, same bytes) because no answer came "+
			"within the retransmission timeout, by command.", "command"),
		prepared: vec("prepared_operations_total", "Operations installed ahead of a job's next invocation (Config.Prepare), by outcome: "+
			"used (granted to its ranks without a CONTROL exchange), unused (not asked for within PrepareTTL: ABORTed), "+
			"mismatch (the next invocation differed: ABORTed) or failed (its setup failed).", "outcome"),
		setupRetries: vec("setup_retries_total", "Setups tried a second time under the same Operation ID after a rollback, by cause: "+
			"stale_generation (a node remembered a newer generation: this AM skipped ahead) or older_generation_held (a node still "+
			"held an older generation, left by an AM that stopped: the rollback's ABORT retired it) or no_resources_while_ending (a node "+
			"had no room while operations of this AM on it were ending: tried again once they ended).", "cause"),
		ctlTimeouts: vec("control_timeouts_total", "CONTROL transactions that got no answer within their bound (the transaction timeout, or 300 ms for the ABORT of a failed operation's node that has just not answered one), by command.", "command"),
		ctlSendErrors: vec("control_send_errors_total", "CONTROL transmissions the AM's own socket refused for a full queue or buffer "+
			"(ENOBUFS, EAGAIN, ...), by command: each is resent on the retransmission timer like a lost frame.", "command"),
	}
	for _, r := range failReasons {
		x.failed.WithLabelValues(r)
	}
	for _, o := range prepOutcomes {
		x.prepared.WithLabelValues(o)
	}
	x.setupRetries.WithLabelValues(retryStale.String())
	x.setupRetries.WithLabelValues(retryOlder.String())
	x.setupRetries.WithLabelValues(retryResources.String())
	x.rollbacks.WithLabelValues("complete")
	x.rollbacks.WithLabelValues("incomplete")
	for _, c := range ctlCommands {
		x.ctlTxns.WithLabelValues(cmdLabel(c))
		x.ctlRetrans.WithLabelValues(cmdLabel(c))
		x.ctlTimeouts.WithLabelValues(cmdLabel(c))
		x.ctlSendErrors.WithLabelValues(cmdLabel(c))
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "active_operations",
		Help: "Operations being set up or running: begun and not yet released or failed."}, func() float64 { return float64(m.activeOps()) })
	for _, e := range []string{"none", "waited_for"} {
		x.ranksGone.WithLabelValues(e) // exported at 0 from the start, as every other series
	}
	x.reg.MustRegister(x.begun, x.granted, x.completed, x.barrierTimeouts, x.ranksGone, x.failed, x.rollbacks, x.prepared, x.setupRetries,
		x.ctlTxns, x.ctlRetrans, x.ctlTimeouts, x.ctlSendErrors, active,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return x
}

// MetricsRegistry returns the registry GET /metrics serves, for tests and
// for programs that embed a Manager and export its metrics elsewhere.
func (m *Manager) MetricsRegistry() *prometheus.Registry { return m.metrics.reg }

func (m *Manager) metricsHandler() http.Handler {
	return promhttp.HandlerFor(m.metrics.reg, promhttp.HandlerOpts{Registry: m.metrics.reg})
}

// activeOps counts the invocations being placed and set up plus the
// granted operations not yet released or failed.
func (m *Manager) activeOps() int {
	m.mu.Lock()
	ops := make([]*operation, 0, len(m.ops))
	for _, op := range m.ops {
		ops = append(ops, op)
	}
	n := m.settingUp
	m.mu.Unlock()
	for _, op := range ops {
		op.mu.Lock()
		// An operation in "setup" belongs to a runInvocation counted above.
		if op.ended.IsZero() && op.state != "setup" && op.state != "prepared" {
			n++
		}
		op.mu.Unlock()
	}
	return n
}
