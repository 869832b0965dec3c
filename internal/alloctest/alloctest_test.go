package alloctest

import "testing"

var sink []byte

// TestPerRunSeesRealAllocations: a path that allocates on every call is
// reported as such; retries do not hide it.
func TestPerRunSeesRealAllocations(t *testing.T) {
	if a := PerRun(100, func() { sink = make([]byte, 64) }); a != 1 {
		t.Fatalf("PerRun = %.2f for one allocation per call, want 1", a)
	}
	if a := PerRun(100, func() { sink = sink[:0] }); a != 0 {
		t.Fatalf("PerRun = %.2f for a path that allocates nothing, want 0", a)
	}
}

// TestPerRunCountsRareAllocations: a path that allocates once every 50
// calls is not 0 (testing.AllocsPerRun's integer division said 0).
func TestPerRunCountsRareAllocations(t *testing.T) {
	n := 0
	a := PerRun(1000, func() {
		n++
		if n%50 == 0 {
			sink = make([]byte, 64)
		}
	})
	if a != 0.02 {
		t.Fatalf("PerRun = %v for one allocation every 50 calls, want 0.02", a)
	}
}

// TestPerRunRetriesNoise: allocations in the first measurement only (noise
// from elsewhere) do not count; the path is measured again.
func TestPerRunRetriesNoise(t *testing.T) {
	calls := 0
	a := PerRun(100, func() {
		calls++
		if calls <= 101 { // AllocsPerRun's warm-up call plus the first measurement
			sink = make([]byte, 64)
		}
	})
	if a != 0 {
		t.Fatalf("PerRun = %.2f, want 0 after a noisy first measurement", a)
	}
	if calls != 2*101 {
		t.Fatalf("f called %d times, want %d (two measurements of 100 plus warm-ups)", calls, 2*101)
	}
}
