// This file owns the coordinator: the barrier that gathers the ranks of one
// invocation, Operation ID and generation allocation, and the life of an
// operation from setup to RELEASE or ABORT.

package am

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// Config configures a Manager. Zero fields mean the documented defaults.
type Config struct {
	// Topology is the network the AM places trees on. Required.
	Topology *deploy.Topology
	// Conn sends and receives CONTROL frames. Required.
	Conn Conn
	// RTO is the first CONTROL retransmission timeout (default 20ms; it
	// doubles up to 8x). The veth/lab round trip is well under 1ms, so 20ms
	// only retransmits what was really lost.
	RTO time.Duration
	// CtlTimeout bounds one CONTROL transaction (default 2s).
	CtlTimeout time.Duration
	// BarrierTimeout bounds how long the first rank waits for the others
	// (default 2m: ranks of a job may start seconds apart).
	BarrierTimeout time.Duration
	// PresenceGrace is how long a rank's closed presence stream may take
	// to come back before the rank is gone (default 1s; presence.go).
	PresenceGrace time.Duration
	// DefaultTimeoutMS is the contributor inactivity bound of operations
	// that do not ask for one (default 5000).
	DefaultTimeoutMS uint32
	// Window is the wished receive window; it is lowered to what every node
	// advertises. Zero fields: 64 intervals, 64 replay, 64*MTU bytes and
	// 64 maximal packets of the input format.
	Window Window
	// CapsTTL is how long a node's CAPS answer is reused (default 10s).
	CapsTTL time.Duration
	// Watchdog is the period of the progress check of a granted operation
	// whose ranks have not all reported (default 3 x timeout + 10s).
	// Persistent operations are not checked for progress (they idle
	// between invocations) but for their ranks' keepalives (persistent.go).
	Watchdog time.Duration
	// Prepare installs the operation of a job's next invocation (Seq+1,
	// same parameters and rank hosts) as soon as the current one is
	// granted, so its grant needs no CONTROL exchange (prepare.go).
	// prismctl am turns it on (--prepare); off in a zero Config.
	Prepare bool
	// PrepareTTL is how long a prepared operation waits for its ranks
	// before it is ABORTed (default min(2s, half the operation timeout)).
	PrepareTTL time.Duration
	// PersistentRefresh is how often the AM sends COMPLETE to every node of
	// a persistent operation (default 10s): a node retires a resting
	// persistent context that hears neither CONTROL nor DATA for three
	// timeouts plus a minute (its AM and ranks are gone), and this keeps a
	// healthy idle one (persistent.go).
	PersistentRefresh time.Duration
	// Logf logs setup events; nil means log.Printf.
	Logf func(format string, args ...any)
}

type capsEntry struct {
	pages []capsPage
	at    time.Time
}

type invKey struct {
	job   uint64
	group uint16
	seq   uint64
}

type opIDKey struct {
	job   uint64
	group uint16
}

type genKey struct {
	job   uint64
	group uint16
	opID  uint16
}

// invocation is one collective call gathering its ranks.
type invocation struct {
	key     invKey
	first   BeginRequest
	p       params
	arrived map[int]BeginRequest
	ready   chan struct{}
	grants  []Grant
	err     *APIError
	created time.Time
	timer   *time.Timer
	forgetT *time.Timer // forget's; nil until then (under m.mu)
	// started is set (under m.mu) once every rank arrived and setup began:
	// from then on no arrival is withdrawn.
	started bool
	// waiting counts, per rank, the Begin calls blocked on ready (under
	// m.mu): a rank whose last one gave up (its client went away) is
	// withdrawn from a barrier that has not started.
	waiting map[int]int
	// abandonedBy is the request of the rank whose POST /v1/abandon failed the
	// invocation (under m.mu; nil: none did).
	abandonedBy *BeginRequest
	// unchecked: the invocation was created by a refused abandon whose
	// body no AM takes (the rank's own settings were wrong): p is not a
	// call to compare later arrivals with.
	unchecked bool
	// failedBy is the request that failed the invocation before every
	// rank arrived (a mismatch, a rank the topology cannot place): not an
	// arrival, but a new process of its rank (another session) is a new
	// run of the job, not a repeat to answer with the old error.
	failedBy *BeginRequest
	// claimedBy is the second process that asked for a rank another
	// process waited for, failing the invocation (claimedTwice; under
	// m.mu; nil: none did).
	claimedBy *BeginRequest
}

// operation is one installed (or being installed) PRISM operation.
type operation struct {
	id    OpIdentity
	inv   *invocation
	tree  *Tree
	plan  *plan
	size  int
	final chan struct{}
	// persistent: the ranks keep the operation alive with keepalives and
	// it ends with ABORT when they free it (persistent.go).
	persistent bool

	mu    sync.Mutex
	state string
	nodes map[string]*NodeStatus
	done  map[int]DoneRequest
	// firstFail is the first rank that reported a local failure (done
	// with ok=false and local: it was cancelled), in arrival order (done
	// is a map): when no node failed on its own, that rank is where the
	// failure began and the others' later reports are the consequence.
	firstFail *int
	err       *APIError
	finishing bool
	watchdog  *time.Timer // the progress check, or a persistent operation's keepalive check
	ended     time.Time
	granted   time.Time
	refreshed time.Time         // a persistent operation's last COMPLETE to its nodes (refreshNodes)
	alive     map[int]time.Time // a persistent operation's last keepalive, by rank
	// aliveInv is the invocations each rank's last keepalive reported
	// completed (AliveRequest.Invocations).
	aliveInv map[int]uint32
	// drain is set while a persistent operation drains (persistent.go):
	// a rank failed locally after drain.after invocations.
	drain *drain
	// failStarted: failOpBlaming runs or ran (state says "failing" from
	// the report that starts it, before failOpBlaming takes over).
	failStarted bool
}

// Manager is the Aggregation Manager and Host Coordinator.
type Manager struct {
	cfg  Config
	ctl  *ctlClient
	logf func(string, ...any)
	// genBase makes generations of a restarted AM newer than those of its
	// predecessor: Unix seconds at start, so unless the old AM allocated
	// more generations per Operation ID than it ran seconds, a reused ID is
	// strictly newer.
	genBase uint32

	mu   sync.Mutex
	invs map[invKey]*invocation
	prep map[invKey]*prepared // operations installed ahead of their invocation
	ops  map[string]*operation
	// byID is the newest operation allocated each Operation ID of a job's
	// group (allocate): whether an ID is in use is one lookup, not a scan
	// of every operation kept for introspection.
	byID map[genKey]*operation
	// retired lists ended operations oldest first; they stay in ops for
	// GET /v1/ops until retainEnded passes or maxRetained newer ones ended.
	retired   []retiredOp
	endedInvs []*invocation // invocations of ended operations, oldest first (ended)
	nextOpID  map[opIDKey]uint16
	// foreign holds the Operation IDs of persistent operations an earlier
	// AM granted whose ranks still send keepalives here (Alive), with the
	// last one's time: allocate skips them for foreignHold, because a
	// STAGE of their ID would make this AM's rollback ABORT a collective
	// that still runs (see retryOlder).
	foreign   map[genKey]time.Time
	lastGen   map[genKey]uint32
	groupGen  map[opIDKey]groupInfo
	capsCache map[string]capsEntry
	closed    bool
	done      chan struct{} // closed by StopStreams: ends presence streams
	stopOnce  sync.Once
	// pres is what the AM knows of each rank's process (presence.go).
	pres      presenceState
	settingUp int // invocations inside runInvocation (for the active operations gauge)

	metrics *amMetrics

	// amHost and amIface are where the AM's Conn sits in the topology
	// (the host interface whose MAC is the Conn's; "" when none is): the
	// start of every CONTROL path (controlPath).
	amHost, amIface string
}

type groupInfo struct {
	gen  uint16
	size int
}

