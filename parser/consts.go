// This file owns the assigned numbers of docs/protocol.md: lengths, class,
// format, command, status, role, kind, state and flag codes. Zero is invalid
// for every enum so that a forgotten field never decodes as something real.

package parser

import "strconv"

const (
	// EtherType is IEEE 802 "local experimental EtherType 1": PRISM runs inside
	// one administrative fabric and needs no public assignment.
	EtherType = 0x88B5
	// EthLen is an untagged Ethernet II header: 802.1Q-tagged frames are not
	// PRISM frames (docs/protocol.md section 1).
	EthLen = 14
	// CWLen is the control word: Version, Class.
	CWLen = 2
	// ControlHdrLen, DataHdrLen and ProgressHdrLen are the class headers that
	// follow the control word (sections 5, 6, 7).
	ControlHdrLen  = 32
	DataHdrLen     = 40
	ProgressHdrLen = 44
	// ExtHdrLen is the fixed part of the endpoint-set extension (section 8).
	ExtHdrLen = 16
	// TagLen is the truncated HMAC-SHA256 tag: 128 bits keep forgery at 2^-128
	// per attempt while costing a quarter of the full digest in every frame.
	TagLen = 16
	// HoleLen is one PROGRESS hole: Start, End.
	HoleLen = 8
	// MaxHoles bounds PROGRESS to 32 holes (44 + 256 bytes), so a PROGRESS
	// always fits the smallest defined MTU (576).
	MaxHoles = 32
	// OpIDLen is the operation identity that opens every class header.
	OpIDLen = 18

	// VersionMajor is the only major version this implementation speaks; a
	// different major is incompatible (drop bad_version).
	VersionMajor = 1
	// Version is the byte this implementation sends: major 1, minor 0.
	Version = 0x10

	// Byte offsets, from the start of the Ethernet frame, of the parts every
	// decoder needs.
	CWOff           = EthLen
	HdrOff          = EthLen + CWLen
	ControlBodyOff  = HdrOff + ControlHdrLen  // 48
	DataBodyOff     = HdrOff + DataHdrLen     // 56: extension (if EXT) or body
	ProgressHoleOff = HdrOff + ProgressHdrLen // 60

	// GroupDescLen is the NumberGroup descriptor: Count, Format Word.
	GroupDescLen = 4
	// MaxGroups is the 8-bit Group Count.
	MaxGroups = 255
	// MinKulischBytes and MaxKulischBytes bound the Kulisch integer W/8:
	// W in 64..4096 bits.
	MinKulischBytes = 8
	MaxKulischBytes = 512
	// ScaleWordLen is the KULISCH_SCALED Scale Word: Shift (2), reserved
	// (2), so that the values start 4-byte aligned like every group's.
	ScaleWordLen = 4
	// MinScaledBytes and MaxScaledBytes bound B, the KULISCH_SCALED
	// integer byte count: one byte up to the widest Kulisch integer.
	MinScaledBytes = 1
	MaxScaledBytes = MaxKulischBytes

	// Context record, binding, ACK body, CAPS page and record sizes (section 5).
	ContextRecordLen = 40
	BindingLen       = 16
	SetRecordHdrLen  = 4
	SetPrefixLen     = 4 // Encoding (1), reserved (3) before a set body in a set record
	AckBodyLen       = 16
	CapsQueryLen     = 4
	CapsPageHdrLen   = 12
	CapRecordLen     = 32
	MaxBindings      = 64
	MaxSetRecords    = 64
	MaxCapRecords    = 16
	// OwnSet is the set record Binding Index naming the node's own A-BM.
	OwnSet = 0xFF
	// BoundarySet is the set record Binding Index naming the node's
	// identity in the enclosing aggregation domain (section 8.10): a node
	// with one is a domain boundary.
	BoundarySet = 0xFE
	// NoDetail is the ACK Detail / Missing Stream value meaning "none".
	NoDetail = 0xFFFF
)

// Defined MTUs (section 4). The MTU counts bytes after the Ethernet header.
const (
	MTUSmall   = 576
	MTUDefault = 1500
	MTUJumbo   = 9000
)

// Class is the packet class in the control word.
type Class uint8

const (
	ClassControl  Class = 1
	ClassData     Class = 2
	ClassResult   Class = 3
	ClassProgress Class = 4
)

var classNames = [...]string{"", "CONTROL", "DATA", "RESULT", "PROGRESS"}

