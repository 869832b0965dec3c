// This file owns PROGRESS (section 7): header, holes, validation, encoding.

package parser

// Hole is a missing half-open element range [Start, End).
type Hole struct{ Start, End uint32 }

// Progress is a decoded PROGRESS frame. Holes are copied (32 x 8 bytes) so
// that the value outlives the frame buffer; Holes[:NHoles] are valid.
type Progress struct {
	Op              OpKey
	SrcEP           uint16
	DstEP           uint16
	Stream          uint16
	PacketID        uint32
	Committed       uint32
	IntervalCredits uint16
	ByteCredits     uint32
	Status          ProgressStatus
	Flags           uint8
	NHoles          int
	Holes           [MaxHoles]Hole
	// FailCause and FailHops travel with status FAILED only (zero
	// otherwise): the cause where the failure began, and how many
	// FAILED hops it has crossed since (0: the sender's own context
	// failed on it). FailNone means the sender did not say.
	FailCause FailCause
	FailHops  uint8

	err FieldError // what Decode returns on rejection (see Decode)
}

// Decode validates a whole PROGRESS Ethernet frame. lim.VectorLen (if
// nonzero) bounds Committed Element and the holes; lim.MTU the frame. On
// error g is zeroed and the error is a *FieldError held inside g, so
// rejecting a frame allocates nothing: it stays valid until the next Decode
// on g (copy it to keep it).
func (g *Progress) Decode(frame []byte, lim Limits) error {
	if len(frame) < EthLen {
		*g = Progress{}
		return g.err.set(ClassProgress, "ethernet", 0, ErrTruncated)
	}
	return g.decode(frame[EthLen:], &lim)
}

// DecodePRISM is Decode for the bytes after the Ethernet header.
func (g *Progress) DecodePRISM(prism []byte, lim Limits) error { return g.decode(prism, &lim) }

func (g *Progress) decode(p []byte, lim *Limits) error {
	*g = Progress{}
	err := g.decode1(p, lim)
	if err == nil {
		return nil
	}
	if err != error(&g.err) { // not ours (there is none today): pass it on
		*g = Progress{}
		return err
	}
	fe := g.err // the reset below must not wipe the error it returns
	*g = Progress{err: fe}
	return &g.err
}

func (g *Progress) decode1(p []byte, lim *Limits) error {
	const C = ClassProgress
	fe := &g.err
	if lim.MTU > 0 && len(p) > lim.MTU {
		return fe.set(C, "frame", EthLen, ErrMTU)
	}
	if len(p) < CWLen+ProgressHdrLen {
		return fe.set(C, "header", HdrOff, ErrTruncated)
	}
	if p[0]>>4 != VersionMajor {
		return fe.set(C, "version", CWOff, ErrVersion)
	}
	if Class(p[1]) != C {
		return fe.set(Class(p[1]), "class", CWOff+1, ErrClass)
	}
	h := ProgressHeader(p[CWLen : CWLen+ProgressHdrLen])
	switch {
	case h.Status() != ProgressStatusFailed && h.FailCause() != 0:
		return fe.set(C, "fail_cause", HdrOff+prgFailCause, ErrReserved)
	case h.Status() != ProgressStatusFailed && h.FailHops() != 0:
		return fe.set(C, "fail_hops", HdrOff+prgFailHops, ErrReserved)
	case h.FailCause() > FailLinkDown:
		return fe.set(C, "fail_cause", HdrOff+prgFailCause, ErrRange)
	case h.FailCause() == FailNone && h.FailHops() != 0:
		return fe.set(C, "fail_hops", HdrOff+prgFailHops, ErrReserved)
	case h.Flags()&progressFlagsReserved != 0:
		return fe.set(C, "flags", HdrOff+prgFlags, ErrReserved)
	case h.Status() > ProgressStatusFailed:
		return fe.set(C, "status", HdrOff+prgStatus, ErrRange)
	case h.HoleCount() > MaxHoles:
		return fe.set(C, "hole_count", HdrOff+prgHoles, ErrCount)
	}
	nh := int(h.HoleCount())
	if len(p) < CWLen+ProgressHdrLen+nh*HoleLen {
		return fe.set(C, "hole_count", HdrOff+prgHoles, ErrTruncated)
	}
	committed := h.Committed()
	if lim.VectorLen != 0 && committed > lim.VectorLen {
		return fe.set(C, "committed", HdrOff+prgCommitted, ErrRange)
	}
	prev := committed
	for i := 0; i < nh; i++ {
		o := CWLen + ProgressHdrLen + i*HoleLen
		s, e := be.Uint32(p[o:]), be.Uint32(p[o+4:])
		// Ascending, non-overlapping, non-empty, above the watermark.
		if s < prev || e <= s || (lim.VectorLen != 0 && e > lim.VectorLen) {
			return fe.set(C, "hole", EthLen+o, ErrRange)
		}
		g.Holes[i] = Hole{s, e}
		prev = e
	}
	g.Op = h.Op()
	g.SrcEP, g.DstEP, g.Stream = h.SrcEP(), h.DstEP(), h.Stream()
	g.PacketID, g.Committed = h.PacketID(), committed
	g.IntervalCredits, g.ByteCredits = h.IntervalCredits(), h.ByteCredits()
	g.Status, g.Flags, g.NHoles = h.Status(), h.Flags(), nh
	g.FailCause, g.FailHops = h.FailCause(), h.FailHops()
	return nil
}

// Len is the number of bytes g encodes to after the Ethernet header.
func (g *Progress) Len() int { return CWLen + ProgressHdrLen + g.NHoles*HoleLen }

// Encode writes g as a whole Ethernet frame.
func (g *Progress) Encode(buf []byte, eth Eth) (int, error) {
	if len(buf) < EthLen+g.Len() {
		return 0, fieldErr(ClassProgress, "buffer", 0, ErrTruncated)
	}
	eth.put(buf)
	n, err := g.EncodePRISM(buf[EthLen:])
	return EthLen + n, err
}

// EncodePRISM writes g after the Ethernet header.
func (g *Progress) EncodePRISM(p []byte) (int, error) {
	if g.NHoles < 0 || g.NHoles > MaxHoles {
		return 0, fieldErr(ClassProgress, "hole_count", HdrOff+prgHoles, ErrCount)
	}
	n := g.Len()
	if len(p) < n {
		return 0, fieldErr(ClassProgress, "buffer", 0, ErrTruncated)
	}
	ControlWord(p).Set(ClassProgress)
	h := ProgressHeader(p[CWLen : CWLen+ProgressHdrLen])
	h.SetOp(g.Op)
	h.SetSrcEP(g.SrcEP)
	h.SetDstEP(g.DstEP)
	h.SetStream(g.Stream)
	h.SetPacketID(g.PacketID)
	h.SetCommitted(g.Committed)
	h.SetIntervalCredits(g.IntervalCredits)
	h.SetByteCredits(g.ByteCredits)
	h.SetStatus(g.Status)
	h.SetFlags(g.Flags)
	h.SetHoleCount(uint16(g.NHoles))
	if g.Status == ProgressStatusFailed && g.FailCause != FailNone {
		h.SetFailCause(g.FailCause)
		h.SetFailHops(g.FailHops)
	} else {
		h.SetFailCause(FailNone)
		h.SetFailHops(0)
	}
	for i := 0; i < g.NHoles; i++ {
		o := CWLen + ProgressHdrLen + i*HoleLen
		be.PutUint32(p[o:], g.Holes[i].Start)
		be.PutUint32(p[o+4:], g.Holes[i].End)
	}
	return n, nil
}
