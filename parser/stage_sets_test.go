package parser

import (
	"errors"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// bitmapStage is a BITMAP-job STAGE: 2 bindings, the node's own A-BM (HIER)
// and the BIFT mask of binding 1 (LIST).
func bitmapStage(t testing.TB) []byte {
	st := exampleStageSpec()
	st.Context.Collective = CollBitmap
	st.Context.MaxTerms = 4
	st.Sets = []SetRecord{
		{BindingIndex: OwnSet, Encoding: EncHier, Set: AppendHierSet(nil, 64, 2, 0, 1, 64)},
		{BindingIndex: 1, Encoding: EncList, Set: AppendListSet(nil, 64)},
	}
	body := make([]byte, st.Len())
	if _, err := st.Encode(body); err != nil {
		t.Fatal(err)
	}
	c := ctlHdr(CmdStage, 0x21)
	c.Body = body
	return mustControl(&c)
}

func TestStageSetRecords(t *testing.T) {
	f := bitmapStage(t)
	var c Control
	if err := c.Decode(f, Limits{}); err != nil {
		t.Fatal(err)
	}
	s := c.Stage()
	var it SetRecordIter
	var got [][]uint32
	for r, ok := s.NextSet(&it); ok; r, ok = s.NextSet(&it) {
		var eps []uint32
		var si SetIter
		for ep, ok := NextEndpoint(r.Encoding, r.Set, &si); ok; ep, ok = NextEndpoint(r.Encoding, r.Set, &si) {
			eps = append(eps, ep)
		}
		got = append(got, eps)
	}
	if len(got) != 2 || len(got[0]) != 3 || got[0][2] != 64 || len(got[1]) != 1 || got[1][0] != 64 {
		t.Fatalf("sets %v", got)
	}

	// A LIST longer than Max Terms (the per-job cap when Limits.ListCap is 0).
	st := exampleStageSpec()
	st.Context.Collective, st.Context.MaxTerms = CollBitmap, 4
	st.Sets = []SetRecord{{BindingIndex: 0, Encoding: EncList, Set: AppendListSet(nil, 1, 2, 3, 4, 5)}}
	body := make([]byte, st.Len())
	st.Encode(body)
	lc := ctlHdr(CmdStage, 0x22)
	lc.Body = body
	long := mustControl(&lc)
	var fe *FieldError
	if err := c.Decode(long, Limits{}); !errors.As(err, &fe) || fe.Field != "stage.set.list_count" {
		t.Fatalf("list over Max Terms: %v", err)
	}
	if err := c.Decode(long, Limits{ListCap: 5}); err != nil {
		t.Fatalf("explicit cap: %v", err)
	}

	rec := ControlBodyOff + ContextRecordLen + 2*BindingLen // first set record
	hierLen := SetRecordHdrLen + SetPrefixLen + 4 + 8 + 16
	rec2 := rec + hierLen
	cases := []struct {
		name  string
		mut   func(b []byte) []byte
		lim   Limits
		err   error
		field string
	}{
		{"binding index out of range", setB(rec2, 2), Limits{}, ErrRange, "stage.set.binding_index"},
		{"record reserved", setB(rec+1, 1), Limits{}, ErrReserved, "stage.set.reserved"},
		{"prefix reserved", setB(rec+5, 1), Limits{}, ErrReserved, "stage.set.reserved"},
		{"record length not multiple of 4", set16(rec+2, 27), Limits{}, ErrLength, "stage.set.length"},
		{"record length too small", set16(rec+2, 4), Limits{}, ErrLength, "stage.set.length"},
		{"record past body", set16(rec2+2, 40), Limits{}, ErrLength, "body_length"},
		{"encoding 0", setB(rec+4, 0), Limits{}, ErrFormat, "stage.set.encoding"},
		{"set content", setB(rec+8+4, 0x80), Limits{}, ErrCount, "stage.set.lower_count"},
		{"list over Max Terms", set32(ControlBodyOff+ctxMaxTerms, 0), Limits{}, ErrRange, "stage.context.max_terms"},
		{"too many set records", setB(ControlBodyOff+ctxSets, 3), Limits{}, ErrLength, "body_length"},
	}
	for _, tc := range cases {
		b := append([]byte(nil), f...)
		if tc.mut != nil {
			b = tc.mut(b)
		}
		err := c.Decode(b, tc.lim)
		if tc.err == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.Is(err, tc.err) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: got %v, want %v %s", tc.name, err, tc.err, tc.field)
		}
		// "stage."-prefixed set names included, a rejection allocates nothing.
		if n := alloctest.PerRun(20, func() { _ = Reason(c.Decode(b, tc.lim)) }); n != 0 {
			t.Errorf("%s: %v allocs per rejection", tc.name, n)
		}
	}
}

