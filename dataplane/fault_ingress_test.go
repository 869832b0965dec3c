package dataplane_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
	"github.com/prismd/prismd/internal/alloctest"
)

// ingressModel is the naive reading of IngressFault's documentation: three
// draws per frame (drop, duplicate, reorder), held frames released after
// ReorderDepth frames that were neither dropped nor held. It returns the
// delivery order and the frames still held at the end (released only by
// the idle timer).
func ingressModel(n int, f dataplane.IngressFault) (out, held []int) {
	rng := rand.New(rand.NewPCG(f.Seed, f.Seed^0x5851f42d4c957f2d))
	under := func(u uint64, p float64) bool { return float64(u)/(1<<64)*100 < p }
	depth := max(f.ReorderDepth, 1)
	type h struct{ seq, copies, left int }
	var hs []h
	for seq := 0; seq < n; seq++ {
		d, du, r := rng.Uint64(), rng.Uint64(), rng.Uint64()
		if under(d, f.DropPercent) {
			continue
		}
		copies := 1
		if under(du, f.DuplicatePercent) {
			copies = 2
		}
		if under(r, f.ReorderPercent) {
			hs = append(hs, h{seq, copies, depth})
			continue
		}
		for c := 0; c < copies; c++ {
			out = append(out, seq)
		}
		var keep []h
		for _, x := range hs {
			x.left--
			if x.left == 0 {
				for c := 0; c < x.copies; c++ {
					out = append(out, x.seq)
				}
				continue
			}
			keep = append(keep, x)
		}
		hs = keep
	}
	for _, x := range hs {
		held = append(held, x.seq)
	}
	return out, held
}

// ingressCounts is what ingressModel does to frames 0..n-1, counted: the
// frames neither delivered nor still held were dropped, repeats in the
// delivery are duplicates.
func ingressCounts(n int, f dataplane.IngressFault) (drops, dups uint64) {
	out, held := ingressModel(n, f)
	distinct := map[int]bool{}
	for _, seq := range out {
		distinct[seq] = true
	}
	return uint64(n - len(distinct) - len(held)), uint64(len(out) - len(distinct))
}

// ingressReordered counts the frames of 0..n-1 that ingressModel holds
// back: those that arrive after a higher sequence number, plus those still
// held at the end (the idle timer releases them after the last).
func ingressReordered(n int, f dataplane.IngressFault) uint64 {
	out, held := ingressModel(n, f)
	late, hi := map[int]bool{}, -1
	for _, seq := range out {
		if seq < hi {
			late[seq] = true
		}
		hi = max(hi, seq)
	}
	return uint64(len(late) + len(held))
}

func seqFrame(seq int) []byte {
	p := make([]byte, 46)
	binary.BigEndian.PutUint32(p, uint32(seq))
	return eth(hostB, hostA, 0x88B6, p...)
}

func frameSeq(f []byte) int { return int(binary.BigEndian.Uint32(f[14:])) }

// readSeqs reads p until it delivered want frames (then waits quiet for more)
// and returns their sequence numbers and arrival times.
func readSeqs(t *testing.T, p dataplane.Port, want int, quiet time.Duration) ([]int, []time.Time) {
	t.Helper()
	type got struct {
		seq int
		at  time.Time
	}
	ch := make(chan got, 8192)
	go func() {
		defer close(ch)
		bufs := make([][]byte, 16)
		for i := range bufs {
			bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("ReadBatch: %v", err)
				}
				return
			}
			now := time.Now()
			for i := 0; i < n; i++ {
				ch <- got{frameSeq(bufs[i][:sizes[i]]), now}
			}
		}
	}()
	var seqs []int
	var ats []time.Time
	deadline := time.After(10 * time.Second)
	for len(seqs) < want {
		select {
		case g := <-ch:
			seqs, ats = append(seqs, g.seq), append(ats, g.at)
		case <-deadline:
			p.Close()
			t.Fatalf("got %d of %d frames: %v", len(seqs), want, seqs)
		}
	}
	extra := time.After(quiet)
	for done := false; !done; {
		select {
		case g := <-ch:
			seqs, ats = append(seqs, g.seq), append(ats, g.at)
		case <-extra:
			done = true
		}
	}
	p.Close()
	for range ch {
	}
	return seqs, ats
}