// New starts a Manager; Close stops it.
func New(cfg Config) (*Manager, error) {
	if cfg.Topology == nil || cfg.Conn == nil {
		return nil, errors.New("am: Config.Topology and Config.Conn are required")
	}
	// Zero means the default, but a negative duration used to be taken
	// as is: a negative BarrierTimeout failed every invocation at once
	// ("did not arrive within -5s"), a negative RTO or CtlTimeout every
	// CONTROL exchange.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RTO", cfg.RTO}, {"CtlTimeout", cfg.CtlTimeout}, {"BarrierTimeout", cfg.BarrierTimeout}, {"PresenceGrace", cfg.PresenceGrace}, {"CapsTTL", cfg.CapsTTL},
		{"Watchdog", cfg.Watchdog}, {"PrepareTTL", cfg.PrepareTTL}, {"PersistentRefresh", cfg.PersistentRefresh}} {
		if d.v < 0 {
			return nil, fmt.Errorf("am: Config.%s %v is negative: use a positive duration, or 0 for the default", d.name, d.v)
		}
	}
	// Begin refuses a timeout_ms above 600000, and would refuse every
	// request that asks for none with a default above it.
	if cfg.DefaultTimeoutMS > 600000 {
		return nil, fmt.Errorf("am: Config.DefaultTimeoutMS %d: use 1..600000 (milliseconds), or 0 for the default, 5000", cfg.DefaultTimeoutMS)
	}
	if cfg.RTO == 0 {
		cfg.RTO = 20 * time.Millisecond
	}
	if cfg.CtlTimeout == 0 {
		cfg.CtlTimeout = 2 * time.Second
	}
	if cfg.BarrierTimeout == 0 {
		cfg.BarrierTimeout = 2 * time.Minute
	}
	if cfg.PresenceGrace == 0 {
		cfg.PresenceGrace = time.Second
	}
	if cfg.DefaultTimeoutMS == 0 {
		cfg.DefaultTimeoutMS = 5000
	}
	if cfg.CapsTTL == 0 {
		cfg.CapsTTL = 10 * time.Second
	}
	if cfg.PersistentRefresh == 0 {
		cfg.PersistentRefresh = 10 * time.Second
	}
	m := &Manager{cfg: cfg, logf: cfg.Logf,
		genBase: uint32(time.Now().Unix()),
		invs:    map[invKey]*invocation{}, pres: newPresenceState(), done: make(chan struct{}), prep: map[invKey]*prepared{}, ops: map[string]*operation{}, byID: map[genKey]*operation{}, nextOpID: map[opIDKey]uint16{},
		lastGen: map[genKey]uint32{}, foreign: map[genKey]time.Time{}, groupGen: map[opIDKey]groupInfo{}, capsCache: map[string]capsEntry{}}
	m.metrics = newAMMetrics(m)
	m.amHost, m.amIface = locateIface(cfg.Topology, cfg.Conn.MAC())
	m.ctl = newCtlClient(cfg.Conn, cfg.RTO, cfg.CtlTimeout, m.metrics)
	if m.logf == nil {
		m.logf = log.Printf
	}
	return m, nil
}

// Close stops the Manager and closes its Conn. Installed operations are left
// to their nodes' timeouts.
func (m *Manager) Close() error {
	m.StopStreams()
	m.mu.Lock()
	m.closed = true
	prep := m.prep
	m.prep = map[invKey]*prepared{}
	m.mu.Unlock()
	for _, pr := range prep {
		go func() {
			<-pr.ready
			if pr.timer != nil {
				pr.timer.Stop() // left to the nodes' timeouts, as installed operations are
			}
		}()
	}
	return m.cfg.Conn.Close()
}

