package bitmap

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prismd/prismd/parser"
)

const fanout = 16

// fanFabric: node sx, RESULT_IN from src on port 0, RESULT_OUT to h1..h16 on
// ports 1..16; h(i+1)'s mask holds the bits b < bits with b%16 == i.
func fanFabric(t testing.TB, bits int) *fabric {
	f := newFabric(t)
	f.node("sx", fanout+1)
	f.host("src")
	f.link("src", 0, "sx", 0)
	bs := []bspec{{kind: parser.KindResultIn, port: 0}}
	for i := 0; i < fanout; i++ {
		name := fmt.Sprintf("h%d", i+1)
		f.host(name)
		f.link(name, 0, "sx", i+1)
		m := []byte(strings.Repeat("0", bits))
		for b := i; b < bits; b += fanout {
			m[b] = '1'
		}
		bs = append(bs, bspec{kind: parser.KindResultOut, port: i + 1, mask: string(m)})
	}
	cr := baseContext(parser.RoleRoot)
	cr.MaxTerms = 1024 // also the LIST cap
	f.stage("sx", cr, "", bits/64, bs)
	return f
}

func encodeSet(enc uint8, bits int, eps []uint32) []byte {
	switch enc {
	case parser.EncFlat:
		return parser.AppendFlatSet(nil, 0, uint16(bits/64), eps...)
	case parser.EncHier:
		return parser.AppendHierSet(nil, 64, uint16(bits/64), eps...)
	}
	return parser.AppendListSet(nil, eps...)
}

// TestReplicateEveryBit: for bitmap lengths 64..1024 and every encoding,
// every bit position gives exactly one copy, on the binding whose mask holds
// it, carrying exactly that bit in the frame's encoding; random sets are
// split into disjoint per-mask subsets whose union is the D-BM.
func TestReplicateEveryBit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, bits := range []int{64, 128, 256, 512, 1024} {
		for _, enc := range []uint8{parser.EncFlat, parser.EncHier, parser.EncList} {
			t.Run(fmt.Sprintf("%d/%d", bits, enc), func(t *testing.T) {
				f := fanFabric(t, bits)
				send := func(token uint64, eps []uint32) map[int][]byte {
					f.inject("src", f.hostFrame("src", parser.ClassResult, token, 0, encodeSet(enc, bits, eps), enc, 0, []float32{1.5}))
					f.run()
					got := map[int][]byte{}
					for i := 0; i < fanout; i++ {
						h := f.hosts[fmt.Sprintf("h%d", i+1)]
						if len(h.got) > 1 {
							t.Fatalf("h%d got %d copies", i+1, len(h.got))
						}
						if len(h.got) == 1 {
							got[i] = h.got[0]
						}
						h.got = nil
					}
					return got
				}
				for b := 0; b < bits; b++ {
					got := send(uint64(b+1), []uint32{uint32(b)})
					if len(got) != 1 || got[b%fanout] == nil {
						t.Fatalf("bit %d: copies on %v", b, slices.Collect(mapKeys(got)))
					}
					x := decodeFrame(t, got[b%fanout])
					if x.d.Ext.Encoding != enc || !bytes.Equal(x.d.Ext.Set, encodeSet(enc, bits, []uint32{uint32(b)})) {
						t.Fatalf("bit %d: copy set %x (encoding %d)", b, x.d.Ext.Set, x.d.Ext.Encoding)
					}
					if x.d.Ext.Token != uint64(b+1) || len(x.vals) != 1 {
						t.Fatalf("bit %d: token %d, %d values", b, x.d.Ext.Token, len(x.vals))
					}
				}
				for k := 0; k < 50; k++ {
					var dbm []uint32
					want := map[int][]uint32{}
					for b := 0; b < bits; b++ {
						if r.IntN(8) == 0 {
							dbm = append(dbm, uint32(b))
							want[b%fanout] = append(want[b%fanout], uint32(b))
						}
					}
					if len(dbm) == 0 {
						continue
					}
					got := send(1, dbm)
					if len(got) != len(want) {
						t.Fatalf("set %v: %d copies, want %d", dbm, len(got), len(want))
					}
					for i, eps := range want {
						x := decodeFrame(t, got[i])
						if !bytes.Equal(x.d.Ext.Set, encodeSet(enc, bits, eps)) {
							t.Fatalf("set %v: h%d got %v want %v", dbm, i+1, x.eps, eps)
						}
					}
				}
			})
		}
	}
}

func mapKeys(m map[int][]byte) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestReplicateDrops: unknown bits are dropped from the copies and counted;
// a D-BM with no routable bit sends nothing and is counted; a bit routed via
// the ingress binding is not sent back.
func TestReplicateDrops(t *testing.T) {
	f := newFabric(t)
	f.node("sx", 3)
	for _, h := range []string{"src", "h1", "h2"} {
		f.host(h)
	}
	f.link("src", 0, "sx", 0)
	f.link("h1", 0, "sx", 1)
	f.link("h2", 0, "sx", 2)
	f.stage("sx", baseContext(parser.RoleRoot), "", 1, []bspec{
		{kind: parser.KindResultIn, port: 0},
		{kind: parser.KindResultOut, port: 0, mask: "10000000"}, // back toward src
		{kind: parser.KindResultOut, port: 1, mask: "01000000"},
		{kind: parser.KindResultOut, port: 2, mask: "00100000"},
	})
	type ctr struct{ unrouted, empty, looped, bad, copies uint64 }
	read := func() ctr {
		c := f.cnt
		return ctr{c.UnroutedBits.Load(), c.EmptySets.Load(), c.LoopedBits.Load(), c.Drops[DropBadEndpoint].Load(), c.Copies.Load()}
	}
	for _, tc := range []struct {
		name string
		set  []byte
		want ctr
		got  []int // hosts h1, h2 copies
	}{
		{"unknown bit", flat(1, 40), ctr{unrouted: 1, bad: 1, copies: 1}, []int{1, 0}},
		{"only unknown bits", flat(40, 63), ctr{unrouted: 2, bad: 1, empty: 1}, []int{0, 0}},
		{"outside the bit space", parser.AppendFlatSet(nil, 5, 1, 5*64+3), ctr{unrouted: 1, bad: 1, empty: 1}, []int{0, 0}},
		{"looped", flat(0, 2), ctr{looped: 1, copies: 1}, []int{0, 1}},
		{"only looped", flat(0), ctr{looped: 1, empty: 1}, []int{0, 0}},
	} {
		before := read()
		f.inject("src", f.hostFrame("src", parser.ClassResult, 1, 0, tc.set, parser.EncFlat, 0, []float32{1}))
		f.run()
		after := read()
		d := ctr{after.unrouted - before.unrouted, after.empty - before.empty, after.looped - before.looped, after.bad - before.bad, after.copies - before.copies}
		if d != tc.want {
			t.Errorf("%s: counters %+v, want %+v", tc.name, d, tc.want)
		}
		for i, n := range tc.got {
			h := f.hosts[fmt.Sprintf("h%d", i+1)]
			if len(h.got) != n {
				t.Errorf("%s: h%d got %d", tc.name, i+1, len(h.got))
			}
			h.got = nil
		}
		if n := len(f.hosts["src"].got); n != 0 {
			t.Errorf("%s: %d copies went back to the ingress", tc.name, n)
		}
	}
}
