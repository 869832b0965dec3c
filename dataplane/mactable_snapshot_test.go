package dataplane

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

type oracleEnt struct {
	port int
	seen uint32
}

// walk collects t.each into a map and fails on a key listed twice.
func walk(tb testing.TB, t *macTable, now, aging uint32) map[uint64]oracleEnt {
	tb.Helper()
	got := map[uint64]oracleEnt{}
	t.each(now, aging, func(k uint64, port int, seen uint32) {
		if _, dup := got[k]; dup {
			tb.Fatalf("key %#x listed twice", k)
		}
		got[k] = oracleEnt{port, seen}
	})
	return got
}

// TestMACTableEachAgainstMap compares the snapshot walk with a plain map
// under random learns (new stations, moves, refreshes), clock steps and
// rebuilds: the walk must list exactly the map's entries younger than the
// aging time, with the same port and last-seen second.
func TestMACTableEachAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := newMACTable(1024)
	ref := map[uint64]oracleEnt{}
	const aging = 20
	now := uint32(100)
	macs := make([]uint64, 400) // more than the 512-entry limit can hold once, fewer than a full table
	for i := range macs {
		m := rng.Uint64()
		macs[i] = macKey([]byte{byte(m>>40) &^ 1, byte(m >> 32), byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)})
	}
	checks := 0
	for step := 0; step < 100000; step++ {
		switch op := rng.IntN(1000); {
		case op < 900:
			k, p := macs[rng.IntN(len(macs))], rng.IntN(8)
			if tab.learn(k, p, now) != learnFull {
				ref[k] = oracleEnt{p, now}
			}
		case op < 980:
			now += uint32(rng.IntN(3))
		case op < 990:
			tab = tab.rebuilt(now, aging)
			for k, e := range ref {
				if now-e.seen > aging {
					delete(ref, k)
				}
			}
		default:
			checks++
			got := walk(t, tab, now, aging)
			want := map[uint64]oracleEnt{}
			for k, e := range ref {
				if now-e.seen <= aging {
					want[k] = e
				}
			}
			if len(got) != len(want) {
				t.Fatalf("step %d: walk lists %d entries, map has %d live", step, len(got), len(want))
			}
			for k, e := range want {
				if g, ok := got[k]; !ok || g != e {
					t.Fatalf("step %d: key %#x: walk (%+v, %v), map %+v", step, k, g, ok, e)
				}
			}
			if n, _ := tab.live(now, aging); n != len(want) {
				t.Fatalf("step %d: live() = %d, walk = %d", step, n, len(want))
			}
		}
	}
	if checks < 50 {
		t.Fatalf("only %d comparisons ran", checks)
	}
}

// TestMACTableEachConcurrent walks the table while writers learn: stations
// learned before the walk and never moved must all be listed; every listed
// entry must be a real station on a port some writer wrote for it (each
// station has two possible ports, so a value torn from another slot would
// show up as a third port) and appear once. Run with -race.
func TestMACTableEachConcurrent(t *testing.T) {
	tab := newMACTable(8192)
	const stable, moving = 1000, 1000
	key := func(i int) uint64 { return macKey([]byte{2, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)}) }
	portA := func(i int) int { return i % 7 }
	portB := func(i int) int { return i%7 + 7 }
	index := map[uint64]int{}
	for i := 0; i < stable+moving; i++ {
		index[key(i)] = i
		if tab.learn(key(i), portA(i), 1) == learnFull {
			t.Fatalf("learn %d failed", i)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for !stop.Load() {
				i := stable + rng.IntN(moving)
				p := portA(i)
				if rng.IntN(2) == 0 {
					p = portB(i)
				}
				tab.learn(key(i), p, 1+uint32(rng.IntN(2)))
				tab.lookup(key(rng.IntN(stable)), 2, 300)
			}
		}()
	}
	for round := 0; round < 50; round++ {
		got := walk(t, tab, 2, 300)
		if len(got) != stable+moving {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("round %d: %d entries listed, want %d", round, len(got), stable+moving)
		}
		for k, e := range got {
			i, ok := index[k]
			if !ok {
				t.Fatalf("round %d: unknown key %#x listed", round, k)
			}
			if e.port != portA(i) && (i < stable || e.port != portB(i)) {
				t.Fatalf("round %d: station %d listed on port %d, never learned there", round, i, e.port)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}

func TestMACOfInvertsMACKey(t *testing.T) {
	m := [6]byte{0x02, 0x4b, 0xff, 0x00, 0x10, 0xfe}
	if got := macOf(macKey(m[:])); got != m {
		t.Fatalf("macOf(macKey(%x)) = %x", m, got)
	}
}