func badReq(format string, args ...any) *APIError {
	return &APIError{Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// normalize validates a request and derives its parameters.
func (m *Manager) normalize(r BeginRequest) (params, *APIError) {
	return normalizeRequest(r, m.cfg.DefaultTimeoutMS)
}

// CheckBegin refuses a begin request any AM refuses as bad_request, without
// an AM: the rank library checks a call's options with it before the call
// takes a sequence number, so a typo (Options.Acc "fp23", an MTU of 1400)
// fails at once on the rank that made it instead of at the AM, after every
// rank arrived. The error is an *APIError.
func CheckBegin(r BeginRequest) error {
	if _, e := normalizeRequest(r, 0); e != nil {
		return e
	}
	return nil
}

// normalizeRequest validates and normalizes r; defaultTimeoutMS is what a
// timeout_ms of 0 becomes.
func normalizeRequest(r BeginRequest, defaultTimeoutMS uint32) (params, *APIError) {
	var p params
	var err error
	if r.Size < 1 {
		return p, badReq("size %d: a collective needs at least one rank", r.Size)
	}
	if r.Size > MaxRanks {
		return p, badReq("size %d: at most %d ranks (an operation numbers its streams' endpoints in 16 bits, up to 4 per rank)", r.Size, MaxRanks)
	}
	if r.Rank < 0 || r.Rank >= r.Size {
		return p, badReq("rank %d is outside 0..%d (size %d)", r.Rank, r.Size-1, r.Size)
	}
	p.Size = r.Size
	if p.Collective, err = ParseCollective(r.Collective); err != nil {
		return p, badReq("%v", err)
	}
	if p.Collective == parser.CollReduce {
		if r.RootRank < 0 || r.RootRank >= r.Size {
			return p, badReq("root_rank %d is outside 0..%d", r.RootRank, r.Size-1)
		}
		p.RootRank = r.RootRank
	}
	if p.Input, err = ParseFormat(r.InputFormat); err != nil || p.Input == parser.FormatKulisch || p.Input == parser.FormatAuto {
		return p, badReq("input_format %q: want int8, fp16, bf16 or fp32", r.InputFormat)
	}
	if p.Acc, err = ParseAcc(r.AccPolicy); err != nil {
		return p, badReq("acc_policy: %v", err)
	}
	// FP32_ARRIVAL keeps FP32 partials (its values are already rounded);
	// KULISCH_FIXED lets the switch pick a lossless encoding.
	p.Partial = parser.FormatAuto
	if p.Acc == parser.AccFP32Arrival {
		p.Partial = parser.FormatFP32
	}
	if r.PartialPolicy != "" {
		if p.Partial, err = ParseFormat(r.PartialPolicy); err != nil {
			return p, badReq("partial_policy: %v", err)
		}
	}
	p.Output = p.Input
	if r.OutputFormat != "" {
		if p.Output, err = ParseFormat(r.OutputFormat); err != nil {
			return p, badReq("output_format: %v", err)
		}
	}
	if r.VectorLen < 1 {
		return p, badReq("vector_len must be at least 1")
	}
	p.VectorLen = r.VectorLen
	p.MTU = r.MTU
	if p.MTU == 0 {
		p.MTU = parser.MTUDefault
	}
	if !parser.IsDefinedMTU(p.MTU) {
		return p, badReq("mtu %d: want 576, 1500 or 9000", r.MTU)
	}
	p.KulischWidth = r.KulischWidth
	usesKulisch := p.Acc == parser.AccKulischFixed || p.Partial == parser.FormatKulisch || p.Output == parser.FormatKulisch
	if p.KulischWidth == 0 && usesKulisch {
		p.KulischWidth = KulischWidthFor(r.Size)
	}
	if p.KulischWidth != 0 && (p.KulischWidth%8 != 0 || p.KulischWidth < 64 || p.KulischWidth > 4096) {
		return p, badReq("kulisch_width %d: want a multiple of 8 in 64..4096", p.KulischWidth)
	}
	if !usesKulisch && p.KulischWidth != 0 {
		return p, badReq("kulisch_width %d: nothing here uses a Kulisch format (acc_policy %s, partial_policy %s, output_format %s): leave it out",
			p.KulischWidth, AccName(p.Acc), FormatName(p.Partial), FormatName(p.Output))
	}
	if usesKulisch {
		// The nodes check W against their terms too (STAGE INVALID); a
		// width too narrow for the job is the caller's to fix, so it is
		// refused here, before anything is staged.
		tu := kulisch.Tuple{Input: kulisch.Format(p.Input), Acc: kulisch.Policy(p.Acc), Partial: kulisch.Format(p.Partial), Output: kulisch.Format(p.Output)}
		if err := tu.ValidateStage(p.KulischWidth, uint32(r.Size)); errors.Is(err, kulisch.ErrOverflow) {
			return p, badReq("kulisch_width %d is too narrow for the exact sum of %d %s values: use at least %d, or leave it out for the default",
				p.KulischWidth, r.Size, FormatName(p.Input), kulisch.MinWidthFor(kulisch.Format(p.Input), uint32(r.Size)))
		}
	}
	p.TimeoutMS = r.TimeoutMS
	if p.TimeoutMS == 0 {
		p.TimeoutMS = defaultTimeoutMS
	}
	if p.TimeoutMS > 600000 {
		return p, badReq("timeout_ms %d above 600000", p.TimeoutMS)
	}
	p.Persistent = r.Persistent
	if r.Persistent && r.InvocationLen > 0 && p.VectorLen%r.InvocationLen == 0 {
		p.InvocationLen = r.InvocationLen
	}
	if r.Node == "" {
		return p, badReq("node is empty: name the rank's host in the topology (e.g. h1)")
	}
	if r.MAC != "" {
		if mac, err := net.ParseMAC(r.MAC); err != nil || len(mac) != 6 {
			return p, badReq("mac %q: not a 6-byte MAC address (write it as 02:00:00:00:00:01, or leave it out for the topology's)", r.MAC)
		}
	}
	return p, nil
}

// Begin is POST /v1/begin: it blocks until every rank arrived and the tree is
// active (the grant), setup failed, or ctx ends.
func (m *Manager) Begin(ctx context.Context, r BeginRequest) (*Grant, error) {
	p, aerr := m.normalize(r)
	if aerr != nil {
		return nil, aerr
	}
	// A rank on a host the topology does not have, or on another host than
	// it says (its MAC is that host's), dooms its invocation:
	// like a mismatch, it fails at once for every rank (below) instead of
	// after the last one arrived, or never if that rank gave up.
	var unplaced *APIError
	if m.cfg.Topology != nil {
		rh := RankHost{Node: r.Node, Iface: r.Iface}
		rh.MAC, _ = net.ParseMAC(r.MAC) // normalize checked it; "" is nil
		if _, err := placeRank(m.cfg.Topology, r.Rank, rh); err != nil {
			unplaced = &APIError{Code: CodeTopology, Rank: &r.Rank, Message: err.Error()}
		}
	}
	key := invKey{r.Job, r.Group, r.Seq}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, &APIError{Code: CodeSetupFailed, Message: "the AM is shutting down"}
	}
	inv := m.invs[key]
	if inv != nil && m.restarted(inv, r) {
		if !inv.started && inv.err == nil {
			// Rank r is claimed by two live processes at once.
			e := m.claimedTwice(inv, r)
			m.mu.Unlock()
			inv.timer.Stop()
			m.metrics.failed.WithLabelValues(e.Code).Inc()
			m.warn(e)
			close(inv.ready)
			m.forget(inv, time.Minute)
			return nil, e
		}
		// Rank r asks from a new process after the invocation started
		// or failed: this is not a repeat of its arrival but a new run
		// of the job (9.1).
		m.supersede(inv)
		inv = nil
	}
	if inv == nil {
		inv = &invocation{key: key, first: r, p: p, arrived: map[int]BeginRequest{}, ready: make(chan struct{}), created: time.Now(),
			waiting: map[int]int{}}
		m.invs[key] = inv
		inv.timer = time.AfterFunc(m.cfg.BarrierTimeout, func() { m.barrierTimeout(inv) })
	}
	if by := inv.abandonedBy; inv.err != nil && by != nil && unplaced == nil {
		// A rank gave this invocation up before this one arrived: its
		// answer is that abandon, whatever this request asks (compared
		// with the abandon's body instead, a rank that asked for the
		// persistent setup another rank's abandoned invocation stood for
		// was told it mismatched, which its library takes as a shape the
		// ranks disagree on, and whether it was told depended on which
		// request reached the AM first). How the requests differ follows.
		e := *inv.err
		if !inv.unchecked && !inv.p.same(p) {
			e.Message += fmt.Sprintf("; this call differs from it: %s (rank %d's value first)", p.differences(inv.p), r.Rank)
		}
		m.mu.Unlock()
		return nil, &e
	}
	var mismatch *APIError
	switch prev, ok := inv.arrived[r.Rank]; {
	case unplaced != nil:
		mismatch = unplaced // not an arrival: the rank cannot take part
	case !inv.p.same(p) || !sameOpID(inv.first.OpID, r.OpID):
		diff := p.differences(inv.p)
		if !sameOpID(inv.first.OpID, r.OpID) {
			// One rank pinning an op_id the other leaves out differs too:
			// the ranks that pinned one got another.
			diff = strings.TrimPrefix(diff+fmt.Sprintf(", op_id %s vs %s", opIDText(r.OpID), opIDText(inv.first.OpID)), ", ")
		}
		mismatch = &APIError{Code: CodeMismatch, Rank: &r.Rank,
			Message: fmt.Sprintf("rank %d's request for job %d group %d seq %d differs from rank %d's: %s "+
				"(rank %d's value first; every rank of one collective must ask for the same)", r.Rank, r.Job, r.Group, r.Seq, inv.first.Rank, diff, r.Rank)}
	case ok && prev.Node != r.Node:
		mismatch = &APIError{Code: CodeMismatch, Rank: &r.Rank,
			Message: fmt.Sprintf("rank %d arrived twice from different nodes (%s, %s)", r.Rank, prev.Node, r.Node)}
	}
	if mismatch != nil {
		// Before the barrier completes the invocation cannot be set up as
		// asked: every rank, waiting or still to come, gets this error now
		// (9.1: the same for every rank) instead of a barrier timeout that
		// names the ranks which did arrive. Once all arrived, only this
		// request is refused.
		abandon := len(inv.arrived) < inv.p.Size && inv.err == nil && inv.grants == nil
		// Logged once: when it fails the invocation, or when it refuses
		// a request the invocation went on without; not again for every
		// rank of an invocation it already failed.
		logIt := inv.err == nil
		if abandon {
			inv.err = mismatch
			by := r
			inv.failedBy = &by
		}
		m.mu.Unlock()
		if logIt {
			m.warn(mismatch)
		}
		if abandon {
			inv.timer.Stop()
			m.metrics.failed.WithLabelValues(mismatch.Code).Inc()
			close(inv.ready)
			m.forget(inv, time.Minute)
		}
		return nil, mismatch
	}
	isNew := false
	if _, ok := inv.arrived[r.Rank]; !ok {
		inv.arrived[r.Rank] = r
		isNew = true
	}
	start := isNew && len(inv.arrived) == p.Size && inv.err == nil && inv.grants == nil
	if start {
		inv.started = true
		m.joinRun(inv) // its processes are one run of the job (presence.go)
	}
	// A rank this invocation waits for may be gone already (presence.go).
	gone := !start && isNew && m.goneMissing(inv)
	inv.waiting[r.Rank]++
	m.mu.Unlock()
	if gone {
		m.closeFailed([]*invocation{inv})
	}
	if start {
		inv.timer.Stop()
		go m.runInvocation(inv)
	}
	select {
	case <-inv.ready:
		m.mu.Lock()
		inv.waiting[r.Rank]--
		m.mu.Unlock()
	case <-ctx.Done():
		m.withdraw(inv, r)
		return nil, ctx.Err()
	}
	if inv.err != nil {
		return nil, selfGone(inv, r)
	}
	g := inv.grants[r.Rank]
	return &g, nil
}

// restarted reports (under m.mu) whether r comes from another process than
// the arrival inv already holds for r.Rank: both name their session and the
// sessions differ.
func (m *Manager) restarted(inv *invocation, r BeginRequest) bool {
	prev, ok := inv.arrived[r.Rank]
	if by := inv.abandonedBy; !ok && by != nil && by.Rank == r.Rank {
		// The rank abandoned the invocation without arriving (or its
		// arrival was withdrawn): a new process of it starts afresh.
		prev, ok = *by, true
	}
	if by := inv.failedBy; !ok && by != nil && by.Rank == r.Rank {
		// Its request failed the invocation (a --node typo): the same
		// job run again, corrected, got the old error for a minute.
		prev, ok = *by, true
	}
	if c := inv.claimedBy; c != nil && c.Rank == r.Rank && c.Session == r.Session {
		return false // the second claimant of a rank asking again: a repeat
	}
	return ok && r.Session != 0 && prev.Session != 0 && prev.Session != r.Session
}

// supersede (under m.mu) takes inv, an invocation that started setup, was
// granted or failed, out of m.invs so that a rank asking from a new
// process starts a new invocation of the same (job, group, seq): the
// rank's earlier process is gone or was replaced, so inv is history. An
// operation already granted runs on: its ranks have their grants, and it
// ends as it ends.
func (m *Manager) supersede(inv *invocation) {
	delete(m.invs, inv.key)
	if inv.forgetT != nil {
		inv.forgetT.Stop()
	}
}

// claimedTwice (under m.mu) fails inv, still gathering its ranks, because
// r asks for a rank another process (another session) already waits
// for there: two processes started with one --rank. (A dead process's
// request is withdrawn when its connection closes, so the other one is
// alive.) Every rank of the invocation, waiting or still to come, and
// both claimants get the error at once, as for a mismatch. It used to
// supersede the invocation with one of its own: the first claimant and
// the ranks waiting with it failed at once, but the second and the ranks
// that came after it waited the whole barrier timeout for ranks that had
// been evicted, and the second never learnt it displaced another. A job
// run again while a process of its earlier run still waits at the call
// is told to stop that one.
func (m *Manager) claimedTwice(inv *invocation, r BeginRequest) *APIError {
	prev := inv.arrived[r.Rank]
	rank := r.Rank
	inv.err = &APIError{Code: CodeMismatch, Rank: &rank,
		Message: fmt.Sprintf("rank %d of job %d group %d seq %d was claimed by two processes, on %s and %s (sessions %#x and %#x): "+
			"fix the job's rank assignment, giving each process its own rank (or, if a process of an earlier run of the job still waits at this call, stop it)",
			r.Rank, r.Job, r.Group, r.Seq, prev.Node, r.Node, prev.Session, r.Session)}
	by := r
	inv.claimedBy = &by
	return inv.err
}

// withdraw undoes r's arrival when its Begin gave up (the client went
// away: a killed rank, a cancelled context) before the barrier started,
// unless another request of the same rank still waits. Without it a rank
// that died at the barrier would be counted there until the barrier
// timeout, and a new run of the job would meet its stale arrival: joined
// to it, or refused as a mismatch when its parameters changed. An
// invocation left with no arrival is forgotten at once.
func (m *Manager) withdraw(inv *invocation, r BeginRequest) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if inv.waiting[r.Rank]--; inv.waiting[r.Rank] > 0 || inv.started || inv.err != nil {
		return
	}
	if prev, ok := inv.arrived[r.Rank]; !ok || prev.Session != r.Session {
		return
	}
	delete(inv.arrived, r.Rank)
	if len(inv.arrived) == 0 && m.invs[inv.key] == inv {
		delete(m.invs, inv.key)
		inv.timer.Stop()
	}
}

