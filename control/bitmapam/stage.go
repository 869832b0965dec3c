// This file owns the bytes of a bitmap STAGE: set encoding for set records
// and the StageSpec of every planned switch.

package bitmapam

import (
	"fmt"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/parser"
)

// EncodeSet encodes s with the job's negotiated parameters p. A FLAT body
// holds one Set ID window only, and a LIST at most listCap members (the
// job's Max Terms), so a set that does not fit falls back to HIER, which is
// lossless for every set; the encoding used is returned with the body.
func EncodeSet(s *bitmapfwd.Set, p bitmapfwd.Params, listCap int) (bitmapfwd.Encoding, []byte, error) {
	if s.IsEmpty() {
		return 0, nil, fmt.Errorf("%w: empty sets are not encodable (docs/protocol.md 8.3)", ErrSpec)
	}
	switch p.Encoding {
	case bitmapfwd.Flat:
		wc := p.WordCount
		if wc == 0 {
			wc = (s.Cap() + 63) / 64
		}
		// The window of the set's first member; a set spanning windows
		// needs one body per Set ID (FlatBodies) or another encoding.
		if id := bitmapfwd.NextFlatSet(s, wc, 0); id >= 0 {
			if b, err := bitmapfwd.AppendFlat(nil, s, id, wc); err == nil {
				return bitmapfwd.Flat, b, nil
			}
		}
	case bitmapfwd.List:
		lc := p.ListCap
		if lc == 0 || (listCap > 0 && listCap < lc) {
			lc = listCap
		}
		if b, err := bitmapfwd.AppendList(nil, s, lc); err == nil {
			return bitmapfwd.List, b, nil
		}
	}
	bb := p.BlockBits
	if bb == 0 {
		bb = bitmapfwd.DefaultBlockBits
	}
	b, err := bitmapfwd.AppendHier(nil, s, bb)
	if err != nil {
		return 0, nil, err
	}
	return bitmapfwd.Hier, b, nil
}

// EncodeRecord encodes a STAGE set record: the smallest of the job's
// encoding, HIER and (within the LIST cap) LIST. Set records are read once,
// at STAGE, so bytes matter more than the per-packet processing cost that
// makes the job's packet encoding the default (bitmap-framework section 7):
// a sparse BIFT mask in a dense job's FLAT bit space would otherwise grow
// a STAGE past the link MTU.
func EncodeRecord(s *bitmapfwd.Set, p bitmapfwd.Params, listCap int) (bitmapfwd.Encoding, []byte, error) {
	enc, body, err := EncodeSet(s, p, listCap)
	if err != nil {
		return 0, nil, err
	}
	bb := p.BlockBits
	if bb == 0 {
		bb = bitmapfwd.DefaultBlockBits
	}
	if h, err := bitmapfwd.AppendHier(nil, s, bb); err == nil && len(h) < len(body) {
		enc, body = bitmapfwd.Hier, h
	}
	if listCap > 0 && s.Count() <= listCap {
		if l, err := bitmapfwd.AppendList(nil, s, listCap); err == nil && len(l) < len(body) {
			enc, body = bitmapfwd.List, l
		}
	}
	return enc, body, nil
}

// FlatBodies splits s into one FLAT body per Set ID window that holds a
// member (BIER: one copy per set), for a job whose FLAT bit space spans
// several Set IDs.
func FlatBodies(s *bitmapfwd.Set, wordCount int) ([][]byte, error) {
	var r [][]byte
	for id := bitmapfwd.NextFlatSet(s, wordCount, 0); id >= 0; id = bitmapfwd.NextFlatSet(s, wordCount, id+1) {
		b, err := bitmapfwd.AppendFlatWindow(nil, s, id, wordCount)
		if err != nil {
			return nil, err
		}
		r = append(r, b)
	}
	return r, nil
}

// Stage returns the STAGE body fields of switch s under plan p.
func (p *Plan) Stage(s *SwitchPlan) (parser.StageSpec, error) {
	spec := parser.StageSpec{Context: s.Context, Bindings: s.Bindings}
	listCap := int(s.Context.MaxTerms)
	add := func(idx uint8, set *bitmapfwd.Set) error {
		enc, body, err := EncodeRecord(set, p.Choice.Params, listCap)
		if err != nil {
			return fmt.Errorf("switch %s: set record %d: %w", s.Name, idx, err)
		}
		spec.Sets = append(spec.Sets, parser.SetRecord{BindingIndex: idx, Encoding: uint8(enc), Set: body})
		return nil
	}
	if s.ABM != nil && !s.ABM.IsEmpty() {
		if err := add(parser.OwnSet, s.ABM); err != nil {
			return spec, err
		}
	}
	for i := range s.Bindings {
		if m, ok := s.Masks[i]; ok && !m.IsEmpty() {
			if err := add(uint8(i), m); err != nil {
				return spec, err
			}
		}
	}
	spec.Context.BindingCount = uint8(len(spec.Bindings))
	spec.Context.SetCount = uint8(len(spec.Sets))
	return spec, nil
}

// StageBody encodes switch s's STAGE body and checks it fits one CONTROL
// frame at the link MTU (docs/protocol.md section 4: a STAGE is never
// fragmented).
func (p *Plan) StageBody(s *SwitchPlan, linkMTU int) ([]byte, error) {
	spec, err := p.Stage(s)
	if err != nil {
		return nil, err
	}
	b := make([]byte, spec.Len())
	n, err := spec.Encode(b)
	if err != nil {
		return nil, fmt.Errorf("switch %s: STAGE: %w", s.Name, err)
	}
	if linkMTU > 0 && parser.CWLen+parser.ControlHdrLen+n > linkMTU {
		return nil, fmt.Errorf("%w: switch %s: STAGE is %d bytes after the Ethernet header, above the link MTU %d (use a jumbo link MTU or a sparser encoding)",
			ErrSpec, s.Name, parser.CWLen+parser.ControlHdrLen+n, linkMTU)
	}
	return b[:n], nil
}
