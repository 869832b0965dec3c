// This file owns the JSON of the runtime channel between ranks and the
// coordinator (docs/protocol.md "Runtime channel"). Every field is documented
// there; change both together.

package am

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prismd/prismd/parser"
)

// APIVersion is the path prefix of every runtime-channel endpoint.
const APIVersion = "/v1"

// BeginRequest is POST /v1/begin: one rank arriving at the host-side barrier
// of one collective invocation.
//
// The invocation is identified by (Job, Group, Seq): every rank of a
// communicator numbers its collectives 0, 1, 2, ... in call order (MPI
// semantics), so ranks meet without agreeing on anything else first.
// Repeated arrivals of the same rank for the same invocation are idempotent.
type BeginRequest struct {
	Job   uint64 `json:"job"`
	Group uint16 `json:"group"`
	Seq   uint64 `json:"seq"`
	// OpID optionally pins the Operation ID; nil lets the AM pick one.
	OpID *uint16 `json:"op_id,omitempty"`

	Rank int `json:"rank"`
	Size int `json:"size"`

	Collective string `json:"collective"` // "reduce" | "allreduce"
	RootRank   int    `json:"root_rank"`  // REDUCE destination rank

	InputFormat   string `json:"input_format"`             // int8 | fp16 | bf16 | fp32
	AccPolicy     string `json:"acc_policy"`               // kulisch | fp32 (KULISCH_FIXED | FP32_ARRIVAL)
	PartialPolicy string `json:"partial_policy,omitempty"` // int8..kulisch | auto; "" = auto
	OutputFormat  string `json:"output_format,omitempty"`  // "" = input format
	KulischWidth  int    `json:"kulisch_width,omitempty"`  // bits; 0 = sufficient for Size terms
	VectorLen     uint32 `json:"vector_len"`
	MTU           int    `json:"mtu,omitempty"`        // 0 = 1500
	TimeoutMS     uint32 `json:"timeout_ms,omitempty"` // 0 = AM default

	// Persistent asks for a persistent operation (MPI_Allreduce_init): the
	// ranks run invocation after invocation over its vector without asking
	// the AM again, keep it alive with POST /v1/ops/{id}/alive while it is
	// idle, and report done when they free it.
	Persistent bool `json:"persistent,omitempty"`
	// RepeatsPersistent says the rank will run a repeat of this call (the
	// same shape, the next Seq) as a persistent operation of its own, as
	// package host does from a shape's second call on: an ordinary
	// operation prepared ahead for Seq+1 (Config.Prepare) would only be
	// ABORTed, so the AM prepares none when every rank says so.
	RepeatsPersistent bool `json:"repeats_persistent,omitempty"`
	// InvocationLen is, for a persistent request, the elements of one
	// invocation (VectorLen is a whole number of them): informational, so
	// that a mismatch says "vector_len 777 per invocation vs 8" instead
	// of the persistent vector's 814743552.
	InvocationLen uint32 `json:"invocation_len,omitempty"`

	// Node is the rank's host in the topology; Iface its interface there
	// ("" = the host's only link). MAC is the interface's actual address
	// ("" = the topology's deterministic MAC).
	Node  string `json:"node"`
	Iface string `json:"iface,omitempty"`
	MAC   string `json:"mac,omitempty"`

	// Session names the process (the communicator) that asks: random, not
	// 0, the same in every request and retry it sends (0 = unknown). A
	// job started again numbers its collectives from seq 0 again; only the
	// session tells its ranks from repeats of the previous run's (9.1).
	Session uint64 `json:"session,omitempty"`
}

// NewSession returns a random BeginRequest.Session for one communicator:
// never 0, and two processes pick the same one with odds of 2^-64.
func NewSession() uint64 {
	for {
		if s := rand.Uint64(); s != 0 {
			return s
		}
	}
}

// OpIdentity is the PRISM operation identity (docs/protocol.md section 3).
type OpIdentity struct {
	Job      uint64 `json:"job"`
	Group    uint16 `json:"group"`
	GroupGen uint16 `json:"group_gen"`
	OpID     uint16 `json:"op_id"`
	OpGen    uint32 `json:"op_gen"`
}

