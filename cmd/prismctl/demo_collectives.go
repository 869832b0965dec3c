// This file owns the collective steps of `prismctl demo` (issue #5): an
// Aggregation Manager in this process with CONTROL from h1's eth0, one rank
// per host opened inside its namespace, then ALLREDUCE and REDUCE of one
// million FP32 values, each checked against an oracle that never touches the
// switches (math/big over the same deterministic inputs, rounded once), with
// the bytes every link carried read from the switches' own /metrics.

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/host"
)

const (
	demoVector = 1 << 20 // elements per rank ("one million")
	demoJob    = 1
	// demoOpTimeout bounds one collective end to end. A 4 MB ALLREDUCE
	// takes well under a second on an idle machine; a loaded 2-core box
	// with four ranks and three switches competing can be 50x slower.
	demoOpTimeout = 3 * time.Minute
	// demoInactivity is the operation's inactivity bound (the AM default
	// is 5s): generous so a descheduled switch is not taken for a dead one.
	demoInactivity = 15 * time.Second
)

// demoColl is what the collective steps share.
type demoColl struct {
	m      *am.Manager
	amLog  *logBuf
	hosts  []string
	comms  []*host.Comm
	amHost string
}

// logBuf keeps the AM's log for an error report instead of interleaving it
// with the demo's output.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuf) logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
	if len(b.lines) > 200 {
		b.lines = b.lines[len(b.lines)-100:]
	}
}

func (b *logBuf) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n     ")
}

// demoStartRanks starts the AM on the first host (CONTROL from its eth0; the
// runtime channel on 127.0.0.1 in the demo's own namespace, which the
// in-process ranks reach directly) and opens one rank per host.
func demoStartRanks(d *demo) error {
	hosts := d.topo.Hosts()
	if len(hosts) < 2 {
		return fmt.Errorf("topology %s has %d hosts; the collectives need at least 2", d.topo.Name, len(hosts))
	}
	c := &demoColl{hosts: hosts, amHost: hosts[0], amLog: &logBuf{}}
	var conn *am.PacketConn
	if err := d.lab.Do(c.amHost, func() error {
		var err error
		conn, err = am.OpenConn("eth0")
		return err
	}); err != nil {
		return fmt.Errorf("AM: CONTROL socket on %s:eth0: %w", c.amHost, err)
	}
	m, err := am.New(am.Config{Topology: d.topo, Conn: conn, Logf: c.amLog.logf,
		CtlTimeout: 10 * time.Second, BarrierTimeout: time.Minute})
	if err != nil {
		conn.Close()
		return fmt.Errorf("AM: %w", err)
	}
	c.m = m
	srv := httptest.NewServer(m.Handler())
	d.cleanups = append(d.cleanups, func() { m.StopStreams(); srv.Close(); m.Close() })
	fmt.Fprintf(d.out, "   AM: CONTROL from %s:eth0 (%s), runtime channel %s\n", c.amHost, conn.MAC(), srv.URL)

	c.comms = make([]*host.Comm, len(hosts))
	d.cleanups = append(d.cleanups, func() {
		for _, cm := range c.comms {
			if cm != nil {
				cm.Close()
			}
		}
	})
	for i, h := range hosts {
		ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
		err := d.lab.Do(h, func() error {
			var err error
			c.comms[i], err = host.NewComm(ctx, host.Config{Rank: i, Size: len(hosts), Iface: "eth0",
				Job: demoJob, Coordinator: srv.URL, Node: h})
			return err
		})
		cancel()
		if err != nil {
			return fmt.Errorf("rank %d on %s: %w", i, h, err)
		}
	}
	fmt.Fprintf(d.out, "   ranks: %s (job %d, one per host, AF_PACKET on eth0)\n", rankList(hosts), demoJob)
	d.coll = c
	return nil
}

func rankList(hosts []string) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = fmt.Sprintf("%d=%s", i, h)
	}
	return strings.Join(parts, " ")
}

