package dataplane

// StepForTest installs ports without RX goroutines and returns a function
// that runs one RX batch of port in (read + process, lending as the RX goroutine would), so allocation
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
	read, done := r.portReader()
	return func() {
		n, err := read()
		if err != nil {
			panic(err)
		}
		r.process(n)
		done() // hand lent frames back: a test may close the port next
	}
}

// SweepForTest runs one aging sweep now.
func (d *Dataplane) SweepForTest() { d.sweep() }
