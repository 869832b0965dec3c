// This file owns the byte views: one named []byte type per wire structure,
// offsets under an ASCII diagram, getters and setters. Views never validate:
// callers check lengths once (the Decode methods do) and then use them.

package parser

import "encoding/binary"

var be = binary.BigEndian

// EthHeader is the 14-byte Ethernet II header.
//
//	 0                   6                  12        14
//	+-------------------+-------------------+---------+
//	|  Destination MAC  |    Source MAC     |EtherType|
//	+-------------------+-------------------+---------+
type EthHeader []byte

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

func (h EthHeader) Dst() [6]byte      { return [6]byte(h[ethDst : ethDst+6]) }
func (h EthHeader) Src() [6]byte      { return [6]byte(h[ethSrc : ethSrc+6]) }
func (h EthHeader) EtherType() uint16 { return be.Uint16(h[ethType:]) }

// SetDst and SetSrc store the MAC as one 6-byte array: copy into the
// slice called memmove for 6 bytes, 7% of a switch's engine per frame
// (BenchmarkAbsorbFP32ArrivalByRef).
func (h EthHeader) SetDst(m [6]byte)      { *(*[6]byte)(h[ethDst : ethDst+6]) = m }
func (h EthHeader) SetSrc(m [6]byte)      { *(*[6]byte)(h[ethSrc : ethSrc+6]) = m }
func (h EthHeader) SetEtherType(t uint16) { be.PutUint16(h[ethType:], t) }

// Eth carries the MACs an encoder writes; the EtherType is always 0x88B5.
type Eth struct {
	Dst, Src [6]byte
}

func (e Eth) put(b []byte) {
	h := EthHeader(b)
	h.SetDst(e.Dst)
	h.SetSrc(e.Src)
	h.SetEtherType(EtherType)
}

// ControlWord is the 2-byte control word after the Ethernet header.
//
//	+---------------+---------------+
//	| major | minor |     Class     |
//	+---------------+---------------+
type ControlWord []byte

func (w ControlWord) Version() uint8 { return w[0] }
func (w ControlWord) Major() uint8   { return w[0] >> 4 }
func (w ControlWord) Class() Class   { return Class(w[1]) }
func (w ControlWord) Set(c Class)    { w[0] = Version; w[1] = uint8(c) }

// OpIdentity is the 18 bytes that open every class header.
//
//	 0                               8       10      12      14              18
//	+-------------------------------+-------+-------+-------+---------------+
//	|            Job ID             | Group |GroupGen| Op ID |    Op Gen     |
//	+-------------------------------+-------+-------+-------+---------------+
type OpIdentity []byte

const (
	opJob      = 0
	opGroup    = 8
	opGroupGen = 10
	opOp       = 12
	opOpGen    = 14
)

func (o OpIdentity) Key() OpKey {
	return OpKey{Job: be.Uint64(o[opJob:]), Group: be.Uint16(o[opGroup:]), GroupGen: be.Uint16(o[opGroupGen:]),
		Op: be.Uint16(o[opOp:]), OpGen: be.Uint32(o[opOpGen:])}
}

func (o OpIdentity) SetKey(k OpKey) {
	be.PutUint64(o[opJob:], k.Job)
	be.PutUint16(o[opGroup:], k.Group)
	be.PutUint16(o[opGroupGen:], k.GroupGen)
	be.PutUint16(o[opOp:], k.Op)
	be.PutUint32(o[opOpGen:], k.OpGen)
}

// ControlHeader is the 32-byte CONTROL header (after the control word).
//
//	 0              18          22     24     26  27  28     30  31  32
//	+--------------+-----------+------+------+---+---+------+---+---+
//	| Op identity  |  Txn ID   | SrcEP| DstEP|Cmd|Sts|BodyLen|FIx|FCt|
//	+--------------+-----------+------+------+---+---+------+---+---+
type ControlHeader []byte

const (
	ctlTxn     = 18
	ctlSrcEP   = 22
	ctlDstEP   = 24
	ctlCmd     = 26
	ctlStatus  = 27
	ctlBodyLen = 28
	ctlFragIdx = 30
	ctlFragCnt = 31
)