func demoAllReduceKulisch(d *demo) error {
	if err := d.collective("allreduce", -1, "kulisch", "", 11); err != nil {
		return err
	}
	// The same on values shaped like training gradients: their sums at a
	// leaf are binary64 values, so the leaves send KULISCH_F64 partials
	// (prismd's default kulisch_partials), a copy instead of a plan.
	return d.collective("allreduce", -1, "kulisch", "gradient", 14)
}

func demoReduceKulisch(d *demo) error {
	return d.collective("reduce", d.rankOn("h2", 1), "kulisch", "", 12)
}

// rankOn is the rank that runs on host h, or fallback (its rank in the
// shipped topologies) when no rank does or the ranks did not start.
func (d *demo) rankOn(h string, fallback int) int {
	if d.coll != nil {
		if i := slices.Index(d.coll.hosts, h); i >= 0 {
			return i
		}
	}
	return fallback
}

func demoAllReduceArrival(d *demo) error {
	if err := d.collective("allreduce", -1, "fp32", "", 13); err != nil {
		return err
	}
	// A REDUCE with FP32_ARRIVAL too, on integers: exact in any order,
	// so checked bit for bit like KULISCH_FIXED.
	return d.collective("reduce", d.rankOn("h3", len(d.coll.comms)-1), "fp32", "integral", 15)
}