// Abandon is POST /v1/abandon (9.8): rank r gives up its invocation before
// the grant (its caller cancelled the call). Unlike a withdrawal (the
// client just went away: a killed rank, whose restarted job must be able
// to join the barrier again), the rank says it will not come back for
// this seq and moves on to the next: the invocation fails at once for
// every rank, waiting or still to come (for as long as a failed
// invocation answers, forget), with an error naming r, so all of them
// leave the seq together and meet again at the next. Without it the
// others waited the whole barrier timeout, and a retry by r took the next
// seq while they still waited at this one: every later call of the job
// was out of step. An invocation whose setup began, was granted or
// failed otherwise is left as it is.
func (m *Manager) Abandon(r AbandonRequest) (AbandonResponse, error) {
	p, aerr := m.normalize(r.BeginRequest)
	unchecked := false
	if aerr != nil {
		// A rank that gives up its first call because its own settings
		// are wrong (prismctl with --rank 3 --size 3 where the others say
		// 4) cannot send a request the AM would take; the others waited
		// the whole barrier timeout (2 minutes) for it. Its refusal is
		// taken with what identifies it (job, group, seq, rank, node),
		// and its invalid body is said, not compared (9.8).
		if r.Stage != AbandonRefused || r.Rank < 0 || r.Rank >= MaxRanks || r.Node == "" {
			return AbandonResponse{}, aerr
		}
		unchecked = true
		r.Reason = strings.TrimPrefix(r.Reason+"; its own request is invalid: "+aerr.Message, "; ")
	}
	switch r.Stage {
	case "", AbandonBarrier, AbandonPersistent, AbandonRefused:
	default:
		return AbandonResponse{}, badReq("stage %q: use barrier, persistent or refused (or leave it out)", r.Stage)
	}
	key := invKey{r.Job, r.Group, r.Seq}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return AbandonResponse{}, &APIError{Code: CodeSetupFailed, Message: "the AM is shutting down"}
	}
	inv := m.invs[key]
	if inv != nil && m.restarted(inv, r.BeginRequest) {
		// The rank's arrival there is another process's (a new run of
		// the job): not this process's to abandon.
		m.mu.Unlock()
		return AbandonResponse{}, nil
	}
	if inv != nil && (inv.started || inv.err != nil) {
		by := inv.abandonedBy
		m.mu.Unlock()
		return AbandonResponse{Abandoned: by != nil && by.Rank == r.Rank && by.Session == r.Session}, nil
	}
	fresh := inv == nil
	if fresh {
		// No rank arrived yet (or the rank's own withdrawal, its request
		// cancelled, came first): the others must still find the failure
		// when they arrive.
		inv = &invocation{key: key, first: r.BeginRequest, p: p, arrived: map[int]BeginRequest{}, ready: make(chan struct{}), created: time.Now(),
			waiting: map[int]int{}, unchecked: unchecked}
		m.invs[key] = inv
		inv.timer = time.AfterFunc(m.cfg.BarrierTimeout, func() { m.barrierTimeout(inv) })
	}
	var msg string
	switch r.Stage {
	case AbandonPersistent, AbandonRefused:
		msg = fmt.Sprintf("job %d group %d seq %d: rank %d (%s) will not come to the barrier", r.Job, r.Group, r.Seq, r.Rank, r.Node)
		if r.Reason != "" {
			msg += ": " + r.Reason
		}
	default:
		msg = fmt.Sprintf("job %d group %d seq %d: rank %d (%s) cancelled its call at the barrier", r.Job, r.Group, r.Seq, r.Rank, r.Node)
		if r.Reason != "" {
			msg += " (" + r.Reason + ")"
		}
	}
	why := ""
	if !fresh && !unchecked && !inv.p.same(p) {
		// The ranks waiting here asked for another collective than the
		// one the rank gave up: say how, since that is usually why (one
		// rank's call of another length, run on its persistent
		// collective of the length the others had before). The calls
		// differ: reason mismatch (host.ErrMismatch). The code stays
		// abandoned: a rank library forgets the shapes it has seen on a
		// mismatch code only, which every rank of a barrier mismatch
		// gets alike; here the abandoning rank got none.
		msg += fmt.Sprintf("; its call differs from rank %d's: %s (rank %d's value first)", inv.first.Rank, p.differences(inv.p), r.Rank)
		why = CodeMismatch
	}
	rank := r.Rank
	inv.err = &APIError{Code: CodeAbandoned, Rank: &rank, Message: msg, Reason: why}
	by := r.BeginRequest
	inv.abandonedBy = &by
	m.mu.Unlock()
	inv.timer.Stop()
	m.metrics.failed.WithLabelValues(CodeAbandoned).Inc()
	m.logf("am: %s", msg)
	close(inv.ready)
	m.forget(inv, time.Minute)
	return AbandonResponse{Abandoned: true}, nil
}

func (m *Manager) barrierTimeout(inv *invocation) {
	m.mu.Lock()
	if len(inv.arrived) == inv.p.Size || inv.err != nil {
		m.mu.Unlock()
		return
	}
	var missing []int
	for r := 0; r < inv.p.Size; r++ {
		if _, ok := inv.arrived[r]; !ok {
			missing = append(missing, r)
		}
	}
	inv.err = &APIError{Code: CodeBarrierTimeout,
		Message: fmt.Sprintf("job %d group %d seq %d: ranks %v did not arrive within %v%s", inv.key.job, inv.key.group, inv.key.seq, missing, m.cfg.BarrierTimeout,
			m.presenceHints(inv.key.job, inv.key.group, missing))}
	e := inv.err
	m.mu.Unlock()
	m.metrics.barrierTimeouts.Inc()
	m.warn(e)
	close(inv.ready)
	m.forget(inv, time.Minute)
}

// warn logs, at WARN, an error the AM answers ranks with at the barrier
// (mismatch, barrier_timeout, ...), in the words they get: an operator
// watching only the AM saw none of them.
func (m *Manager) warn(e *APIError) {
	m.logf("am: WARN %s: %s", e.Code, e.Message)
}

// forget drops an invocation after a while: late retries of its ranks still
// get the same answer until then.
func (m *Manager) forget(inv *invocation, after time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.invs[inv.key] != inv {
		return // already forgotten (its operation ended)
	}
	inv.forgetT = time.AfterFunc(after, func() {
		m.mu.Lock()
		if m.invs[inv.key] == inv {
			delete(m.invs, inv.key)
		}
		m.mu.Unlock()
	})
}

// maxEndedInvs bounds the invocations of ended operations kept to answer
// repeated arrivals (9.1).
const maxEndedInvs = 4096

// ended notes that inv's operation ended well. Its invocation still answers
// repeated arrivals until forget's time, but no more than maxEndedInvs of
// them are kept: a job running a hundred small collectives a second held
// 11 000 (grants, requests, timers), 130 MB of heap whose scanning slowed
// each collective from 6.5 to 10 ms within a minute. Every rank of an
// ended operation had its grant, so only a stale duplicate could still ask.
func (m *Manager) ended(inv *invocation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endedInvs = append(m.endedInvs, inv)
	n := len(m.endedInvs) - maxEndedInvs
	for i := 0; i < n; i++ {
		old := m.endedInvs[i]
		if m.invs[old.key] == old {
			delete(m.invs, old.key)
			if old.forgetT != nil {
				old.forgetT.Stop()
			}
		}
		m.endedInvs[i] = nil
	}
	if n > 0 {
		m.endedInvs = append(m.endedInvs[:0], m.endedInvs[n:]...)
	}
}

// sameOpID reports whether two requests pin the same Operation ID (or
// neither pins one).
func sameOpID(a, b *uint16) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// opIDText is a request's op_id as a mismatch names it ("none": not pinned).
func opIDText(id *uint16) string {
	if id == nil {
		return "none"
	}
	return strconv.Itoa(int(*id))
}

// allocate picks the Operation ID and a strictly newer generation.
func (m *Manager) allocate(inv *invocation, retryID *uint16) OpIdentity {
	m.mu.Lock()
	defer m.mu.Unlock()
	gk := opIDKey{inv.key.job, inv.key.group}
	gi, ok := m.groupGen[gk]
	if !ok {
		gi = groupInfo{gen: 1, size: inv.p.Size}
	} else if gi.size != inv.p.Size {
		// A group whose membership changed is a new group generation.
		gi = groupInfo{gen: gi.gen + 1, size: inv.p.Size}
	}
	m.groupGen[gk] = gi
	var opID uint16
	switch {
	case retryID != nil:
		opID = *retryID
	case inv.first.OpID != nil:
		opID = *inv.first.OpID
	default:
		// Next ID not in use by a live operation of this job and group.
		opID = m.nextOpID[gk]
		for i := 0; i < 1<<16; i++ {
			if !m.opIDBusy(gk, opID) {
				break
			}
			opID++
		}
		m.nextOpID[gk] = opID + 1
	}
	k := genKey{gk.job, gk.group, opID}
	gen := m.lastGen[k] + 1
	if gen < m.genBase {
		gen = m.genBase
	}
	m.lastGen[k] = gen
	return OpIdentity{Job: gk.job, Group: gk.group, GroupGen: gi.gen, OpID: opID, OpGen: gen}
}

