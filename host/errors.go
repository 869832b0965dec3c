// This file owns the rank library's errors: sentinels for errors.Is and
// OpError, which says which collective, which stage and which range failed.

package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/prismd/prismd/control/am"
)

var (
	// ErrType: an argument the call cannot take, refused on this rank
	// before any request: a buffer is not one of the supported slice
	// types, send and recv differ, or they overlap without being the same
	// slice; a root out of range; Options.Timeout out of range; Options
	// no AM would take (an unknown Acc, an MTU but 576, 1500 or 9000:
	// these also match ErrSetup and carry the *am.APIError the AM would
	// have answered).
	ErrType = errors.New("host: invalid argument")
	// ErrTimeout: a peer (the leaf switch) stayed silent past the
	// operation's timeout.
	ErrTimeout = errors.New("host: timeout")
	// ErrInexact: the switch reported ACCUMULATION_INEXACT; no value of the
	// operation is valid.
	ErrInexact = errors.New("host: ACCUMULATION_INEXACT: the exact sum cannot be represented in the requested output")
	// ErrFailed: the operation failed (the AM's diagnosis is in the message).
	ErrFailed = errors.New("host: operation failed")
	// ErrInterfaceDown: the rank's interface is gone (ENXIO, ENODEV). A
	// link that is merely down is waited for until the operation's
	// timeout, whose ErrTimeout then says so.
	ErrInterfaceDown = errors.New("host: interface down")
	// ErrUnreachable is am.ErrUnreachable: the coordinator cannot be reached.
	ErrUnreachable = am.ErrUnreachable
	// ErrClosed: the Comm was closed. A call on a closed Comm fails with
	// it at once, before anything is sent.
	ErrClosed = errors.New("host: communicator closed")
	// ErrPersistentClosed: the persistent collective was closed (its Comm
	// may still be open).
	ErrPersistentClosed = errors.New("host: persistent collective closed")
	// ErrBusy: a Start or Close of a persistent collective while one of
	// its invocations still runs (Wait for it first). Nothing was sent;
	// the running invocation goes on.
	ErrBusy = errors.New("host: an invocation is still running")
	// ErrEarlierCancelled: an earlier invocation of the persistent
	// collective this call runs on was cancelled (a call of the same
	// shape, on the collective the Comm keeps for it,
	// Config.PersistentShapes; or a Start of an explicit Persistent); the
	// other ranks ran that invocation without this rank, so the calls
	// after it cannot run in step and fail with this (not with
	// context.Canceled: their own context was not cancelled).
	ErrEarlierCancelled = errors.New("host: an earlier call of the same shape was cancelled")
	// ErrMismatch: the ranks asked for different collectives at one
	// point of their call sequence (the AM's mismatch: which field, in
	// the message). Also a call that ran (the others' persistent
	// collective's invocation, with no AM round trip) and failed because
	// a rank made another call instead: it matches ErrFailed too, after
	// the operation's timeout.
	ErrMismatch = errors.New("host: ranks disagree")
	// ErrAbandoned: another rank gave the call up while the AM gathered
	// the ranks (its caller cancelled it, it ran it on a persistent
	// collective that failed, or its communicator could not start: the
	// message says which); every rank's call of that invocation fails, and
	// the next calls meet again. Also a call another rank cancelled while
	// it ran (it matches ErrFailed too). A rank that gave up because its
	// call differs from the others' makes theirs fail with ErrMismatch.
	ErrAbandoned = errors.New("host: another rank gave up the call")
	// ErrSetup: the AM could not set the operation up (the topology cannot
	// place it, no switch supports it, a switch refused or did not answer,
	// or the request was invalid); no rank got a grant.
	ErrSetup = errors.New("host: the AM could not set the operation up")
	// ErrRankGone: a rank this call waits for is gone: its process's
	// presence stream to the AM closed and did not come back (it was
	// killed or crashed, or its host went down), or it closed its
	// communicator. The message names the rank and its node. (A rank
	// whose own stream was lost while it lived is told that it was
	// declared gone itself.) It also classifies a granted operation the
	// AM failed for that reason (its diagnosis says rank_gone): one whose
	// switch waited for the rank's data, or a persistent collective the
	// rank had not freed.
	ErrRankGone = errors.New("host: another rank is gone")
)

