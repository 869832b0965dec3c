//go:build race

package dataplane_test

// raceEnabled: the race detector's instrumentation allocates, so the
// allocation counts of the frame path are checked only without it.
const raceEnabled = true