// Key is the identity as used in /v1/ops/{id}: "job-group-groupgen-opid-opgen".
func (o OpIdentity) Key() string {
	return fmt.Sprintf("%d-%d-%d-%d-%d", o.Job, o.Group, o.GroupGen, o.OpID, o.OpGen)
}

// ParseOpKey is the inverse of Key.
func ParseOpKey(s string) (OpIdentity, error) {
	p := strings.Split(s, "-")
	if len(p) != 5 {
		return OpIdentity{}, fmt.Errorf("operation id %q: want job-group-groupgen-opid-opgen", s)
	}
	var v [5]uint64
	bits := [5]int{64, 16, 16, 16, 32}
	for i := range p {
		n, err := strconv.ParseUint(p[i], 10, bits[i])
		if err != nil {
			return OpIdentity{}, fmt.Errorf("operation id %q: %w", s, err)
		}
		v[i] = n
	}
	return OpIdentity{Job: v[0], Group: uint16(v[1]), GroupGen: uint16(v[2]), OpID: uint16(v[3]), OpGen: uint32(v[4])}, nil
}

// StreamBinding is one direct stream between the rank and its leaf.
type StreamBinding struct {
	StreamID    uint16 `json:"stream_id"`
	SrcEndpoint uint16 `json:"src_endpoint"`
	DstEndpoint uint16 `json:"dst_endpoint"`
}

// Window is the receive window of every stream of the operation.
type Window struct {
	Intervals   uint16 `json:"intervals"`
	ReplayDepth uint16 `json:"replay_depth"`
	Bytes       uint32 `json:"bytes"`
	Elements    uint32 `json:"elements"`
}

// Grant is START_GRANT: the answer to BeginRequest once every node of the tree
// is ACTIVE.
type Grant struct {
	ID   string     `json:"id"` // OpIdentity.Key
	Op   OpIdentity `json:"op"`
	Rank int        `json:"rank"`
	Size int        `json:"size"`

	Collective    string `json:"collective"`
	RootRank      int    `json:"root_rank"`
	InputFormat   string `json:"input_format"`
	AccPolicy     string `json:"acc_policy"`
	PartialPolicy string `json:"partial_policy"`
	OutputFormat  string `json:"output_format"`
	KulischWidth  int    `json:"kulisch_width"`
	VectorLen     uint32 `json:"vector_len"`
	MTU           int    `json:"mtu"`
	TimeoutMS     uint32 `json:"timeout_ms"`

	// Persistent echoes the request. KeepaliveMS is how often each rank
	// must POST /v1/ops/{id}/alive until it reports done: max(TimeoutMS/2,
	// 100). Both are zero for an operation that is not persistent.
	Persistent  bool   `json:"persistent,omitempty"`
	KeepaliveMS uint32 `json:"keepalive_ms,omitempty"`

	// Data is the rank's DATA stream to its leaf (Src = rank endpoint).
	Data StreamBinding `json:"data"`
	// Result is the RESULT stream from the leaf to this rank (Src = leaf
	// endpoint, Dst = rank endpoint); nil for a REDUCE non-destination rank.
	Result *StreamBinding `json:"result,omitempty"`

	RankMAC  string `json:"rank_mac"`  // source MAC the leaf accepts DATA from
	Leaf     string `json:"leaf"`      // leaf switch name
	LeafMAC  string `json:"leaf_mac"`  // destination MAC of DATA
	LeafPort int    `json:"leaf_port"` // the leaf's port toward the rank
	Tree     string `json:"tree"`      // "SINGLE" or "TREE"
	Window   Window `json:"window"`
}

