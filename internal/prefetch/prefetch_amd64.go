package prefetch

// Bytes issues a PREFETCHT0 for every 64-byte line of b. It never faults:
// a prefetch of an unmapped address is dropped by the CPU.
//
//go:noescape
func Bytes(b []byte)