// Is lets errors.Is classify the AM's refusals by their code (the
// *am.APIError, which errors.As also reaches, holds the code and message):
// ErrMismatch, ErrAbandoned, ErrRankGone, ErrSetup, and ErrTimeout for a barrier that
// timed out (a rank never arrived) as for a silent peer.
func (e *OpError) Is(target error) bool {
	if e.own != nil && errors.Is(e.own, target) {
		return true
	}
	if target == ErrInexact && e.amFailure != nil && e.amFailure.Reason == am.ReasonInexact {
		// Told by the AM (its presence stream, or the diagnosis) before
		// this rank's own ACCUMULATION_INEXACT frame arrived.
		return true
	}
	if e.amFailure != nil && (target == ErrMismatch && e.amFailure.Reason == am.CodeMismatch ||
		target == ErrAbandoned && e.amFailure.Reason == am.CodeAbandoned) {
		// A granted operation that failed because a rank made another
		// call (it waited at the AM's barrier of it while the others ran
		// theirs), or because a rank cancelled its own call.
		return true
	}
	if target == ErrRankGone && e.amFailure != nil && e.amFailure.Reason == am.CodeRankGone {
		// A granted operation the AM failed because a rank's process
		// went (its diagnosis, which the failure path fetched).
		return true
	}
	var ae *am.APIError
	if !errors.As(e.Err, &ae) {
		return false
	}
	switch target {
	case ErrMismatch:
		// Also a rank that abandoned the call because its own differs.
		return ae.Code == am.CodeMismatch || ae.Code == am.CodeAbandoned && ae.Reason == am.CodeMismatch
	case ErrAbandoned:
		return ae.Code == am.CodeAbandoned
	case ErrRankGone:
		return ae.Code == am.CodeRankGone
	case ErrTimeout:
		return ae.Code == am.CodeBarrierTimeout
	case ErrSetup:
		switch ae.Code {
		case am.CodeBadRequest, am.CodeTopology, am.CodeUnsupported, am.CodeSetupFailed, am.CodeRollbackIncomplete:
			return true
		}
	}
	return false
}

// OpError is the error of one collective call.
type OpError struct {
	Collective string // "allreduce" or "reduce"
	Rank       int
	Op         string // operation ID (am.OpIdentity.Key), "" before the grant
	Stage      string // "begin", "data", "result", "done"
	// From, To is the element range involved ([From, To), To == 0: none),
	// within the invocation for a persistent collective.
	From, To uint32
	// Invocation numbers the failed invocation of a persistent collective
	// from 1, over every operation it renewed (0: an ordinary collective).
	Invocation int
	// Diagnosis is the AM's explanation (which node, which contributor).
	Diagnosis string
	// amFailure is the AM's error for a granted operation it failed (its
	// Reason classifies the error: Is).
	amFailure *am.APIError
	Err       error
	// own is the call's context's error when that context had ended by
	// the time the call failed of another cause (ownEnd): its caller
	// cancelled it too, and errors.Is(err, context.Canceled) says so.
	own error
}

func (e *OpError) Error() string {
	s := fmt.Sprintf("%s rank %d", e.Collective, e.Rank)
	if e.Op != "" {
		s += " op " + e.Op
	}
	if e.Invocation > 0 {
		s += fmt.Sprintf(" invocation %d", e.Invocation)
	}
	s += " (" + e.Stage + ")"
	if e.To > e.From {
		s += fmt.Sprintf(" elements [%d, %d)", e.From, e.To)
	}
	s += ": " + e.Err.Error()
	if e.Diagnosis != "" {
		s += "; AM: " + e.Diagnosis
	}
	if e.own != nil {
		s += "; this call's own context ended too (" + e.own.Error() + ")"
	}
	return s
}

// ownEnd marks err, a call's failure, with the call's context's error
// when that context has ended too: the caller asked it to stop, so
// errors.Is(err, context.Canceled) (or DeadlineExceeded) holds as the
// package promises for the caller's own cancel, whichever cause the
// call's end was put down to. When every rank cancelled at about the same
// moment, all but the first were told "rank 2 reported failure first:
// cancelled" and only ErrFailed matched.
func ownEnd(ctx context.Context, err error) error {
	cause := ctx.Err()
	var oe *OpError
	if err == nil || cause == nil || errors.Is(err, cause) || !errors.As(err, &oe) {
		return err
	}
	c := *oe // a copy: a persistent collective keeps err for its later calls, whose contexts are their own
	c.own = cause
	return &c
}

func (e *OpError) Unwrap() error { return e.Err }
