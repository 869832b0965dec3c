// This file owns the first look at a frame: class, operation identity and
// the shard hash, all without decoding the class header.

package parser

import "strconv"

// OpKey is the operation identity of section 3: one execution of one
// operation. Generations distinguish a reused numeric ID from delayed frames.
type OpKey struct {
	Job      uint64
	Group    uint16
	GroupGen uint16
	Op       uint16
	OpGen    uint32
}

// String is the identity as the AM, the ranks, 'prismctl show ops' and
// the switches' logs name it: Job-Group-GroupGen-Op-OpGen.
func (k OpKey) String() string {
	return strconv.FormatUint(k.Job, 10) + "-" + strconv.Itoa(int(k.Group)) + "-" + strconv.Itoa(int(k.GroupGen)) + "-" +
		strconv.Itoa(int(k.Op)) + "-" + strconv.FormatUint(uint64(k.OpGen), 10)
}

// PeekOpKey reads the operation identity from prism, the bytes after the
// Ethernet header (control word first). It checks only that the bytes exist.
func PeekOpKey(prism []byte) (OpKey, bool) {
	if len(prism) < CWLen+OpIDLen {
		return OpKey{}, false
	}
	return OpIdentity(prism[CWLen:]).Key(), true
}

// ShardHash hashes Job, Group and Operation ID of a whole Ethernet frame so
// that every frame of one operation lands on one worker. Generations are
// deliberately left out: a new generation of the same operation must meet the
// state (and the retirement record) of the old one on the same worker. It
// returns 0 for a frame too short to carry the identity.
func ShardHash(frame []byte) uint32 {
	if len(frame) < HdrOff+OpIDLen {
		return 0
	}
	o := frame[HdrOff:]
	x := be.Uint64(o[opJob:])
	x ^= uint64(be.Uint16(o[opGroup:]))<<48 ^ uint64(be.Uint16(o[opOp:]))<<16
	// splitmix64 finalizer: a full-avalanche mix, so sequential job and
	// operation IDs spread evenly over any number of shards.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x) ^ uint32(x>>32)
}

// Classify's three errors have a fixed class, field and offset, so they are
// built once: Classify has no value of its own to keep an error in, and a
// flood of frames with a foreign control word must not allocate.
var (
	errCWTruncated = &FieldError{Field: "control_word", Offset: EthLen, Err: ErrTruncated}
	errCWVersion   = &FieldError{Field: "version", Offset: CWOff, Err: ErrVersion}
	errCWClass     = &FieldError{Field: "class", Offset: CWOff + 1, Err: ErrClass}
)

// Classify checks the control word of a whole Ethernet frame already known to
// carry EtherType 0x88B5 and returns its class. It does not validate the
// class header: the class decoder does that. Its errors are shared
// package-level *FieldError values: read them, never modify them.
func Classify(frame []byte) (Class, error) {
	if len(frame) < EthLen+CWLen {
		return 0, errCWTruncated
	}
	return classifyCW(frame[EthLen:])
}

func classifyCW(prism []byte) (Class, error) {
	if prism[0]>>4 != VersionMajor {
		return 0, errCWVersion
	}
	c := Class(prism[1])
	if c < ClassControl || c > ClassProgress {
		return 0, errCWClass
	}
	return c, nil
}
