package host

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/host/internal/rawio"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// TestLoopAllocsAFPacket is TestLoopAllocs over real AF_PACKET sockets: the
// rank's Comm on one end of a veth pair (NewComm's socket: recvmmsg,
// sendmmsg, read deadlines), the fake leaf on the other, served by its own
// goroutine. Steady state allocates nothing, anywhere in the process, and
// every value comes back exactly. Needs root.
func TestLoopAllocsAFPacket(t *testing.T) {
	env := netnstest.New(t, "hblp")
	ns := env.Namespace("x")
	va, vb := env.Veth(ns, ns)
	var pc *packetConn
	var leaf *rawio.Socket
	env.Do(ns, func() {
		var err error
		if pc, err = openPacketConn(va); err != nil {
			t.Fatal(err)
		}
		if leaf, err = rawio.Open(vb, rawio.Options{}); err != nil {
			t.Fatal(err)
		}
	})
	defer leaf.Close()
	defer pc.Close()
	var rankMAC, leafMAC [6]byte
	copy(rankMAC[:], pc.MAC())
	copy(leafMAC[:], leaf.MAC())
	var fl *fakeLeaf
	const n = 1 << 24 // INT8 at MTU 1500: ~11600 frames
	l, op, send, recv := commFixture(t, n, 1500, rankMAC, leafMAC, func(g *am.Grant) Conn {
		fl = newFakeLeaf(t, g, rankMAC, leafMAC, 1024)
		return pc
	})
	// The leaf: read a batch, answer it, send the answers; allocation free.
	// Its goroutine owns fl; the test reads fl's DATA count through
	// dataIn, and the rest once the goroutine ended.
	var dataIn atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var bufs [64][]byte
		var views [64][]byte
		var sizes [64]int
		for i := range bufs {
			bufs[i] = make([]byte, frameBufSize)
		}
		out := make([][]byte, 0, 1024)
		for {
			k, err := leaf.RecvBatch(bufs[:], sizes[:])
			if err != nil {
				return
			}
			for i := 0; i < k; i++ {
				views[i] = bufs[i][:sizes[i]]
			}
			fl.WriteBatch(views[:k])
			dataIn.Store(uint64(fl.dataIn))
			out = fl.drain(out[:0])
			if _, err := leaf.SendBatch(out); err != nil {
				return
			}
		}
	}()
	defer func() { leaf.Close(); <-done }()
	for i := 0; i < 20; i++ {
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	}
	in0 := dataIn.Load()
	a := alloctest.PerRun(200, func() {
		// A measurement repeated (alloctest.PerRun) may run past the
		// operation's end: with nothing registered the loop's read has
		// no deadline and would wait for ever.
		if op.state != opRunning {
			return
		}
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	})
	if a != 0 && !raceEnabled {
		t.Errorf("%v allocations per loop turn over AF_PACKET (want 0)", a)
	}
	if d := dataIn.Load() - in0; d < 200 {
		t.Fatalf("only %d DATA frames in 200 turns", d)
	}
	for op.state == opRunning {
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	}
	if r := <-op.result; r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.Equal(asBytes(send), asBytes(recv)) {
		t.Fatal("RESULT values differ from what was sent")
	}
	rt, _ := op.sw.Stats()
	leaf.Close()
	<-done
	t.Logf("%d DATA, %d RESULT, %d PROGRESS answers, %d retransmissions, %d kernel drops", fl.dataIn, fl.resOut, fl.progIn, rt, pc.KernelDrops())
}
