//go:build race

package bitmap

// raceEnabled: the race detector slows the in-memory fabric several times,
// so timing-dependent expectations (merges before soft state expires) are
// relaxed, and allocation counts of pooled objects are not checked.
const raceEnabled = true