// DoneRequest is POST /v1/ops/{id}/done: a rank finished its part.
type DoneRequest struct {
	Rank  int    `json:"rank"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Local says the failure began at this rank: its caller cancelled the
	// collective (or its deadline passed), rather than the rank giving up
	// on what it waited for. When no node failed on its own, the AM names
	// the first rank that reported a local failure as the culprit.
	Local bool `json:"local,omitempty"`
	// TimedOut says the rank's own inactivity timer ended the operation
	// (its leaf went silent, or its link): the switches' timers run on the
	// same Timeout, so the AM waits a moment for their verdict before it
	// diagnoses (9.2). Any other failure (ACCUMULATION_INEXACT, a FAILED
	// announcement) is diagnosed at once, unless a node does not answer.
	TimedOut bool `json:"timed_out,omitempty"`
	// Inexact says the rank's RESULT was the ACCUMULATION_INEXACT
	// terminal frame: the exact sum cannot be represented in the output
	// format. No node or rank is at fault; the AM fails the operation
	// with reason inexact and says so instead of diagnosing the nodes
	// (9.2), so a rank the AM tells of the failure before its own
	// terminal frame arrives knows it for what it is.
	Inexact bool `json:"inexact,omitempty"`
	// Wait asks the AM to answer only once the operation is final (released,
	// failed or aborted), so a failing rank receives the AM's diagnosis.
	Wait bool `json:"wait,omitempty"`
	// Invocations, for a persistent operation, is how many of its
	// invocations this rank completed. A local failure that names them
	// (the rank's next call was cancelled before it ran) lets the other
	// ranks finish those invocations before the AM ABORTs the operation
	// (protocol 9.7, draining): an invocation this rank completed may
	// still be delivering its RESULT to another rank.
	Invocations uint32 `json:"invocations,omitempty"`
}

// AliveRequest is POST /v1/ops/{id}/alive: a rank of a persistent
// operation is still there (its process runs, it has not freed the
// operation), however long the operation has been idle on the switches.
type AliveRequest struct {
	Rank int `json:"rank"`
	// Invocations is how many invocations of the operation the rank has
	// completed (DoneRequest.Invocations): what a draining operation
	// waits for.
	Invocations uint32 `json:"invocations,omitempty"`
}

// AbandonRequest is POST /v1/abandon (9.8): a rank gives up invocation
// (Job, Group, Seq) before its grant (its caller cancelled the call, or
// the call's deadline passed). The body is the rank's BeginRequest for
// the invocation, so that the AM can refuse the invocation to ranks that
// have not arrived yet, plus why.
type AbandonRequest struct {
	BeginRequest
	// Reason is the rank's own words ("context canceled"), appended to
	// the error the other ranks get.
	Reason string `json:"reason,omitempty"`
	// Stage says where the rank's call ended (protocol 9.8): "" or
	// "barrier", cancelled before its grant; "persistent", the rank ran
	// the call as an invocation of a persistent operation it already
	// had, which did not complete; "refused", the rank could not make the
	// call at all (its communicator could not start: a wrong interface).
	// Either way the rank took the call's seq and will not come to its
	// barrier.
	Stage string `json:"stage,omitempty"`
}

// Abandon stages (AbandonRequest.Stage).
const (
	AbandonBarrier    = "barrier"
	AbandonPersistent = "persistent"
	AbandonRefused    = "refused"
)

// AbandonResponse answers POST /v1/abandon.
type AbandonResponse struct {
	// Abandoned says the invocation failed (now or by an earlier repeat of
	// this request) because this rank abandoned it; false: it had started
	// setup, been granted or failed otherwise before, and nothing changed.
	Abandoned bool `json:"abandoned"`
}

// NodeStatus is one tree node as the AM last saw it.
type NodeStatus struct {
	Name   string `json:"name"`
	Role   string `json:"role"` // SINGLE | LEAF | INTERNAL | ROOT
	MAC    string `json:"mac"`
	Parent string `json:"parent,omitempty"`
	State  string `json:"state"` // NONE STAGED ACTIVE COMPLETE FAILED RELEASED ABORTED UNREACHABLE
	// CompletedElements is the most elements the node said it completed
	// and handed on: the acknowledgement of RELEASE or ABORT comes after
	// the context is gone and says 0, which left every finished
	// operation's nodes showing 0.
	CompletedElements uint32 `json:"completed_elements"`
	MissingStream     *int   `json:"missing_stream,omitempty"`
	MissingFrom       uint32 `json:"missing_from,omitempty"`
	// MissingFromWhom names the contributor behind MissingStream ("rank 2
	// (h3)", "subtree leaf1").
	MissingFromWhom string `json:"missing_from_whom,omitempty"`
	// FailCause is why a FAILED node failed, about MissingStream: TIMEOUT
	// (its peer went silent: where a failure starts), PEER_FAILED (its
	// peer reported FAILED: a failure that came from elsewhere), INTERNAL.
	FailCause string `json:"fail_cause,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Streams names the peer behind each of the node's bindings, so that
	// a switch's own view (prismctl show ops), which knows streams by
	// endpoint and MAC, can say which rank or switch a stream is.
	Streams []StreamPeer `json:"streams,omitempty"`

	// answered: the node acknowledged a command of this operation, so a
	// later silence is the node or its path failing, not a topology or
	// am_sources mistake.
	answered bool
	// localSend: the last request to it never left the AM's host (its
	// socket refused every transmission): its silence says nothing about
	// the node.
	localSend bool
	// behind, for a node that stopped answering, is why the AM's CONTROL
	// may not reach it while it is healthy ("the AM reaches it only
	// through s1, which stopped answering too"), set by diagnose.
	behind string
}