func (c Class) String() string {
	if c >= 1 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Format is a NumberGroup format code (descriptor bits 15..12) or a policy code.
type Format uint8

const (
	FormatINT8    Format = 1
	FormatFP16    Format = 2
	FormatBF16    Format = 3
	FormatFP32    Format = 4
	FormatKulisch Format = 5
	// FormatAuto is a policy only (partial / output); it never appears in a
	// descriptor.
	FormatAuto Format = 6
	// FormatKulischScaled (KULISCH_SCALED) is the compact exact encoding of
	// Kulisch partials: a Scale Word (Shift) and Count values of a state
	// byte plus a B-byte integer, value = integer x 2^Shift units. It is a
	// descriptor format only (never a policy) and legal only in DATA
	// without EXT: a switch's partial to its parent.
	FormatKulischScaled Format = 7
	// FormatKulischF64 (KULISCH_F64) carries exact Kulisch values as IEEE
	// binary64, 8 bytes little-endian each: a finite value must be a
	// multiple of 2^-149 inside the operation's W-bit range. Like
	// KULISCH_SCALED, a descriptor format only, legal only in DATA without
	// EXT.
	FormatKulischF64 Format = 8
)

var formatNames = [...]string{"", "INT8", "FP16", "BF16", "FP32", "KULISCH", "AUTO", "KULISCH_SCALED", "KULISCH_F64"}

func (f Format) String() string {
	if f >= 1 && int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// Width is the byte width of one value of format f; kulischBytes is the
// Kulisch integer byte count (W/8 for KULISCH, B for KULISCH_SCALED; the
// state byte is added here). It returns 0 for AUTO and unknown codes.
func (f Format) Width(kulischBytes int) int {
	switch f {
	case FormatINT8:
		return 1
	case FormatFP16, FormatBF16:
		return 2
	case FormatFP32:
		return 4
	case FormatKulischF64:
		return 8
	case FormatKulisch, FormatKulischScaled:
		return 1 + kulischBytes
	}
	return 0
}

// ScaleLen is the bytes that precede a group's values after its descriptor:
// the Scale Word for KULISCH_SCALED, nothing for every other format.
func (f Format) ScaleLen() int {
	if f == FormatKulischScaled {
		return ScaleWordLen
	}
	return 0
}

// GroupLen is the body bytes of a NumberGroup of count values of format f:
// descriptor, Scale Word (KULISCH_SCALED), values and zero padding to 4.
// kbytes is W/8 for KULISCH and B for KULISCH_SCALED.
func GroupLen(f Format, kbytes, count int) int {
	return GroupDescLen + pad4(f.ScaleLen()+count*f.Width(kbytes))
}

// Kulisch value state byte.
const (
	KulischFinite  uint8 = 0
	KulischPosZero uint8 = 1
	KulischNegZero uint8 = 2
	KulischPosInf  uint8 = 3
	KulischNegInf  uint8 = 4
	KulischNaN     uint8 = 5
)

// Command is the CONTROL command.
type Command uint8

const (
	CmdStage        Command = 1
	CmdCommit       Command = 2
	CmdComplete     Command = 3
	CmdRelease      Command = 4
	CmdAck          Command = 5
	CmdAbort        Command = 6
	CmdCapsQuery    Command = 7
	CmdCapsResponse Command = 8
)

var cmdNames = [...]string{"", "STAGE", "COMMIT", "COMPLETE", "RELEASE", "ACK", "ABORT", "CAPS_QUERY", "CAPS_RESPONSE"}

func (c Command) String() string {
	if c >= 1 && int(c) < len(cmdNames) {
		return cmdNames[c]
	}
	return "Command(" + strconv.Itoa(int(c)) + ")"
}

// Status is the CONTROL status (nonzero only in ACK).
type Status uint8

const (
	StatusOK              Status = 0
	StatusInvalid         Status = 1
	StatusUnsupported     Status = 2
	StatusNoResources     Status = 3
	StatusBadState        Status = 4
	StatusStaleGeneration Status = 5
	StatusConflict        Status = 6
	StatusInvalidBinding  Status = 7
)

var statusNames = [...]string{"OK", "INVALID", "UNSUPPORTED", "NO_RESOURCES", "BAD_STATE", "STALE_GENERATION", "CONFLICT", "INVALID_BINDING"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Role is the node role in a STAGE context record.
type Role uint8

const (
	RoleSingle   Role = 1
	RoleLeaf     Role = 2
	RoleInternal Role = 3
	RoleRoot     Role = 4
)

var roleNames = [...]string{"", "SINGLE", "LEAF", "INTERNAL", "ROOT"}

func (r Role) String() string {
	if r >= 1 && int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Collective is the collective kind in a STAGE context record.
type Collective uint8

const (
	CollReduce    Collective = 1
	CollAllReduce Collective = 2
	CollBitmap    Collective = 3
)

var collNames = [...]string{"", "REDUCE", "ALLREDUCE", "BITMAP"}

func (c Collective) String() string {
	if c >= 1 && int(c) < len(collNames) {
		return collNames[c]
	}
	return "Collective(" + strconv.Itoa(int(c)) + ")"
}

// AccPolicy is the accumulator policy ID. 0x02 is deliberately unassigned
// (the source text rejects it).
type AccPolicy uint8

const (
	AccFP32Arrival  AccPolicy = 0x01
	AccKulischFixed AccPolicy = 0x03
)

func (a AccPolicy) String() string {
	switch a {
	case AccFP32Arrival:
		return "FP32_ARRIVAL"
	case AccKulischFixed:
		return "KULISCH_FIXED"
	}
	return "AccPolicy(" + strconv.Itoa(int(a)) + ")"
}

// BindingKind is the Kind of a STAGE binding.
type BindingKind uint8

const (
	KindContributor BindingKind = 1
	KindParent      BindingKind = 2
	KindResultIn    BindingKind = 3
	KindResultOut   BindingKind = 4
)

var kindNames = [...]string{"", "CONTRIBUTOR", "PARENT", "RESULT_IN", "RESULT_OUT"}

func (k BindingKind) String() string {
	if k >= 1 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "BindingKind(" + strconv.Itoa(int(k)) + ")"
}

// BindingFlagRank marks a binding whose peer is a rank (else a switch).
const BindingFlagRank uint8 = 0x01

// OpState is the Operation State of an ACK body. Zero (NONE) is a real value
// here: "no such context".
type OpState uint8

const (
	StateNone     OpState = 0
	StateStaged   OpState = 1
	StateActive   OpState = 2
	StateComplete OpState = 3
	StateFailed   OpState = 4
	StateReleased OpState = 5
	StateAborted  OpState = 6
)

var stateNames = [...]string{"NONE", "STAGED", "ACTIVE", "COMPLETE", "FAILED", "RELEASED", "ABORTED"}

func (s OpState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "OpState(" + strconv.Itoa(int(s)) + ")"
}

// FailCause is the ACK's Failure Cause: why a FAILED context failed, about
// its Missing Stream. COMPLETE's ACK of a FAILED PRISM context carries
// one; no other state does (other ACKs of a FAILED context may carry
// FailNone).
type FailCause uint8

const (
	FailNone FailCause = 0
	// FailTimeout: the peer of Missing Stream was silent past the context
	// timeout (a contributor or the result path in sent nothing, or the
	// receiver of an output stream acknowledged nothing). The origin of a
	// failure: what the AM names.
	FailTimeout FailCause = 1
	// FailPeer: the peer of Missing Stream reported FAILED or
	// UNKNOWN_OPERATION (PROGRESS): a failure that came from elsewhere.
	FailPeer FailCause = 2
	// FailInternal: the node could not encode a completed range (Missing
	// Stream 0xFFFF).
	FailInternal FailCause = 3
	// FailLinkDown: as FailTimeout, but the node's port toward the peer of
	// Missing Stream was down (set down, or without carrier) when the
	// timeout fired: the failure began on that link, not necessarily at
	// the peer, which may be alive.
	FailLinkDown FailCause = 4
)

var failCauseNames = [...]string{"NONE", "TIMEOUT", "PEER_FAILED", "INTERNAL", "LINK_DOWN"}

func (c FailCause) String() string {
	if int(c) < len(failCauseNames) {
		return failCauseNames[c]
	}
	return "FailCause(" + strconv.Itoa(int(c)) + ")"
}

// DATA / RESULT flags.
const (
	FlagLast       uint8 = 0x01
	FlagInexact    uint8 = 0x02 // ACCUMULATION_INEXACT
	FlagExt        uint8 = 0x04
	FlagRetransmit uint8 = 0x08
	// FlagPush marks the frame after which its sender sends no more DATA
	// until something comes back (a persistent collective's invocation
	// ends here): a receiver must not hold back a partial frame ending at
	// this position waiting for more input, and must not time the sender
	// out while it rests there (docs/protocol.md section 6.1).
	FlagPush      uint8 = 0x10
	flagsReserved uint8 = 0xE0
)

// Endpoint-set encodings (extension Encoding, set record prefix).
const (
	EncFlat uint8 = 1
	EncHier uint8 = 2
	EncList uint8 = 3
)

// Extension XFlags.
const (
	XFlagInstall   uint8 = 0x01
	XFlagPartial   uint8 = 0x02
	XFlagAuth      uint8 = 0x04
	xflagsReserved uint8 = 0xF8
)

// ProgressStatus is the PROGRESS Status.
type ProgressStatus uint8

const (
	ProgressStatusOK               ProgressStatus = 0
	ProgressStatusDuplicate        ProgressStatus = 1
	ProgressStatusInvalid          ProgressStatus = 2
	ProgressStatusNoCredit         ProgressStatus = 3
	ProgressStatusUnknownOperation ProgressStatus = 4
	ProgressStatusFailed           ProgressStatus = 5
)

var pstatusNames = [...]string{"OK", "DUPLICATE", "INVALID", "NO_CREDIT", "UNKNOWN_OPERATION", "FAILED"}

func (s ProgressStatus) String() string {
	if int(s) < len(pstatusNames) {
		return pstatusNames[s]
	}
	return "ProgressStatus(" + strconv.Itoa(int(s)) + ")"
}

// PROGRESS flags.
const (
	ProgressFlagResult    uint8 = 0x01
	ProgressFlagComplete  uint8 = 0x02
	progressFlagsReserved uint8 = 0xFC
)

// IsDefinedMTU reports whether mtu is one of the MTUs of section 4.
func IsDefinedMTU(mtu int) bool { return mtu == MTUSmall || mtu == MTUDefault || mtu == MTUJumbo }

func pad4(n int) int { return (n + 3) &^ 3 }
