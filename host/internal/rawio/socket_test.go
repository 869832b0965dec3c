package rawio

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// pair opens a Socket on each end of a veth pair (MTU 9000) inside a fresh
// namespace. Needs root.
func pair(t *testing.T, optsA, optsB Options) (a, b *Socket) {
	env := netnstest.New(t, "hbrw")
	ns := env.Namespace("x")
	va, vb := env.Veth(ns, ns)
	env.MustExec(ns, "ip", "link", "set", va, "mtu", "9000")
	env.MustExec(ns, "ip", "link", "set", vb, "mtu", "9000")
	env.Do(ns, func() {
		var err error
		if a, err = Open(va, optsA); err != nil {
			t.Fatal(err)
		}
		if b, err = Open(vb, optsB); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// frames builds n PRISM-EtherType frames of size bytes from src to dst,
// frame i carrying i in its first payload bytes.
func frames(n, size int, dst, src net.HardwareAddr) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		f := make([]byte, size)
		copy(f[0:6], dst)
		copy(f[6:12], src)
		f[12], f[13] = 0x88, 0xB5
		f[14], f[15] = byte(i), byte(i>>8)
		for k := 16; k < size; k++ {
			f[k] = byte(k + i)
		}
		out[i] = f
	}
	return out
}

func TestBatchRoundTripNoAllocs(t *testing.T) {
	a, b := pair(t, Options{}, Options{})
	const n = 64
	out := frames(n, 9014, b.MAC(), a.MAC())
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, 9014)
	}
	sizes := make([]int, n)
	recvAll := func() {
		got := 0
		for got < n {
			k, err := b.RecvBatch(bufs[got:], sizes[got:])
			if err != nil {
				t.Fatal(err)
			}
			for i := got; i < got+k; i++ {
				if sizes[i] != len(out[i]) || string(bufs[i][:sizes[i]]) != string(out[i]) {
					t.Fatalf("frame %d: got %d bytes, want frame %d (%d bytes) unchanged", i, sizes[i], i, len(out[i]))
				}
			}
			got += k
		}
	}
	if k, err := a.SendBatch(out); err != nil || k != n {
		t.Fatalf("SendBatch: %d, %v", k, err)
	}
	recvAll()
	allocs := alloctest.PerRun(50, func() {
		if k, err := a.SendBatch(out); err != nil || k != n {
			t.Fatalf("SendBatch: %d, %v", k, err)
		}
		recvAll()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch of %d (send + receive), want 0", allocs, n)
	}
	if d := b.KernelDrops(); d != 0 {
		t.Fatalf("%d kernel drops", d)
	}
}

// TestDeadlines: a deadline in the past returns at once, without
// allocating; one set from another goroutine wakes a blocked reader; Close
// wakes it with net.ErrClosed.
func TestDeadlines(t *testing.T) {
	a, _ := pair(t, Options{}, Options{})
	bufs := [][]byte{make([]byte, 9014)}
	sizes := make([]int, 1)
	if err := a.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	allocs := alloctest.PerRun(100, func() {
		if _, err := a.RecvBatch(bufs, sizes); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("past deadline: %v", err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per timed-out read", allocs)
	}
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := a.RecvBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	a.SetReadDeadline(time.Unix(1, 0)) // the kick the host's Comm uses
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("kicked read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set from another goroutine did not wake the reader")
	}
	a.SetReadDeadline(time.Time{})
	go func() {
		_, err := a.RecvBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
	if _, err := a.SendBatch(frames(1, 100, a.MAC(), a.MAC())); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("send after Close: %v, want net.ErrClosed", err)
	}
}

// TestReceiveBufferHoldsWindows: 256 jumbo frames (four default windows)
// sent while the receiver is not reading all arrive with the default
// buffer; with the kernel's usual 208 KiB most would be dropped, and the
// drop counter says so.
func TestReceiveBufferHoldsWindows(t *testing.T) {
	const n = 256
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, 9014)
	}
	sizes := make([]int, n)
	// recv reads until n frames arrived or the socket stays empty.
	recv := func(s *Socket) int {
		got := 0
		for got < n {
			s.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := s.RecvBatch(bufs[got:], sizes[got:])
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		return got
	}
	a, b := pair(t, Options{}, Options{})
	if k, err := a.SendBatch(frames(n, 9014, b.MAC(), a.MAC())); err != nil || k != n {
		t.Fatalf("SendBatch: %d, %v", k, err)
	}
	if got, d := recv(b), b.KernelDrops(); got != n || d != 0 {
		t.Fatalf("default buffer: received %d of %d, %d kernel drops", got, n, d)
	}
	sa, sb := pair(t, Options{}, Options{SocketBuffer: 212992})
	if k, err := sa.SendBatch(frames(n, 9014, sb.MAC(), sa.MAC())); err != nil || k != n {
		t.Fatalf("SendBatch: %d, %v", k, err)
	}
	got, d := recv(sb), sb.KernelDrops()
	if got == n || d == 0 || got+int(d) != n {
		t.Fatalf("208 KiB buffer: received %d of %d with %d kernel drops; want drops, counted", got, n, d)
	}
	t.Logf("208 KiB buffer: %d of %d jumbo frames kept, %d dropped", got, n, d)
}
