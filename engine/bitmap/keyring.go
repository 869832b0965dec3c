// This file owns the per-job authentication keys (docs/protocol.md 8.6) as
// the worker goroutines see them: written rarely by the runtime channel,
// read on every frame without a lock.

package bitmap

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Keyring maps Job IDs to their authentication keys. Set may be called from
// any goroutine (the runtime channel that receives keys from the AM); the
// shards read it with one atomic load per frame. One Keyring per node, shared
// by every Shard through Config.Keys.
type Keyring struct {
	mu  sync.Mutex
	ver atomic.Uint64
	m   atomic.Pointer[map[uint64][]byte]
}

// NewKeyring returns an empty keyring.
func NewKeyring() *Keyring { return &Keyring{} }

// Set installs (or, with a nil or empty key, removes) the key of job. The
// key is copied. Copy-on-write: readers never see a half-updated map.
func (k *Keyring) Set(job uint64, key []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.m.Load()
	n := make(map[uint64][]byte)
	if old != nil {
		for j, v := range *old {
			n[j] = v
		}
	}
	if len(key) == 0 {
		delete(n, job)
	} else {
		n[job] = append([]byte(nil), key...)
	}
	k.m.Store(&n)
	k.ver.Add(1)
}

// Version changes whenever a key is set or removed.
func (k *Keyring) Version() uint64 {
	if k == nil {
		return 0
	}
	return k.ver.Load()
}

// Get returns job's key (nil if none). The slice must not be modified.
func (k *Keyring) Get(job uint64) []byte {
	if k == nil {
		return nil
	}
	m := k.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[job]
}

// Jobs lists the jobs that have a key, ascending. For listings (the
// runtime channel's GET /v1/keys), not for the frame path.
func (k *Keyring) Jobs() []uint64 {
	if k == nil {
		return nil
	}
	m := k.m.Load()
	if m == nil {
		return nil
	}
	r := make([]uint64, 0, len(*m))
	for j := range *m {
		r = append(r, j)
	}
	slices.Sort(r)
	return r
}