func (h ControlHeader) Op() OpKey            { return OpIdentity(h).Key() }
func (h ControlHeader) Txn() uint32          { return be.Uint32(h[ctlTxn:]) }
func (h ControlHeader) SrcEP() uint16        { return be.Uint16(h[ctlSrcEP:]) }
func (h ControlHeader) DstEP() uint16        { return be.Uint16(h[ctlDstEP:]) }
func (h ControlHeader) Command() Command     { return Command(h[ctlCmd]) }
func (h ControlHeader) Status() Status       { return Status(h[ctlStatus]) }
func (h ControlHeader) BodyLen() uint16      { return be.Uint16(h[ctlBodyLen:]) }
func (h ControlHeader) FragIndex() uint8     { return h[ctlFragIdx] }
func (h ControlHeader) FragCount() uint8     { return h[ctlFragCnt] }
func (h ControlHeader) SetOp(k OpKey)        { OpIdentity(h).SetKey(k) }
func (h ControlHeader) SetTxn(v uint32)      { be.PutUint32(h[ctlTxn:], v) }
func (h ControlHeader) SetSrcEP(v uint16)    { be.PutUint16(h[ctlSrcEP:], v) }
func (h ControlHeader) SetDstEP(v uint16)    { be.PutUint16(h[ctlDstEP:], v) }
func (h ControlHeader) SetCommand(v Command) { h[ctlCmd] = uint8(v) }
func (h ControlHeader) SetStatus(v Status)   { h[ctlStatus] = uint8(v) }
func (h ControlHeader) SetBodyLen(v uint16)  { be.PutUint16(h[ctlBodyLen:], v) }
func (h ControlHeader) SetFragIndex(v uint8) { h[ctlFragIdx] = v }
func (h ControlHeader) SetFragCount(v uint8) { h[ctlFragCnt] = v }

// DataHeader is the 40-byte DATA / RESULT header (after the control word).
//
//	 0            18     20     22        26        30     32  33  34     36     38   40
//	+------------+------+------+---------+---------+------+---+---+------+------+----+
//	|Op identity | SrcEP| DstEP|Packet ID|First El.|ElCnt |GCt|Flg|BodyLen|Stream|rsvd|
//	+------------+------+------+---------+---------+------+---+---+------+------+----+
type DataHeader []byte

const (
	dataSrcEP    = 18
	dataDstEP    = 20
	dataPacketID = 22
	dataFirst    = 26
	dataCount    = 30
	dataGroups   = 32
	dataFlags    = 33
	dataBodyLen  = 34
	dataStream   = 36
	dataReserved = 38
)

func (h DataHeader) Op() OpKey            { return OpIdentity(h).Key() }
func (h DataHeader) SrcEP() uint16        { return be.Uint16(h[dataSrcEP:]) }
func (h DataHeader) DstEP() uint16        { return be.Uint16(h[dataDstEP:]) }
func (h DataHeader) PacketID() uint32     { return be.Uint32(h[dataPacketID:]) }
func (h DataHeader) First() uint32        { return be.Uint32(h[dataFirst:]) }
func (h DataHeader) Count() uint16        { return be.Uint16(h[dataCount:]) }
func (h DataHeader) Groups() uint8        { return h[dataGroups] }
func (h DataHeader) Flags() uint8         { return h[dataFlags] }
func (h DataHeader) BodyLen() uint16      { return be.Uint16(h[dataBodyLen:]) }
func (h DataHeader) Stream() uint16       { return be.Uint16(h[dataStream:]) }
func (h DataHeader) Reserved() uint16     { return be.Uint16(h[dataReserved:]) }
func (h DataHeader) SetOp(k OpKey)        { OpIdentity(h).SetKey(k) }
func (h DataHeader) SetSrcEP(v uint16)    { be.PutUint16(h[dataSrcEP:], v) }
func (h DataHeader) SetDstEP(v uint16)    { be.PutUint16(h[dataDstEP:], v) }
func (h DataHeader) SetPacketID(v uint32) { be.PutUint32(h[dataPacketID:], v) }
func (h DataHeader) SetFirst(v uint32)    { be.PutUint32(h[dataFirst:], v) }
func (h DataHeader) SetCount(v uint16)    { be.PutUint16(h[dataCount:], v) }
func (h DataHeader) SetGroups(v uint8)    { h[dataGroups] = v }
func (h DataHeader) SetFlags(v uint8)     { h[dataFlags] = v }
func (h DataHeader) SetBodyLen(v uint16)  { be.PutUint16(h[dataBodyLen:], v) }
func (h DataHeader) SetStream(v uint16)   { be.PutUint16(h[dataStream:], v) }
func (h DataHeader) SetReserved(v uint16) { be.PutUint16(h[dataReserved:], v) }