// track lists op for GET /v1/ops and as the holder of its Operation ID.
// Called with m.mu held.
func (m *Manager) track(op *operation) {
	m.ops[op.id.Key()] = op
	m.byID[genKey{op.id.Job, op.id.Group, op.id.OpID}] = op
}

// opIDBusy reports whether Operation ID id of group gk belongs to a live
// operation. Called with m.mu held. It looked at every operation kept for
// introspection (ten minutes of them): at a hundred small collectives a
// second that was a scan of 60 000 operations, each under its lock, per
// allocation.
func (m *Manager) opIDBusy(gk opIDKey, id uint16) bool {
	k := genKey{gk.job, gk.group, id}
	if t, ok := m.foreign[k]; ok {
		if time.Since(t) < foreignHold {
			return true
		}
		delete(m.foreign, k)
	}
	op := m.byID[k]
	if op == nil {
		return false
	}
	op.mu.Lock()
	live := op.ended.IsZero()
	op.mu.Unlock()
	return live
}

// runInvocation places, sets up and grants one invocation.
func (m *Manager) runInvocation(inv *invocation) {
	m.metrics.begun.Inc()
	m.mu.Lock()
	m.settingUp++
	m.mu.Unlock()
	// Metrics are updated before the ranks are answered, so a scrape after
	// Begin returned sees them.
	fail := func(e *APIError) {
		m.metrics.failed.WithLabelValues(e.Code).Inc()
		m.mu.Lock()
		inv.err = e
		m.settingUp--
		m.mu.Unlock()
		close(inv.ready)
		m.forget(inv, time.Minute)
	}
	hosts := make([]RankHost, inv.p.Size)
	for r := range hosts {
		a := inv.arrived[r]
		hosts[r] = RankHost{Node: a.Node, Iface: a.Iface}
		if a.MAC != "" {
			mac, err := net.ParseMAC(a.MAC)
			if err != nil {
				fail(badReq("rank %d: mac %q: %v", r, a.MAC, err))
				return
			}
			hosts[r].MAC = mac
		}
	}
	if id := inv.first.OpID; id != nil {
		// A pinned Operation ID that one of this AM's own operations still
		// runs under: set up again under a newer generation, its STAGE
		// retired the running operation on the switches (the retry meant
		// for contexts a stopped AM left), and that operation's ranks
		// were failed mid-transfer. It is refused instead.
		m.mu.Lock()
		holder := m.byID[genKey{inv.key.job, inv.key.group, *id}]
		m.mu.Unlock()
		if holder != nil {
			holder.mu.Lock()
			live := holder.ended.IsZero()
			holder.mu.Unlock()
			if live {
				fail(badReq("job %d group %d seq %d: op_id %d is in use by operation %s, which still runs: pin another op_id, "+
					"or leave it out and the AM picks one not in use", inv.key.job, inv.key.group, inv.key.seq, *id, holder.id.Key()))
				return
			}
		}
	}
	start := time.Now()
	op := m.takePrepared(inv, hosts)
	how := "active (prepared ahead)"
	if op == nil {
		how = "active"
		if op = m.setupInvocation(inv, hosts, fail); op == nil {
			return
		}
	}
	tree, pl := op.tree, op.plan
	grants := make([]Grant, inv.p.Size)
	for r := range grants {
		rp := tree.Ranks[r]
		grants[r] = Grant{ID: op.id.Key(), Op: op.id, Rank: r, Size: inv.p.Size,
			Collective: strings.ToLower(inv.first.Collective), RootRank: inv.p.RootRank,
			InputFormat: FormatName(inv.p.Input), AccPolicy: AccName(inv.p.Acc),
			PartialPolicy: FormatName(inv.p.Partial), OutputFormat: FormatName(inv.p.Output),
			KulischWidth: inv.p.KulischWidth, VectorLen: inv.p.VectorLen, MTU: inv.p.MTU, TimeoutMS: inv.p.TimeoutMS,
			Data: pl.ranks[r].data, Result: pl.ranks[r].result,
			RankMAC: rp.HostMAC.String(), Leaf: rp.Leaf, LeafMAC: rp.LeafMAC.String(), LeafPort: rp.LeafPort,
			Tree: tree.Kind(), Window: pl.win}
		if inv.p.Persistent {
			grants[r].Persistent, grants[r].KeepaliveMS = true, keepaliveMS(inv.p)
		}
		// The rank's streams are its leaf's: DATA into the leaf's window,
		// RESULT sized like it.
		grants[r].Window.Elements = pl.nodes[rp.Leaf].ctx.WindowElems
	}
	op.mu.Lock()
	op.state = "active"
	op.granted = time.Now()
	op.refreshed = op.granted
	// Watchdog: ranks that never report done (killed) must not pin the
	// nodes' contexts forever. A persistent operation idles between its
	// invocations for as long as the application likes, so no progress
	// proves nothing there: its ranks' keepalives are checked instead.
	if op.persistent {
		op.watchdog = time.AfterFunc(keepalivePeriod(inv.p), func() { m.checkAlive(op) })
	} else {
		op.watchdog = time.AfterFunc(m.watchdogPeriod(op), func() { m.watch(op, 0) })
	}
	op.mu.Unlock()
	m.logf("am: op %s (%s, %d ranks, %d nodes, root %s) %s after %v", op.id.Key(), tree.Kind(), inv.p.Size, len(tree.Nodes), tree.Root, how, time.Since(start))
	m.mu.Lock()
	inv.grants = grants
	m.settingUp-- // op (state active) counts from now on
	m.mu.Unlock()
	m.metrics.granted.Inc()
	close(inv.ready)
	m.forget(inv, time.Duration(3*inv.p.TimeoutMS)*time.Millisecond+time.Minute)
	m.prepareNext(inv, hosts, op)
}

// window is the receive window wished for an invocation of p: the
// configured one with its defaults filled in.
func (m *Manager) window(p params) Window {
	win := m.cfg.Window
	// 64 intervals in flight per stream: measured on 2 loaded cores, deeper
	// windows (256, 1024) turn every spurious 20 ms retransmission timeout
	// into a burst of hundreds of frames and the fabric collapses; 64
	// keeps a 1500-byte-MTU FP32 stream at ~23k elements in flight. A
	// Kulisch-280 partial (40 values per frame) is then the narrowest
	// stream of a tree; raise Config.Window where RTTs are steady.
	if win.Intervals == 0 {
		win.Intervals = 64
	}
	if win.ReplayDepth == 0 {
		// A sender holds every unacknowledged frame for replay, so the
		// replay depth is what it can have in flight: a window deeper
		// than it would be unusable.
		win.ReplayDepth = win.Intervals
	}
	if win.Bytes == 0 {
		// A frame counts 14 + MTU bytes (protocol 7): Intervals x MTU
		// let only Intervals - 1 full frames fly, and the last interval
		// credit could never be used.
		win.Bytes = uint32(win.Intervals) * uint32(parser.EthLen+p.MTU)
	}
	// win.Elements 0: each node's element window is sized in setup for
	// the formats it receives (nodeElements).
	return win
}

func newOperation(id OpIdentity, inv *invocation, tree *Tree, pl *plan) *operation {
	op := &operation{id: id, inv: inv, tree: tree, plan: pl, size: inv.p.Size, persistent: inv.p.Persistent,
		final: make(chan struct{}), state: "setup", nodes: map[string]*NodeStatus{}, done: map[int]DoneRequest{},
		alive: map[int]time.Time{}, aliveInv: map[int]uint32{}}
	for _, n := range tree.Nodes {
		ns := &NodeStatus{Name: n.Name, Role: n.Role.String(), MAC: n.MAC.String(), State: "NONE"}
		if n.Parent != nil {
			ns.Parent = n.Parent.Parent
		}
		if np := pl.nodes[n.Name]; np != nil {
			for _, b := range np.bindings {
				ns.Streams = append(ns.Streams, StreamPeer{Kind: b.Kind.String(), Stream: b.Stream, Peer: np.owner[b.Stream]})
			}
		}
		op.nodes[n.Name] = ns
	}
	return op
}

