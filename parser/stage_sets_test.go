package parser

import (
	"errors"
	"testing"
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
		if n := testing.AllocsPerRun(20, func() { _ = Reason(c.Decode(b, tc.lim)) }); n != 0 {
			t.Errorf("%s: %v allocs per rejection", tc.name, n)
		}
	}
}