// GroupDescriptor is the 4-byte NumberGroup descriptor.
//
//	 0       2                        4
//	+-------+------+-----------------+
//	| Count | fmt  | Kulisch bytes   |   Format Word = fmt<<12 | kbytes
//	+-------+------+-----------------+
type GroupDescriptor []byte

func (g GroupDescriptor) Count() uint16        { return be.Uint16(g[0:]) }
func (g GroupDescriptor) FormatWord() uint16   { return be.Uint16(g[2:]) }
func (g GroupDescriptor) Format() Format       { return Format(g.FormatWord() >> 12) }
func (g GroupDescriptor) KulischBytes() uint16 { return g.FormatWord() & 0x0FFF }
func (g GroupDescriptor) SetCount(v uint16)    { be.PutUint16(g[0:], v) }
func (g GroupDescriptor) SetFormat(f Format, kbytes uint16) {
	be.PutUint16(g[2:], uint16(f)<<12|kbytes&0x0FFF)
}

// ProgressHeader is the 44-byte PROGRESS header (after the control word).
//
//	 0           18    20    22     24        28         32    34        38  39  40    42   44
//	+-----------+-----+-----+------+---------+----------+-----+---------+---+---+-----+----+
//	|Op identity|SrcEP|DstEP|Stream|Packet ID|Committed |IvCr | ByteCr  |Sts|Flg|Holes|rsvd|
//	+-----------+-----+-----+------+---------+----------+-----+---------+---+---+-----+----+
type ProgressHeader []byte

const (
	prgSrcEP     = 18
	prgDstEP     = 20
	prgStream    = 22
	prgPacketID  = 24
	prgCommitted = 28
	prgIvCredits = 32
	prgByteCred  = 34
	prgStatus    = 38
	prgFlags     = 39
	prgHoles     = 40
	prgFailCause = 42
	prgFailHops  = 43
)

func (h ProgressHeader) Op() OpKey                   { return OpIdentity(h).Key() }
func (h ProgressHeader) SrcEP() uint16               { return be.Uint16(h[prgSrcEP:]) }
func (h ProgressHeader) DstEP() uint16               { return be.Uint16(h[prgDstEP:]) }
func (h ProgressHeader) Stream() uint16              { return be.Uint16(h[prgStream:]) }
func (h ProgressHeader) PacketID() uint32            { return be.Uint32(h[prgPacketID:]) }
func (h ProgressHeader) Committed() uint32           { return be.Uint32(h[prgCommitted:]) }
func (h ProgressHeader) IntervalCredits() uint16     { return be.Uint16(h[prgIvCredits:]) }
func (h ProgressHeader) ByteCredits() uint32         { return be.Uint32(h[prgByteCred:]) }
func (h ProgressHeader) Status() ProgressStatus      { return ProgressStatus(h[prgStatus]) }
func (h ProgressHeader) Flags() uint8                { return h[prgFlags] }
func (h ProgressHeader) HoleCount() uint16           { return be.Uint16(h[prgHoles:]) }
func (h ProgressHeader) FailCause() FailCause        { return FailCause(h[prgFailCause]) }
func (h ProgressHeader) FailHops() uint8             { return h[prgFailHops] }
func (h ProgressHeader) SetOp(k OpKey)               { OpIdentity(h).SetKey(k) }
func (h ProgressHeader) SetSrcEP(v uint16)           { be.PutUint16(h[prgSrcEP:], v) }
func (h ProgressHeader) SetDstEP(v uint16)           { be.PutUint16(h[prgDstEP:], v) }
func (h ProgressHeader) SetStream(v uint16)          { be.PutUint16(h[prgStream:], v) }
func (h ProgressHeader) SetPacketID(v uint32)        { be.PutUint32(h[prgPacketID:], v) }
func (h ProgressHeader) SetCommitted(v uint32)       { be.PutUint32(h[prgCommitted:], v) }
func (h ProgressHeader) SetIntervalCredits(v uint16) { be.PutUint16(h[prgIvCredits:], v) }
func (h ProgressHeader) SetByteCredits(v uint32)     { be.PutUint32(h[prgByteCred:], v) }
func (h ProgressHeader) SetStatus(v ProgressStatus)  { h[prgStatus] = uint8(v) }
func (h ProgressHeader) SetFlags(v uint8)            { h[prgFlags] = v }
func (h ProgressHeader) SetHoleCount(v uint16)       { be.PutUint16(h[prgHoles:], v) }
func (h ProgressHeader) SetFailCause(v FailCause)    { h[prgFailCause] = uint8(v) }
func (h ProgressHeader) SetFailHops(v uint8)         { h[prgFailHops] = v }