// setupInvocation places inv and sets it up on every node; on failure it
// calls fail and returns nil.
func (m *Manager) setupInvocation(inv *invocation, hosts []RankHost, fail func(*APIError)) *operation {
	tree, err := BuildTree(m.cfg.Topology, hosts)
	if err != nil {
		fail(&APIError{Code: CodeTopology, Message: err.Error()})
		return nil
	}
	op, aerr := m.setupOp(inv, tree)
	if aerr != nil {
		fail(aerr)
		return nil
	}
	return op
}

// setupOp allocates an operation for inv on tree and sets it up on every
// node. A setup refused only because a node holds state from before this
// allocation (retryCause) was rolled back; it is tried once more under the
// same Operation ID. On failure the operation is retired and the last
// error returned.
func (m *Manager) setupOp(inv *invocation, tree *Tree) (*operation, *APIError) {
	win := m.window(inv.p)
	var retryID *uint16
	start := time.Now()
	for attempt := 0; ; attempt++ {
		pl, err := buildPlan(tree, inv.p, win)
		if err != nil {
			return nil, &APIError{Code: CodeTopology, Message: err.Error()}
		}
		op := newOperation(m.allocate(inv, retryID), inv, tree, pl)
		m.mu.Lock()
		m.track(op)
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 4*m.cfg.CtlTimeout+time.Duration(len(tree.Nodes))*time.Millisecond)
		aerr := m.setup(ctx, op)
		cancel()
		if aerr == nil {
			return op, nil
		}
		if attempt == 0 && aerr.Code == CodeSetupFailed && aerr.retry != retryNone {
			// Tried again below, which logs why: not a failure yet
			// (an operator grepping for "failed" found this one above
			// the line saying the setup recovered).
			m.logf("am: op %s setup attempt refused after %v (rolled back, trying again): %v", op.id.Key(), time.Since(start), aerr)
		} else {
			m.logf("am: op %s setup failed after %v: %v", op.id.Key(), time.Since(start), aerr)
		}
		op.mu.Lock()
		op.state, op.err, op.ended = "failed", aerr, time.Now()
		op.mu.Unlock()
		close(op.final)
		m.retire(op)
		if attempt > 0 || aerr.Code != CodeSetupFailed || aerr.retry == retryNone {
			return nil, aerr
		}
		switch aerr.retry {
		case retryStale:
			// A node remembers a newer generation of this Operation ID
			// than this AM allocated (an AM restarted within the same
			// second, or a pinned op_id reused by another AM): skip ahead.
			m.skipGenerations(op.id)
		case retryOlder:
			// Without this the job failed at every reuse of the Operation
			// ID until the nodes expired the context, minutes later.
			m.logf("am: %s still held an older generation of job %d group %d operation %d (left by an AM that stopped, "+
				"or a RELEASE that never arrived); the rollback's ABORT retired it: setting up again",
				strings.Join(aerr.older, ", "), op.id.Job, op.id.Group, op.id.OpID)
		case retryResources:
			// The room those operations hold comes back with their
			// RELEASE or ABORT: bounded by the CONTROL rounds they take.
			w0 := time.Now()
			deadline := time.After(2*m.cfg.CtlTimeout + time.Second)
		wait:
			for _, o := range aerr.ending {
				select {
				case <-o.final:
				case <-deadline:
					break wait
				}
			}
			m.logf("am: node %s had no room (NO_RESOURCES) while %d operations of this AM on it were ending; waited %v for them: setting up again",
				aerr.Node, len(aerr.ending), time.Since(w0).Round(time.Millisecond))
		}
		m.metrics.setupRetries.WithLabelValues(aerr.retry.String()).Inc()
		id := op.id.OpID
		retryID = &id
	}
}

// skipGenerations makes the next generation of id's Operation ID jump far
// past id's, beyond what a node may remember from another AM.
func (m *Manager) skipGenerations(id OpIdentity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := genKey{id.Job, id.Group, id.OpID}
	if m.lastGen[k] < id.OpGen+1<<20 {
		m.lastGen[k] = id.OpGen + 1<<20
	}
}

// watchdogPeriod is how long the AM waits between progress checks of a
// granted operation: long enough that a healthy but slow collective always
// moves in between.
func (m *Manager) watchdogPeriod(op *operation) time.Duration {
	if m.cfg.Watchdog > 0 {
		return m.cfg.Watchdog
	}
	return 3*time.Duration(op.inv.p.TimeoutMS)*time.Millisecond + 10*time.Second
}

// watch runs when an operation has not finished within a watchdog period:
// ranks that were killed never report done, and their nodes' contexts must
// not stay installed forever. A node that FAILED, or no node completing a
// single element more since the last check, fails the operation; otherwise
// it is still moving (a large vector) and the watchdog re-arms.
func (m *Manager) watch(op *operation, lastDone uint64) {
	op.mu.Lock()
	if !op.ended.IsZero() || op.finishing {
		op.mu.Unlock()
		return
	}
	op.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CtlTimeout)
	m.forEach(op.plan.order, func(n string) error {
		a, err := m.ctl.command(ctx, n, op.plan.nodes[n].node.MAC, op.id, parser.CmdComplete, nil)
		op.setNodeAck(n, a, err)
		return err
	})
	cancel()
	op.mu.Lock()
	var done uint64
	failed := false
	for _, ns := range op.nodes {
		done += uint64(ns.CompletedElements)
		failed = failed || ns.State == "FAILED"
	}
	if !op.ended.IsZero() || op.finishing {
		// Every rank reported while the nodes were polled: the report's
		// ending (finishOp or failOp) owns the operation now, and a second
		// ending would close op.final twice.
		op.mu.Unlock()
		return
	}
	if !failed && done > lastDone {
		op.watchdog = time.AfterFunc(m.watchdogPeriod(op), func() { m.watch(op, done) })
		op.mu.Unlock()
		return
	}
	op.finishing = true // claimed, as Done claims it
	op.mu.Unlock()
	m.failOp(op, reasonWatchdog, "watchdog: the operation stopped making progress and not every rank reported done")
}

// retainEnded and maxRetained bound how long and how many ended operations
// GET /v1/ops still lists.
const (
	retainEnded = 10 * time.Minute
	maxRetained = 4096
)

type retiredOp struct {
	op *operation
	at time.Time
}

// retire lets an ended operation go from GET /v1/ops after retainEnded, or
// sooner once maxRetained newer ones ended (a job running small
// collectives back to back ends hundreds a second). Call without m.mu.
func (m *Manager) retire(op *operation) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retired = append(m.retired, retiredOp{op, now})
	n := 0
	for n < len(m.retired) && (len(m.retired)-n > maxRetained || now.Sub(m.retired[n].at) > retainEnded) {
		r := m.retired[n].op
		k := r.id.Key()
		if m.ops[k] == r {
			delete(m.ops, k)
		}
		g := genKey{r.id.Job, r.id.Group, r.id.OpID}
		if m.byID[g] == r {
			delete(m.byID, g)
		}
		m.retired[n] = retiredOp{}
		n++
	}
	if n > 0 {
		m.retired = append(m.retired[:0], m.retired[n:]...)
	}
}

func (m *Manager) lookup(id string) (*operation, *APIError) {
	if _, err := ParseOpKey(id); err != nil {
		return nil, &APIError{Code: CodeBadRequest, Message: err.Error()}
	}
	m.mu.Lock()
	op := m.ops[id]
	m.mu.Unlock()
	if op == nil {
		return nil, &APIError{Code: CodeNotFound, Message: fmt.Sprintf("no operation %s (finished ones are kept 10 minutes)", id)}
	}
	return op, nil
}

// Done is POST /v1/ops/{id}/done.
func (m *Manager) Done(ctx context.Context, id string, d DoneRequest) (OpStatus, error) {
	op, aerr := m.lookup(id)
	if aerr != nil {
		return OpStatus{}, aerr
	}
	if d.Rank < 0 || d.Rank >= op.size {
		return OpStatus{}, badReq("rank %d is outside 0..%d", d.Rank, op.size-1)
	}
	op.mu.Lock()
	_, dup := op.done[d.Rank]
	if !dup {
		op.done[d.Rank] = d
		if !d.OK && d.Local && op.firstFail == nil {
			r := d.Rank
			op.firstFail = &r
		}
	}
	all := len(op.done) == op.size
	anyFail := false
	for _, x := range op.done {
		anyFail = anyFail || !x.OK
	}
	start := !op.finishing && op.state == "active" && (all || anyFail)
	inexact := anyFail && op.inexactOnly()
	drainNow := false
	var nudge []int
	if start {
		op.finishing = true
		op.state = "completing"
		if anyFail {
			op.state = "failing" // what this answer says: failOp (or the drain) comes next
		}
		if anyFail && !all && op.persistent && d.Local && !d.OK && d.Invocations > 0 {
			// Before the ABORT, the others finish what this rank took
			// part in (persistent.go).
			if m.startDrain(op, d) {
				start, nudge = false, op.drainWaiting()
			}
		}
	} else if op.drain != nil && !dup {
		// A repeated report (a retry after a lost answer) is ignored
		// here as everywhere.
		drainNow = op.drained(!d.OK)
	}
	op.mu.Unlock()
	if nudge != nil {
		m.tell(op, nudge, PresenceAlive)
	}
	if drainNow {
		go m.endDrain(op, fmt.Sprintf("rank %d reported done (ok %v)", d.Rank, d.OK))
	}
	if start {
		switch {
		case inexact:
			go m.failInexact(op)
		case anyFail:
			go m.failOp(op, reasonRankFailed, "")
		case op.persistent:
			go m.endPersistent(op)
		default:
			go m.finishOp(op)
		}
	}
	if d.Wait {
		select {
		case <-op.final:
		case <-ctx.Done():
			return OpStatus{}, ctx.Err()
		}
	}
	return op.status(), nil
}

