package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
	"github.com/prismd/prismd/host"
	"github.com/prismd/prismd/internal/testlog"
	"github.com/prismd/prismd/metrics/metricstest"
)

func soak() bool { return os.Getenv("PRISMD_SOAK") == "1" }

// n picks a vector length: modest in CI, large in soak runs.
func n(ci, soakN int) int {
	if soak() {
		return soakN
	}
	return ci
}

// ---- oracle ----

// exactF32 is the exact sum of column i (math/big) rounded once to binary32,
// ties to even; an exact zero is -0 only when every term was -0.
func exactF32(vecs [][]float32, i int) float32 {
	s := new(big.Float).SetPrec(4096)
	neg := true
	for _, v := range vecs {
		if !(v[i] == 0 && math.Signbit(float64(v[i]))) {
			neg = false
		}
		s.Add(s, new(big.Float).SetPrec(4096).SetFloat64(float64(v[i])))
	}
	f, _ := s.Float32()
	if f == 0 && neg {
		return float32(math.Copysign(0, -1))
	}
	return f
}

// vecFor is rank r's input: mixed magnitudes, subnormals and cancellation,
// so a float32 sum in any order differs from the exact one in many places.
// integral gives integers, exact in any order (for FP32_ARRIVAL).
func vecFor(seed uint64, r, n int, integral bool) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	v := make([]float32, n)
	for i := range v {
		if integral {
			v[i] = float32(rng.IntN(1<<16) - 1<<15)
			continue
		}
		switch rng.IntN(8) {
		case 0:
			v[i] = float32(rng.IntN(2000) - 1000)
		case 1:
			v[i] = float32(rng.NormFloat64() * 1e-40)
		case 2:
			v[i] = float32(rng.NormFloat64() * 1e30)
		default:
			v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
		}
	}
	return v
}

