// This file owns the MAC learning table.
//
// Design: a fixed-size open-addressing table of atomic (key, value) slots,
// read and written lock-free by every RX goroutine, behind an atomic.Pointer.
// Aging and flushes never delete in place (deletion under linear probing
// with concurrent readers needs tombstones and is racy); instead a sweeper
// builds a fresh table with the live entries and swaps the pointer
// (RCU-style). A learn that races with the swap is lost and redone on the
// station's next frame: at worst one extra flood. Lookups are two atomic
// loads per probe and the learn path stores only when the port or the
// one-second timestamp changes, so a busy station does not bounce a cache
// line between cores on every frame. Compared with per-RX-goroutine copies
// of the table, one shared table learns a station once instead of once per
// port and needs no fan-out of updates.

package dataplane

import (
	"math/bits"
	"sync/atomic"
)

// maxProbe bounds a probe sequence; with the table kept at most half full the
// expected probe length is ~1.5, so 32 only triggers on pathological clustering.
const maxProbe = 32

type macSlot struct {
	key atomic.Uint64 // mac | 1<<48 (nonzero marks a used slot)
	val atomic.Uint64 // (port+1)<<32 | seenSeconds; 0 = being written
}

type macTable struct {
	slots []macSlot
	shift uint8
	used  atomic.Int64
	limit int64 // at most half the slots, so probes stay short
}

func newMACTable(size int) *macTable {
	n := 1 << bits.Len(uint(size-1))
	if n < 64 {
		n = 64
	}
	return &macTable{slots: make([]macSlot, n), shift: uint8(64 - bits.TrailingZeros(uint(n))), limit: int64(n / 2)}
}

func macKey(m []byte) uint64 {
	_ = m[5]
	return uint64(m[0])<<40 | uint64(m[1])<<32 | uint64(m[2])<<24 | uint64(m[3])<<16 |
		uint64(m[4])<<8 | uint64(m[5]) | 1<<48
}

func (t *macTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

// learnResult is what learn did.
type learnResult uint8

const (
	learnFull  learnResult = iota // the table is full: not learned (the frame is still forwarded; the station is flooded to)
	learnOK                       // learned, or refreshed where it was
	learnMoved                    // the station was learned on another port until now
)

// learn records that mac was seen on port at second now.
func (t *macTable) learn(key uint64, port int, now uint32) learnResult {
	want := uint64(port+1)<<32 | uint64(now)
	mask := uint64(len(t.slots) - 1)
	i := t.home(key)
	for p := 0; p < maxProbe; p++ {
		s := &t.slots[i&mask]
		k := s.key.Load()
		if k == 0 {
			if t.used.Load() >= t.limit {
				return learnFull
			}
			if s.key.CompareAndSwap(0, key) {
				t.used.Add(1)
				s.val.Store(want)
				return learnOK
			}
			k = s.key.Load()
		}
		if k == key {
			if v := s.val.Load(); v != want {
				s.val.Store(want)
				if v>>32 != want>>32 && v != 0 {
					return learnMoved
				}
			}
			return learnOK
		}
		i++
	}
	return learnFull
}

// lookup returns the port mac was learned on, if the entry is younger than aging seconds.
func (t *macTable) lookup(key uint64, now, aging uint32) (int, bool) {
	mask := uint64(len(t.slots) - 1)
	i := t.home(key)
	for p := 0; p < maxProbe; p++ {
		s := &t.slots[i&mask]
		k := s.key.Load()
		if k == 0 {
			return 0, false
		}
		if k == key {
			v := s.val.Load()
			if v == 0 || now-uint32(v) > aging {
				return 0, false
			}
			return int(v>>32) - 1, true
		}
		i++
	}
	return 0, false
}

// live counts entries younger than aging and reports whether any expired.
func (t *macTable) live(now, aging uint32) (n int, expired bool) {
	for i := range t.slots {
		if t.slots[i].key.Load() == 0 {
			continue
		}
		v := t.slots[i].val.Load()
		if v != 0 && now-uint32(v) <= aging {
			n++
		} else if v != 0 {
			expired = true
		}
	}
	return n, expired
}

// rebuilt returns a new table holding only the live entries of t.
func (t *macTable) rebuilt(now, aging uint32) *macTable {
	nt := newMACTable(len(t.slots))
	for i := range t.slots {
		k := t.slots[i].key.Load()
		v := t.slots[i].val.Load()
		if k == 0 || v == 0 || now-uint32(v) > aging {
			continue
		}
		nt.learn(k, int(v>>32)-1, uint32(v))
	}
	return nt
}

// each calls fn for every entry younger than aging, reading the slots with
// the same atomic loads as lookup: it takes no lock and never writes, so an
// RX goroutine learning or looking up at the same time is not slowed by
// more than the shared cache lines. Slots are visited in table order, so
// an entry learned (or re-learned on another port) during the walk may or
// may not be seen; a key never moves within one table, so no entry is
// reported twice, and key and value are read from the same slot, so the
// port and age reported belong to that MAC.
func (t *macTable) each(now, aging uint32, fn func(key uint64, port int, seen uint32)) {
	for i := range t.slots {
		k := t.slots[i].key.Load()
		if k == 0 {
			continue
		}
		v := t.slots[i].val.Load()
		if v == 0 || now-uint32(v) > aging {
			continue
		}
		fn(k, int(v>>32)-1, uint32(v))
	}
}

// macOf is the inverse of macKey.
func macOf(key uint64) [6]byte {
	return [6]byte{byte(key >> 40), byte(key >> 32), byte(key >> 24), byte(key >> 16), byte(key >> 8), byte(key)}
}
