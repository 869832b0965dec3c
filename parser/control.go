// This file owns CONTROL (section 5): header, the STAGE / ACK / CAPS bodies,
// their validation and their encoders. What needs node state (known ports,
// duplicate streams, generations, transactions) is package control's job.

package parser

// Control is a decoded CONTROL frame. Body aliases the frame; use Stage, Ack,
// CapsPage or CapsQueryPage to read it (valid only after a successful Decode
// for the matching Cmd).
type Control struct {
	Op        OpKey
	Txn       uint32
	SrcEP     uint16
	DstEP     uint16
	Cmd       Command
	Status    Status
	BodyLen   uint16
	FragIndex uint8
	FragCount uint8
	Body      []byte

	err FieldError // what Decode returns on rejection (see Decode)
}

// ContextRecord is the STAGE context record.
type ContextRecord struct {
	Role            Role
	Collective      Collective
	InputFormat     Format
	AccPolicy       AccPolicy
	PartialPolicy   Format
	OutputFormat    Format
	KulischWidth    uint16 // bits
	VectorLen       uint32
	MTU             uint16
	BindingCount    uint8
	SetCount        uint8
	WindowIntervals uint16
	ReplayDepth     uint16
	WindowBytes     uint32
	WindowElements  uint32
	MaxTerms        uint32
	TimeoutMs       uint32
	Tenant          uint32 // BITMAP jobs: the tenant every extension must carry; 0 otherwise
}

// Binding is one STAGE binding.
type Binding struct {
	Kind    BindingKind
	Flags   uint8
	Stream  uint16
	LocalEP uint16
	PeerEP  uint16
	Port    uint16
	PeerMAC [6]byte
}

// SetRecord is one STAGE set record. Set aliases the frame.
type SetRecord struct {
	BindingIndex uint8 // OwnSet (0xFF) = the node's A-BM; BoundarySet (0xFE) = its boundary set
	Encoding     uint8
	Set          []byte
}

// Len is the encoded size of the record.
func (r *SetRecord) Len() int { return SetRecordHdrLen + SetPrefixLen + len(r.Set) }

// Ack is the ACK body.
type Ack struct {
	AckedCmd      Command
	State         OpState
	Detail        uint16
	Completed     uint32
	MissingStream uint16
	// FailCause says why a FAILED context failed; Missing Stream is then
	// the stream it failed on. FailNone for any other state.
	FailCause   FailCause
	MissingFrom uint32
}

// CapRecord is one capability record.
type CapRecord struct {
	InputFormat        Format
	AccPolicy          AccPolicy
	PartialPolicy      Format
	OutputFormat       Format
	MinKulischWidth    uint16
	MaxKulischWidth    uint16
	MaxVectorLen       uint32
	MaxTerms           uint32
	MaxMTU             uint16
	MaxBindings        uint16
	MaxWindowIntervals uint16
	MaxReplayDepth     uint16
	MaxWindowBytes     uint32
	MaxWindowElements  uint32
}

// CapsPage is one CAPS_RESPONSE page; Records[:NRecords] are valid.
type CapsPage struct {
	PortCount uint16
	MaxMTU    uint16
	MaxOps    uint16
	NRecords  int
	Records   [MaxCapRecords]CapRecord
}

// Decode validates a whole CONTROL Ethernet frame: header, fragment rules and
// the complete body of its command. lim.MTU (if nonzero) bounds the frame;
// lim.ListCap (if nonzero) bounds LIST sets in STAGE set records, otherwise
// the context record's Max Terms does [choice]. On error c is zeroed and the
// error is a *FieldError held inside c, so rejecting a frame allocates
// nothing: it stays valid until the next Decode on c (copy it to keep it).
func (c *Control) Decode(frame []byte, lim Limits) error {
	if len(frame) < EthLen {
		*c = Control{}
		return c.err.set(ClassControl, "ethernet", 0, ErrTruncated)
	}
	return c.decode(frame[EthLen:], &lim)
}

// DecodePRISM is Decode for the bytes after the Ethernet header.
func (c *Control) DecodePRISM(prism []byte, lim Limits) error { return c.decode(prism, &lim) }

