package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/packet"

	"github.com/prismd/prismd/internal/netnstest"
)

// multiQueuePair is a veth pair with 4 active queues each way, end a in
// namespace a, end b in namespace b.
func multiQueuePair(t *testing.T) (env *netnstest.Env, nsA, nsB, ifA, ifB string) {
	env = netnstest.New(t, "xd")
	nsA, nsB = env.Namespace("a"), env.Namespace("b")
	ifA, ifB = env.ID()+"mqa", env.ID()+"mqb"
	env.MustExec("", "ip", "link", "add", ifA, "numtxqueues", "4", "numrxqueues", "4", "type", "veth",
		"peer", "name", ifB, "numtxqueues", "4", "numrxqueues", "4")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", ifA).Run() })
	for _, x := range [][2]string{{ifA, nsA}, {ifB, nsB}} {
		env.MustExec("", "ip", "link", "set", x[0], "netns", x[1])
		// veth starts with one active queue of the four it has.
		env.MustExec(x[1], "ethtool", "-L", x[0], "rx", "4", "tx", "4")
		env.MustExec(x[1], "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
		env.MustExec(x[1], "ip", "link", "set", x[0], "up")
	}
	return env, nsA, nsB, ifA, ifB
}

// udpFrame is an IPv4/UDP frame from source port sport, so the sender's
// transmit queue (picked by flow hash) differs between flows. The checksums
// do not matter: nothing parses it above L2.
func udpFrame(dst, src [6]byte, sport uint16, seq uint32) []byte {
	f := make([]byte, 14+20+8+8)
	copy(f, dst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	copy(ip[12:], []byte{10, 80, 0, 2})
	copy(ip[16:], []byte{10, 80, 0, 1})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 9)
	binary.BigEndian.PutUint16(ip[24:], 16)
	binary.BigEndian.PutUint32(ip[28:], seq)
	return f
}

// TestMultiQueue: one socket per active receive queue; frames of many flows,
// spread by the sender over its transmit queues, land on several receive
// queues and every one is read exactly once.
func TestMultiQueue(t *testing.T) {
	for _, native := range []bool{false, true} {
		t.Run(fmt.Sprintf("native=%v", native), func(t *testing.T) {
			env, nsA, nsB, ifA, ifB := multiQueuePair(t)
			var s *Socket
			var err error
			env.Do(nsA, func() { s, err = Open(ifA, Options{MaxFrame: 1518, Native: native}) })
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Queues() != 4 {
				t.Fatalf("Queues() = %d, want 4", s.Queues())
			}
			var c *packet.Conn
			env.Do(nsB, func() {
				ifi, ierr := net.InterfaceByName(ifB)
				if ierr != nil {
					err = ierr
					return
				}
				// A plain packet socket goes through dev_queue_xmit, whose
				// flow hash spreads the flows over the 4 transmit queues.
				c, err = packet.Listen(ifi, packet.Raw, 0x0800, nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			far := [6]byte{0x02, 0, 0, 0, 0, 0x42}
			src := [6]byte{0x02, 0, 0, 0, 0, 0x43}
			const n = 512
			for i := 0; i < n; i++ {
				f := udpFrame(far, src, uint16(1000+i%64), uint32(i))
				if _, err := c.WriteTo(f, &packet.Addr{HardwareAddr: far[:]}); err != nil {
					t.Fatal(err)
				}
			}
			seen := make([]bool, n)
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, len(bufs))
			got := 0
			timer := time.AfterFunc(5*time.Second, func() { s.Close() })
			defer timer.Stop()
			for got < n {
				k, _, err := s.RecvBatch(bufs, sizes)
				if err != nil {
					t.Fatalf("got %d of %d frames: %v", got, n, err)
				}
				for i := 0; i < k; i++ {
					f := bufs[i][:sizes[i]]
					if len(f) != 50 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
						continue
					}
					seq := binary.BigEndian.Uint32(f[42:])
					if seq >= n || seen[seq] {
						t.Fatalf("frame %d read twice or out of range", seq)
					}
					seen[seq] = true
					got++
				}
			}
			used := 0
			var per []uint32
			for _, q := range s.qs {
				per = append(per, q.rx.cachedCons)
				if q.rx.cachedCons > 0 {
					used++
				}
			}
			t.Logf("frames per receive queue: %v", per)
			if used < 2 {
				t.Errorf("all frames arrived on one queue (%v); the test did not exercise several sockets", per)
			}
		})
	}
}

// TestQueuesOption: Queues limits the sockets; asking for more than the
// interface has is an error naming both numbers.
func TestQueuesOption(t *testing.T) {
	env, nsA, _, ifA, _ := multiQueuePair(t)
	var s *Socket
	var err error
	env.Do(nsA, func() { s, err = Open(ifA, Options{MaxFrame: 1518, Queues: 2}) })
	if err != nil {
		t.Fatal(err)
	}
	if s.Queues() != 2 {
		t.Errorf("Queues() = %d, want 2", s.Queues())
	}
	s.Close()
	env.Do(nsA, func() { _, err = Open(ifA, Options{MaxFrame: 1518, Queues: 5}) })
	if err == nil || !strings.Contains(err.Error(), "4 receive queues, 5 requested") {
		t.Errorf("Open with 5 of 4 queues: %v", err)
	}
}

// publishInvalid queues one TX descriptor the kernel must refuse (longer
// than a chunk) on q and kicks it. The chunk stays on the free stack: the
// kernel never completes an invalid descriptor.
func publishInvalid(t *testing.T, q *xsk) {
	t.Helper()
	q.txMu.Lock()
	defer q.txMu.Unlock()
	if q.tx.free(1) < 1 || len(q.txFree) == 0 {
		t.Fatal("no room in the TX ring")
	}
	d := &q.txDescs[q.tx.slot(q.tx.reserve(1))]
	d.Addr, d.Len, d.Options = q.txFree[len(q.txFree)-1], q.chunk+1, 0
	q.tx.publish()
	if err := q.kick(); err != nil {
		t.Fatal(err)
	}
}

// TestStatsSumQueues: Stats sums the cumulative XDP_STATISTICS of every
// queue's socket, once. Receive: with small rings and no reader, frames of
// many flows overflow several queues; every frame sent is then either read
// or in RxDropped, and reading Stats again (the kernel counters do not
// reset) changes nothing. Transmit: invalid descriptors published on two
// queues (one on queue 0, two on queue 1) make TxInvalid 3. After Close
// Stats still reports the final totals.
func TestStatsSumQueues(t *testing.T) {
	env, nsA, nsB, ifA, ifB := multiQueuePair(t)
	var s *Socket
	var err error
	env.Do(nsA, func() { s, err = Open(ifA, Options{MaxFrame: 1518, RingSize: 64}) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var c *packet.Conn
	env.Do(nsB, func() {
		ifi, ierr := net.InterfaceByName(ifB)
		if ierr != nil {
			err = ierr
			return
		}
		c, err = packet.Listen(ifi, packet.Raw, 0x0800, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	far := [6]byte{0x02, 0, 0, 0, 0, 0x42}
	src := [6]byte{0x02, 0, 0, 0, 0, 0x43}
	const n = 2000
	for i := 0; i < n; i++ {
		f := udpFrame(far, src, uint16(1000+i%64), uint32(i))
		if _, err := c.WriteTo(f, &packet.Addr{HardwareAddr: far[:]}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the kernel finish delivering
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var per []uint64
	overflowed := 0
	for _, q := range s.qs {
		k, err := statistics(q.fd)
		if err != nil {
			t.Fatal(err)
		}
		per = append(per, k.Rx_dropped+k.Rx_ring_full)
		if k.Rx_dropped+k.Rx_ring_full > 0 {
			overflowed++
		}
	}
	t.Logf("drops per queue: %v, Stats %+v", per, st)
	if overflowed < 2 {
		t.Fatalf("drops on %d queues (%v); the test needs several to check the sum", overflowed, per)
	}
	if again, _ := s.Stats(); again != st {
		t.Fatalf("second Stats without traffic = %+v, want %+v: the counters are cumulative", again, st)
	}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	got := 0
	for quiet := time.Now(); time.Since(quiet) < 300*time.Millisecond; {
		k := 0
		for _, q := range s.qs {
			m, _ := q.recv(bufs, sizes)
			for i := 0; i < m; i++ {
				if sizes[i] == 50 {
					got++
				}
			}
			k += m
		}
		if k > 0 {
			quiet = time.Now()
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if uint64(got)+st.RxDropped != n {
		t.Fatalf("read %d + RxDropped %d = %d, want the %d frames sent", got, st.RxDropped, uint64(got)+st.RxDropped, n)
	}

	publishInvalid(t, s.qs[0])
	publishInvalid(t, s.qs[1])
	publishInvalid(t, s.qs[1])
	st, err = s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxInvalid != 3 || st.TxDriverDrops != 0 {
		t.Fatalf("after 3 invalid descriptors on 2 queues: TxInvalid %d, TxDriverDrops %d; want 3, 0", st.TxInvalid, st.TxDriverDrops)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after, err := s.Stats(); after != st || err != nil {
		t.Fatalf("Stats after Close = %+v, %v; want the final %+v", after, err, st)
	}
}
