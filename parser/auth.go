// This file owns the optional per-job authentication tag of the endpoint-set
// extension (XFlag AUTH): HMAC-SHA256 truncated to 16 bytes over the frame
// from the control word to the end of the body, with the tag bytes zeroed.

package parser

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"hash"
)

// Authenticator signs and verifies frames of one job. It keeps one HMAC state
// and one FieldError so that Sign and Verify allocate nothing, not even for a
// forged frame; it is not safe for concurrent use (one per worker). The error
// Sign or Verify returns is valid until the next call on the Authenticator.
type Authenticator struct {
	h   hash.Hash
	sum [sha256.Size]byte
	err FieldError // what Sign and Verify return; valid until the next call
}

var zeroTag [TagLen]byte

// NewAuthenticator returns an Authenticator for the job key.
func NewAuthenticator(key []byte) *Authenticator {
	return &Authenticator{h: hmac.New(sha256.New, key)}
}

// tag computes the tag of the prism bytes p (control word first) whose tag
// field sits at p[tagOff:tagOff+TagLen] and whose body ends at end.
func (a *Authenticator) tag(p []byte, tagOff, end int) []byte {
	a.h.Reset()
	a.h.Write(p[:tagOff])
	a.h.Write(zeroTag[:])
	a.h.Write(p[tagOff+TagLen : end])
	return a.h.Sum(a.sum[:0])[:TagLen]
}

// locate finds the tag and the declared end of a DATA/RESULT frame built or
// decoded with an AUTH extension.
func authSpan(frame []byte) (tagOff, end int, ok bool) {
	if len(frame) < DataBodyOff+ExtHdrLen {
		return 0, 0, false
	}
	h := DataHeader(frame[HdrOff:DataBodyOff])
	x := ExtHeader(frame[DataBodyOff:])
	if h.Flags()&FlagExt == 0 || x.XFlags()&XFlagAuth == 0 {
		return 0, 0, false
	}
	n := int(x.Len())
	end = DataBodyOff + n + int(h.BodyLen())
	if n < ExtHdrLen+TagLen || end > len(frame) {
		return 0, 0, false
	}
	return DataBodyOff + n - TagLen - EthLen, end - EthLen, true
}

// Sign writes the tag into a whole DATA/RESULT frame whose extension has
// XFlagAuth (for example DataBuilder.Finish's result).
func (a *Authenticator) Sign(frame []byte) error {
	tagOff, end, ok := authSpan(frame)
	if !ok {
		return a.err.set(0, "ext.tag", DataBodyOff, ErrLength)
	}
	p := frame[EthLen:]
	copy(p[tagOff:tagOff+TagLen], a.tag(p, tagOff, end))
	return nil
}

// Verify checks the tag of a whole DATA/RESULT frame already validated by
// Data.Decode; it returns ErrAuth (wrapped) on mismatch or when the frame has
// no tag.
func (a *Authenticator) Verify(frame []byte) error {
	tagOff, end, ok := authSpan(frame)
	if !ok {
		return a.err.set(0, "ext.tag", DataBodyOff, ErrAuth)
	}
	p := frame[EthLen:]
	if subtle.ConstantTimeCompare(p[tagOff:tagOff+TagLen], a.tag(p, tagOff, end)) != 1 {
		return a.err.set(Class(p[1]), "ext.tag", EthLen+tagOff, ErrAuth)
	}
	return nil
}