// TestIngressFaultAgainstModel: loss, duplication and reordering of 3000
// frames through a fake port match the naive model exactly (same seed, same
// draws), with the idle release pushed out of the way so the order does not
// depend on timing.
func TestIngressFaultAgainstModel(t *testing.T) {
	for _, f := range []dataplane.IngressFault{
		{DropPercent: 10, DuplicatePercent: 5, ReorderPercent: 10, ReorderDepth: 3, Seed: 42},
		{DropPercent: 0.5, ReorderPercent: 30, ReorderDepth: 1, Seed: 7},
		{DuplicatePercent: 50, Seed: 1},
		{DropPercent: 100, Seed: 3},
		{ReorderPercent: 5, ReorderDepth: 20, Delay: time.Millisecond, Seed: 9},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			f.ReorderIdle = time.Hour
			const n = 3000
			want, held := ingressModel(n, f)
			under := porttest.New("p", porttest.MAC(1), 1500)
			p := dataplane.WithFault(under, dataplane.Fault{Ingress: f})
			for seq := 0; seq < n; seq++ {
				under.Inject(seqFrame(seq))
			}
			got, _ := readSeqs(t, p, len(want), 50*time.Millisecond)
			if !slices.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("delivered %d frames, model %d; first difference at %d: got %v, model %v",
					len(got), len(want), i, got[i:min(i+10, len(got))], want[i:min(i+10, len(want))])
			}
			t.Logf("%d sent, %d delivered, %d still held", n, len(got), len(held))
		})
	}
}

// TestIngressFaultIdleRelease: frames held with nothing to overtake them
// come out after ReorderIdle, in the order they were held.
func TestIngressFaultIdleRelease(t *testing.T) {
	under := porttest.New("p", porttest.MAC(1), 1500)
	f := dataplane.IngressFault{ReorderPercent: 100, ReorderDepth: 1000, ReorderIdle: 30 * time.Millisecond}
	p := dataplane.WithFault(under, dataplane.Fault{Ingress: f})
	start := time.Now()
	for seq := 0; seq < 10; seq++ {
		under.Inject(seqFrame(seq))
	}
	got, ats := readSeqs(t, p, 10, 20*time.Millisecond)
	if !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("released %v, want 0..9 in order", got)
	}
	if el := ats[0].Sub(start); el < 30*time.Millisecond {
		t.Fatalf("held frames released after %v, before the 30ms idle time", el)
	}
}

// TestIngressFaultDelay: every frame reaches the reader at least Delay after
// it was received, in order.
func TestIngressFaultDelay(t *testing.T) {
	under := porttest.New("p", porttest.MAC(1), 1500)
	p := dataplane.WithFault(under, dataplane.Fault{Ingress: dataplane.IngressFault{Delay: 40 * time.Millisecond}})
	var sent []time.Time
	for seq := 0; seq < 5; seq++ {
		sent = append(sent, time.Now())
		under.Inject(seqFrame(seq))
		time.Sleep(5 * time.Millisecond)
	}
	got, ats := readSeqs(t, p, 5, 10*time.Millisecond)
	if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("delay alone reordered or lost frames: %v", got)
	}
	for i := range got {
		if d := ats[i].Sub(sent[i]); d < 40*time.Millisecond {
			t.Fatalf("frame %d delivered %v after it was received, want >= 40ms", i, d)
		}
	}
}

// TestIngressFaultBeforeClassification: a frame the fault drops is never
// counted, learned or forwarded; a duplicated one is forwarded twice.
func TestIngressFaultBeforeClassification(t *testing.T) {
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw0 := porttest.New("p0", porttest.MAC(0x10), 1500)
	p1 := porttest.New("p1", porttest.MAC(0x11), 1500)
	p0 := dataplane.WithFault(raw0, dataplane.Fault{Ingress: dataplane.IngressFault{DropPercent: 100}})
	if err := d.SetPorts([]dataplane.Port{p0, p1}); err != nil {
		t.Fatal(err)
	}
	raw0.Inject(eth(bcast, hostA, 0x0806))
	if got, err := p1.Wait(1, 100*time.Millisecond); err == nil {
		t.Fatalf("a dropped frame was forwarded: %x", got)
	}
	if st := d.Stats(); st.Ports[0].RxFrames != 0 || st.MACEntries != 0 {
		t.Fatalf("a dropped frame was counted (%d) or learned (%d)", st.Ports[0].RxFrames, st.MACEntries)
	}

	raw1 := porttest.New("p2", porttest.MAC(0x12), 1500)
	p2 := dataplane.WithFault(raw1, dataplane.Fault{Ingress: dataplane.IngressFault{DuplicatePercent: 100}})
	if err := d.SetPorts([]dataplane.Port{p0, p1, p2}); err != nil {
		t.Fatal(err)
	}
	raw1.Inject(eth(hostB, hostC, 0x0800, 1, 2, 3))
	if _, err := p1.Wait(2, 2*time.Second); err != nil {
		t.Fatalf("duplicated frame: %v", err)
	}
	if st := d.Stats(); st.Ports[2].RxFrames != 2 {
		t.Fatalf("duplicated frame counted %d times on ingress, want 2", st.Ports[2].RxFrames)
	}
}