func checkExact(t *testing.T, sends, recvs [][]float32, who []int) {
	t.Helper()
	for _, r := range who {
		bad := 0
		for i := range recvs[r] {
			want := exactF32(sends, i)
			if math.Float32bits(want) != math.Float32bits(recvs[r][i]) {
				if bad < 3 {
					t.Errorf("rank %d element %d: got %g (%#x), want %g (%#x)", r, i, recvs[r][i],
						math.Float32bits(recvs[r][i]), want, math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("rank %d: %d of %d elements differ from the exact sum", r, bad, len(recvs[r]))
		}
	}
}

// ---- lab plumbing ----

type env struct {
	t    *testing.T
	lab  *deploy.Lab
	m    *am.Manager
	url  string // runtime channel in the test's own namespace (in-process ranks)
	lurl string // runtime channel inside the AM host's namespace (prismctl ranks)
}

// up builds the lab and starts the AM on amHost: CONTROL from amHost's eth0,
// the runtime channel served both on 127.0.0.1 here and on amHost's lab
// address, reachable from the other hosts through the switches.
func up(t *testing.T, topo, amHost string, cfg am.Config) *env {
	t.Helper()
	lab := labtest.Up(t, topo)
	e := &env{t: t, lab: lab}
	var conn *am.PacketConn
	if err := lab.Do(amHost, func() error {
		var err error
		conn, err = am.OpenConn("eth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The AM's timers (a watchdog, a preparation) may log after the test
	// returned.
	cfg.Topology, cfg.Conn, cfg.Logf = lab.Topo, conn, testlog.Until(t)
	m, err := am.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	srv := httptest.NewServer(m.Handler())
	e.url = srv.URL
	var ln net.Listener
	addr := lab.Topo.Nodes[amHost].IPv4.Addr().String() + ":7000"
	if err := lab.Do(amHost, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lsrv := &http.Server{Handler: m.Handler()}
	go lsrv.Serve(ln)
	e.lurl = "http://" + addr
	t.Cleanup(func() {
		m.StopStreams() // httptest's Close waits for open requests
		lsrv.Close()
		srv.Close()
		m.Close()
	})
	return e
}

// comm opens a rank's communicator inside node's namespace.
func (e *env) comm(node string, rank, size int, job uint64) *host.Comm {
	e.t.Helper()
	return e.commShapes(node, rank, size, job, 0)
}

// commShapes is comm with Config.PersistentShapes set to shapes.
func (e *env) commShapes(node string, rank, size int, job uint64, shapes int) *host.Comm {
	e.t.Helper()
	var c *host.Comm
	if err := e.lab.Do(node, func() error {
		var err error
		c, err = host.NewComm(context.Background(), host.Config{Rank: rank, Size: size, Iface: "eth0", Job: job,
			Coordinator: e.url, Node: node, PersistentShapes: shapes})
		return err
	}); err != nil {
		e.t.Fatalf("rank %d on %s: %v", rank, node, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

type result struct {
	sends, recvs [][]float32
	errs         []error
	stats        []host.Stats
	took         time.Duration
}

// collective runs one collective on comms concurrently.
func collective(comms []*host.Comm, coll string, root, n int, seed uint64, opts *host.Options) *result {
	integral := opts != nil && opts.Acc == "fp32"
	return collectiveOf(comms, coll, root, n, seed, opts, func(seed uint64, r, n int) []float32 { return vecFor(seed, r, n, integral) })
}

// gradientVec is rank r's vector of gradient-like values: N(0,1) scaled by
// 2^-12..2^-4 per element, so the four ranks' sums at a leaf are binary64
// values and the leaves send KULISCH_F64 partials.
func gradientVec(seed uint64, r, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
	}
	return v
}

// collectiveOf is collective with rank r's input vec(seed, r, n).
func collectiveOf(comms []*host.Comm, coll string, root, n int, seed uint64, opts *host.Options, vec func(seed uint64, r, n int) []float32) *result {
	r := &result{sends: make([][]float32, len(comms)), recvs: make([][]float32, len(comms)),
		errs: make([]error, len(comms)), stats: make([]host.Stats, len(comms))}
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range comms {
		r.sends[i] = vec(seed, i, n)
		r.recvs[i] = make([]float32, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var q *host.Request
			if coll == "allreduce" {
				q = c.AllReduceAsync(ctx, r.sends[i], r.recvs[i], opts)
			} else {
				q = c.ReduceAsync(ctx, r.sends[i], r.recvs[i], root, opts)
			}
			r.errs[i] = q.Wait()
			r.stats[i] = q.Stats()
		}()
	}
	wg.Wait()
	r.took = time.Since(start)
	return r
}

func (r *result) check(t *testing.T, coll string, root int) {
	t.Helper()
	for i, err := range r.errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	checkExact(t, r.sends, r.recvs, receivers(coll, root, len(r.recvs)))
	var rt uint64
	for _, s := range r.stats {
		rt += s.Retransmits
	}
	bytes := float64(len(r.sends[0]) * 4)
	t.Logf("%s of %d fp32 on %d ranks (%s): %v (setup %v), %.1f MB/s per rank, %d DATA retransmissions",
		coll, len(r.sends[0]), len(r.sends), r.stats[0].Grant.Tree, r.took.Round(time.Millisecond),
		r.stats[0].Setup.Round(time.Millisecond), bytes/r.took.Seconds()/1e6, rt)
}

// receivers are the ranks that get a result: every rank of an ALLREDUCE,
// the root of a REDUCE.
func receivers(coll string, root, n int) []int {
	if coll != "allreduce" {
		return []int{root}
	}
	who := make([]int, n)
	for i := range who {
		who[i] = i
	}
	return who
}

// persistentRuns creates one persistent collective per rank and runs
// invocations of it with new inputs each time, checking every result
// exactly; it returns each invocation's wall time.
func persistentRuns(t *testing.T, comms []*host.Comm, coll string, root, n, invocations int, seed uint64, opts *host.Options) []time.Duration {
	t.Helper()
	integral := opts != nil && opts.Acc == "fp32"
	r := &result{sends: make([][]float32, len(comms)), recvs: make([][]float32, len(comms)),
		errs: make([]error, len(comms)), stats: make([]host.Stats, len(comms))}
	ps := make([]*host.Persistent, len(comms))
	for i, c := range comms {
		r.sends[i], r.recvs[i] = make([]float32, n), make([]float32, n)
		var err error
		if coll == "allreduce" {
			ps[i], err = c.AllReduceInit(r.sends[i], r.recvs[i], opts)
		} else {
			ps[i], err = c.ReduceInit(r.sends[i], r.recvs[i], root, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var took []time.Duration
	for inv := range invocations {
		for i := range comms {
			copy(r.sends[i], vecFor(seed+uint64(inv), i, n, integral))
		}
		var wg sync.WaitGroup
		start := time.Now()
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				q := p.Start(ctx)
				r.errs[i] = q.Wait()
				r.stats[i] = q.Stats()
			}()
		}
		wg.Wait()
		took = append(took, time.Since(start))
		for i, err := range r.errs {
			if err != nil {
				t.Fatalf("invocation %d rank %d: %v", inv, i, err)
			}
		}
		checkExact(t, r.sends, r.recvs, receivers(coll, root, len(r.recvs)))
		for i, st := range r.stats {
			if inv > 0 && st.Setup != 0 {
				t.Fatalf("invocation %d rank %d asked the AM (setup %v)", inv, i, st.Setup)
			}
		}
	}
	for _, p := range ps {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return took
}

func (e *env) comms(job uint64, hosts ...string) []*host.Comm {
	cs := make([]*host.Comm, len(hosts))
	for i, h := range hosts {
		cs[i] = e.comm(h, i, len(hosts), job)
	}
	return cs
}

// ---- the collectives on the shipped topologies ----

func runMatrix(t *testing.T, topo string, hosts []string, vec int) {
	// Preparation on: each collective below differs from the one before, so
	// every prepared operation is ABORTed on the real switches (mismatch),
	// and the repeated ones at the end are granted prepared operations. The
	// first four run on Comms that keep no shape persistent: the library's
	// default tells the AM not to prepare a shape's repeat (it runs it
	// persistent), which "repeated-auto-persistent" checks.
	e := up(t, topo, hosts[0], am.Config{Prepare: true})
	cs := e.comms(1, hosts...)
	mat := make([]*host.Comm, len(hosts))
	for i, h := range hosts {
		mat[i] = e.commShapes(h, i, len(hosts), 10, -1)
	}
	seed := uint64(1)
	for _, c := range []struct {
		coll string
		root int
		acc  string
	}{
		{"allreduce", 0, "kulisch"},
		{"reduce", len(hosts) - 1, "kulisch"},
		{"allreduce", 0, "fp32"},
		{"reduce", 0, "fp32"},
	} {
		t.Run(c.coll+"-"+c.acc, func(t *testing.T) {
			seed++
			r := collective(mat, c.coll, c.root, vec, seed, &host.Options{Acc: c.acc})
			r.check(t, c.coll, c.root)
		})
	}
	t.Run("repeated-prepared", func(t *testing.T) {
		// Ranks that keep no shape persistent: every call asks the AM,
		// which prepares the next one.
		ord := make([]*host.Comm, len(hosts))
		for i, h := range hosts {
			ord[i] = e.commShapes(h, i, len(hosts), 11, -1)
		}
		used0 := e.amCounter(`prismd_am_prepared_operations_total{outcome="used"}`)
		for i := 0; i < 3; i++ {
			seed++
			r := collective(ord, "allreduce", 0, 1000, seed, &host.Options{Acc: "kulisch"})
			r.check(t, "allreduce", 0)
		}
		// The first of the three is the job's first: only the next two
		// can have been prepared for.
		if used := e.amCounter(`prismd_am_prepared_operations_total{outcome="used"}`) - used0; used < 2 {
			t.Errorf("%v of 3 identical collectives in a row were granted prepared operations, want at least 2", used)
		}
	})
	t.Run("repeated-auto-persistent", func(t *testing.T) {
		// The library's default: from the second identical call on, the
		// Comm runs the shape as a persistent collective, and from the
		// third no call waits for the AM. Its first call tells the AM so
		// (am.BeginRequest.RepeatsPersistent): no ordinary operation is
		// prepared for the second, which was ABORTed as a mismatch.
		prepared := func() float64 {
			return e.amCounter(`prismd_am_prepared_operations_total{outcome="mismatch"}`) +
				e.amCounter(`prismd_am_prepared_operations_total{outcome="unused"}`) +
				e.amCounter(`prismd_am_prepared_operations_total{outcome="used"}`)
		}
		var p0 float64
		for i := 0; i < 4; i++ {
			seed++
			r := collective(cs, "allreduce", 0, 1000, seed, &host.Options{Acc: "kulisch"})
			r.check(t, "allreduce", 0)
			for rank, st := range r.stats {
				if want := i >= 1; st.AutoPersistent != want || (i >= 2) != (st.Setup == 0) {
					t.Fatalf("call %d rank %d: auto-persistent %v (want %v), setup %v", i, rank, st.AutoPersistent, want, st.Setup)
				}
			}
			if i == 0 {
				p0 = prepared()
			}
		}
		if n := prepared() - p0; n != 0 {
			t.Errorf("%v operations were prepared for the shape's repeats and used or thrown away; want none", n)
		}
		for _, o := range e.m.Ops().Ops {
			if o.Op.Job == 1 && o.State == "prepared" {
				t.Errorf("operation %s prepared for job 1 (seq %d): the library runs the shape's repeats persistent", o.ID, o.Seq)
			}
		}
	})
	t.Run("persistent", func(t *testing.T) {
		// Invocations of 3 values, each ending in a short frame that
		// only PUSH gets through the switches at once, and of a vector
		// of many frames; every result exact, one grant for all.
		for _, c := range []struct {
			coll string
			n    int
			acc  string
		}{{"allreduce", 3, "kulisch"}, {"reduce", vec / 4, "fp32"}} {
			seed++
			took := persistentRuns(t, cs, c.coll, len(hosts)-1, c.n, 20, seed, &host.Options{Acc: c.acc})
			t.Logf("persistent %s of %d: invocations took %v", c.coll, c.n, took)
		}
	})
	e.checkNodeMACsLearned(hosts[0])
	e.checkRxPaths()
}

// checkRxPaths checks that prismctl show ports, against each running switch,
// names every port's current receive path: the lab's afpacket ports move
// their frames between lane and ring by rate (rx_sparse_fps).
func (e *env) checkRxPaths() {
	t := e.t
	t.Helper()
	for _, sw := range e.lab.Topo.NodesOf(deploy.KindPrismd) {
		out, err := exec.Command(prismctl(t), "show", "ports", "--socket", e.lab.ControlSocket(sw)).CombinedOutput()
		if err != nil {
			t.Fatalf("prismctl show ports on %s: %v\n%s", sw, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 || !strings.Contains(lines[0], "RX_PATH") {
			t.Fatalf("prismctl show ports on %s has no RX_PATH column:\n%s", sw, out)
		}
		for _, l := range lines[1:] {
			if !strings.Contains(l, "lane (") && !strings.Contains(l, "ring (") {
				t.Errorf("%s: port line without its receive path: %q\n%s", sw, l, out)
			}
		}
	}
}

// amCounter reads one sample of the AM's /metrics.
func (e *env) amCounter(series string) float64 {
	e.t.Helper()
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatalf("AM metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				e.t.Fatalf("AM metrics: %q: %v", line, err)
			}
			return f
		}
	}
	e.t.Fatalf("AM metrics have no %s", series)
	return 0
}

// checkNodeMACsLearned checks that the switch amHost hangs off has learned,
// on a port, the node MAC of every other switch the AM configured. The AM
// sends CONTROL to node MACs; a switch that answered from another MAC left
// the node MAC unknown to every bridge on the way, and each request to it
// was flooded out of every port, to every host.
func (e *env) checkNodeMACsLearned(amHost string) {
	t := e.t
	t.Helper()
	leaf, ok := e.lab.Topo.Peer(deploy.Endpoint{Node: amHost, Iface: "eth0"})
	if !ok {
		t.Fatalf("%s:eth0 has no link", amHost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops, err := am.NewClient(e.url).Ops(ctx)
	if err != nil {
		t.Fatalf("AM ops: %v", err)
	}
	want := map[string]string{} // node MAC -> switch
	for _, op := range ops.Ops {
		for _, n := range op.Nodes {
			if n.Name != leaf.Node {
				want[n.MAC] = n.Name
			}
		}
	}
	out, err := exec.Command(prismctl(t), "show", "macs", "--json", "--socket", e.lab.ControlSocket(leaf.Node)).CombinedOutput()
	if err != nil {
		t.Fatalf("prismctl show macs on %s: %v\n%s", leaf.Node, err, out)
	}
	var tab struct {
		Entries []struct {
			MAC   string `json:"mac"`
			Port  string `json:"port"`
			Local bool   `json:"local"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(out, &tab); err != nil {
		t.Fatalf("prismctl show macs --json: %v\n%s", err, out)
	}
	learned := map[string]string{}
	for _, en := range tab.Entries {
		if !en.Local {
			learned[en.MAC] = en.Port
		}
	}
	for mac, sw := range want {
		if _, ok := learned[mac]; !ok {
			t.Errorf("%s (next to the AM on %s) has not learned %s's node MAC %s: CONTROL to it is flooded to every port\n%s",
				leaf.Node, amHost, sw, mac, out)
		}
	}
}

func TestSingle(t *testing.T) {
	runMatrix(t, "single", []string{"h1", "h2"}, n(20000, 2000000))
}

func TestSpineLeaf(t *testing.T) {
	runMatrix(t, "spine-leaf", []string{"h1", "h2", "h3", "h4"}, n(20000, 2000000))
}

func TestFatTree(t *testing.T) {
	runMatrix(t, "fat-tree", []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}, n(10000, 1000000))
}

// ---- loss and duplication on every link ----

// impair installs, in every namespace, nftables netdev rules on every
// interface: pct% of arriving frames dropped (ingress) and pct% of leaving
// frames sent twice (egress dup to the same device).
func impair(t *testing.T, lab *deploy.Lab, pct int) {
	t.Helper()
	for _, name := range lab.Topo.NodeNames() {
		n := lab.Topo.Nodes[name]
		if n.Kind == deploy.KindBridge {
			continue
		}
		var b bytes.Buffer
		b.WriteString("table netdev prismimpair {\n")
		for i, ifc := range n.Ifaces {
			fmt.Fprintf(&b, "  chain in%d { type filter hook ingress device %q priority 0; numgen random mod 100 < %d drop; }\n", i, ifc, pct)
			fmt.Fprintf(&b, "  chain out%d { type filter hook egress device %q priority 0; numgen random mod 100 < %d dup to %q; }\n", i, ifc, pct, ifc)
		}
		b.WriteString("}\n")
		cmd := lab.Exec(name, "nft", "-f", "-")
		cmd.Stdin = &b
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft in %s: %v: %s\n%s", name, err, out, b.String())
		}
	}
}

// TestLossAndDuplication impairs with nftables on the hosts' interfaces
// only: prismd's AF_PACKET sockets see a frame before a switch port's
// netdev ingress hook (a rule there counts and drops nothing), and an
// egress rule's drops show in prismd as tx_error (README). The switches'
// own links are impaired with their fault option (TestFaultReorderLab,
// TestFaultFatTree).
func TestLossAndDuplication(t *testing.T) {
	hosts := []string{"h1", "h2", "h3", "h4"}
	e := up(t, "spine-leaf", "h1", am.Config{})
	impair(t, e.lab, 1)
	cs := e.comms(2, hosts...)
	for k := 0; k < 3; k++ {
		r := collective(cs, "allreduce", 0, n(20000, 2000000), uint64(100+k), nil)
		r.check(t, "allreduce", 0)
	}
	r := collective(cs, "reduce", 2, n(20000, 2000000), 200, nil)
	r.check(t, "reduce", 2)
	// Gradient-like data: the leaves send KULISCH_F64 partials, which are
	// lost, duplicated and retransmitted like any other frame.
	f64 := func() float64 {
		return switchCounter(t, e.lab, "l1", f64Frames) + switchCounter(t, e.lab, "l2", f64Frames)
	}
	before := f64()
	r = collectiveOf(cs, "allreduce", 0, n(20000, 2000000), 300, nil, gradientVec)
	r.check(t, "allreduce", 0)
	if sent := f64() - before; sent == 0 {
		t.Errorf("the leaves sent no KULISCH_F64 frame for gradient-like data (%s)", f64Frames)
	} else {
		t.Logf("the leaves sent %.0f KULISCH_F64 frames", sent)
	}
	// A persistent collective's PUSH frames and rests survive loss and
	// duplication too (a lost PUSH frame is retransmitted with its flag).
	persistentRuns(t, cs, "allreduce", 0, 50, 30, 300, nil)
}

// labFault is the impairment TestFaultReorderLab gives every port of every
// switch through the topology file's fault key (prismd's own per-port fault
// option, reordering included, which nftables cannot do): received frames
// lost and duplicated (1% each) and held back for up to 8 later ones (5%),
// sent frames held back for up to 4 later ones (5%).
const labFault = "fault: {ingress: {drop_percent: 1, duplicate_percent: 1, reorder_percent: 5, reorder_depth: 8}, egress: {reorder_percent: 5, reorder_depth: 4}}"

// TestFaultReorderLab: ALLREDUCE (KULISCH_FIXED and FP32_ARRIVAL), REDUCE
// and a persistent collective on spine-leaf, every switch port losing,
// duplicating and reordering frames in both directions: every result is
// exact, and every switch's counters show that frames were really held back
// on the way in and on the way out.
func TestFaultReorderLab(t *testing.T) {
	src, err := deploy.Embedded("spine-leaf")
	if err != nil {
		t.Fatal(err)
	}
	topo := strings.ReplaceAll(string(src), "{kind: prismd}", "{kind: prismd, "+labFault+"}")
	if strings.Count(topo, labFault) != 3 {
		t.Fatalf("the fault reached %d of 3 switches (deploy/lab/spine-leaf.yaml changed?)", strings.Count(topo, labFault))
	}
	hosts := []string{"h1", "h2", "h3", "h4"}
	e := up(t, topo, "h1", am.Config{})
	cs := e.comms(4, hosts...)
	for k := 0; k < 2; k++ {
		r := collective(cs, "allreduce", 0, n(20000, 2000000), uint64(400+k), nil)
		r.check(t, "allreduce", 0)
	}
	fp32 := &host.Options{Acc: "fp32"}
	r := collective(cs, "allreduce", 0, n(20000, 2000000), 410, fp32)
	r.check(t, "allreduce fp32", 0)
	r = collective(cs, "reduce", 3, n(20000, 2000000), 420, nil)
	r.check(t, "reduce", 3)
	persistentRuns(t, cs, "allreduce", 0, 50, 30, 430, nil)
	for _, sw := range []string{"s1", "l1", "l2"} {
		m := scrape(t, e.lab, sw)
		metricstest.Documented(t, []byte(m), "../docs/metrics.md")
		for _, dir := range []string{"ingress", "egress"} {
			held := sumSeries(t, m, "prismd_port_fault_reordered_total", `direction="`+dir+`"`)
			if held == 0 {
				t.Errorf("%s held back no frame on %s: the fault did not reorder", sw, dir)
			}
			t.Logf("%s: %.0f frames held back on %s", sw, held, dir)
		}
	}
}

// heavyFault is TestFaultFatTree's impairment of every switch port: 5% of
// received frames lost, 1% duplicated, 5% held back for up to 8 later ones.
const heavyFault = "fault: {ingress: {drop_percent: 5, duplicate_percent: 1, reorder_percent: 5, reorder_depth: 8}}"

// TestFaultFatTree: ALLREDUCE of a million values over the three-level
// fat-tree with every switch port losing 5% of what it receives. Holes at
// a relay fill its outputs' receive windows with the frames above them,
// until the outputs have no credit left but the room their receivers keep
// for the frame that closes the hole; that frame, new to the relay's
// outputs, used to wait for credit that never came, and the relay then
// refused it from its parent: 2 of 3 such ALLREDUCEs hung until the AM
// timed them out, blaming a healthy rank. The small vectors of the other
// loss tests never filled a window.
func TestFaultFatTree(t *testing.T) {
	src, err := deploy.Embedded("fat-tree")
	if err != nil {
		t.Fatal(err)
	}
	topo := strings.ReplaceAll(string(src), "{kind: prismd}", "{kind: prismd, "+heavyFault+"}")
	if strings.Count(topo, heavyFault) < 6 {
		t.Fatalf("the fault reached %d switches (deploy/lab/fat-tree.yaml changed?)", strings.Count(topo, heavyFault))
	}
	hosts := []string{"h1", "h2", "h3", "h4"}
	e := up(t, topo, "h1", am.Config{})
	cs := e.comms(5, hosts...)
	for k := 0; k < 3; k++ {
		r := collective(cs, "allreduce", 0, 1000000, uint64(500+k), nil)
		r.check(t, "allreduce", 0)
	}
}

// ---- failures ----

// builtTool is one command of this module built once for the whole run.
type builtTool struct {
	once sync.Once
	path string
	err  error
}

var tools sync.Map // command name -> *builtTool

// tool returns the binary of command name (prismctl, prismd-blast):
// $PRISMD_BIN/name when the Makefile set it, else one built once from this
// module.
func tool(t *testing.T, name string) string {
	t.Helper()
	if d := os.Getenv("PRISMD_BIN"); d != "" {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	v, _ := tools.LoadOrStore(name, &builtTool{})
	b := v.(*builtTool)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-"+name+"-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-o", b.path, "github.com/prismd/prismd/cmd/"+name).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("%v: %s", err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("building %s: %v", name, b.err)
	}
	return b.path
}

// prismctl returns the prismctl binary (see tool).
func prismctl(t *testing.T) string { return tool(t, "prismctl") }

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// killSlack is what a killed rank's survivors may take beyond the timeout
// to fail: the failure announcement's trip through the switches, the AM's
// diagnosis (a COMPLETE to every node), and a loaded 2-core CI machine.
// Measured here: 0.97-1.01 s after the kill for a 1 s timeout. Before
// switches announced failures, survivors under another leaf waited for
// their RESULT deadline, about 2 x timeout + 1 s.
const killSlack = 1500 * time.Millisecond

// TestKilledRank kills one rank of job A (a prismctl process) right after
// its operation is granted: every surviving rank must fail, within the
// timeout, with an error naming the dead rank, while job B, running at the
// same time on the other half of the fat tree, completes exactly.
func TestKilledRank(t *testing.T) {
	bin := prismctl(t)
	e := up(t, "fat-tree", "h1", am.Config{})
	const jobA, jobB = 10, 11
	timeout := time.Second
	// Job A's vector is below the leaves' element window (92928 at MTU
	// 1500) but three of the rank's send windows long: the victim cannot
	// have sent all of it when it dies right after the grant.
	const vec = 60000
	// Job A: ranks 0..2 in-process on h1..h3, rank 3 a process on h4.
	csA := make([]*host.Comm, 3)
	for i, h := range []string{"h1", "h2", "h3"} {
		csA[i] = e.comm(h, i, 4, jobA)
	}
	victim := e.lab.Exec("h4", bin, "allreduce", "--coordinator", e.lurl, "--rank", "3", "--size", "4",
		"--iface", "eth0", "--node", "h4", "--job", fmt.Sprint(jobA), "--count", fmt.Sprint(vec), "--timeout", timeout.String())
	var vout bytes.Buffer
	victim.Stdout, victim.Stderr = &vout, &vout
	csB := e.comms(jobB, "h5", "h6", "h7", "h8")

	var wg sync.WaitGroup
	var ra, rb *result
	wg.Add(2)
	start := time.Now()
	go func() {
		defer wg.Done()
		ra = collective(csA, "allreduce", 0, vec, 7, &host.Options{Timeout: timeout})
	}()
	go func() {
		defer wg.Done()
		rb = collective(csB, "allreduce", 0, n(50000, 2000000), 8, nil)
	}()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the victim as soon as job A's operation is granted.
	killed := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !killed; time.Sleep(time.Millisecond) {
		for _, op := range e.m.Ops().Ops {
			if op.Op.Job == jobA && op.State != "setup" {
				victim.Process.Kill() // the PID this test started
				killed = true
				break
			}
		}
	}
	victim.Wait()
	if !killed {
		t.Fatalf("job A never became active; victim said: %s", vout.String())
	}
	killedAt := time.Since(start)
	wg.Wait()
	rb.check(t, "allreduce", 0)
	for i, err := range ra.errs {
		var oe *host.OpError
		// The leaf's timeout names it as a contributor that stopped; the
		// AM, when its presence grace ends first, as a process that is gone.
		if err == nil || !errors.As(err, &oe) || !blamesRank3(err.Error()) {
			t.Errorf("rank %d: error does not name rank 3 (h4): %v", i, err)
			continue
		}
		t.Logf("rank %d: %v", i, err)
	}
	if took := ra.took - killedAt; took > timeout+killSlack {
		t.Errorf("survivors failed %v after the kill; bound is the timeout (%v) plus %v for the diagnosis", took, timeout, killSlack)
	} else {
		t.Logf("survivors failed %v after the kill", took.Round(time.Millisecond))
	}
}

// startVictim starts rank 3 of 4 of job as a 'prismctl allreduce' process
// on h4 with the extra flags; it is killed at the test's end if still
// running. Its output is in the buffer.
func startVictim(t *testing.T, e *env, bin string, job uint64, flags ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	args := append([]string{bin, "allreduce", "--coordinator", e.lurl, "--rank", "3", "--size", "4",
		"--iface", "eth0", "--node", "h4", "--job", fmt.Sprint(job)}, flags...)
	victim := e.lab.Exec("h4", args...)
	vout := &bytes.Buffer{}
	victim.Stdout, victim.Stderr = vout, vout
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		victim.Process.Kill() // the PID this test started
		victim.Wait()
	})
	return victim, vout
}

// TestKilledRankPersistent: the process of one rank of a persistent
// collective is killed between invocations (it rests at its PUSH boundary,
// which no timeout covers by itself); the others' next invocation goes past
// it and fails within the timeout, the error naming the dead rank.
func TestKilledRankPersistent(t *testing.T) {
	bin := prismctl(t)
	e := up(t, "spine-leaf", "h1", am.Config{})
	const job = 12
	timeout := time.Second
	cs := make([]*host.Comm, 3)
	ps := make([]*host.Persistent, 3)
	sends, recvs := make([][]float32, 3), make([][]float32, 3)
	for i, h := range []string{"h1", "h2", "h3"} {
		cs[i] = e.comm(h, i, 4, job)
		sends[i], recvs[i] = vecFor(uint64(i), i, 300, true), make([]float32, 300)
		p, err := cs[i].AllReduceInit(sends[i], recvs[i], &host.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	victim, vout := startVictim(t, e, bin, job, "--count", "300", "--timeout", timeout.String(), "--persistent", "--iters", "1000000000")
	// Run invocations together until the victim dies: the survivors wait in
	// each invocation for it, so it dies having sent its part of the 20th
	// (0-based; that one completes) or not: the next one then goes past its
	// PUSH boundary.
	errs := make([]error, 3)
	var killedAt time.Time
	start := time.Now()
	for inv := 0; ; inv++ {
		if inv == 20 {
			victim.Process.Kill()
			victim.Wait()
			killedAt = time.Now()
		}
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				errs[i] = p.Run(ctx)
			}()
		}
		wg.Wait()
		if errors.Join(errs...) != nil {
			if inv < 20 {
				t.Fatalf("invocation %d failed before the kill: %v\nvictim: %s", inv, errors.Join(errs...), vout.String())
			}
			break
		}
		if inv > 20 || time.Since(start) > time.Minute {
			// Only the 20th may complete: the victim may have sent its
			// part before it died.
			t.Fatalf("invocation %d completed without the killed rank", inv)
		}
	}
	took := time.Since(killedAt)
	for i, err := range errs {
		var oe *host.OpError
		if err == nil || !errors.As(err, &oe) || oe.Invocation < 21 || oe.Invocation > 22 ||
			!blamesRank3(oe.Diagnosis) {
			t.Errorf("rank %d: %v; want invocation 21 or 22 failed, the AM naming rank 3 (h4)", i, err)
			continue
		}
		t.Logf("rank %d: %v", i, err)
	}
	if took > timeout+killSlack {
		t.Errorf("survivors failed %v after the kill; bound is the timeout (%v) plus %v for the diagnosis", took, timeout, killSlack)
	} else {
		t.Logf("survivors failed %v after the kill", took.Round(time.Millisecond))
	}
}

// TestSetupFailureRollsBack: a tuple no node supports is refused for every
// rank (no grant), a width too small for the terms is refused by the AM
// before anything is staged, and a STAGE the nodes refuse (a window smaller
// than one frame, from a misconfigured AM) is rolled back with ABORT
// everywhere.
func TestSetupFailureRollsBack(t *testing.T) {
	e := up(t, "spine-leaf", "h1", am.Config{})
	hosts := []string{"h1", "h2", "h3", "h4"}
	cs := e.comms(3, hosts...)
	check := func(what string, errs []error, code string) {
		for i, err := range errs {
			var ae *am.APIError
			if err == nil || !errors.As(err, &ae) || ae.Code != code {
				t.Errorf("%s: rank %d: got %v, want code %s", what, i, err, code)
			}
		}
	}
	// FP32_ARRIVAL has no FP16 input.
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := make([]host.Float16, 1000)
			errs[i] = c.AllReduce(context.Background(), s, s, &host.Options{Acc: "fp32"})
		}()
	}
	wg.Wait()
	check("unsupported tuple", errs, am.CodeUnsupported)
	// A 64-bit Kulisch accumulator cannot hold FP32 terms exactly: the AM
	// refuses the request before staging anything (9.1), every rank alike.
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := make([]float32, 1000)
			errs[i] = c.AllReduce(context.Background(), s, s, &host.Options{KulischWidth: 64})
		}()
	}
	wg.Wait()
	check("width too small", errs, am.CodeBadRequest)
	// A second AM on h1 misconfigured with a receive window smaller than
	// one frame: every node refuses its STAGE (INVALID, Window Bytes), and
	// the AM ABORTs the whole tree; no rank is granted.
	var conn2 *am.PacketConn
	if err := e.lab.Do("h1", func() error {
		var err error
		conn2, err = am.OpenConn("eth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	m2, err := am.New(am.Config{Topology: e.lab.Topo, Conn: conn2, Logf: t.Logf, Window: am.Window{Bytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	srv2 := httptest.NewServer(m2.Handler())
	defer srv2.Close()
	cs2 := make([]*host.Comm, len(hosts))
	for i, h := range hosts {
		if err := e.lab.Do(h, func() error {
			var err error
			cs2[i], err = host.NewComm(context.Background(), host.Config{Rank: i, Size: len(hosts), Iface: "eth0", Job: 4,
				Coordinator: srv2.URL, Node: h})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer cs2[i].Close()
	}
	for i, c := range cs2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := make([]float32, 1000)
			errs[i] = c.AllReduce(context.Background(), s, s, nil)
		}()
	}
	wg.Wait()
	check("window smaller than a frame", errs, am.CodeSetupFailed)
	ops := m2.Ops().Ops
	if len(ops) == 0 {
		t.Fatal("the AM shows no failed operation")
	}
	last := ops[len(ops)-1]
	for _, n := range last.Nodes {
		if n.State != "ABORTED" {
			t.Errorf("node %s is %s after the rollback, want ABORTED", n.Name, n.State)
		}
	}
	// The tree still works afterwards.
	r := collective(cs, "allreduce", 0, 5000, 9, nil)
	r.check(t, "allreduce", 0)
}

// TestPrismctl runs the whole CLI path as processes: 'prismctl am' on h1
// (CONTROL from h1's eth0, runtime channel on h1's lab address), every rank
// as 'prismctl allreduce --verify' (bit-for-bit self check against math/big)
// reaching the AM through the switches' own forwarding, then 'prismctl
// bench' on all ranks.
func TestPrismctl(t *testing.T) {
	bin := prismctl(t)
	lab := labtest.Up(t, "spine-leaf")
	addr := lab.Topo.Nodes["h1"].IPv4.Addr().String() + ":7000"
	amCmd := lab.Exec("h1", bin, "am", "--topology", lab.TopologyFile(), "--listen", addr, "--iface", "eth0")
	var amOut bytes.Buffer
	amCmd.Stdout, amCmd.Stderr = &amOut, &amOut
	if err := amCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		amCmd.Process.Kill() // the PID this test started
		amCmd.Wait()
		if t.Failed() {
			t.Logf("prismctl am:\n%s", amOut.String())
		}
	})
	hc := lab.HTTPClient("h2")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := hc.Get("http://" + addr + "/v1/ops")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prismctl am never answered on %s from h2: %v\n%s", addr, err, amOut.String())
		}
	}
	hosts := []string{"h1", "h2", "h3", "h4"}
	run := func(job int, args ...string) []string {
		outs := make([]bytes.Buffer, len(hosts))
		cmds := make([]*exec.Cmd, len(hosts))
		for i, h := range hosts {
			argv := append([]string{bin}, args...)
			argv = append(argv, "--coordinator", "http://"+addr, "--rank", fmt.Sprint(i), "--size", "4",
				"--iface", "eth0", "--node", h, "--job", fmt.Sprint(job))
			cmds[i] = lab.Exec(h, argv...)
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		res := make([]string, len(hosts))
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("%v rank %d: %v\n%s", args, i, err, outs[i].String())
			}
			res[i] = outs[i].String()
		}
		return res
	}
	for j, format := range []string{"fp32", "fp16", "bf16"} {
		args := []string{"allreduce", "--count", fmt.Sprint(n(10000, 4000000)), "--format", format, "--verify", "--iters", "2"}
		if format == "fp32" {
			args = append(args, "--data", "mixed") // the exactness stress, not the default
		}
		outs := run(70+j, args...)
		for i, o := range outs {
			if !strings.Contains(o, "verified") {
				t.Errorf("%s rank %d did not verify:\n%s", format, i, o)
			}
		}
		t.Logf("%s rank 0:\n%s", format, outs[0])
	}
	// INT8 into an FP32 RESULT: with a wider RESULT the ranks draw from
	// the whole INT8 range, so many sums of the 4 are outside it.
	for i, o := range run(73, "allreduce", "--count", "20000", "--format", "int8", "--output", "fp32", "--verify") {
		if !strings.Contains(o, "verified") {
			t.Errorf("int8 -> fp32 rank %d did not verify:\n%s", i, o)
		}
	}
	// Two ranks that swapped their --node (the topology says whose MAC each
	// interface has): every rank fails at once naming the right host,
	// rather than timing out on a leaf that waits for DATA arriving on
	// another port.
	t0 := time.Now()
	var swapped [4]bytes.Buffer
	var swapCmds []*exec.Cmd
	for i, h := range hosts {
		node := map[string]string{"h2": "h3", "h3": "h2"}[h]
		if node == "" {
			node = h
		}
		c := lab.Exec(h, bin, "allreduce", "--coordinator", "http://"+addr, "--rank", fmt.Sprint(i), "--size", "4",
			"--iface", "eth0", "--node", node, "--job", "84", "--count", "1000")
		c.Stdout, c.Stderr = &swapped[i], &swapped[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		swapCmds = append(swapCmds, c)
	}
	for i, c := range swapCmds {
		if err := c.Wait(); err == nil || !strings.Contains(swapped[i].String(), "is h2 eth0's") && !strings.Contains(swapped[i].String(), "is h3 eth0's") {
			t.Errorf("swapped --node, rank %d: %v, want a topology error naming the host:\n%s", i, err, swapped[i].String())
		}
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("swapped --node: the ranks took %v to fail, want at once", d)
	}
	outs := run(80, "bench", "-b", "1K", "-e", "64K", "-f", "4", "-n", "2", "--check")
	if !strings.Contains(outs[0], "algbw") || strings.Count(outs[0], "exact") != 4 {
		t.Errorf("bench table:\n%s", outs[0])
	}
	t.Logf("bench:\n%s", outs[0])
	// The same job at once again: its collectives are numbered from 0
	// again, and the AM must tell the new processes from repeats of the
	// old ones (until it kept the ended invocations, the new run got
	// their grants, for operations the switches had released).
	outs = run(80, "bench", "-b", "1K", "-e", "64K", "-f", "4", "-n", "2", "--check")
	if strings.Count(outs[0], "exact") != 4 {
		t.Errorf("job 80 run again, bench table:\n%s", outs[0])
	}
	// Ranks killed at the barrier hold neither it nor the next run of
	// their job, even one with other parameters.
	for i, h := range hosts[:2] {
		c := lab.Exec(h, bin, "allreduce", "--coordinator", "http://"+addr, "--rank", fmt.Sprint(i), "--size", "4",
			"--iface", "eth0", "--node", h, "--job", "83", "--count", "1000", "--format", "fp16")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); amArrivals(t, hc, addr) <= i && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		c.Process.Kill() // the PID this test started
		c.Wait()
	}
	for i, o := range run(83, "allreduce", "--count", "1000", "--verify") {
		if !strings.Contains(o, "verified") {
			t.Errorf("job 83 after its killed run, rank %d:\n%s", i, o)
		}
	}
	// Persistent: one operation for every repetition, the last verified.
	outs = run(81, "allreduce", "--count", "1000", "--persistent", "--iters", "5", "--verify", "--format", "int8")
	for i, o := range outs {
		ids := map[string]bool{}
		for _, l := range strings.Split(o, "\n") {
			if f := strings.Fields(l); len(f) > 8 && f[2] == "allreduce" {
				ids[f[8]] = true // "op ID"
			}
		}
		if !strings.Contains(o, "verified") || len(ids) != 1 {
			t.Errorf("persistent rank %d: verified %v, operations %v (want one for 5 repetitions):\n%s", i, strings.Contains(o, "verified"), ids, o)
		}
	}
	outs = run(82, "bench", "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "--check", "--persistent")
	if !strings.Contains(outs[0], "persistent allreduce") || strings.Count(outs[0], "exact") != 4 {
		t.Errorf("persistent bench table:\n%s", outs[0])
	}
	t.Logf("persistent bench:\n%s", outs[0])
	// The AM's view of all of it, as a user reads it.
	show, err := lab.Exec("h2", bin, "show", "am", "--coordinator", "http://"+addr).CombinedOutput()
	if err != nil {
		t.Fatalf("prismctl show am: %v\n%s", err, show)
	}
	for _, want := range []string{"persistent allreduce of 4 ranks", "on a tree rooted at s1", "l1  ", "LEAF", "ROOT"} {
		if !strings.Contains(string(show), want) {
			t.Errorf("prismctl show am lacks %q:\n%s", want, show)
		}
	}
}

// amArrivals counts the ranks of job 83 waiting at a barrier of the AM at
// addr (GET /v1/ops, read from a host of the lab).
func amArrivals(t *testing.T, hc *http.Client, addr string) int {
	t.Helper()
	resp, err := hc.Get("http://" + addr + "/v1/ops")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var l am.OpList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatalf("GET /v1/ops: %v", err)
	}
	n := 0
	for _, b := range l.Barriers {
		if b.Job == 83 {
			n += len(b.Arrived)
		}
	}
	return n
}

// TestKilledRankBetweenCalls: the process of rank 3 (prismctl on h4) is
// killed between two REDUCE calls of a job, waiting at the AM's barrier
// for the next one. The other ranks' next call fails with an error
// naming rank 3 and its node within about the AM's 1 s presence grace,
// not at the 2-minute barrier timeout: the killed process's presence
// stream to the AM closed with it (docs/protocol.md 9.9).
func TestKilledRankBetweenCalls(t *testing.T) {
	bin := prismctl(t)
	e := up(t, "spine-leaf", "h1", am.Config{})
	const job = 13
	cs := make([]*host.Comm, 3)
	for i, h := range []string{"h1", "h2", "h3"} {
		cs[i] = e.comm(h, i, 4, job)
	}
	const iters = 4
	victim, vout := startVictim(t, e, bin, job, "--root", "0", "--count", "300", "--iters", fmt.Sprint(iters+1))
	for i := 0; i < iters; i++ {
		if r := collective(cs, "reduce", 0, 300, uint64(i), nil); errors.Join(r.errs...) != nil {
			t.Fatalf("call %d: %v\nvictim: %s", i, errors.Join(r.errs...), vout.String())
		}
	}
	// The victim's last call now waits at the barrier for the others.
	atBarrier := func() bool {
		for _, b := range e.m.Ops().Barriers {
			if b.Job == job && len(b.Arrived) == 1 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !atBarrier(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 3's next call did not reach the barrier within 10 s; victim: %s", vout.String())
		}
	}
	victim.Process.Kill()
	victim.Wait()
	killedAt := time.Now()
	r := collective(cs, "reduce", 0, 300, iters, nil)
	took := time.Since(killedAt)
	for i, err := range r.errs {
		if !errors.Is(err, host.ErrRankGone) || !strings.Contains(err.Error(), "rank 3 (h4) is gone") {
			t.Errorf("rank %d: %v; want ErrRankGone naming rank 3 (h4)", i, err)
			continue
		}
		t.Logf("rank %d: %v", i, err)
	}
	if took > 3*time.Second {
		t.Errorf("the survivors failed %v after the kill, want within about the AM's 1 s grace", took)
	} else {
		t.Logf("survivors failed %v after the kill", took.Round(time.Millisecond))
	}
}

// blamesRank3 reports whether a diagnosis names the killed rank 3 (h4):
// gone (its process's AM connection closed), or the stream its leaf
// waited on, its DATA (stopped contributing) or, when it had sent all of
// its DATA before it died, its RESULT (stopped acknowledging RESULT).
func blamesRank3(s string) bool {
	for _, w := range []string{"rank 3 (h4) stopped contributing", "rank 3 (h4) stopped acknowledging RESULT", "rank 3 (h4) is gone"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
