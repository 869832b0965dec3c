package alloctest

import (
	"runtime"
	"testing"
)

// Attempts is how many measurements PerRun makes at most.
const Attempts = 3

// PerRun returns the average number of allocations per call of f over runs
// calls (as testing.AllocsPerRun), the least of up to Attempts
// measurements. It stops at the first measurement of zero. Before a repeat
// it runs the garbage collector and yields, so pending finalizers run
// outside the next measurement.
func PerRun(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for i := 1; i < Attempts && least > 0; i++ {
		runtime.GC()
		runtime.Gosched()
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