// boundaryStage is a BITMAP STAGE of a domain boundary: the exampleStageSpec
// bindings, the A-BM {0..3} (0xFF), the boundary set {65536} (0xFE) and a
// mask for binding 1, each a FLAT record of one word (20 bytes).
func boundaryStage(sets ...SetRecord) StageSpec {
	st := exampleStageSpec()
	st.Context.Collective = CollBitmap
	st.Context.MaxTerms = 4
	st.Sets = sets
	return st
}

func stageFrame(t testing.TB, st StageSpec) []byte {
	body := make([]byte, st.Len())
	if _, err := st.Encode(body); err != nil {
		t.Fatal(err)
	}
	c := ctlHdr(CmdStage, 0x23)
	c.Body = body
	return mustControl(&c)
}

// TestStageBoundaryRecord: Binding Index 0xFE is a set record like the
// others; every Binding Index appears at most once (the second record is
// refused, Detail = its offset); set records, 0xFE included, exist only in
// BITMAP contexts (Detail 15, the Set Record Count).
func TestStageBoundaryRecord(t *testing.T) {
	abm := SetRecord{BindingIndex: OwnSet, Encoding: EncFlat, Set: AppendFlatSet(nil, 0, 1, 0, 1, 2, 3)}
	bnd := SetRecord{BindingIndex: BoundarySet, Encoding: EncFlat, Set: AppendFlatSet(nil, 1024, 1, 65536)}
	mask := SetRecord{BindingIndex: 1, Encoding: EncFlat, Set: AppendFlatSet(nil, 0, 1, 0, 1, 2, 3)}
	var c Control
	if err := c.Decode(stageFrame(t, boundaryStage(abm, bnd, mask)), Limits{}); err != nil {
		t.Fatal(err)
	}
	s := c.Stage()
	var it SetRecordIter
	var idx []uint8
	for r, ok := s.NextSet(&it); ok; r, ok = s.NextSet(&it) {
		idx = append(idx, r.BindingIndex)
		if r.BindingIndex == BoundarySet {
			var si SetIter
			e, ok := NextEndpoint(r.Encoding, r.Set, &si)
			if _, more := NextEndpoint(r.Encoding, r.Set, &si); !ok || e != 65536 || more {
				t.Fatalf("boundary set: first %d %v, more %v", e, ok, more)
			}
		}
	}
	if len(idx) != 3 || idx[0] != OwnSet || idx[1] != BoundarySet || idx[2] != 1 {
		t.Fatalf("records %v", idx)
	}

	rec := func(i int) int { return ContextRecordLen + 2*BindingLen + 20*i } // body offset of record i
	notBitmap := boundaryStage(bnd)
	notBitmap.Context.Collective = CollAllReduce
	for _, tc := range []struct {
		name   string
		st     StageSpec
		err    error
		field  string
		detail int
	}{
		{"boundary twice", boundaryStage(abm, bnd, bnd), ErrRange, "stage.set.binding_index", rec(2)},
		{"boundary twice, apart", boundaryStage(bnd, abm, mask, bnd), ErrRange, "stage.set.binding_index", rec(3)},
		{"A-BM twice", boundaryStage(abm, bnd, abm), ErrRange, "stage.set.binding_index", rec(2)},
		{"mask twice", boundaryStage(mask, mask), ErrRange, "stage.set.binding_index", rec(1)},
		{"boundary outside BITMAP", notBitmap, ErrCount, "stage.context.set_count", ctxSets},
		{"boundary alone", boundaryStage(bnd), nil, "", 0},
	} {
		f := stageFrame(t, tc.st)
		err := c.Decode(f, Limits{})
		if tc.err == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		fe, ok := errors.AsType[*FieldError](err)
		if !errors.Is(err, tc.err) || !ok || fe.Field != tc.field || fe.Offset-ControlBodyOff != tc.detail {
			t.Errorf("%s: got %v, want %v %s at body offset %d", tc.name, err, tc.err, tc.field, tc.detail)
		}
		if n := alloctest.PerRun(20, func() { _ = Reason(c.Decode(f, Limits{})) }); n != 0 {
			t.Errorf("%s: %v allocs per rejection", tc.name, n)
		}
	}
}
