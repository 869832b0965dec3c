package prefetch

import (
	"testing"
	"unsafe"

	"github.com/prismd/prismd/internal/alloctest"
)

// Bytes reads nothing the caller can see and never faults, whatever the
// slice: empty, one byte, unaligned, not a whole number of lines, ending at
// the last byte of its allocation; and it leaves the bytes as they were.
func TestBytesHarmless(t *testing.T) {
	buf := make([]byte, 4096+17)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, r := range [][2]int{{0, 0}, {0, 1}, {3, 3}, {5, 70}, {63, 129}, {1, len(buf)}, {len(buf) - 1, len(buf)}} {
		Bytes(buf[r[0]:r[1]])
	}
	Bytes(nil)
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed", i)
		}
	}
	// A slice whose last line crosses into the next page of the heap.
	big := make([]byte, 3*4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&big[0]))%4096) - 10
	if off < 0 {
		off += 4096
	}
	Bytes(big[off : off+20])
}

// No allocation: it is called for every frame.
func TestBytesAllocs(t *testing.T) {
	buf := make([]byte, 1500)
	if a := alloctest.PerRun(100, func() { Bytes(buf) }); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}
