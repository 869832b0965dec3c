// This file owns BufferPool: replay buffers kept between windows.

package stream

// BufferPool keeps the replay buffers (SendWindow.Buffer) of windows that
// are done, by size, for the SendConfig.Buffer of later windows: an owner
// that runs window after window of one shape then allocates, faults in and
// zeroes nothing. It is not safe for concurrent use. The zero value keeps
// nothing; set MaxPerSize (and MaxBytes, 0 = no total limit).
type BufferPool struct {
	MaxPerSize int // buffers kept per size
	MaxBytes   int // bytes kept in all (0: no limit)
	bufs       map[int][][]byte
	bytes      int
	hits       int
}

// Take returns a kept buffer of n bytes, or nil.
func (p *BufferPool) Take(n int) []byte {
	l := p.bufs[n]
	if len(l) == 0 {
		return nil
	}
	b := l[len(l)-1]
	l[len(l)-1] = nil
	p.bufs[n] = l[:len(l)-1]
	p.bytes -= n
	p.hits++
	return b
}

// Put keeps b for Take within the limits; it reports whether it did. The
// window b served must not be used to send again.
func (p *BufferPool) Put(b []byte) bool {
	n := len(b)
	if n == 0 || len(p.bufs[n]) >= p.MaxPerSize || p.MaxBytes > 0 && p.bytes+n > p.MaxBytes {
		return false
	}
	if p.bufs == nil {
		p.bufs = map[int][][]byte{}
	}
	p.bufs[n] = append(p.bufs[n], b)
	p.bytes += n
	return true
}

// Bytes is how many bytes the pool keeps.
func (p *BufferPool) Bytes() int { return p.bytes }

// Drop forgets every kept buffer.
func (p *BufferPool) Drop() { p.bufs, p.bytes = nil, 0 }

// Hits is how many Take calls returned a buffer.
func (p *BufferPool) Hits() int { return p.hits }
