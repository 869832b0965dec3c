// This file owns the C-BM soft state of self-installed trees (MoE combine,
// reliable-multicast ACK aggregation): per-(job, token) Completions with a
// completion timeout, per-job quotas and no allocation in steady state.

package bitmapfwd

import (
	"math/rand/v2"
	"time"
)

// MaxSoftSlots bounds a SoftTable (and keeps slot numbers in int32).
const MaxSoftSlots = 1 << 22

// SoftTableConfig sizes a SoftTable. Every field is required.
type SoftTableConfig struct {
	// Slots is the number of (job, token) entries the table holds across
	// all jobs; per-job quotas (SetQuota) partition it.
	Slots int
	// Bits is the capacity of every C-BM and P-BM passed to the table.
	// Jobs whose domains differ use tables of their own, or allocate their
	// sets at this common capacity.
	Bits int
	// Timeout is the completion timeout, counted from Install. Bitmap
	// framework section 8 asks for bounded and short timeouts.
	Timeout time.Duration
}

// SoftTableStats are the table's counters, plain integers: the table belongs
// to one engine worker, which copies them for the metrics package.
type SoftTableStats struct {
	Installs     uint64 // new entries
	Reinstalls   uint64 // Install of an existing entry with the same C-BM (no change)
	Conflicts    uint64 // Install of an existing entry with a different C-BM
	QuotaRejects uint64 // Install refused: no quota or quota exhausted
	Released     uint64 // entries freed by Release (completed)
	Expired      uint64 // entries evicted by Expire (timeout)
}

type jobQuota struct {
	quota, used int
}

type softEntry struct {
	job, token uint64
	hash       uint64
	deadline   int64
	prev, next int32 // FIFO by deadline; -1 = none
	live       bool
	jq         *jobQuota
	c          Completion
}

// SoftTable holds C-BM soft state keyed by (job, token). Entries live in a
// preallocated slab; an open-addressing index (linear probing, backward-shift
// deletion, seeded hash so packets cannot aim collisions) finds them; a FIFO
// ordered by deadline finds the expired ones. Install, Lookup, Admit, Release
// and Expire never allocate. Not safe for concurrent use: one table per
// engine worker.
//
// A slot number identifies a live entry until it is released or expires, so
// the engine can keep its payload buffers in a parallel slab of Slots
// elements indexed by slot.
type SoftTable struct {
	bits     int
	timeout  int64
	entries  []softEntry
	index    []int32 // slot+1; 0 = empty
	imask    uint64
	seed     uint64
	free     []int32
	head     int32
	tail     int32
	jobs     map[uint64]*jobQuota
	quotaSum int
	scratch  Set
	stats    SoftTableStats
}

// NewSoftTable allocates every entry up front.
func NewSoftTable(cfg SoftTableConfig) (*SoftTable, error) {
	if cfg.Slots < 1 || cfg.Slots > MaxSoftSlots {
		return nil, paramErr(0, "SoftTable Slots", cfg.Slots, ErrParam)
	}
	if cfg.Bits < 1 || cfg.Bits > MaxBits {
		return nil, paramErr(0, "SoftTable Bits", cfg.Bits, ErrParam)
	}
	if cfg.Timeout <= 0 {
		return nil, paramErr(0, "SoftTable Timeout (ns)", int(cfg.Timeout), ErrParam)
	}
	// Load factor <= 1/2 keeps linear-probing runs short.
	isz := 1
	for isz < 2*cfg.Slots {
		isz <<= 1
	}
	t := &SoftTable{
		bits:    cfg.Bits,
		timeout: int64(cfg.Timeout),
		entries: make([]softEntry, cfg.Slots),
		index:   make([]int32, isz),
		imask:   uint64(isz - 1),
		seed:    rand.Uint64(),
		free:    make([]int32, 0, cfg.Slots),
		head:    -1,
		tail:    -1,
		jobs:    make(map[uint64]*jobQuota),
		scratch: MakeSet(cfg.Bits),
	}
	wpe := (cfg.Bits + 63) / 64
	slab := make([]uint64, 2*wpe*cfg.Slots)
	for i := range t.entries {
		e := &t.entries[i]
		e.c.target = makeSetOn(cfg.Bits, slab[2*i*wpe:])
		e.c.received = makeSetOn(cfg.Bits, slab[(2*i+1)*wpe:])
		e.prev, e.next = -1, -1
	}
	for i := cfg.Slots - 1; i >= 0; i-- {
		t.free = append(t.free, int32(i))
	}
	return t, nil
}