// TestIngressFaultZeroAllocs: the per-frame path allocates nothing, with the
// fault off (WithFault returns the port itself) and on (every decision and
// a delay), through the dataplane's RX path. AllocsPerRun counts the
// fault's reader goroutine too.
func TestIngressFaultZeroAllocs(t *testing.T) {
	plain := porttest.New("p", porttest.MAC(1), 1500)
	if dataplane.WithFault(plain, dataplane.Fault{}) != dataplane.Port(plain) {
		t.Fatal("an inactive fault wrapped the port")
	}
	for _, f := range []dataplane.IngressFault{
		{DropPercent: 10, DuplicatePercent: 10, ReorderPercent: 10, ReorderDepth: 3, Seed: 5},
		{DropPercent: 1, ReorderPercent: 20, ReorderDepth: 2, Delay: 20 * time.Microsecond},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			d, err := dataplane.New(dataplane.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			p0 := porttest.New("p0", porttest.MAC(0x10), 1500)
			p1 := porttest.New("p1", porttest.MAC(0x11), 1500)
			batch := make([][]byte, dataplane.DefaultBatch)
			for i := range batch {
				batch[i] = seqFrame(i)
			}
			p0.SetReplay(batch)
			p1.SetDiscard()
			fp := dataplane.WithFault(p0, dataplane.Fault{Ingress: f})
			defer fp.Close()
			step := d.StepForTest([]dataplane.Port{fp, p1}, 0)
			for i := 0; i < 20; i++ {
				step()
			}
			before := p1.Written()
			if a := alloctest.PerRun(200, step); a != 0 {
				t.Errorf("%.2f allocations per RX batch with an ingress fault, want 0", a)
			}
			if p1.Written() == before {
				t.Fatal("no frame got through the fault")
			}
		})
	}
}

// TestFaultBothDirections: one Fault impairs both directions of a port, and
// Close ends both wrappers (a ReadBatch blocked in the ingress one returns).
func TestFaultBothDirections(t *testing.T) {
	under := porttest.New("p", porttest.MAC(1), 1500)
	p := dataplane.WithFault(under, dataplane.Fault{Delay: 5 * time.Millisecond,
		Ingress: dataplane.IngressFault{DuplicatePercent: 100}})
	if n, err := p.WriteBatch([][]byte{seqFrame(1)}); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if got, err := under.Wait(1, 2*time.Second); err != nil || frameSeq(got[0]) != 1 {
		t.Fatalf("egress: %v %v", got, err)
	}
	under.Inject(seqFrame(2))
	bufs := [][]byte{make([]byte, 1518), make([]byte, 1518)}
	sizes := make([]int, 2)
	got := 0
	for got < 2 {
		n, err := p.ReadBatch(bufs[got:], sizes[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if frameSeq(bufs[0][:sizes[0]]) != 2 || frameSeq(bufs[1][:sizes[1]]) != 2 {
		t.Fatalf("ingress: want frame 2 twice, got %d and %d", frameSeq(bufs[0]), frameSeq(bufs[1]))
	}
	errc := make(chan error, 1)
	go func() {
		_, err := p.ReadBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	p.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not unblock ReadBatch")
	}
}

// TestIngressFaultCounters: Stats().Fault counts exactly the frames the
// documented draw rule drops and delivers twice (ingressCounts, from the
// naive model).
func TestIngressFaultCounters(t *testing.T) {
	for _, f := range []dataplane.IngressFault{
		{DropPercent: 30, DuplicatePercent: 10, Seed: 5},
		{DropPercent: 100, Seed: 3},
		{DuplicatePercent: 100, Seed: 4},
		{DropPercent: 0.5, DuplicatePercent: 50, Delay: time.Millisecond, Seed: 6},
		{DropPercent: 2, DuplicatePercent: 2, ReorderPercent: 10, ReorderDepth: 5, Seed: 7},
		{ReorderPercent: 100, ReorderDepth: 1, Seed: 8},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			const n = 3000
			wantDrops, wantDups := ingressCounts(n, f)
			under := porttest.New("p", porttest.MAC(1), 1500)
			p := dataplane.WithFault(under, dataplane.Fault{Ingress: f})
			defer p.Close()
			var delivered atomic.Uint64
			go func() {
				bufs := make([][]byte, 16)
				for i := range bufs {
					bufs[i] = make([]byte, 1518)
				}
				sizes := make([]int, len(bufs))
				for {
					k, err := p.ReadBatch(bufs, sizes)
					if err != nil {
						return
					}
					delivered.Add(uint64(k))
				}
			}()
			for seq := 0; seq < n; seq++ {
				under.Inject(seqFrame(seq))
			}
			// Every frame is accounted for once it was delivered (once or
			// twice) or dropped.
			var st dataplane.FaultStats
			for deadline := time.Now().Add(10 * time.Second); ; {
				st = p.Stats().Fault
				if delivered.Load()-st.IngressDuplicates+st.IngressDrops == n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 10s: %d delivered, counters %+v; %d frames sent", delivered.Load(), st, n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			want := dataplane.FaultStats{IngressDrops: wantDrops, IngressDuplicates: wantDups, IngressReordered: ingressReordered(n, f)}
			if st != want {
				t.Fatalf("Stats().Fault = %+v, want %+v (the draw rule's counts)", st, want)
			}
		})
	}
}
