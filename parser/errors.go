// This file owns the error vocabulary: sentinels for errors.Is, FieldError
// for errors.As, and the stable drop-reason labels used as metric labels.

package parser

import (
	"errors"
	"strings"
)

// Sentinels. Every error returned by a Decode is a *FieldError wrapping one of
// these.
var (
	ErrTruncated = errors.New("truncated")        // a declared structure runs past the frame
	ErrReserved  = errors.New("reserved nonzero") // a reserved field, bit or padding byte is nonzero
	ErrVersion   = errors.New("bad version")      // major version is not 1
	ErrRange     = errors.New("out of range")     // a field value outside its defined range
	ErrLength    = errors.New("bad length")       // a declared length disagrees with the structure
	ErrCount     = errors.New("bad count")        // counts disagree (groups, elements, records)
	ErrFormat    = errors.New("bad format")       // unknown / illegal format or encoding code
	ErrClass     = errors.New("unknown class")    // class code not 1..4, or not the class asked for
	ErrMTU       = errors.New("over mtu")         // frame longer than the operation's MTU
	ErrAuth      = errors.New("auth failed")      // authentication tag mismatch
)

// FieldError says which field of which class failed and why.
//
// The *FieldError a Decode returns is not a fresh value: it points into the
// decoder value (Data, Control, Progress, Ext; likewise DataBuilder and
// Authenticator), which owns one FieldError and refills it on every
// rejection. It is valid until the next call on the same value; a caller that
// keeps the error longer must copy it (fe := *err.(*FieldError), or
// fmt.Errorf / err.Error() for text). Errors from Classify are shared
// package-level values. Treat every FieldError as read-only.
type FieldError struct {
	Class Class
	// Field is a stable dotted name, e.g. "group.count", "set.list_count".
	Field string
	// Offset is the byte offset of the field from the start of the Ethernet
	// frame. For a STAGE body error, Offset-ControlBodyOff is the ACK Detail.
	Offset int
	Err    error
}

func (e *FieldError) Error() string {
	return "prism " + e.Class.String() + ": " + e.Field + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Reason is the drop reason for metrics (docs/protocol.md section 10). The
// set of values is closed: truncated, reserved_nonzero, bad_version,
// out_of_range, bad_length, bad_count, bad_format, unknown_class, over_mtu,
// auth_failed, invalid.
func (e *FieldError) Reason() string { return Reason(e.Err) }

// Reason maps any parser error to its drop-reason label.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTruncated):
		return "truncated"
	case errors.Is(err, ErrReserved):
		return "reserved_nonzero"
	case errors.Is(err, ErrVersion):
		return "bad_version"
	case errors.Is(err, ErrRange):
		return "out_of_range"
	case errors.Is(err, ErrLength):
		return "bad_length"
	case errors.Is(err, ErrCount):
		return "bad_count"
	case errors.Is(err, ErrFormat):
		return "bad_format"
	case errors.Is(err, ErrClass):
		return "unknown_class"
	case errors.Is(err, ErrMTU):
		return "over_mtu"
	case errors.Is(err, ErrAuth):
		return "auth_failed"
	}
	return "invalid"
}

// Reasons lists every label Reason can return, for pre-registering metrics.
var Reasons = [...]string{"truncated", "reserved_nonzero", "bad_version", "out_of_range", "bad_length",
	"bad_count", "bad_format", "unknown_class", "over_mtu", "auth_failed", "invalid"}

// set fills e and returns it. The per-frame code paths (every Decode, Classify,
// DataBuilder, Authenticator) report errors through a FieldError they own, so
// that rejecting a frame allocates nothing: a flood of malformed frames must
// not turn into garbage-collector work. Every field name passed here is a
// constant string for the same reason.
func (e *FieldError) set(c Class, field string, off int, err error) error {
	*e = FieldError{Class: c, Field: field, Offset: off, Err: err}
	return e
}

// fieldErr builds a fresh error for the encoders and ValidateSet, which run
// on the send path of control traffic, in tools and in tests: there an
// allocation per error is harmless and an error that outlives the next call
// is simpler for the caller.
func fieldErr(c Class, field string, off int, err error) error {
	return &FieldError{Class: c, Field: field, Offset: off, Err: err}
}

// clone returns a fresh copy of e, for helpers that return an error past the
// life of the local builder or decoder holding it.
func (e *FieldError) clone() error { return fieldErr(e.Class, e.Field, e.Offset, e.Err) }

// StageDetail reports whether err is a content error inside a STAGE body (to
// be answered by ACK INVALID with this Detail) rather than malformed framing
// (dropped without reply).
func StageDetail(err error) (detail uint16, ok bool) {
	// AsType, not As: As makes its target escape, which would cost an
	// allocation per rejected STAGE.
	fe, ok := errors.AsType[*FieldError](err)
	if !ok || fe.Class != ClassControl || !strings.HasPrefix(fe.Field, "stage.") {
		return 0, false
	}
	if errors.Is(fe.Err, ErrTruncated) || errors.Is(fe.Err, ErrLength) {
		return 0, false
	}
	return uint16(fe.Offset - ControlBodyOff), true
}