// ExtHeader is the fixed 16 bytes of the endpoint-set extension.
//
//	 0       2   3   4       8               16             16+n        +16
//	+-------+---+---+-------+---------------+--------------+-----------+
//	|ExtLen |Enc|XFl|Tenant | Token/Sequence| set body (n) | [Auth tag]|
//	+-------+---+---+-------+---------------+--------------+-----------+
type ExtHeader []byte

const (
	extLen    = 0
	extEnc    = 2
	extXFlags = 3
	extTenant = 4
	extToken  = 8
)

func (h ExtHeader) Len() uint16         { return be.Uint16(h[extLen:]) }
func (h ExtHeader) Encoding() uint8     { return h[extEnc] }
func (h ExtHeader) XFlags() uint8       { return h[extXFlags] }
func (h ExtHeader) Tenant() uint32      { return be.Uint32(h[extTenant:]) }
func (h ExtHeader) Token() uint64       { return be.Uint64(h[extToken:]) }
func (h ExtHeader) SetLen(v uint16)     { be.PutUint16(h[extLen:], v) }
func (h ExtHeader) SetEncoding(v uint8) { h[extEnc] = v }
func (h ExtHeader) SetXFlags(v uint8)   { h[extXFlags] = v }
func (h ExtHeader) SetTenant(v uint32)  { be.PutUint32(h[extTenant:], v) }
func (h ExtHeader) SetToken(v uint64)   { be.PutUint64(h[extToken:], v) }

// ContextRecordView is the 40-byte STAGE context record.
//
//	 0   1   2   3   4   5   6     8         12   14  15  16   18   20     24     28     32     36   40
//	+---+---+---+---+---+---+-----+---------+----+---+---+----+----+------+------+------+------+----+
//	|Rol|Col|In |Acc|Par|Out|KulW |VectorLen|MTU |BCt|SCt|WIv |Rply|WBytes|WElems|MaxTrm|Tmo ms|Tnt |
//	+---+---+---+---+---+---+-----+---------+----+---+---+----+----+------+------+------+------+----+
type ContextRecordView []byte

const (
	ctxRole     = 0
	ctxColl     = 1
	ctxIn       = 2
	ctxAcc      = 3
	ctxPartial  = 4
	ctxOut      = 5
	ctxKulW     = 6
	ctxVecLen   = 8
	ctxMTU      = 12
	ctxBindings = 14
	ctxSets     = 15
	ctxWinIv    = 16
	ctxReplay   = 18
	ctxWinBytes = 20
	ctxWinElems = 24
	ctxMaxTerms = 28
	ctxTimeout  = 32
	ctxTenant   = 36
)

// BindingView is one 16-byte STAGE binding.
//
//	 0    1     2      4       6       8     10          16
//	+----+-----+------+-------+-------+-----+-----------+
//	|Kind|Flags|Stream|LocalEP|PeerEP | Port| Peer MAC  |
//	+----+-----+------+-------+-------+-----+-----------+
type BindingView []byte

const (
	bndKind   = 0
	bndFlags  = 1
	bndStream = 2
	bndLocal  = 4
	bndPeer   = 6
	bndPort   = 8
	bndMAC    = 10
)

// CapRecordView is one 32-byte capability record.
//
//	 0  1  2  3  4     6     8       12      16   18   20   22   24      28      32
//	+--+--+--+--+-----+-----+-------+-------+----+----+----+----+-------+-------+
//	|In|Ac|Pa|Ou|MinKW|MaxKW|MaxVec |MaxTrm |MTU |Bnd |WIv |Rply|WBytes |WElems |
//	+--+--+--+--+-----+-----+-------+-------+----+----+----+----+-------+-------+
type CapRecordView []byte