// StreamPeer is one binding of a node as the AM planned it. Kind and
// Stream identify it within the operation (a stream ID appears at two
// nodes, under two kinds: CONTRIBUTOR at the parent and PARENT at the
// child, RESULT_OUT and RESULT_IN).
type StreamPeer struct {
	Kind   string `json:"kind"` // CONTRIBUTOR | PARENT | RESULT_IN | RESULT_OUT
	Stream uint16 `json:"stream"`
	// Peer is the other end: "rank 2 (h3)", "subtree l2", "the parent s1",
	// "the RESULT from s1".
	Peer string `json:"peer"`
}

// OpStatus is GET /v1/ops/{id} and an element of GET /v1/ops.
type OpStatus struct {
	ID         string       `json:"id"`
	Op         OpIdentity   `json:"op"`
	Seq        uint64       `json:"seq"`
	Collective string       `json:"collective"`
	Size       int          `json:"size"`
	Persistent bool         `json:"persistent,omitempty"`
	State      string       `json:"state"` // setup | active | completing | released | failed
	Tree       string       `json:"tree"`
	Root       string       `json:"root"`
	Forwarders []string     `json:"forwarders,omitempty"`
	Nodes      []NodeStatus `json:"nodes"`
	RanksDone  []int        `json:"ranks_done"`
	Error      *APIError    `json:"error,omitempty"`
	// InvocationLen is, for a persistent operation, the elements of one
	// invocation: its nodes' element positions (missing_from,
	// completed_elements) count through every invocation.
	InvocationLen uint32 `json:"invocation_len,omitempty"`
	// Holding, for an active or draining operation whose nodes report
	// what they wait for, names the rank the chain of waits from the root
	// ends at, and its leaf ("rank 3 (h8) at l2"): the one furthest
	// behind, which holds a stuck operation while other leaves may name
	// healthy ranks their flow control stopped behind it (in a healthy
	// one, whichever is behind at that moment).
	Holding string `json:"holding,omitempty"`
	// EndedUnixMs is when the operation was released or failed, or (a
	// prepared one nobody took) ABORTed unused (Unix milliseconds), absent
	// before: the order in which operations ended,
	// which seq (restarting at 0 with every run of a job) does not give.
	EndedUnixMs int64 `json:"ended_unix_ms,omitempty"`
	// Draining, while State is "draining", says what the AM waits for
	// before it ABORTs a persistent operation a rank failed locally
	// (protocol 9.7).
	Draining *Draining `json:"draining,omitempty"`
}

// Draining is a persistent operation's wait between a rank's local failure
// and the ABORT: the ranks in Waiting have not yet reported Invocations
// completed invocations, the ones the failing rank took part in.
type Draining struct {
	Rank        int    `json:"rank"`        // the rank that failed locally
	Invocations uint32 `json:"invocations"` // invocations it completed
	Waiting     []int  `json:"waiting"`     // ranks that have not reported as many, ascending
	LeftMS      int64  `json:"left_ms"`     // at most this long more before the ABORT
}

