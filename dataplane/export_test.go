package dataplane

// StepForTest installs ports without RX goroutines and returns a function
// that runs one RX batch of port in (ReadBatch + process), so allocation
// tests and benchmarks drive the per-frame path synchronously.
func (d *Dataplane) StepForTest(ports []Port, in int) func() {
	var states []*portState
	for i, p := range ports {
		ps := d.newPortState(p)
		ps.index.Store(int32(i))
		close(ps.done) // no RX goroutine: Close must not wait for one
		close(ps.laneDone)
		states = append(states, ps)
	}
	d.snap.Store(d.buildSnapshot(states))
	r := d.newRx(states[in], false)
	return func() {
		n, err := states[in].port.ReadBatch(r.bufs, r.sizes)
		if err != nil {
			panic(err)
		}
		r.process(n)
	}
}

// SweepForTest runs one aging sweep now.
func (d *Dataplane) SweepForTest() { d.sweep() }