func (c *Control) decode(p []byte, lim *Limits) error {
	*c = Control{}
	err := c.decode1(p, lim)
	if err == nil {
		return nil
	}
	if err != error(&c.err) { // not ours (there is none today): pass it on
		*c = Control{}
		return err
	}
	fe := c.err // the reset below must not wipe the error it returns
	*c = Control{err: fe}
	return &c.err
}

func (c *Control) decode1(p []byte, lim *Limits) error {
	const C = ClassControl
	e := &c.err
	if lim.MTU > 0 && len(p) > lim.MTU {
		return e.set(C, "frame", EthLen, ErrMTU)
	}
	if len(p) < CWLen+ControlHdrLen {
		return e.set(C, "header", HdrOff, ErrTruncated)
	}
	if p[0]>>4 != VersionMajor {
		return e.set(C, "version", CWOff, ErrVersion)
	}
	if Class(p[1]) != C {
		return e.set(Class(p[1]), "class", CWOff+1, ErrClass)
	}
	h := ControlHeader(p[CWLen : CWLen+ControlHdrLen])
	cmd := h.Command()
	if cmd < CmdStage || cmd > CmdCapsResponse {
		return e.set(C, "command", HdrOff+ctlCmd, ErrRange)
	}
	st := h.Status()
	if (cmd != CmdAck && st != StatusOK) || st > StatusInvalidBinding {
		return e.set(C, "status", HdrOff+ctlStatus, ErrRange)
	}
	fi, fc := h.FragIndex(), h.FragCount()
	if fc == 0 || (fc > 1 && cmd != CmdCapsResponse) {
		return e.set(C, "fragment_count", HdrOff+ctlFragCnt, ErrRange)
	}
	if fi >= fc {
		return e.set(C, "fragment_index", HdrOff+ctlFragIdx, ErrRange)
	}
	bl := int(h.BodyLen())
	if CWLen+ControlHdrLen+bl > len(p) {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrTruncated)
	}
	body := p[CWLen+ControlHdrLen : CWLen+ControlHdrLen+bl : CWLen+ControlHdrLen+bl]
	var err error
	switch cmd {
	case CmdCommit, CmdComplete, CmdRelease, CmdAbort:
		if bl != 0 {
			err = e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
		}
	case CmdAck:
		err = validateAck(e, body)
	case CmdCapsQuery:
		if bl != CapsQueryLen {
			err = e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
		} else if body[1]|body[2]|body[3] != 0 {
			err = e.set(C, "caps_query.reserved", ControlBodyOff+1, ErrReserved)
		}
	case CmdCapsResponse:
		err = validateCaps(e, body)
	case CmdStage:
		err = validateStage(e, body, lim.ListCap)
	}
	if err != nil {
		return err
	}
	c.Op, c.Txn = h.Op(), h.Txn()
	c.SrcEP, c.DstEP = h.SrcEP(), h.DstEP()
	c.Cmd, c.Status, c.BodyLen = cmd, st, uint16(bl)
	c.FragIndex, c.FragCount = fi, fc
	c.Body = body
	return nil
}

