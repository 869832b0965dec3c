package testlog

import (
	"sync"
	"testing"
)

// Until returns t.Logf as a printf-style func that goes silent once t and
// its cleanups have finished.
func Until(t testing.TB) func(format string, args ...any) {
	var mu sync.Mutex
	ended := false
	// Registered now, so it runs after every cleanup registered later
	// (those may still log while they stop the work).
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
	})
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Logf(format, args...)
		}
	}
}
