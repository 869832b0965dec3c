//go:build !amd64

package prefetch

// Bytes does nothing on this architecture.
func Bytes(b []byte) {}