func validateAck(e *FieldError, b []byte) error {
	const C = ClassControl
	if len(b) != AckBodyLen {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	if cmd := Command(b[0]); cmd < CmdStage || cmd > CmdCapsResponse || cmd == CmdAck {
		return e.set(C, "ack.command", ControlBodyOff, ErrRange)
	}
	if OpState(b[1]) > StateAborted {
		return e.set(C, "ack.state", ControlBodyOff+1, ErrRange)
	}
	if c := FailCause(b[10]); c > FailLinkDown || (c != FailNone && OpState(b[1]) != StateFailed) {
		return e.set(C, "ack.fail_cause", ControlBodyOff+10, ErrRange)
	}
	if b[11] != 0 {
		return e.set(C, "ack.reserved", ControlBodyOff+11, ErrReserved)
	}
	return nil
}

func validateCaps(e *FieldError, b []byte) error {
	const C = ClassControl
	if len(b) < CapsPageHdrLen {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	n := int(b[0])
	if n > MaxCapRecords {
		return e.set(C, "caps.record_count", ControlBodyOff, ErrCount)
	}
	if b[1] != 0 || be.Uint32(b[8:]) != 0 {
		return e.set(C, "caps.reserved", ControlBodyOff+1, ErrReserved)
	}
	if len(b) != CapsPageHdrLen+n*CapRecordLen {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	for i := 0; i < n; i++ {
		o := CapsPageHdrLen + i*CapRecordLen
		r := b[o : o+CapRecordLen]
		base := ControlBodyOff + o
		switch {
		case r[0] < uint8(FormatINT8) || r[0] > uint8(FormatFP32):
			return e.set(C, "caps.record.input_format", base, ErrFormat)
		case AccPolicy(r[1]) != AccFP32Arrival && AccPolicy(r[1]) != AccKulischFixed:
			return e.set(C, "caps.record.accumulator", base+1, ErrRange)
		case r[2] < uint8(FormatINT8) || r[2] > uint8(FormatAuto):
			return e.set(C, "caps.record.partial_policy", base+2, ErrFormat)
		case r[3] < uint8(FormatINT8) || r[3] > uint8(FormatAuto):
			return e.set(C, "caps.record.output_format", base+3, ErrFormat)
		}
	}
	return nil
}

func usesKulisch(acc AccPolicy, partial, out Format) bool {
	return acc == AccKulischFixed || partial == FormatKulisch || out == FormatKulisch
}

// MaxPacketElements is the largest Element Count one frame can carry at mtu:
// one INT8 group, 4*floor((MTU-46)/4) (1452 at 1500, 528 at 576).
func MaxPacketElements(mtu int) int { return (mtu - CWLen - DataHdrLen - GroupDescLen) &^ 3 }

func validateStage(e *FieldError, b []byte, listCap int) error {
	const C = ClassControl
	o := ControlBodyOff
	if len(b) < ContextRecordLen {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	r := decodeContext(b)
	// Field names are spelled out in full: "stage.context."+field would
	// allocate on every rejection.
	bad := func(field string, off int, err error) error { return e.set(C, field, o+off, err) }
	switch {
	case r.Role < RoleSingle || r.Role > RoleRoot:
		return bad("stage.context.role", ctxRole, ErrRange)
	case r.Collective < CollReduce || r.Collective > CollBitmap:
		return bad("stage.context.collective", ctxColl, ErrRange)
	case r.InputFormat < FormatINT8 || r.InputFormat > FormatFP32:
		return bad("stage.context.input_format", ctxIn, ErrFormat)
	case r.AccPolicy != AccFP32Arrival && r.AccPolicy != AccKulischFixed:
		return bad("stage.context.accumulator", ctxAcc, ErrRange)
	case r.PartialPolicy < FormatINT8 || r.PartialPolicy > FormatAuto:
		return bad("stage.context.partial_policy", ctxPartial, ErrFormat)
	case r.OutputFormat < FormatINT8 || r.OutputFormat > FormatAuto:
		return bad("stage.context.output_format", ctxOut, ErrFormat)
	}
	kw := int(r.KulischWidth)
	if usesKulisch(r.AccPolicy, r.PartialPolicy, r.OutputFormat) {
		if kw%8 != 0 || kw < MinKulischBytes*8 || kw > MaxKulischBytes*8 {
			return bad("stage.context.kulisch_width", ctxKulW, ErrRange)
		}
	} else if kw != 0 {
		return bad("stage.context.kulisch_width", ctxKulW, ErrRange)
	}
	mtu := int(r.MTU)
	switch {
	case r.VectorLen == 0:
		return bad("stage.context.vector_length", ctxVecLen, ErrRange)
	case !IsDefinedMTU(mtu):
		return bad("stage.context.mtu", ctxMTU, ErrRange)
	case r.BindingCount < 1 || r.BindingCount > MaxBindings:
		return bad("stage.context.binding_count", ctxBindings, ErrCount)
	case r.SetCount > MaxSetRecords || (r.SetCount > 0 && r.Collective != CollBitmap):
		return bad("stage.context.set_count", ctxSets, ErrCount)
	case r.WindowIntervals == 0:
		return bad("stage.context.window_intervals", ctxWinIv, ErrRange)
	case r.ReplayDepth == 0:
		return bad("stage.context.replay_depth", ctxReplay, ErrRange)
	case r.WindowBytes < uint32(mtu):
		return bad("stage.context.window_bytes", ctxWinBytes, ErrRange)
	case r.WindowElements < uint32(MaxPacketElements(mtu)):
		return bad("stage.context.window_elements", ctxWinElems, ErrRange)
	case r.MaxTerms == 0:
		return bad("stage.context.max_terms", ctxMaxTerms, ErrRange)
	case r.TimeoutMs < 1 || r.TimeoutMs > 600000:
		return bad("stage.context.timeout", ctxTimeout, ErrRange)
	case r.Tenant != 0 && r.Collective != CollBitmap:
		return bad("stage.context.tenant", ctxTenant, ErrRange)
	}
	// An exact sum of N FP32-domain terms needs W >= 278 + ceil(log2 N) bits.
	if r.AccPolicy == AccKulischFixed && kw < 278+ceilLog2(r.MaxTerms) {
		return bad("stage.context.kulisch_width", ctxKulW, ErrRange)
	}
	nb := int(r.BindingCount)
	off := ContextRecordLen
	if len(b) < off+nb*BindingLen {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	for i := 0; i < nb; i++ {
		v := b[off : off+BindingLen]
		if k := BindingKind(v[bndKind]); k < KindContributor || k > KindResultOut {
			return e.set(C, "stage.binding.kind", o+off, ErrRange)
		}
		if v[bndFlags]&^BindingFlagRank != 0 {
			return e.set(C, "stage.binding.flags", o+off+bndFlags, ErrReserved)
		}
		off += BindingLen
	}
	if listCap == 0 && r.Collective == CollBitmap {
		listCap = int(min(r.MaxTerms, 0xFFFF))
	}
	// At most one record per Binding Index [choice]: a second A-BM, boundary
	// set or mask for the same binding would silently replace the first.
	// 256 bits on the stack, so a rejection still allocates nothing.
	var seen [4]uint64
	for i := 0; i < int(r.SetCount); i++ {
		if len(b) < off+SetRecordHdrLen+SetPrefixLen {
			return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
		}
		idx := b[off]
		if idx != OwnSet && idx != BoundarySet && int(idx) >= nb {
			return e.set(C, "stage.set.binding_index", o+off, ErrRange)
		}
		if seen[idx/64]&(1<<(idx%64)) != 0 {
			return e.set(C, "stage.set.binding_index", o+off, ErrRange)
		}
		seen[idx/64] |= 1 << (idx % 64)
		if b[off+1] != 0 {
			return e.set(C, "stage.set.reserved", o+off+1, ErrReserved)
		}
		n := int(be.Uint16(b[off+2:]))
		if n%4 != 0 || n < SetPrefixLen+4 {
			return e.set(C, "stage.set.length", o+off+2, ErrLength)
		}
		if len(b) < off+SetRecordHdrLen+n {
			return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
		}
		pre := off + SetRecordHdrLen
		enc := b[pre]
		if enc < EncFlat || enc > EncList {
			return e.set(C, "stage.set.encoding", o+pre, ErrFormat)
		}
		if b[pre+1]|b[pre+2]|b[pre+3] != 0 {
			return e.set(C, "stage.set.reserved", o+pre+1, ErrReserved)
		}
		if err := validateSet(e, &stageSetNames, enc, b[pre+SetPrefixLen:off+SetRecordHdrLen+n], C, o+pre+SetPrefixLen, listCap); err != nil {
			return err
		}
		off += SetRecordHdrLen + n
	}
	if off != len(b) {
		return e.set(C, "body_length", HdrOff+ctlBodyLen, ErrLength)
	}
	return nil
}

func ceilLog2(n uint32) int {
	l := 0
	for (uint64(1) << uint(l)) < uint64(n) {
		l++
	}
	return l
}

func decodeContext(b []byte) ContextRecord {
	return ContextRecord{
		Role: Role(b[ctxRole]), Collective: Collective(b[ctxColl]), InputFormat: Format(b[ctxIn]),
		AccPolicy: AccPolicy(b[ctxAcc]), PartialPolicy: Format(b[ctxPartial]), OutputFormat: Format(b[ctxOut]),
		KulischWidth: be.Uint16(b[ctxKulW:]), VectorLen: be.Uint32(b[ctxVecLen:]), MTU: be.Uint16(b[ctxMTU:]),
		BindingCount: b[ctxBindings], SetCount: b[ctxSets], WindowIntervals: be.Uint16(b[ctxWinIv:]),
		ReplayDepth: be.Uint16(b[ctxReplay:]), WindowBytes: be.Uint32(b[ctxWinBytes:]),
		WindowElements: be.Uint32(b[ctxWinElems:]), MaxTerms: be.Uint32(b[ctxMaxTerms:]), TimeoutMs: be.Uint32(b[ctxTimeout:]), Tenant: be.Uint32(b[ctxTenant:]),
	}
}

func (r *ContextRecord) put(b []byte) {
	b[ctxRole], b[ctxColl], b[ctxIn] = uint8(r.Role), uint8(r.Collective), uint8(r.InputFormat)
	b[ctxAcc], b[ctxPartial], b[ctxOut] = uint8(r.AccPolicy), uint8(r.PartialPolicy), uint8(r.OutputFormat)
	be.PutUint16(b[ctxKulW:], r.KulischWidth)
	be.PutUint32(b[ctxVecLen:], r.VectorLen)
	be.PutUint16(b[ctxMTU:], r.MTU)
	b[ctxBindings], b[ctxSets] = r.BindingCount, r.SetCount
	be.PutUint16(b[ctxWinIv:], r.WindowIntervals)
	be.PutUint16(b[ctxReplay:], r.ReplayDepth)
	be.PutUint32(b[ctxWinBytes:], r.WindowBytes)
	be.PutUint32(b[ctxWinElems:], r.WindowElements)
	be.PutUint32(b[ctxMaxTerms:], r.MaxTerms)
	be.PutUint32(b[ctxTimeout:], r.TimeoutMs)
	be.PutUint32(b[ctxTenant:], r.Tenant)
}

func (v BindingView) Binding() Binding {
	var m [6]byte
	copy(m[:], v[bndMAC:bndMAC+6])
	return Binding{Kind: BindingKind(v[bndKind]), Flags: v[bndFlags], Stream: be.Uint16(v[bndStream:]),
		LocalEP: be.Uint16(v[bndLocal:]), PeerEP: be.Uint16(v[bndPeer:]), Port: be.Uint16(v[bndPort:]), PeerMAC: m}
}

func (v BindingView) Set(x *Binding) {
	v[bndKind], v[bndFlags] = uint8(x.Kind), x.Flags
	be.PutUint16(v[bndStream:], x.Stream)
	be.PutUint16(v[bndLocal:], x.LocalEP)
	be.PutUint16(v[bndPeer:], x.PeerEP)
	be.PutUint16(v[bndPort:], x.Port)
	copy(v[bndMAC:bndMAC+6], x.PeerMAC[:])
}

// Stage is a validated STAGE body: the context record plus views of the
// bindings and set records (no copies).
type Stage struct {
	Context ContextRecord
	body    []byte
}

// Stage returns the STAGE body of a decoded CmdStage frame.
func (c *Control) Stage() Stage {
	if c.Cmd != CmdStage || len(c.Body) < ContextRecordLen {
		return Stage{}
	}
	return Stage{Context: decodeContext(c.Body), body: c.Body}
}

// NBindings is the number of bindings.
func (s *Stage) NBindings() int { return int(s.Context.BindingCount) }

// Binding returns binding i (0 <= i < NBindings).
func (s *Stage) Binding(i int) Binding {
	o := ContextRecordLen + i*BindingLen
	return BindingView(s.body[o : o+BindingLen]).Binding()
}

// SetRecordIter is the state of Stage.NextSet; the zero value starts at the first.
type SetRecordIter struct{ off, n int }

// NextSet returns the next set record.
func (s *Stage) NextSet(it *SetRecordIter) (SetRecord, bool) {
	if it.n >= int(s.Context.SetCount) {
		return SetRecord{}, false
	}
	if it.off == 0 {
		it.off = ContextRecordLen + s.NBindings()*BindingLen
	}
	b := s.body[it.off:]
	n := int(be.Uint16(b[2:]))
	r := SetRecord{BindingIndex: b[0], Encoding: b[SetRecordHdrLen], Set: b[SetRecordHdrLen+SetPrefixLen : SetRecordHdrLen+n : SetRecordHdrLen+n]}
	it.off += SetRecordHdrLen + n
	it.n++
	return r, true
}

// StageSpec is what a sender puts in a STAGE body. BindingCount and SetCount
// of Context are taken from the slices.
type StageSpec struct {
	Context  ContextRecord
	Bindings []Binding
	Sets     []SetRecord
}

// Len is the encoded body length.
func (s *StageSpec) Len() int {
	n := ContextRecordLen + len(s.Bindings)*BindingLen
	for i := range s.Sets {
		n += s.Sets[i].Len()
	}
	return n
}

// Encode writes the STAGE body into b and returns its length.
func (s *StageSpec) Encode(b []byte) (int, error) {
	n := s.Len()
	if len(b) < n || len(s.Bindings) > 0xFF || len(s.Sets) > 0xFF {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	ctx := s.Context
	ctx.BindingCount, ctx.SetCount = uint8(len(s.Bindings)), uint8(len(s.Sets))
	ctx.put(b)
	off := ContextRecordLen
	for i := range s.Bindings {
		BindingView(b[off : off+BindingLen]).Set(&s.Bindings[i])
		off += BindingLen
	}
	for i := range s.Sets {
		r := &s.Sets[i]
		b[off], b[off+1] = r.BindingIndex, 0
		be.PutUint16(b[off+2:], uint16(SetPrefixLen+len(r.Set)))
		b[off+4], b[off+5], b[off+6], b[off+7] = r.Encoding, 0, 0, 0
		copy(b[off+8:], r.Set)
		off += r.Len()
	}
	return n, nil
}

// Ack returns the ACK body of a decoded CmdAck frame.
func (c *Control) Ack() Ack {
	if c.Cmd != CmdAck || len(c.Body) < AckBodyLen {
		return Ack{}
	}
	b := c.Body
	return Ack{AckedCmd: Command(b[0]), State: OpState(b[1]), Detail: be.Uint16(b[2:]), Completed: be.Uint32(b[4:]),
		MissingStream: be.Uint16(b[8:]), FailCause: FailCause(b[10]), MissingFrom: be.Uint32(b[12:])}
}

// Encode writes the 16-byte ACK body into b.
func (a *Ack) Encode(b []byte) (int, error) {
	if len(b) < AckBodyLen {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	b[0], b[1] = uint8(a.AckedCmd), uint8(a.State)
	be.PutUint16(b[2:], a.Detail)
	be.PutUint32(b[4:], a.Completed)
	be.PutUint16(b[8:], a.MissingStream)
	b[10], b[11] = uint8(a.FailCause), 0
	be.PutUint32(b[12:], a.MissingFrom)
	return AckBodyLen, nil
}

// CapsQueryPage returns the requested page of a decoded CmdCapsQuery frame.
func (c *Control) CapsQueryPage() uint8 {
	if c.Cmd != CmdCapsQuery || len(c.Body) < CapsQueryLen {
		return 0
	}
	return c.Body[0]
}

// EncodeCapsQuery writes a CAPS_QUERY body into b.
func EncodeCapsQuery(b []byte, page uint8) (int, error) {
	if len(b) < CapsQueryLen {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	b[0], b[1], b[2], b[3] = page, 0, 0, 0
	return CapsQueryLen, nil
}

// CapsPage returns the page of a decoded CmdCapsResponse frame.
func (c *Control) CapsPage() (p CapsPage) {
	b := c.Body
	if c.Cmd != CmdCapsResponse || len(b) < CapsPageHdrLen {
		return
	}
	p.NRecords = int(b[0])
	p.PortCount, p.MaxMTU, p.MaxOps = be.Uint16(b[2:]), be.Uint16(b[4:]), be.Uint16(b[6:])
	for i := 0; i < p.NRecords && i < MaxCapRecords && CapsPageHdrLen+(i+1)*CapRecordLen <= len(b); i++ {
		p.Records[i] = CapRecordView(b[CapsPageHdrLen+i*CapRecordLen:]).Record()
	}
	return
}

// Record decodes the view.
func (v CapRecordView) Record() CapRecord {
	return CapRecord{InputFormat: Format(v[0]), AccPolicy: AccPolicy(v[1]), PartialPolicy: Format(v[2]), OutputFormat: Format(v[3]),
		MinKulischWidth: be.Uint16(v[4:]), MaxKulischWidth: be.Uint16(v[6:]), MaxVectorLen: be.Uint32(v[8:]), MaxTerms: be.Uint32(v[12:]),
		MaxMTU: be.Uint16(v[16:]), MaxBindings: be.Uint16(v[18:]), MaxWindowIntervals: be.Uint16(v[20:]), MaxReplayDepth: be.Uint16(v[22:]),
		MaxWindowBytes: be.Uint32(v[24:]), MaxWindowElements: be.Uint32(v[28:])}
}

// Set encodes r into the view.
func (v CapRecordView) Set(r *CapRecord) {
	v[0], v[1], v[2], v[3] = uint8(r.InputFormat), uint8(r.AccPolicy), uint8(r.PartialPolicy), uint8(r.OutputFormat)
	be.PutUint16(v[4:], r.MinKulischWidth)
	be.PutUint16(v[6:], r.MaxKulischWidth)
	be.PutUint32(v[8:], r.MaxVectorLen)
	be.PutUint32(v[12:], r.MaxTerms)
	be.PutUint16(v[16:], r.MaxMTU)
	be.PutUint16(v[18:], r.MaxBindings)
	be.PutUint16(v[20:], r.MaxWindowIntervals)
	be.PutUint16(v[22:], r.MaxReplayDepth)
	be.PutUint32(v[24:], r.MaxWindowBytes)
	be.PutUint32(v[28:], r.MaxWindowElements)
}

// Len is the encoded page length.
func (p *CapsPage) Len() int { return CapsPageHdrLen + p.NRecords*CapRecordLen }

// Encode writes the page into b.
func (p *CapsPage) Encode(b []byte) (int, error) {
	n := p.Len()
	if p.NRecords < 0 || p.NRecords > MaxCapRecords || len(b) < n {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	b[0], b[1] = uint8(p.NRecords), 0
	be.PutUint16(b[2:], p.PortCount)
	be.PutUint16(b[4:], p.MaxMTU)
	be.PutUint16(b[6:], p.MaxOps)
	be.PutUint32(b[8:], 0)
	for i := 0; i < p.NRecords; i++ {
		CapRecordView(b[CapsPageHdrLen+i*CapRecordLen:]).Set(&p.Records[i])
	}
	return n, nil
}

// Len is the number of bytes c encodes to after the Ethernet header.
func (c *Control) Len() int { return CWLen + ControlHdrLen + len(c.Body) }

// Encode writes c as a whole Ethernet frame; Body Length is len(c.Body).
func (c *Control) Encode(buf []byte, eth Eth) (int, error) {
	if len(buf) < EthLen+c.Len() {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	eth.put(buf)
	n, err := c.EncodePRISM(buf[EthLen:])
	return EthLen + n, err
}

// EncodePRISM writes c after the Ethernet header. c.Body may already sit at
// its final place in p (copy handles the overlap).
func (c *Control) EncodePRISM(p []byte) (int, error) {
	n := c.Len()
	if len(p) < n || len(c.Body) > 0xFFFF {
		return 0, fieldErr(ClassControl, "buffer", 0, ErrTruncated)
	}
	ControlWord(p).Set(ClassControl)
	h := ControlHeader(p[CWLen : CWLen+ControlHdrLen])
	h.SetOp(c.Op)
	h.SetTxn(c.Txn)
	h.SetSrcEP(c.SrcEP)
	h.SetDstEP(c.DstEP)
	h.SetCommand(c.Cmd)
	h.SetStatus(c.Status)
	h.SetBodyLen(uint16(len(c.Body)))
	h.SetFragIndex(c.FragIndex)
	h.SetFragCount(c.FragCount)
	copy(p[CWLen+ControlHdrLen:], c.Body)
	return n, nil
}
