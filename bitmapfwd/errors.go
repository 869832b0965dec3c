// This file owns the package's sentinel and typed errors.

package bitmapfwd

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every error the package returns wraps exactly one of them,
// so callers count drops by reason with errors.Is.
var (
	// ErrShort: the body is shorter than its fixed header or than the
	// lengths its header declares.
	ErrShort = errors.New("body truncated")
	// ErrLength: the body is longer than its header declares (bodies are
	// exactly delimited by the extension length; there is no padding).
	ErrLength = errors.New("body length does not match its header")
	// ErrFieldValue: a header field holds a value the encoding forbids
	// (Word Count 0, Block Bits not a multiple of 64, Block Count 0, ...).
	ErrFieldValue = errors.New("invalid field value")
	// ErrReserved: a reserved field or padding bit is non-zero.
	ErrReserved = errors.New("reserved field or padding bit set")
	// ErrOutOfDomain: an endpoint lies outside the job's bit space (the
	// capacity of the destination set).
	ErrOutOfDomain = errors.New("endpoint outside the job's domain")
	// ErrNotAscending: a LIST is not strictly ascending (duplicates included).
	ErrNotAscending = errors.New("endpoint list not strictly ascending")
	// ErrListCap: a LIST holds more endpoints than the job's cap on K.
	ErrListCap = errors.New("endpoint list longer than the job's cap")
	// ErrEmptyBlock: a HIER upper bit selects a block whose lower bitmap is
	// empty. Rejected so that every set has exactly one HIER encoding per
	// block size (de-duplication and authentication compare bytes).
	ErrEmptyBlock = errors.New("selected block has an empty lower bitmap")
	// ErrParamMismatch: the body's shape (Word Count, Block Bits) differs from
	// the one negotiated for the job.
	ErrParamMismatch = errors.New("encoding parameters differ from the job's")
	// ErrUnknownEncoding: encoding code not 1..3.
	ErrUnknownEncoding = errors.New("unknown endpoint-set encoding")
	// ErrParam: an encoder or constructor parameter is out of range.
	ErrParam = errors.New("invalid parameter")
	// ErrTooLarge: the set cannot be represented with the given parameters
	// (too many members for a LIST, a member outside a FLAT window, ...).
	ErrTooLarge = errors.New("set not representable with these parameters")
	// ErrOverlap: a BIFT mask shares bits with another port's mask.
	ErrOverlap = errors.New("BIFT masks overlap")
	// ErrTopology: the topology description is inconsistent.
	ErrTopology = errors.New("invalid topology")
	// ErrQuota: a SoftTable job has no quota, exceeds it, or quotas exceed
	// the table.
	ErrQuota = errors.New("soft-state quota")
	// ErrConflict: a (job, token) C-BM is installed again with a different
	// set.
	ErrConflict = errors.New("soft state already installed with a different set")
	// ErrCapacity: a set's capacity differs from the table's.
	ErrCapacity = errors.New("set capacity mismatch")
)

// DecodeError reports which field of an endpoint-set body is wrong.
type DecodeError struct {
	Encoding Encoding
	Field    string // protocol.md field name, e.g. "Word Count", "Endpoint ID"
	Offset   int    // byte offset of the field within the body
	Value    uint64 // the offending value (a length, a count, an ID)
	Err      error  // one of the sentinels above
}

func (e *DecodeError) Error() string {
	return "bitmapfwd: " + e.Encoding.String() + " " + e.Field + " at offset " +
		strconv.Itoa(e.Offset) + " (value " + strconv.FormatUint(e.Value, 10) + "): " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(enc Encoding, field string, off int, v uint64, err error) error {
	return &DecodeError{Encoding: enc, Field: field, Offset: off, Value: v, Err: err}
}

// EncodeError reports an encoder, constructor or table parameter that is out
// of range.
type EncodeError struct {
	Encoding Encoding // 0 when not about an encoding
	Param    string
	Value    int
	Err      error
}

func (e *EncodeError) Error() string {
	p := "bitmapfwd: "
	if e.Encoding != 0 {
		p += e.Encoding.String() + " "
	}
	return p + e.Param + " " + strconv.Itoa(e.Value) + ": " + e.Err.Error()
}

func (e *EncodeError) Unwrap() error { return e.Err }

func paramErr(enc Encoding, param string, v int, err error) error {
	return &EncodeError{Encoding: enc, Param: param, Value: v, Err: err}
}
