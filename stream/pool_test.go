package stream

import "testing"

// TestBufferPool: Take returns what Put kept, by size, last in first out;
// Put refuses beyond the per-size and total limits; Hits counts the Takes
// that found a buffer.
func TestBufferPool(t *testing.T) {
	p := BufferPool{MaxPerSize: 2, MaxBytes: 250}
	a, b, c := make([]byte, 100), make([]byte, 100), make([]byte, 100)
	if !p.Put(a) || !p.Put(b) {
		t.Fatal("Put refused within the limits")
	}
	if p.Put(c) {
		t.Fatal("Put kept a third buffer of one size (MaxPerSize 2)")
	}
	if p.Put(make([]byte, 60)) {
		t.Fatal("Put went past MaxBytes (200 + 60 > 250)")
	}
	if p.Take(50) != nil {
		t.Fatal("Take returned a buffer of another size")
	}
	if g := p.Take(100); &g[0] != &b[0] {
		t.Fatal("Take did not return the last buffer kept")
	}
	if !p.Put(make([]byte, 50)) {
		t.Fatal("Put refused a buffer that fits once one was taken")
	}
	if g := p.Take(100); &g[0] != &a[0] {
		t.Fatal("Take did not return the first buffer kept")
	}
	if p.Take(100) != nil || p.Hits() != 2 {
		t.Fatalf("empty size: Take must return nil; hits %d, want 2", p.Hits())
	}
	var zero BufferPool
	if zero.Put(a) || zero.Take(100) != nil {
		t.Fatal("the zero BufferPool keeps buffers")
	}
}
