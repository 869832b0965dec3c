package afpacket

import (
	"os"
	"testing"
	"time"
)

// TestRingCountsHeldBlocks: Held counts the blocks the kernel retired on
// its timer, with their frames: a burst of three small frames waits for the
// timer in one block; a burst of many large frames fills block after block
// and only its tail waits.
func TestRingCountsHeldBlocks(t *testing.T) {
	a, b := vethPair(t)
	// No IPv6 chatter (neighbour discovery, MLD) in the counted blocks.
	for _, n := range []string{a, b} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n+"/disable_ipv6", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := Open(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx, err := Open(b, Options{RxRing: true, RingTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	time.Sleep(20 * time.Millisecond)
	if bl, tm, fr := rx.Held(); bl != 0 || tm != 0 || fr != 0 {
		t.Fatalf("before any frame: %d blocks, %d timed out with %d frames", bl, tm, fr)
	}
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	recv := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < want; {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d frames", got, want)
			}
			n, _, err := rx.RecvBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	send := func(n, size int) {
		t.Helper()
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = frame(size, 0x88B6, 0, byte(i))
		}
		for sent := 0; sent < n; {
			k, err := tx.SendBatch(batch[sent:])
			if err != nil {
				t.Fatal(err)
			}
			sent += k
		}
	}
	send(3, 200)
	recv(3)
	if bl, tm, fr := rx.Held(); bl != 1 || tm != 1 || fr != 3 {
		t.Fatalf("3 frames in one burst: %d blocks, %d timed out with %d frames; want 1, 1, 3", bl, tm, fr)
	}
	// 400 frames of 1400 B: about 17 blocks of 32 KiB, filled faster than
	// the timer, but for the last one (and, on a loaded machine, a block
	// the timer caught while it filled).
	const many = 400
	send(many, 1400)
	recv(many)
	bl, tm, fr := rx.Held()
	bl, tm, fr = bl-1, tm-1, fr-3
	if bl < 15 || bl > 20 || tm < 1 || tm > 3 || fr > many/4 {
		t.Fatalf("a burst of %d frames: %d blocks, %d timed out with %d frames; want about 17, the tail's 1 to 3", many, bl, tm, fr)
	}
}
