// Package alloctest measures allocations of a per-frame path in tests
// without the noise of the rest of the test binary.
//
// testing.AllocsPerRun reads the process-wide malloc count, so an
// allocation by any goroutine during the measurement counts: a finalizer
// the garbage collector runs for a file an earlier test left behind, a
// netlink or timer goroutine of another test's lab. In CI such noise once
// added 200 allocations to a 200-run measurement of a path that allocates
// nothing. PerRun repeats a measurement that saw allocations and keeps the
// least: an allocation on the measured path shows in every attempt, noise
// from elsewhere rarely in three in a row.
package alloctest