// collective runs one collective on every rank and checks it: exact
// (bit for bit) for KULISCH_FIXED, within the recursive-summation bound
// for FP32_ARRIVAL. data is genSpec's distribution ("": mixed).
func (d *demo) collective(coll string, root int, acc, data string, seed uint64) error {
	c := d.coll
	if c == nil {
		return errors.New("skipped: the AM and ranks did not start (see the step that starts them)")
	}
	n := len(c.comms)
	// The mixed-magnitude FP32 data of 'prismctl allreduce' (subnormals,
	// 1e30s, cancellation) unless data says otherwise, never the integer
	// variant: a float32 sum in arrival order then differs from the exact
	// one in places.
	gen := genSpec{seed: seed, format: "fp32", size: n, data: data}
	sends := make([][]float32, n)
	recvs := make([][]float32, n)
	for r := range sends {
		sends[r] = gen.vector(r, d.count).([]float32)
		recvs[r] = make([]float32, d.count)
		for i := range recvs[r] {
			recvs[r][i] = float32(math.NaN()) // what was not written shows
		}
	}
	policy := map[string]string{"kulisch": "KULISCH_FIXED", "fp32": "FP32_ARRIVAL"}[acc]
	what := fmt.Sprintf("ALLREDUCE of %d FP32 x %d ranks, %s", d.count, n, policy)
	if coll == "reduce" {
		what = fmt.Sprintf("REDUCE to rank %d (%s) of %d FP32 x %d ranks, %s", root, c.hosts[root], d.count, n, policy)
	}
	switch data {
	case "gradient":
		what += ", gradient-like values (N(0,1) x 2^-12..2^-4)"
	case "integral":
		what += ", integer values (their float32 sums are exact in any order)"
	default:
		what += ", mixed values (subnormals to 1e30 with cancellation: the exactness stress, whose exact partials cost the most)"
	}
	fmt.Fprintf(d.out, "   %s\n", what)

	before, err := d.linkCounters()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, demoOpTimeout)
	defer cancel()
	errs := make([]error, n)
	stats := make([]host.Stats, n)
	var wg sync.WaitGroup
	start := time.Now()
	for r, cm := range c.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := &host.Options{Acc: acc, Timeout: demoInactivity}
			var q *host.Request
			if coll == "allreduce" {
				q = cm.AllReduceAsync(ctx, sends[r], recvs[r], opts)
			} else {
				q = cm.ReduceAsync(ctx, sends[r], recvs[r], root, opts)
			}
			errs[r] = q.Wait()
			stats[r] = q.Stats()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var failed []error
	for r, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("rank %d (%s): %w", r, c.hosts[r], err))
		}
	}
	if len(failed) > 0 && d.ctx.Err() != nil {
		return fmt.Errorf("%s: interrupted after %v", what, took.Round(time.Millisecond))
	}
	if len(failed) > 0 {
		if ctx.Err() == context.DeadlineExceeded {
			failed = append(failed, fmt.Errorf("the collective did not finish within %v", demoOpTimeout))
		}
		return fmt.Errorf("%s: %w\n     AM log (last lines):\n     %s", what, errors.Join(failed...), c.amLog.tail(15))
	}
	after, err := d.linkCounters()
	if err != nil {
		return err
	}

	var setup time.Duration
	var retx, frames uint64
	var leaves []string
	tree := "the tree"
	for _, s := range stats {
		setup = max(setup, s.Setup)
		retx += s.Retransmits
		frames += s.Frames
		if g := s.Grant; g != nil {
			if !slices.Contains(leaves, g.Leaf) {
				leaves = append(leaves, g.Leaf)
			}
			if st, err := c.m.Op(g.ID); err == nil && st.Root != "" {
				tree = "the tree rooted at " + st.Root // "tree TREE" named the kind, not a switch
			}
		}
	}
	slices.Sort(leaves)
	vecBytes := int64(d.count) * 4
	fmt.Fprintf(d.out, "   on %s (leaves %s): time %v (setup %v), algorithm bandwidth %s, %d DATA frames from the ranks, %d retransmitted\n",
		tree, strings.Join(leaves, ", "), took.Round(time.Millisecond), setup.Round(time.Millisecond), mbps(vecBytes, took), frames, retx)
	d.printLinkBytes(before, after, vecBytes)

	// The oracle: every rank's input again, summed exactly in math/big and
	// rounded once, ties to even, to FP32.
	vstart := time.Now()
	who := []int{root}
	if coll == "allreduce" {
		who = make([]int, n)
		for r := range who {
			who[r] = r
		}
	}
	res := verifyExact(d.ctx, sends, recvs, who)
	if err := d.ctx.Err(); err != nil {
		return fmt.Errorf("verification interrupted: %w", err)
	}
	vt := time.Since(vstart).Round(time.Millisecond)
	if acc == "kulisch" {
		if res.differ > 0 || res.outside > 0 {
			return fmt.Errorf("%s: %d of %d results differ from the exact sum (first: %s)", what, res.differ, res.checked, res.first)
		}
		fmt.Fprintf(d.out, "   verified: %d results on %s equal the exact sum (math/big, rounded once RNE to FP32) bit for bit [%v]\n",
			res.checked, hostList(c.hosts, who), vt)
		return nil
	}
	if res.outside > 0 {
		return fmt.Errorf("%s: %d of %d results outside the FP32 summation error bound (first: %s)", what, res.outside, res.checked, res.firstOut)
	}
	if data == "integral" {
		// Integers: every order of float32 additions gives the exact
		// sum, so FP32_ARRIVAL is checked bit for bit too.
		if res.differ > 0 {
			return fmt.Errorf("%s: %d of %d results differ from the exact sum of integers (first: %s)", what, res.differ, res.checked, res.first)
		}
		fmt.Fprintf(d.out, "   verified: %d results on %s equal the exact sum bit for bit (integers: exact in any order, as FP32_ARRIVAL sums them) [%v]\n",
			res.checked, hostList(c.hosts, who), vt)
		return nil
	}
	fmt.Fprintf(d.out, "   FP32_ARRIVAL rounds after every addition in the order frames arrive, so it is order dependent:\n")
	fmt.Fprintf(d.out, "   %d of %d results (%.3f%%) differ from the exactly rounded sum, all within |err| <= gamma(%d)*sum|x| [%v]\n",
		res.differ, res.checked, 100*float64(res.differ)/float64(max(res.checked, 1)), n-1, vt)
	if res.differ > 0 {
		fmt.Fprintf(d.out, "   (e.g. %s; KULISCH_FIXED above is exact on the same kind of data)\n", res.first)
	}
	return nil
}