// finishOp checks every node with COMPLETE and RELEASEs them.
func (m *Manager) finishOp(op *operation) {
	deadline := time.Now().Add(time.Duration(op.inv.p.TimeoutMS)*time.Millisecond + m.cfg.CtlTimeout)
	if bad := m.completeAll(op, deadline); len(bad) > 0 {
		m.failOp(op, reasonNotComplete, fmt.Sprintf("nodes %v did not reach COMPLETE", bad))
		return
	}
	m.released(op, m.releaseAll(op), "RELEASE not acknowledged; contexts may remain installed until their timeout")
}

// released records a successful end whose last CONTROL round (RELEASE, or
// ABORT for a persistent operation) left incomplete unacknowledged (msg
// says which round).
func (m *Manager) released(op *operation, incomplete []string, msg string) {
	op.mu.Lock()
	if op.watchdog != nil {
		op.watchdog.Stop()
	}
	op.state = "released"
	if len(incomplete) > 0 {
		op.err = &APIError{Code: CodeRollbackIncomplete, Message: msg, RollbackIncomplete: incomplete}
	}
	op.ended = time.Now()
	op.mu.Unlock()
	m.metrics.completed.Inc()
	close(op.final)
	m.retire(op)
	m.ended(op.inv)
}

// madeAnotherCall says, for rank r that a failed operation waited for,
// whether it waits at the AM's barrier of another call of the job and
// group instead: "; rank 3 (h4) made another call instead (seq 7,
// waiting at the AM's barrier): vector_len 2001 vs 2000 (its value
// first)". A rank that called another length while the others ran their
// persistent collective's invocation (no AM round trip) left them to
// time out on it, named as one that stopped contributing. "" if not.
func (m *Manager) madeAnotherCall(op *operation, r int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, inv := range m.invs {
		if key.job != op.inv.key.job || key.group != op.inv.key.group || inv == op.inv || inv.started || inv.err != nil {
			continue
		}
		req, ok := inv.arrived[r]
		if !ok {
			continue
		}
		rp, aerr := m.normalize(req)
		if aerr != nil {
			continue
		}
		// One call each, as the ranks made them: a persistent
		// collective's invocation against an ordinary call of the
		// same shape is the same call.
		mine, theirs := callShape(rp), callShape(op.inv.p)
		if mine.same(theirs) {
			continue
		}
		return fmt.Sprintf("; rank %d (%s) made another call instead (seq %d, waiting at the AM's barrier): %s (its value first)",
			r, op.tree.Ranks[r].Host, key.seq, mine.differences(theirs))
	}
	return ""
}

// callShape is p as one call of it: a persistent operation's invocation,
// not its whole vector.
func callShape(p params) params {
	p.VectorLen, p.InvocationLen, p.Persistent = p.invocationLen(), 0, false
	return p
}

// inexactOnly reports (under op.mu) whether every failure reported so far
// is an ACCUMULATION_INEXACT RESULT.
func (op *operation) inexactOnly() bool {
	any := false
	for _, d := range op.done {
		if !d.OK {
			if !d.Inexact {
				return false
			}
			any = true
		}
	}
	return any
}

// failInexact ends an operation whose sum the output format cannot hold
// (a rank reported its ACCUMULATION_INEXACT RESULT, 9.2): no node failed
// and no rank is at fault, so there is nothing to diagnose, and the
// verdict (reason inexact) is given at once: a rank whose own terminal
// frame is still on its way, told by its presence stream, knows what it
// will find. Then, as for a success, the nodes are RELEASEd once COMPLETE
// (their contexts stay ACTIVE until their terminal frames are
// acknowledged), and ABORTed if they do not get there.
func (m *Manager) failInexact(op *operation) {
	op.mu.Lock()
	if !op.ended.IsZero() || op.failStarted {
		op.mu.Unlock()
		return
	}
	op.failStarted = true
	if op.watchdog != nil {
		op.watchdog.Stop()
	}
	var by []string
	for r := 0; r < op.size; r++ {
		if d, ok := op.done[r]; ok && d.Inexact {
			by = append(by, fmt.Sprintf("%d (%s)", r, op.tree.Ranks[r].Host))
		}
	}
	msg := fmt.Sprintf("operation %s failed: the exact sum cannot be represented in the output format %s (ACCUMULATION_INEXACT, received by rank %s): "+
		"no node or rank failed; sum into a wider output format (Options.Output, prismctl --output fp32)",
		op.id.Key(), FormatName(op.inv.p.Output), strings.Join(by, ", "))
	if len(by) > 1 {
		msg = strings.Replace(msg, "received by rank ", "received by ranks ", 1)
	}
	op.mu.Unlock()
	m.metrics.failed.WithLabelValues(ReasonInexact).Inc()
	m.logf("am: %s", msg)
	m.publishFailure(op, &APIError{Code: CodeOperationFailed, Message: msg, Reason: ReasonInexact})
	deadline := time.Now().Add(time.Duration(op.inv.p.TimeoutMS)*time.Millisecond + m.cfg.CtlTimeout)
	left := m.completeAll(op, deadline)
	if len(left) == 0 {
		left = m.releaseAll(op)
	}
	if len(left) > 0 {
		if inc := m.abortAll(op); len(inc) > 0 {
			m.logf("am: operation %s (inexact): no RELEASE or ABORT acknowledgement from %v; contexts may remain installed until their timeout", op.id.Key(), inc)
		}
	}
	m.retire(op)
}

// failOp diagnoses, ABORTs every node and records the failure; reason is
// the label of prismd_am_operations_failed_total. Safe to call more than
// once: only the first call acts.
func (m *Manager) failOp(op *operation, reason, why string) {
	m.failOpBlaming(op, reason, why, nil)
}

// failOpBlaming is failOp when the caller already knows the culprit rank
// (why says what it did); nil lets the diagnosis find one.
func (m *Manager) failOpBlaming(op *operation, reason, why string, blame *int) {
	op.mu.Lock()
	if !op.ended.IsZero() || op.failStarted {
		op.mu.Unlock()
		return
	}
	op.failStarted, op.state = true, "failing"
	if op.watchdog != nil {
		op.watchdog.Stop()
	}
	if op.drain != nil {
		// Something else failed the operation while it drained: the
		// drain's own end must not fail it again.
		op.drain.timer.Stop()
		op.drain = nil
	}
	op.mu.Unlock()
	diag, culprit, origin := m.diagnose(op, blame)
	if why != "" {
		diag = why + "; " + diag
	}
	if reason == reasonRankFailed && culprit != nil {
		op.mu.Lock()
		first := op.firstFail
		op.mu.Unlock()
		if first != nil && *first == *culprit {
			// The rank cancelled its own call (its context ended): the
			// others' calls end as a call abandoned at the barrier does
			// (ErrAbandoned), not as a fault of the network.
			reason = CodeAbandoned
		} else if note := m.madeAnotherCall(op, *culprit); note != "" {
			// It did not contribute because it called something else:
			// the ranks' calls differ (ErrMismatch), whatever timed out.
			diag += note
			reason = CodeMismatch
		}
	}
	m.metrics.failed.WithLabelValues(reason).Inc()
	skip := -1
	if reason == CodeRankGone && blame != nil {
		skip = *blame // why already says it is gone
	}
	m.mu.Lock()
	diag += m.goneNote(op, skip) // a rank whose process lost its connection (presence.go)
	m.mu.Unlock()
	var silent map[string]bool
	op.mu.Lock()
	for _, n := range op.plan.order {
		if ns := op.nodes[n]; ns.State == "UNREACHABLE" && !ns.localSend {
			if silent == nil {
				silent = map[string]bool{}
			}
			silent[n] = true
		}
	}
	op.mu.Unlock()
	incomplete := m.abortAllBut(op, silent)
	e := &APIError{Code: CodeOperationFailed, Message: fmt.Sprintf("operation %s failed: %s", op.id.Key(), diag), Rank: culprit, Node: origin, Reason: reason}
	if len(incomplete) > 0 {
		e.RollbackIncomplete = incomplete
		e.Message += "; rollback incomplete: no ABORT acknowledgement from " + fmt.Sprint(incomplete)
	}
	m.logf("am: %v", e.Message)
	m.publishFailure(op, e)
	m.retire(op)
}