// Bits is the capacity every set passed to the table must have.
func (t *SoftTable) Bits() int { return t.bits }

// Len is the number of live entries.
func (t *SoftTable) Len() int { return len(t.entries) - len(t.free) }

// Stats returns a copy of the counters.
func (t *SoftTable) Stats() SoftTableStats { return t.stats }

// JobUsage returns a job's live entries and quota.
func (t *SoftTable) JobUsage(job uint64) (used, quota int) {
	if jq := t.jobs[job]; jq != nil {
		return jq.used, jq.quota
	}
	return 0, 0
}

// SetQuota admits a job with at most quota live entries (admission control
// at job setup, bitmap-framework section 8). The quotas of all jobs together
// may not exceed Slots, so one job's flood can never take another job's
// entries. Quota 0 removes the job and frees its entries (without calling
// anything: the job is gone). Lowering a quota below the live count keeps the
// live entries and refuses installs until they drain. Setup path: may
// allocate.
func (t *SoftTable) SetQuota(job uint64, quota int) error {
	if quota < 0 || quota > len(t.entries) {
		return paramErr(0, "SoftTable quota", quota, ErrParam)
	}
	jq := t.jobs[job]
	old := 0
	if jq != nil {
		old = jq.quota
	}
	if t.quotaSum-old+quota > len(t.entries) {
		return paramErr(0, "SoftTable quota (sum over jobs exceeds Slots)", quota, ErrQuota)
	}
	t.quotaSum += quota - old
	if quota == 0 {
		if jq != nil {
			for i := t.head; i >= 0; {
				next := t.entries[i].next
				if t.entries[i].job == job {
					t.release(i)
				}
				i = next
			}
			delete(t.jobs, job)
		}
		return nil
	}
	if jq == nil {
		t.jobs[job] = &jobQuota{quota: quota}
	} else {
		jq.quota = quota
	}
	return nil
}

func (t *SoftTable) hash(job, token uint64) uint64 {
	h := mix64(job ^ t.seed)
	return mix64(h ^ token ^ t.seed>>7)
}

// mix64 is the SplitMix64 finalizer: a bijection that spreads every input
// bit over the whole word.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// find returns the slot and the index position, or -1 and the empty index
// position where the key would go.
func (t *SoftTable) find(job, token, h uint64) (slot int32, pos uint64) {
	pos = h & t.imask
	for {
		v := t.index[pos]
		if v == 0 {
			return -1, pos
		}
		e := &t.entries[v-1]
		if e.hash == h && e.job == job && e.token == token {
			return v - 1, pos
		}
		pos = (pos + 1) & t.imask
	}
}

// Lookup returns the slot of (job, token).
func (t *SoftTable) Lookup(job, token uint64) (slot int, ok bool) {
	s, _ := t.find(job, token, t.hash(job, token))
	return int(s), s >= 0
}

// Install records cbm as the C-BM of (job, token), with deadline now +
// Timeout (now is the caller's monotonic clock in nanoseconds; the package
// reads no clock). Installing the same C-BM again is idempotent (the
// dispatch packet was retransmitted); a different one fails with
// ErrConflict. A job without quota or at its quota fails with ErrQuota.
func (t *SoftTable) Install(job, token uint64, cbm *Set, now int64) (int, error) {
	if cbm.n != t.bits {
		return -1, paramErr(0, "C-BM capacity", cbm.n, ErrCapacity)
	}
	if cbm.IsEmpty() {
		return -1, paramErr(0, "C-BM member count", 0, ErrParam)
	}
	h := t.hash(job, token)
	s, pos := t.find(job, token, h)
	if s >= 0 {
		if t.entries[s].c.target.Equal(cbm) {
			t.stats.Reinstalls++
			return int(s), nil
		}
		t.stats.Conflicts++
		return -1, errConflict
	}
	jq := t.jobs[job]
	if jq == nil || jq.used >= jq.quota || len(t.free) == 0 {
		t.stats.QuotaRejects++
		return -1, errQuota
	}
	s = t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	jq.used++
	e := &t.entries[s]
	e.job, e.token, e.hash = job, token, h
	e.deadline = now + t.timeout
	e.live = true
	e.jq = jq
	e.c.Reset(cbm)
	// Append to the FIFO. Deadlines grow with now, so the head expires first.
	e.prev, e.next = t.tail, -1
	if t.tail >= 0 {
		t.entries[t.tail].next = s
	} else {
		t.head = s
	}
	t.tail = s
	t.index[pos] = s + 1
	t.stats.Installs++
	return int(s), nil
}