// OpList is GET /v1/ops.
type OpList struct {
	Ops []OpStatus `json:"ops"`
	// Barriers are the invocations still gathering their ranks: a job
	// whose ranks wait there for one that never comes shows which.
	Barriers []Barrier `json:"barriers,omitempty"`
}

// Barrier is one invocation whose ranks have not all arrived (9.3).
type Barrier struct {
	Job        uint64 `json:"job"`
	Group      uint16 `json:"group"`
	Seq        uint64 `json:"seq"`
	Collective string `json:"collective"`
	Size       int    `json:"size"`
	Arrived    []int  `json:"arrived"` // ascending
	Missing    []int  `json:"missing"` // ascending
	// WaitingMS is how long ago the invocation's first rank arrived.
	WaitingMS int64 `json:"waiting_ms"`
}

// Waited says how long b has waited and for whom: "3.1s for ranks 1 3
// (arrived: 0 2)", as 'prismctl show am' and a waiting rank put it.
func (b *Barrier) Waited() string {
	return fmt.Sprintf("%v for ranks %s (arrived: %s)", (time.Duration(b.WaitingMS) * time.Millisecond).Round(100*time.Millisecond),
		RankRanges(b.Missing), RankRanges(b.Arrived))
}

// MaxRanks is the most ranks one collective may have: an operation's
// plan numbers its endpoints and streams in 16 bits (docs/protocol.md
// 5.1), up to 4 endpoints per rank and as many per switch edge, and a job
// of 100000 ranks was held at its barrier for 2 minutes before.
const MaxRanks = 16000

// RankRanges writes rank numbers in ascending runs ("0 2 5-9"), at most
// maxRuns runs and then how many ranks it left out: a notice for a
// 100000-rank job listed every one, a line of 589 KB.
func RankRanges(v []int) string {
	const maxRuns = 16
	if len(v) == 0 {
		return "none"
	}
	v = slices.Clone(v)
	slices.Sort(v)
	v = slices.Compact(v)
	var sb strings.Builder
	runs := 0
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if runs == maxRuns {
			fmt.Fprintf(&sb, " ... and %d more", len(v)-i)
			break
		}
		if runs > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.Itoa(v[i]))
		if j > i {
			sb.WriteByte('-')
			sb.WriteString(strconv.Itoa(v[j]))
		}
		runs++
		i = j + 1
	}
	return sb.String()
}

// APIError is every non-2xx body: {"error": {...}}.
type APIError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Node names the switch that failed, Rank the rank that did (or -1).
	Node string `json:"node,omitempty"`
	Rank *int   `json:"rank,omitempty"`
	// RollbackIncomplete lists nodes that never acknowledged ABORT/RELEASE.
	RollbackIncomplete []string `json:"rollback_incomplete,omitempty"`
	// Reason, for operation_failed, is why the AM failed the operation,
	// as prismd_am_operations_failed_total counts it: rank_failed,
	// abandoned, mismatch, inexact, rank_gone, keepalive, watchdog,
	// not_complete. For abandoned, mismatch says the abandoning rank's
	// call differs from the others' (9.8).
	Reason string `json:"reason,omitempty"`

	retry retryCause // why a failed setup may be tried once more (setupOnce)
	older []string   // nodes that still held an older generation (retryOlder)
	// ending are this AM's operations still ending (RELEASE or ABORT
	// under way) on a node that refused STAGE for lack of room
	// (retryResources): the retry waits for them.
	ending []*operation
}

// retryCause says why a STAGE refusal does not condemn an operation: the
// refusing node holds state from before this AM's allocation, which the
// rollback's ABORT (or a generation skip) clears.
type retryCause uint8