// publishFailure records e as op's verdict (state failed), answers the
// ranks waiting for it (op.final) and tells those that have not reported
// on their presence stream: a rank that has sent everything and waits for
// RESULT hears nothing from its ABORTed leaf, and learned of the failure
// only at its own RESULT timeout.
func (m *Manager) publishFailure(op *operation, e *APIError) {
	op.mu.Lock()
	op.state, op.err, op.ended = "failed", e, time.Now()
	var tell []int
	for r := 0; r < op.size; r++ {
		if _, done := op.done[r]; !done {
			tell = append(tell, r)
		}
	}
	op.mu.Unlock()
	close(op.final)
	m.tell(op, tell, PresenceFailed)
}

// Op is GET /v1/ops/{id}.
func (m *Manager) Op(id string) (OpStatus, error) {
	op, aerr := m.lookup(id)
	if aerr != nil {
		return OpStatus{}, aerr
	}
	return op.status(), nil
}

// Ops is GET /v1/ops: every known operation, newest generation last.
// Refresh asks every node of every active operation for its state now
// (COMPLETE, which changes nothing on a node: 5.1), so that Ops shows
// where each stands and what it waits for. Without it the AM's view of
// an active operation was its setup's (every node 0 elements completed,
// waiting for nothing) until it ended: a stalled one looked healthy in
// 'prismctl show am'. Bounded by the CONTROL timeout.
func (m *Manager) Refresh() {
	m.mu.Lock()
	var ops []*operation
	for _, op := range m.ops {
		op.mu.Lock()
		if op.state == "active" || op.state == "draining" {
			ops = append(ops, op)
		}
		op.mu.Unlock()
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.askAll(op)
		}()
	}
	wg.Wait()
}

func (m *Manager) Ops() OpList { return m.OpsWhere(OpsFilter{}) }

// OpsFilter selects what OpsWhere lists (GET /v1/ops's query, 9.3): a nil
// field matches everything.
type OpsFilter struct {
	Job   *uint64
	Group *uint16
	Seq   *uint64
	NoOps bool // barriers only
}

func (f OpsFilter) match(job uint64, group uint16, seq uint64) bool {
	return (f.Job == nil || *f.Job == job) && (f.Group == nil || *f.Group == group) && (f.Seq == nil || *f.Seq == seq)
}

// OpsWhere is Ops of what f selects. A rank asks for its own barrier with
// it: the whole list (4096 finished operations at most, ~3 KB each) on
// every barrier check cost a job more bytes than its collectives.
func (m *Manager) OpsWhere(f OpsFilter) OpList {
	m.mu.Lock()
	ops := make([]*operation, 0, len(m.ops))
	for _, op := range m.ops {
		// The identity is fixed at creation; op.inv is not (a prepared
		// operation takes its invocation later, under op.mu), so seq is
		// matched on the status below.
		if !f.NoOps && (f.Job == nil || *f.Job == op.id.Job) && (f.Group == nil || *f.Group == op.id.Group) {
			ops = append(ops, op)
		}
	}
	var bs []Barrier
	for _, b := range m.barriers() {
		if f.match(b.Job, b.Group, b.Seq) {
			bs = append(bs, b)
		}
	}
	l := OpList{Ops: []OpStatus{}, Barriers: bs}
	m.mu.Unlock()
	for _, op := range ops {
		if st := op.status(); f.Seq == nil || *f.Seq == st.Seq {
			l.Ops = append(l.Ops, st)
		}
	}
	sort.Slice(l.Ops, func(i, j int) bool {
		a, b := l.Ops[i].Op, l.Ops[j].Op
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if l.Ops[i].Seq != l.Ops[j].Seq {
			return l.Ops[i].Seq < l.Ops[j].Seq
		}
		return a.OpGen < b.OpGen
	})
	return l
}

// barriers lists (under m.mu) the invocations still gathering ranks, by
// job, group and seq.
func (m *Manager) barriers() []Barrier {
	var bs []Barrier
	for _, inv := range m.invs {
		if inv.started || inv.err != nil || len(inv.arrived) == 0 {
			continue
		}
		b := Barrier{Job: inv.key.job, Group: inv.key.group, Seq: inv.key.seq, Collective: inv.first.Collective,
			Size: inv.p.Size, Arrived: []int{}, Missing: []int{}, WaitingMS: time.Since(inv.created).Milliseconds()}
		for r := 0; r < inv.p.Size; r++ {
			if _, ok := inv.arrived[r]; ok {
				b.Arrived = append(b.Arrived, r)
			} else {
				b.Missing = append(b.Missing, r)
			}
		}
		bs = append(bs, b)
	}
	sort.Slice(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Seq < b.Seq
	})
	return bs
}

func (op *operation) status() OpStatus {
	op.mu.Lock()
	defer op.mu.Unlock()
	s := OpStatus{ID: op.id.Key(), Op: op.id, Seq: op.inv.key.seq, Collective: op.inv.first.Collective,
		Size: op.size, Persistent: op.persistent, State: op.state, Tree: op.tree.Kind(), Root: op.tree.Root,
		Forwarders: op.tree.Forwarders, RanksDone: []int{}, Error: op.err, Draining: op.drainStatus()}
	if p := op.inv.p; p.Persistent && p.invocationLen() < p.VectorLen {
		s.InvocationLen = p.invocationLen()
	}
	if op.state == "active" || op.state == "draining" {
		// Every leaf names its least advanced stream, and behind a
		// stalled rank the others run out of credit: a leaf elsewhere
		// then "waits for" a healthy rank. The chain from the root says
		// which one holds the tree.
		if r, leaf := op.holding(); r != nil {
			s.Holding = fmt.Sprintf("rank %d (%s) at %s", *r, op.tree.Ranks[*r].Host, leaf)
		}
	}
	if (op.state == "released" || op.state == "failed" || op.state == "unused") && !op.ended.IsZero() {
		s.EndedUnixMs = op.ended.UnixMilli()
	}
	for _, name := range op.plan.order {
		s.Nodes = append(s.Nodes, *op.nodes[name])
	}
	for r := range op.done {
		s.RanksDone = append(s.RanksDone, r)
	}
	sort.Ints(s.RanksDone)
	return s
}

func (op *operation) setNodeAck(n string, a ackBody, err error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	ns := op.nodes[n]
	var ne *NodeError
	var ls *localSendError
	ns.localSend = errors.As(err, &ls)
	if err != nil && !(errors.As(err, &ne) && ne.Err == nil) {
		ns.State = "UNREACHABLE"
		ns.LastError = err.Error()
		if ns.answered && !ns.localSend {
			ns.LastError = ns.stoppedAnswering(err)
		}
		return
	}
	ns.answered = true
	ns.State = a.State.String()
	ns.CompletedElements = max(ns.CompletedElements, a.Completed) // it only grows while the context exists
	ns.MissingStream, ns.MissingFrom, ns.MissingFromWhom, ns.FailCause = nil, 0, "", ""
	if a.State == parser.StateFailed && a.FailCause != parser.FailNone {
		ns.FailCause = a.FailCause.String()
	}
	if a.MissStream != parser.NoDetail && a.State != parser.StateComplete {
		ms := int(a.MissStream)
		ns.MissingStream = &ms
		ns.MissingFrom = a.MissingFrom
		ns.MissingFromWhom = op.plan.nodes[n].owner[a.MissStream]
	}
	if err != nil {
		ns.LastError = err.Error()
	}
}

// stoppedAnswering is the last error of a node that answered CONTROL
// earlier in the operation and then did not: the no-acknowledgement
// error's hints (node_mac, am_sources, the lab's topology file) are for a
// node never reached, and sent an operator after a configuration mistake
// when the node, or a switch between the AM and it, had stopped.
func (ns *NodeStatus) stoppedAnswering(err error) string {
	what := err.Error()
	if ls := (*localSendError)(nil); errors.As(err, &ls) {
		return what // the AM's own host refused: nothing known about the node
	}
	var ne *NodeError
	var na *noAckError
	if errors.As(err, &ne) && errors.As(err, &na) {
		what = fmt.Sprintf("node %s: %v: %s", ne.Node, ne.Cmd, na.short())
	}
	if ns.behind != "" {
		return what + ": it answered CONTROL earlier in this operation, and " + ns.behind
	}
	return what + ": it answered CONTROL earlier in this operation, " + silenceUnexplained
}

// silenceUnexplained ends the last error of a node that stopped answering
// for no reason the AM knows (stoppedAnswering).
const silenceUnexplained = "so it or a switch on the way from the AM stopped"

func (op *operation) setNodeErr(n string, err error) {
	op.mu.Lock()
	defer op.mu.Unlock()
	ns := op.nodes[n]
	var ne *NodeError
	if ns.answered && !(errors.As(err, &ne) && ne.Err == nil) {
		// An ABORT after the failure that it did not answer either.
		ns.LastError = ns.stoppedAnswering(err)
		return
	}
	ns.LastError = err.Error()
}

func (op *operation) setNodeState(n, s string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.nodes[n].State = s
}