// Preallocated errors: the packet path returns them without allocating.
var (
	errConflict = &EncodeError{Param: "SoftTable (job, token)", Err: ErrConflict}
	errQuota    = &EncodeError{Param: "SoftTable job quota", Err: ErrQuota}
)

// Admit looks up (job, token) and admits pbm against its C-BM. Without an
// entry it returns (-1, AdmitNoState): not a merge point, forward upward.
// When the result is AdmitNew and Completion(slot).Complete(), the engine
// emits the merged packet (P-BM = the C-BM) and calls Release(slot).
func (t *SoftTable) Admit(job, token uint64, pbm *Set) (int, AdmitStatus) {
	s, _ := t.find(job, token, t.hash(job, token))
	if s < 0 {
		return -1, AdmitNoState
	}
	return int(s), t.entries[s].c.Admit(pbm)
}

// Completion returns a live slot's state (nil for a free or bad slot).
func (t *SoftTable) Completion(slot int) *Completion {
	if uint(slot) >= uint(len(t.entries)) || !t.entries[slot].live {
		return nil
	}
	return &t.entries[slot].c
}

// Key returns a live slot's (job, token).
func (t *SoftTable) Key(slot int) (job, token uint64, ok bool) {
	if uint(slot) >= uint(len(t.entries)) || !t.entries[slot].live {
		return 0, 0, false
	}
	e := &t.entries[slot]
	return e.job, e.token, true
}

// Release frees a live slot (the aggregation completed and was emitted).
// It reports false for a slot that is not live.
func (t *SoftTable) Release(slot int) bool {
	if uint(slot) >= uint(len(t.entries)) || !t.entries[slot].live {
		return false
	}
	t.release(int32(slot))
	t.stats.Released++
	return true
}

// Expire evicts every entry whose deadline is <= now, oldest first. For each
// it calls fn (when non-nil) before the slot is freed, with the slot (its
// payload is still the engine's to read), the key, what was missing (target
// AND NOT received: the stragglers) and what was received (the P-BM of the
// PARTIAL result). Both sets are views valid only during the call; fn must
// not Install into the table (a Release of the slot itself is tolerated). Returns
// the number evicted. Entries installed with a clock that went backwards may
// wait behind a later deadline; callers pass a monotonic now.
func (t *SoftTable) Expire(now int64, fn func(slot int, job, token uint64, missing, received *Set)) int {
	n := 0
	for t.head >= 0 && t.entries[t.head].deadline <= now {
		s := t.head
		e := &t.entries[s]
		if fn != nil {
			e.c.Missing(&t.scratch)
			fn(int(s), e.job, e.token, &t.scratch, &e.c.received)
		}
		if e.live && e.deadline <= now { // fn may have released it already
			t.release(s)
		}
		t.stats.Expired++
		n++
	}
	return n
}

// NextDeadline returns the earliest deadline, or false when empty: the
// engine's timer needs to wake no earlier.
func (t *SoftTable) NextDeadline() (int64, bool) {
	if t.head < 0 {
		return 0, false
	}
	return t.entries[t.head].deadline, true
}

func (t *SoftTable) release(s int32) {
	e := &t.entries[s]
	// Index: backward-shift deletion keeps probe runs unbroken without
	// tombstones.
	_, i := t.find(e.job, e.token, e.hash)
	j := i
	for {
		j = (j + 1) & t.imask
		v := t.index[j]
		if v == 0 {
			break
		}
		k := t.entries[v-1].hash & t.imask
		// Entry at j may stay if its home k lies cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.index[i] = v
		i = j
	}
	t.index[i] = 0
	// FIFO.
	if e.prev >= 0 {
		t.entries[e.prev].next = e.next
	} else {
		t.head = e.next
	}
	if e.next >= 0 {
		t.entries[e.next].prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = -1, -1
	e.live = false
	e.jq.used--
	e.jq = nil
	t.free = append(t.free, s)
}