func hostList(hosts []string, who []int) string {
	s := make([]string, len(who))
	for i, r := range who {
		s[i] = hosts[r]
	}
	return strings.Join(s, ",")
}

type verifyResult struct {
	checked, differ, outside int
	first, firstOut          string
}

// verifyExact compares recvs[r] for r in who with the exact column sums of
// sends rounded once to FP32 (roundTo, ties to even), and with the error
// bound of any order of n-1 FP32 additions: |got - exact| <= gamma(n-1) *
// sum |x_i|, gamma(k) = k*u/(1-k*u), u = 2^-24 (Higham, Accuracy and
// Stability, 4.2). The columns are split over the CPUs.
func verifyExact(ctx context.Context, sends, recvs [][]float32, who []int) verifyResult {
	n := len(sends[0])
	k := float64(len(sends) - 1)
	u := math.Ldexp(1, -24)
	gamma := k * u / (1 - k*u) * (1 + 1e-9) // slack for the float64 bound itself
	workers := max(runtime.NumCPU(), 1)
	parts := make([]verifyResult, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &parts[w]
			sum := new(big.Float).SetPrec(512) // >= 2^127 .. 2^-149 span + 24 + carries
			term := new(big.Float).SetPrec(512)
			diff := new(big.Float).SetPrec(512)
			bound := new(big.Float).SetPrec(512)
			for i := lo; i < hi; i++ {
				if i&4095 == 0 && ctx.Err() != nil {
					return // the caller reports the interrupt
				}
				sum.SetInt64(0)
				allNeg := true
				abs := 0.0
				for _, s := range sends {
					x := float64(s[i])
					if !(x == 0 && math.Signbit(x)) {
						allNeg = false
					}
					abs += math.Abs(x)
					sum.Add(sum, term.SetFloat64(x))
				}
				want, _ := roundTo(sum, "fp32", allNeg)
				bound.SetFloat64(gamma * abs)
				for _, r := range who {
					got := recvs[r][i]
					p.checked++
					if math.Float32bits(got) == want {
						continue
					}
					p.differ++
					if p.first == "" {
						p.first = fmt.Sprintf("rank %d element %d: got %g (%#08x), exact sum rounded %g (%#08x)",
							r, i, got, math.Float32bits(got), math.Float32frombits(want), want)
					}
					g := float64(got)
					if math.IsNaN(g) || math.IsInf(g, 0) || diff.Sub(term.SetFloat64(g), sum).Abs(diff).Cmp(bound) > 0 {
						p.outside++
						if p.firstOut == "" {
							p.firstOut = fmt.Sprintf("rank %d element %d: got %g, exact %s, bound %g",
								r, i, got, sum.Text('g', 12), gamma*abs)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	var res verifyResult
	for _, p := range parts {
		res.checked += p.checked
		res.differ += p.differ
		res.outside += p.outside
		if res.first == "" {
			res.first = p.first
		}
		if res.firstOut == "" {
			res.firstOut = p.firstOut
		}
	}
	return res
}

// portBytes is one prismd port's byte counters.
type portBytes struct{ rx, tx int64 }

// linkCounters scrapes every prismd's /metrics: switch -> port -> bytes.
func (d *demo) linkCounters() (map[string]map[string]portBytes, error) {
	out := map[string]map[string]portBytes{}
	for _, sw := range d.topo.NodesOf(deploy.KindPrismd) {
		ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
		text, err := d.lab.Metrics(ctx, sw)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("byte counters of %s: %w", sw, err)
		}
		ports := map[string]portBytes{}
		byPort, _ := portTable(text)
		for port, m := range byPort {
			rx, okR := m["prismd_port_receive_bytes_total"]
			tx, okT := m["prismd_port_transmit_bytes_total"]
			if okR || okT {
				ports[port] = portBytes{rx: int64(rx), tx: int64(tx)}
			}
		}
		if len(ports) == 0 {
			return nil, fmt.Errorf("byte counters of %s: no prismd_port_{receive,transmit}_bytes_total in /metrics", sw)
		}
		out[sw] = ports
	}
	return out, nil
}

// printLinkBytes prints, per link, the bytes each direction carried between
// two scrapes, read at the link's prismd end (a host end has no counters).
func (d *demo) printLinkBytes(before, after map[string]map[string]portBytes, vecBytes int64) {
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "   link\tA->B bytes\tx vector\tB->A bytes\tx vector\t\n")
	for _, l := range d.topo.Links {
		a, b := l.A, l.B
		sw, flip := a, false
		if d.topo.Nodes[a.Node].Kind != deploy.KindPrismd {
			sw, flip = b, true
		}
		if d.topo.Nodes[sw.Node].Kind != deploy.KindPrismd {
			continue // no counters on either end
		}
		pa, pb := after[sw.Node][sw.Iface], before[sw.Node][sw.Iface]
		out, in := pa.tx-pb.tx, pa.rx-pb.rx // seen from the switch end
		ab, ba := out, in
		if flip {
			ab, ba = in, out
		}
		fmt.Fprintf(w, "   %s -> %s\t%d\t%.2f\t%d\t%.2f\t\n", a, b, ab, float64(ab)/float64(vecBytes), ba, float64(ba)/float64(vecBytes))
	}
	w.Flush()
	fmt.Fprintf(d.out, "   (vector = %d bytes per rank; Ethernet headers included; A->B is left to right)\n", vecBytes)
}

// mbps formats an algorithm bandwidth.
func mbps(bytes int64, d time.Duration) string {
	v := float64(bytes) / d.Seconds() / 1e6
	if v < 10 {
		return fmt.Sprintf("%.2f MB/s", v)
	}
	return fmt.Sprintf("%.1f MB/s", v)
}

// demoPersistentCount and demoPersistentRuns size the persistent step: a
// small vector, where the per-collective setup is what a user pays.
const (
	demoPersistentCount = 8
	demoPersistentRuns  = 200
	demoOrdinaryRuns    = 20
)

// demoPersistent runs small ALLREDUCEs the ordinary way (AM barrier and
// grant, CONTROL on every switch, each time), as repeated calls the Comm
// turns into a persistent collective from the second on (the library's
// default), and as one persistent collective (set up once, then invocation
// after invocation), every result checked exactly, and prints what one
// costs each way.
func demoPersistent(d *demo) error {
	c := d.coll
	if c == nil {
		return errors.New("skipped: the AM and ranks did not start (see the step that starts them)")
	}
	n := len(c.comms)
	sends, recvs := make([][]float32, n), make([][]float32, n)
	for r := range sends {
		sends[r], recvs[r] = make([]float32, demoPersistentCount), make([]float32, demoPersistentCount)
	}
	who := make([]int, n)
	for r := range who {
		who[r] = r
	}
	opts := &host.Options{Acc: "kulisch", Timeout: demoInactivity}
	ordOpts := *opts
	ordOpts.Ordinary = true
	var auto []bool // per rank, of the last round
	// round runs one collective on every rank through start and checks it.
	round := func(i int, start func(r int) *host.Request) (time.Duration, error) {
		gen := genSpec{seed: uint64(1000 + i), format: "fp32", size: n}
		for r := range sends {
			copy(sends[r], gen.vector(r, demoPersistentCount).([]float32))
		}
		errs := make([]error, n)
		auto = make([]bool, n)
		var wg sync.WaitGroup
		t0 := time.Now()
		for r := range c.comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q := start(r)
				errs[r] = q.Wait()
				auto[r] = q.Stats().AutoPersistent
			}()
		}
		wg.Wait()
		took := time.Since(t0)
		if err := errors.Join(errs...); err != nil {
			return took, err
		}
		if res := verifyExact(d.ctx, sends, recvs, who); res.differ > 0 || res.outside > 0 {
			return took, fmt.Errorf("collective %d: %d of %d results differ from the exact sum (first: %s)", i, res.differ, res.checked, res.first)
		}
		return took, nil
	}
	ctx, cancel := context.WithTimeout(d.ctx, demoOpTimeout)
	defer cancel()
	fmt.Fprintf(d.out, "   ALLREDUCEs of %d FP32 x %d ranks (KULISCH_FIXED), %d of each kind (%d persistent), each verified bit for bit against math/big\n",
		demoPersistentCount, n, demoOrdinaryRuns, demoPersistentRuns)
	ordinary := make([]time.Duration, 0, demoOrdinaryRuns)
	for i := range demoOrdinaryRuns {
		took, err := round(i, func(r int) *host.Request { return c.comms[r].AllReduceAsync(ctx, sends[r], recvs[r], &ordOpts) })
		if err != nil {
			return fmt.Errorf("ordinary collective %d: %w", i, err)
		}
		ordinary = append(ordinary, took)
	}
	repeated := make([]time.Duration, 0, demoOrdinaryRuns)
	for i := range demoOrdinaryRuns {
		took, err := round(demoOrdinaryRuns+i, func(r int) *host.Request { return c.comms[r].AllReduceAsync(ctx, sends[r], recvs[r], opts) })
		if err != nil {
			return fmt.Errorf("repeated collective %d: %w", i, err)
		}
		for r, a := range auto {
			if a != (i >= 1) {
				return fmt.Errorf("repeated collective %d: rank %d ran it auto-persistent %v, want %v (from the second call of a shape on)", i, r, a, i >= 1)
			}
		}
		repeated = append(repeated, took)
	}
	ps := make([]*host.Persistent, n)
	for r, cm := range c.comms {
		p, err := cm.AllReduceInit(sends[r], recvs[r], opts)
		if err != nil {
			return err
		}
		ps[r] = p
		defer p.Close()
	}
	persistent := make([]time.Duration, 0, demoPersistentRuns)
	for i := range demoPersistentRuns {
		took, err := round(2*demoOrdinaryRuns+i, func(r int) *host.Request { return ps[r].Start(ctx) })
		if err != nil {
			return fmt.Errorf("persistent invocation %d: %w", i+1, err)
		}
		persistent = append(persistent, took)
	}
	om, pm := median(ordinary), median(persistent[1:])
	fmt.Fprintf(d.out, "   ordinary (Options.Ordinary: AM barrier, grant and CONTROL every time): median %v per collective\n", om.Round(time.Microsecond))
	rm := median(repeated[2:])
	fmt.Fprintf(d.out, "   repeated (the default: the Comm keeps the shape persistent from its second call): %v, %v (setup), then median %v over %d: %.1fx faster\n",
		repeated[0].Round(time.Microsecond), repeated[1].Round(time.Microsecond), rm.Round(time.Microsecond), demoOrdinaryRuns-2, float64(om)/float64(max(rm, 1)))
	fmt.Fprintf(d.out, "   persistent (AllReduceInit, set up once): first %v (setup), then median %v per invocation over %d: %.1fx faster\n",
		persistent[0].Round(time.Microsecond), pm.Round(time.Microsecond), demoPersistentRuns-1, float64(om)/float64(max(pm, 1)))
	fmt.Fprintf(d.out, "   verified: all %d + %d + %d results on every host equal the exact sum bit for bit\n", demoOrdinaryRuns, demoOrdinaryRuns, demoPersistentRuns)
	return nil
}

// median of ds (ds is reordered).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
