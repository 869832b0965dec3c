package dataplane

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestMACTableAgainstMap compares the atomic table with a plain map under
// random learns, lookups, time steps and rebuilds.
func TestMACTableAgainstMap(t *testing.T) {
	type ent struct {
		port int
		seen uint32
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newMACTable(1024)
	ref := map[uint64]ent{}
	const aging = 20
	now := uint32(100)
	macs := make([]uint64, 300)
	for i := range macs {
		m := rng.Uint64()
		b := []byte{byte(m>>40) &^ 1, byte(m >> 32), byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
		macs[i] = macKey(b)
	}
	for step := 0; step < 200000; step++ {
		k := macs[rng.IntN(len(macs))]
		switch op := rng.IntN(100); {
		case op < 45:
			p := rng.IntN(8)
			if r := tab.learn(k, p, now); r != learnFull {
				e, had := ref[k]
				if moved := had && e.port != p; (r == learnMoved) != moved {
					t.Fatalf("step %d: learn on port %d = %d, map has (%d, %v): moved %v", step, p, r, e.port, had, moved)
				}
				ref[k] = ent{p, now}
			}
		case op < 98:
			p, ok := tab.lookup(k, now, aging)
			e, rok := ref[k]
			rok = rok && now-e.seen <= aging
			if ok != rok || (ok && p != e.port) {
				t.Fatalf("step %d: lookup = (%d,%v), map says (%d,%v)", step, p, ok, e.port, rok)
			}
		case op < 99:
			now += uint32(rng.IntN(5))
		default:
			tab = tab.rebuilt(now, aging)
			for k, e := range ref {
				if now-e.seen > aging {
					delete(ref, k)
				}
			}
		}
	}
	n, _ := tab.live(now, aging)
	want := 0
	for _, e := range ref {
		if now-e.seen <= aging {
			want++
		}
	}
	if n != want {
		t.Fatalf("live = %d, map has %d", n, want)
	}
}

func TestMACTableFull(t *testing.T) {
	tab := newMACTable(64) // limit 32 entries
	learned := 0
	for i := 0; i < 100; i++ {
		if tab.learn(macKey([]byte{2, 0, 0, 0, 0, byte(i)}), 1, 1) != learnFull {
			learned++
		}
	}
	if learned != 32 {
		t.Fatalf("learned %d entries into a 64-slot table, want 32 (half load)", learned)
	}
}

// BenchmarkMACTable compares the lock-free table with an RWMutex-guarded
// map, the obvious alternative, for the per-frame pattern: learn the source
// (mostly a no-op refresh) and look up the destination, from all RX
// goroutines at once (-cpu 1,2,...).
func BenchmarkMACTable(b *testing.B) {
	keys := make([]uint64, 1024)
	for i := range keys {
		keys[i] = macKey([]byte{2, 0, 0, 0, byte(i >> 8), byte(i)})
	}
	b.Run("atomic", func(b *testing.B) {
		tab := newMACTable(DefaultMACTableSize)
		for i, k := range keys {
			tab.learn(k, i%4, 1)
		}
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				tab.learn(keys[i&1023], (i&1023)%4, 1)
				tab.lookup(keys[(i+7)&1023], 1, 300)
				i++
			}
		})
	})
	b.Run("rwmutex-map", func(b *testing.B) {
		var mu sync.RWMutex
		m := map[uint64]uint64{}
		for i, k := range keys {
			m[k] = uint64(i%4+1)<<32 | 1
		}
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				k := keys[i&1023]
				want := uint64((i&1023)%4+1)<<32 | 1
				mu.RLock()
				v := m[k]
				mu.RUnlock()
				if v != want {
					mu.Lock()
					m[k] = want
					mu.Unlock()
				}
				mu.RLock()
				_ = m[keys[(i+7)&1023]]
				mu.RUnlock()
				i++
			}
		})
	})
}
