package bitmap

import (
	"bytes"
	"slices"
	"testing"
)

// TestKeyringJobs: Jobs lists exactly the keyed jobs, ascending, through
// installs, replacements and removals; Get returns a copy of what was set.
func TestKeyringJobs(t *testing.T) {
	var nilRing *Keyring
	if nilRing.Jobs() != nil || nilRing.Get(1) != nil {
		t.Fatal("a nil keyring is not empty")
	}
	k := NewKeyring()
	if j := k.Jobs(); len(j) != 0 {
		t.Fatalf("new keyring lists %v", j)
	}
	key := bytes.Repeat([]byte{7}, 32)
	v0 := k.Version()
	for _, j := range []uint64{9, 1 << 63, 0, 4} {
		k.Set(j, key)
	}
	key[0] = 8 // the keyring holds a copy
	if g := k.Get(9); g[0] != 7 {
		t.Fatal("Set did not copy the key")
	}
	k.Set(4, key) // replace
	k.Set(9, nil) // remove
	k.Set(5, nil) // remove a job without a key: nothing
	if j, want := k.Jobs(), []uint64{0, 4, 1 << 63}; !slices.Equal(j, want) {
		t.Fatalf("Jobs = %v, want %v", j, want)
	}
	if k.Get(4)[0] != 8 || k.Get(9) != nil {
		t.Fatal("replace/remove not applied")
	}
	if k.Version() == v0 {
		t.Fatal("Version did not change")
	}
}
