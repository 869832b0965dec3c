package afpacket

import "testing"

// blockSizeFor: 32 KiB for ordinary MTUs, enough for framesPerBlock jumbo
// frames otherwise, always a power of two.
func TestBlockSizeFor(t *testing.T) {
	for _, c := range []struct{ mtu, want int }{
		{576, 32 << 10}, {1500, 32 << 10}, {2600, 32 << 10}, {9000, 128 << 10}, {9216, 128 << 10},
	} {
		got := blockSizeFor(c.mtu)
		if got != c.want || got&(got-1) != 0 || got < framesPerBlock*(c.mtu+frameOverhead) {
			t.Errorf("MTU %d: block %d, want %d", c.mtu, got, c.want)
		}
	}
}
