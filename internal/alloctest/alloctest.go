package alloctest

import (
	"runtime"
)

// Attempts is how many measurements PerRun makes at most.
const Attempts = 3

// PerRun returns the exact average number of allocations per call of f
// over runs calls, the least of up to Attempts measurements. It stops at
// the first measurement of zero. Before a repeat it runs the garbage
// collector and yields, so pending finalizers run outside the next
// measurement.
//
// Unlike testing.AllocsPerRun it does not divide in integers: that
// reported a path allocating 22 times every 100 calls as 0 (and so does
// -benchmem's allocs/op). Here any allocation in a measurement shows.
func PerRun(runs int, f func()) float64 {
	least := measure(runs, f)
	for i := 1; i < Attempts && least > 0; i++ {
		runtime.GC()
		runtime.Gosched()
		least = min(least, measure(runs, f))
	}
	return least
}

// measure is testing.AllocsPerRun without its integer division: one
// warm-up call, then the malloc count over runs calls, on one P.
func measure(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.Mallocs
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&ms)
	return float64(ms.Mallocs-before) / float64(runs)
}
