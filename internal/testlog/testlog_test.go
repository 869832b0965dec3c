package testlog

import "testing"

// A log call after the test ended (a background timer firing late) is
// dropped instead of panicking.
func TestSilentAfterEnd(t *testing.T) {
	var logf func(string, ...any)
	t.Run("inner", func(t *testing.T) {
		logf = Until(t)
		logf("while the test runs: %d", 1)
	})
	logf("after the test ended: %d", 2) // t.Logf would panic here
}
