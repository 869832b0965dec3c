package bitmapfwd

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestChooseSection7(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      ChooseInput
		want    Encoding
		wc, sc  int
		maxBody int
	}{
		// Fig. 1 scale and a few thousand endpoints: a flat bitmap is the
		// default even for K = 2 (a list would save bytes but cost per hop).
		{"fig1", ChooseInput{Domain: 8, Active: 4}, Flat, 1, 1, 12},
		{"4096 K=2", ChooseInput{Domain: 4096, Active: 2}, Flat, 64, 1, 516},
		// Very large domain, very small K: the list corner.
		{"65536 K=4", ChooseInput{Domain: 65536, Active: 4}, List, 0, 0, 4 + 4*16},
		// Very large domain, K over the list cap: hierarchical.
		{"65536 K=64 hier", ChooseInput{Domain: 65536, Active: 64, MaxBodyBytes: 4096}, Hier, 0, 0, 4 + 32 + 64*32},
		// Moderate domain below the list threshold, small K: still a bitmap.
		{"8192 K=2", ChooseInput{Domain: 8192, Active: 2}, Hier, 0, 0, 4 + 8 + 2*32},
		// Dense and huge: per-set-ID flat bitmaps (parallel trees).
		{"65536 dense", ChooseInput{Domain: 65536, Active: 60000}, Flat, 64, 16, 516},
		// A larger budget that holds the whole domain.
		{"65536 jumbo budget", ChooseInput{Domain: 65536, Active: 60000, MaxBodyBytes: 8196}, Flat, 1024, 1, 8196},
	} {
		got, err := Choose(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Encoding != c.want || got.WordCount != c.wc || got.SetCount != c.sc || got.MaxBodyBytes != c.maxBody {
			t.Errorf("%s: got %+v, want %v wc=%d sets=%d body=%d", c.name, got, c.want, c.wc, c.sc, c.maxBody)
		}
	}
	for _, in := range []ChooseInput{{}, {Domain: 8, Active: 9}, {Domain: 8, MaxBodyBytes: 4}, {Domain: 8, BlockBits: 100}} {
		if _, err := Choose(in); !errors.Is(err, ErrParam) {
			t.Errorf("%+v: %v", in, err)
		}
	}
}

// Whatever Choose picks must encode every set of Active members within
// MaxBodyBytes (FLAT: per Set ID) and round-trip.
func TestChooseEncodesWithinBudget(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for range 200 {
		n := 1 + r.IntN(70000)
		k := r.IntN(min(n, 40) + 1)
		if r.IntN(4) == 0 {
			k = r.IntN(n + 1)
		}
		in := ChooseInput{Domain: n, Active: k, MaxBodyBytes: []int{0, 1024, 8196}[r.IntN(3)]}
		ch, err := Choose(in)
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		budget := in.MaxBodyBytes
		if budget == 0 {
			budget = DefaultMaxBodyBytes
		}
		if ch.MaxBodyBytes > budget {
			t.Fatalf("%+v: body %d over budget %d", in, ch.MaxBodyBytes, budget)
		}
		// Worst case for HIER: members spread one per block.
		s := NewSet(n)
		for i := 0; s.Count() < k; i++ {
			e := (i * max(ch.BlockBits, 1)) % n
			if s.Contains(e) {
				e = r.IntN(n)
			}
			s.Add(e)
		}
		back, part := NewSet(n), NewSet(n)
		switch ch.Encoding {
		case Flat:
			for id := NextFlatSet(s, ch.WordCount, 0); id >= 0; id = NextFlatSet(s, ch.WordCount, id+1) {
				b, err := AppendFlatWindow(nil, s, id, ch.WordCount)
				if err != nil || len(b) > budget {
					t.Fatalf("%+v: flat set %d: %d bytes, %v", in, id, len(b), err)
				}
				if err := Decode(b, part, ch.Params); err != nil {
					t.Fatal(err)
				}
				back.Or(back, part)
			}
		default:
			b, err := Append(nil, s, ch.Params)
			if err != nil || len(b) > ch.MaxBodyBytes {
				t.Fatalf("%+v -> %+v: %d bytes, %v", in, ch, len(b), err)
			}
			if err := Decode(b, back, ch.Params); err != nil {
				t.Fatal(err)
			}
		}
		if !back.Equal(s) {
			t.Fatalf("%+v: round trip lost members", in)
		}
	}
}