const (
	retryNone retryCause = iota
	// retryStale: a node remembers a newer generation of the Operation
	// ID than this AM allocated (STALE_GENERATION).
	retryStale
	// retryOlder: a node still holds an older generation of the
	// Operation ID (BAD_STATE with its state): a context an earlier AM
	// left behind when it died, or one whose RELEASE never arrived. The
	// rollback's ABORT of the newer generation retires it too
	// (docs/protocol.md section 5).
	retryOlder
	// retryResources: a node had no room (NO_RESOURCES) while operations
	// of this AM on it were ending: a job whose next call came while its
	// previous one's RELEASE was on its way was refused every other call
	// on a full switch. The retry waits for them to end.
	retryResources
)

// String is the cause's label in prismd_am_setup_retries_total.
func (c retryCause) String() string {
	switch c {
	case retryStale:
		return "stale_generation"
	case retryOlder:
		return "older_generation_held"
	case retryResources:
		return "no_resources_while_ending"
	}
	return "none"
}

func (e *APIError) Error() string {
	s := "am: " + e.Code + ": " + e.Message
	if len(e.RollbackIncomplete) > 0 {
		s += " (rollback incomplete on " + strings.Join(e.RollbackIncomplete, ", ") + ")"
	}
	return s
}

// errorBody wraps APIError on the wire.
type errorBody struct {
	Error *APIError `json:"error"`
}

// Error codes of APIError.Code.
const (
	CodeBadRequest         = "bad_request"         // malformed or invalid request (HTTP 400)
	CodeMismatch           = "mismatch"            // ranks of one invocation disagree (409)
	CodeBarrierTimeout     = "barrier_timeout"     // not every rank arrived in time (504)
	CodeAbandoned          = "abandoned"           // a rank cancelled its call at the barrier (409)
	CodeTopology           = "topology"            // a node/rank cannot be placed (422)
	CodeUnsupported        = "unsupported"         // no CAPS record covers the tuple (422)
	CodeSetupFailed        = "setup_failed"        // a node refused or never answered (502)
	CodeRollbackIncomplete = "rollback_incomplete" // setup failed and ABORT was not acknowledged (502)
	CodeOperationFailed    = "operation_failed"    // the operation failed after the grant (502)
	CodeNotFound           = "not_found"           // unknown operation (404)
	CodeRankGone           = "rank_gone"           // a rank the barrier waits for is gone (410)
)

// Format names on the runtime channel, lower case.
var formatByName = map[string]parser.Format{
	"int8": parser.FormatINT8, "fp16": parser.FormatFP16, "bf16": parser.FormatBF16,
	"fp32": parser.FormatFP32, "kulisch": parser.FormatKulisch, "auto": parser.FormatAuto,
}

// ParseFormat maps a runtime-channel format name to its code.
func ParseFormat(s string) (parser.Format, error) {
	if f, ok := formatByName[strings.ToLower(s)]; ok {
		return f, nil
	}
	return 0, fmt.Errorf("unknown format %q (want int8, fp16, bf16, fp32, kulisch or auto)", s)
}

// FormatName is the inverse of ParseFormat.
func FormatName(f parser.Format) string { return strings.ToLower(f.String()) }

// ParseAcc maps "kulisch"/"KULISCH_FIXED" and "fp32"/"FP32_ARRIVAL".
func ParseAcc(s string) (parser.AccPolicy, error) {
	switch strings.ToLower(s) {
	case "kulisch", "kulisch_fixed":
		return parser.AccKulischFixed, nil
	case "fp32", "fp32_arrival":
		return parser.AccFP32Arrival, nil
	}
	return 0, fmt.Errorf("unknown accumulator policy %q (want kulisch or fp32)", s)
}

// AccName is the runtime-channel name of an accumulator policy.
func AccName(a parser.AccPolicy) string {
	if a == parser.AccKulischFixed {
		return "kulisch"
	}
	return "fp32"
}

// ParseCollective maps "reduce"/"allreduce".
func ParseCollective(s string) (parser.Collective, error) {
	switch strings.ToLower(s) {
	case "reduce":
		return parser.CollReduce, nil
	case "allreduce":
		return parser.CollAllReduce, nil
	}
	return 0, fmt.Errorf("unknown collective %q (want reduce or allreduce)", s)
}
