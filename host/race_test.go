//go:build race

package host

// raceEnabled: the race detector's instrumentation allocates, so the
// allocation counts of the frame path are checked only without it.
const raceEnabled = true
