// Package host is the rank library of prismd: what an application process
// links to run REDUCE and ALLREDUCE through PRISM switches, in the shape MPI
// and NCCL users know.
//
//	comm, err := host.NewComm(ctx, host.Config{Rank: 0, Size: 4, Iface: "eth0",
//		Job: 7, Coordinator: "http://10.0.0.1:7000", Node: "h1"})
//	err = comm.AllReduce(ctx, send, recv, nil)       // []float32, []int8, []host.Float16, []host.BFloat16; recv may be send
//	req := comm.AllReduceAsync(ctx, send, recv, nil) // ... req.Wait()
//	p, err := comm.AllReduceInit(send, recv, nil)     // persistent: set up once,
//	err = p.Run(ctx)                                  // then run as often as needed
//
// A call whose shape (collective, root, element type and count, Options)
// the Comm has run before runs as the next invocation of a persistent
// collective the Comm keeps for that shape (auto.go,
// Config.PersistentShapes), with no AM round trip: the decision depends on
// the call sequence and the AM's answers only, so every rank takes the
// same one. A shape counts as run once a call of it got its grant: a first
// call the AM refused (a mismatch, a rank that cancelled) leaves the shape
// unseen on every rank, and a mismatch makes every rank forget every shape
// it has run only once (the ranks of a mismatch made different calls), so
// the next call of any shape not kept yet is a first call on all of them.
//
// # The call sequence
//
// Ranks must make the same sequence of calls on a Comm (collectives, and
// the Starts of persistent collectives), as in MPI: each call that goes
// out takes the Comm's next sequence number at call time, and the AM
// matches the ranks' calls by it. What a call that fails does to the
// sequence:
//
//   - A call refused on the rank, before anything is sent, is no call: an
//     argument error (ErrType: a buffer type, send and recv lengths or
//     types, send and recv overlapping without being the same slice; a
//     root out of range; Options.Timeout out of range) or a closed Comm
//     (ErrClosed). It returns at once, contacts nobody and takes no
//     sequence number, so the rank's next call meets the others' next
//     call. Ranks that all pass the same arguments all refuse it alike.
//   - A count of 0 (empty send, and an empty or nil recv) is a no-op, as
//     in MPI and NCCL: it returns nil at once and takes no sequence
//     number. Every rank must pass 0 then; a rank that passes 0 while the
//     others pass n meets their call with its next one.
//   - A call that went out took its sequence number on every rank, also
//     when it fails (a mismatch, the AM's barrier timeout, a failure in
//     transfer), and the next call meets again. This holds for a call
//     whose context ended (or was done when the call was made): it fails
//     with the context's error, and if that happens before its grant the
//     rank tells the AM it abandons the call (docs/protocol.md 9.8), so
//     the other ranks' matching call fails at once with an error naming
//     it ("rank 0 (h1) cancelled its call at the barrier") instead of
//     waiting the barrier timeout, and every rank's next call meets.
//   - An invocation of a persistent collective that fails ends it on
//     every rank: later Starts return its error. For automatic
//     persistence the calls of the shape queued behind it fail too; when
//     it failed because its own call's context ended (also while it
//     waited for its turn), they fail with ErrEarlierCancelled (not
//     context.Canceled: theirs was not), naming the invocation. The other
//     ranks ran it without this rank and failed it, so none of the queued
//     calls can run in step; the shape's next call sets up afresh. The
//     invocations before the failed one are not cut short on any rank:
//     the AM waits (a drain, docs/protocol.md 9.7) for every rank to
//     report them complete, or at most 1.5 keepalive periods, before it
//     ends the collective.
//   - Every call that runs on a persistent collective (its Start, or a
//     repeated shape's call) takes a sequence number too, though it asks
//     the AM nothing: another rank may make that call through the AM (it
//     passed another length, or set the shape up again after a failure
//     it alone saw). An invocation that does not complete, and a Start
//     refused because an earlier one failed or the previous one still
//     runs (which can differ between ranks), tell the AM that this rank
//     will not come for that number (docs/protocol.md 9.8, stage
//     persistent), so such a rank's call fails at once, told how the
//     calls differ, and the ranks' later calls still meet. Numbered only
//     at setups, they had drifted apart for good, and a later call of one
//     shape was summed with another rank's earlier call without an error.
//   - A rank whose process dies (killed, crashed, its host down) between
//     calls does not hold the others at the next call's barrier for the
//     AM's barrier timeout (2 minutes): each Comm holds a presence stream
//     open to the AM while it lives (docs/protocol.md 9.9), and when it
//     closes and does not come back within a second, the calls that wait
//     for that rank fail with ErrRankGone ("rank 3 (h4) is gone: ..."),
//     as does a running operation whose leaf still waits for its data,
//     or a persistent collective it had not freed. Close says goodbye
//     first, so the others' calls waiting at the barrier fail at once,
//     told that the rank closed its communicator; an invocation of a
//     persistent collective the closed rank had freed, started after,
//     waits for its timeout.
//
// It owns the rank side of one collective: the barrier request to the Host
// Coordinator over the runtime channel (package control/am's Client; while
// the barrier holds it, Config.Notify hears which ranks it waits for), DATA
// sent through a stream.SendWindow with retransmission driven by PROGRESS,
// RESULT received through a stream.RecvWindow and answered with PROGRESS,
// the completion report to the coordinator and the errors that say what
// failed (which contributor, which element range, timeout, coordinator
// unreachable, interface gone, ACCUMULATION_INEXACT). Every call's error is
// an *OpError; errors.Is classifies it (ErrTimeout, also for a barrier a
// rank never reached; ErrMismatch; ErrAbandoned; ErrRankGone; ErrSetup; ErrFailed;
// ErrInexact; ErrClosed; ErrBusy for a persistent collective still running;
// context.Canceled or DeadlineExceeded whenever the call's own context
// had ended when it failed, whatever else it matches: ranks that all
// cancel at once are told that the first of them did, and match
// ErrFailed too), and
// errors.As reaches the AM's *am.APIError (its Code and Rank) when the AM
// refused the call. A link that goes down
// (ENETDOWN) is ridden out: frames lost meanwhile are retransmitted once it
// is back, and an operation whose timeout expires first says the interface
// went down and how long ago, or that it has no carrier (the switch's end
// of the link is down: frames vanish without an error, so the timeout asks
// the interface's flags).
//
// It must not touch: switch-side state (packages engine, control), wire
// layouts beyond calling package parser, arithmetic beyond converting an
// AUTO-encoded RESULT with package kulisch, or flags (cmd/prismctl parses
// those; ConfigFromEnv and LoadConfig read the environment and files).
//
// Frames go through an AF_PACKET socket pair on the rank's interface
// (host/internal/rawio: EtherType 0x88B5 only, an 8 MiB receive buffer so a
// burst of RESULT is not dropped while the process waits for a core,
// recvmmsg and sendmmsg of up to 128 frames). One goroutine per Comm, the
// event loop, owns every running collective: per turn it lets each
// operation send what its windows admit (DATA encoded straight from the
// caller's slice into the send window's replay buffer), flushes everything
// with one sendmmsg, reads one batch and applies each frame where it landed
// (RESULT values copied straight into the caller's slice), queueing the
// answers. In-order RESULT frames of one batch are answered with one
// PROGRESS naming the newest (protocol section 7 allows coalescing);
// out-of-order, duplicate and refused ones are answered one by one. The
// loop wakes for a batch or for the next retransmission tick, never per
// frame, and nothing on this path allocates or takes a lock (proven by
// TestLoopAllocs on an in-memory leaf and TestLoopAllocsAFPacket on a veth
// pair). A collective's DATA replay buffers come from the last one that
// finished (Comm.takeSlab): on a VM, faulting in 577 KB of new buffers per
// jumbo-MTU collective was 40% of a rank's CPU. Any Conn works
// (NewCommConn); one that implements BatchConn is used a batch at a time,
// others through an adapter.
//
// Element values are sent in host memory order, which is the wire's
// little-endian on every platform prismd supports (amd64, arm64); NewComm
// refuses a big-endian host.
//
// A Comm's work is its event loop, one goroutine, while callers wait. Where
// ranks share a few cores with other processes (a lab VM), run the rank
// with GOMAXPROCS=1, as prismctl does unless GOMAXPROCS is set: with more
// Ps the Go runtime wakes an idle thread at each handoff between the
// caller and the loop (measured in cmd/prismctl's oneProc).
package host
