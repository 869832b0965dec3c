package dataplane_test

import (
	"testing"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
	"github.com/prismd/prismd/internal/alloctest"
)

// forwardFixture: port 0 replays a batch of unicast frames to hostB, which is
// learned on port 1; so every frame takes the learned-unicast path.
func forwardFixture(tb testing.TB, size int, flood bool) (func(), *porttest.Port) {
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	p0 := porttest.New("p0", porttest.MAC(0x10), 1500)
	p1 := porttest.New("p1", porttest.MAC(0x11), 1500)
	p2 := porttest.New("p2", porttest.MAC(0x12), 1500)
	dst := hostB
	if flood {
		dst = bcast
	}
	frame := eth(dst, hostA, 0x0800, make([]byte, size-14)...)
	batch := make([][]byte, dataplane.DefaultBatch)
	for i := range batch {
		batch[i] = frame
	}
	p0.SetReplay(batch)
	p1.SetReplay([][]byte{eth(bcast, hostB, 0x0806)})
	p2.SetDiscard()
	ports := []dataplane.Port{p0, p1, p2}
	step1 := d.StepForTest(ports, 1)
	step1() // learn hostB on port 1
	return d.StepForTest(ports, 0), p1
}

func TestForwardZeroAllocs(t *testing.T) {
	for _, flood := range []bool{false, true} {
		step, p1 := forwardFixture(t, 64, flood)
		step() // warm up: TX queues are built on the first batch
		before := p1.Written()
		step()
		if got := p1.Written() - before; got != dataplane.DefaultBatch {
			t.Fatalf("flood=%v: port 1 got %d frames per batch, want %d", flood, got, dataplane.DefaultBatch)
		}
		if a := alloctest.PerRun(100, step); a != 0 {
			t.Errorf("flood=%v: %.1f allocations per batch of %d frames, want 0", flood, a, dataplane.DefaultBatch)
		}
	}
}

func BenchmarkForward(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(sizeName(size), func(b *testing.B) {
			step, _ := forwardFixture(b, size, false)
			step()
			b.ReportAllocs()
			b.SetBytes(int64(size * dataplane.DefaultBatch))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*dataplane.DefaultBatch), "ns/frame")
		})
	}
}

func sizeName(n int) string {
	if n == 64 {
		return "64B"
	}
	return "1500B"
}
