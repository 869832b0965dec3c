// This file owns 'prismctl moe': MoE expert-parallel dispatch/combine through
// the bitmap framework (host/bitmap MoE). 'register' plans the job (one
// operation per token source) and registers it from this host (replacing
// the job's earlier registration, if the switches still hold one); 'run' is
// one host's part: it hosts its experts (a fixed demo function), dispatches
// its own random tokens with random top-K and checks the combined outputs
// bit for bit against the unicast reference (bitmap.ReferenceMoE);
// 'release' frees the job's switch contexts (a registered BITMAP context
// never expires: it is forwarding state, like a route).

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/host/bitmap"
	"github.com/prismd/prismd/parser"
)

func init() {
	register("moe", "MoE dispatch/combine through the bitmap framework (register|run|release)", runMoE)
}

// The synopsis of each moe subcommand, shared by 'moe -h' and the
// subcommand's own -h so the two cannot disagree.
const (
	moeRegisterUsage = "prismctl moe register --spec F --topology T --node H --hosts h1,h2,... [--experts-per-host 2 --topk 2 --hidden 64]"
	moeRunUsage      = "prismctl moe run --spec F --topology T --node H [--tokens 64 --seed 1] [--auth-key-file K]"
	moeReleaseUsage  = "prismctl moe release --spec F --topology T --node H"
)

func moeUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n       %s\n       %s\n", moeRegisterUsage, moeRunUsage, moeReleaseUsage)
}

func runMoE(args []string) int {
	if rc, ok := pickSub("moe", args, []string{"register", "run", "release"}, moeUsage); !ok {
		return rc
	}
	switch args[0] {
	case "register":
		return moeRegister(args[1:])
	case "release":
		return moeRelease(args[1:])
	}
	return moeRun(args[1:])
}

// readSpec reads the job spec 'moe register --spec' wrote.
func readSpec(path string) (bitmapam.JobSpec, error) {
	var js bitmapam.JobSpec
	if path == "" {
		return js, errors.New("--spec is required: the file 'moe register --spec' wrote")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return js, fmt.Errorf("--spec: %v", err)
	}
	if err := json.Unmarshal(b, &js); err != nil {
		return js, fmt.Errorf("--spec %s: %v", path, err)
	}
	return js, nil
}

// loadPlan reads the spec at path and plans it on topo for 'moe cmd': nil
// and the exit status when it cannot (2 for a bad --spec, 1 for a plan
// that fails).
func loadPlan(fs *flag.FlagSet, cmd, path string, topo *deploy.Topology) (*bitmapam.Plan, int) {
	js, err := readSpec(path)
	if err != nil {
		return nil, flagErr(fs, err)
	}
	plan, err := bitmapam.Compute(topo, js)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe %s: %v\n", cmd, err)
		return nil, 1
	}
	return plan, 0
}

// moeRelease frees every switch context of the job 'moe register' wrote
// the spec of.
func moeRelease(args []string) int {
	fs := flag.NewFlagSet("moe release", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	spec := fs.String("spec", "", "the spec 'moe register' wrote")
	fs.Usage = subUsage(fs, moeReleaseUsage)
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	topo, err := mf.load()
	if err != nil {
		return flagErr(fs, err)
	}
	plan, rc := loadPlan(fs, "release", *spec, topo)
	if plan == nil {
		return rc
	}
	js := plan.Spec
	conn, err := am.OpenConn(mf.iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe release: %v\n", err)
		return 1
	}
	reg := bitmapam.NewRegistrar(conn, bitmapam.RegistrarConfig{})
	defer reg.Close()
	ctx, cancel := signalContext(30 * time.Second)
	defer cancel()
	gone, err := reg.ReleaseReport(ctx, plan)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe release: %v\n", err)
		return 1
	}
	n := 0
	for _, o := range plan.Ops {
		n += len(o.Switches)
	}
	switch {
	case gone == n:
		fmt.Printf("MoE job %d: none of its %d switch contexts was installed any more: released before, or replaced by a later 'moe register' of the job (release with that one's spec)\n", js.Op.Job, n)
	case gone > 0:
		fmt.Printf("released MoE job %d: %d of its %d switch contexts (the other %d were gone already)\n", js.Op.Job, n-gone, n, gone)
	default:
		fmt.Printf("released MoE job %d: %d switch contexts of %d operations\n", js.Op.Job, n, len(plan.Ops))
	}
	return 0
}

// demoExpert is expert e's function in 'moe run': deterministic, so every
// source can compute the reference for its own tokens.
func demoExpert(e int, x []float32) []float32 {
	y := make([]float32, len(x))
	a := float32(e%5) + 0.75
	for i, v := range x {
		y[i] = a*v - float32(e)*0.125*float32(i%7) + v*v*1e-3
	}
	return y
}

func moeRegister(args []string) int {
	fs := flag.NewFlagSet("moe register", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	spec := fs.String("spec", "", "write the job's spec (JSON) here for 'moe run'")
	hosts := fs.String("hosts", "", "comma-separated hosts taking part (experts and token sources)")
	per := fs.Int("experts-per-host", 2, "experts per host")
	topk := fs.Int("topk", 2, "experts per token (K)")
	hidden := fs.Int("hidden", 64, "hidden size (FP32 values per token)")
	timeoutMS := fs.Uint("switch-timeout-ms", 200, "context timeout: C-BM soft-state lifetime and PARTIAL deadline")
	mtu := fs.Int("mtu", 1500, "PRISM MTU: 576, 1500 or 9000")
	fs.Usage = subUsage(fs, moeRegisterUsage)
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	topo, err := mf.load()
	if err != nil {
		return flagErr(fs, err)
	}
	if *spec == "" || *hosts == "" {
		return flagErr(fs, errors.New("--spec and --hosts are required"))
	}
	hs := strings.Split(*hosts, ",")
	js := bitmapam.JobSpec{Kind: bitmapam.MoE, Op: parser.OpKey{Job: mf.job, Group: 1, GroupGen: 1, Op: 1, OpGen: uint32(time.Now().Unix())},
		Tenant: uint32(mf.tenant), Endpoints: bitmapam.HostEndpoints(hs, *per), ActiveK: *topk,
		VectorLen: bitmap.MoEVectorLen(*hidden, *topk), MTU: *mtu, TimeoutMS: uint32(*timeoutMS)}
	plan, err := bitmapam.Compute(topo, js)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe register: %v\n", err)
		return 1
	}
	conn, err := am.OpenConn(mf.iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe register: %v\n", err)
		return 1
	}
	reg := bitmapam.NewRegistrar(conn, bitmapam.RegistrarConfig{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "prismctl moe register: "+format+"\n", args...)
	}})
	defer reg.Close()
	ctx, cancel := signalContext(30 * time.Second)
	defer cancel()
	if err := reg.Register(ctx, plan); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe register: %v\n", err)
		return 1
	}
	// The plan's spec: Register moves it to a newer generation when the
	// switches still held the job's earlier registration.
	b, _ := json.MarshalIndent(plan.Spec, "", "  ")
	if err := os.WriteFile(*spec, b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe register: %v\n", err)
		return 1
	}
	n := 0
	for _, o := range plan.Ops {
		n += len(o.Switches)
	}
	fmt.Printf("registered MoE job %d: %d experts on %d hosts, top-%d, %d operations, %d switch contexts, encoding %v\n",
		mf.job, len(js.Endpoints), len(hs), *topk, len(plan.Ops), n, plan.Choice.Encoding)
	return 0
}

func moeRun(args []string) int {
	fs := flag.NewFlagSet("moe run", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	mf.registerAuth(fs)
	spec := fs.String("spec", "", "the spec 'moe register' wrote")
	tokens := fs.Int("tokens", 64, "tokens this host dispatches")
	seed := fs.Uint64("seed", 1, "token seed (mixed with the host name)")
	linger := fs.Duration("linger", 3*time.Second, "after this host's combine, keep serving experts until no frame of the job came for this long (peers re-dispatch every switch timeout chain while they miss an expert here)")
	unicast := fs.Bool("unicast", false, "send one copy per expert and sum at the source, nothing merged in the network (the host-side alternative)")
	window := fs.Int("window", 0, "tokens in flight per dispatch (0 = the library default, -1 = all at once)")
	fs.Usage = subUsage(fs, moeRunUsage)
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	topo, err := mf.load()
	if err != nil {
		return flagErr(fs, err)
	}
	if err := mf.loadKey(); err != nil {
		return flagErr(fs, err)
	}
	plan, rc := loadPlan(fs, "run", *spec, topo)
	if plan == nil {
		return rc
	}
	js := plan.Spec
	ctx, cancel := signalContext(mf.timeout)
	defer cancel()
	port, err := bitmap.Open(mf.iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: %v\n", err)
		return 1
	}
	defer port.Close()
	// The key goes on before NewMoE: its operations size and flag their
	// frames when they start.
	if err := mf.applyKey(port); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: %v\n", err)
		return 1
	}
	opts := &bitmap.MoEOptions{Unicast: *unicast, Window: *window}
	m, err := bitmap.NewMoE(port, plan, mf.node, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: %v\n", err)
		return 1
	}
	defer m.Close()
	var served atomic.Int64
	go func() {
		for {
			toks, err := m.Receive(ctx)
			if err != nil {
				return
			}
			for _, tk := range toks {
				served.Add(1)
				_ = m.Return(ctx, tk, bitmap.Weighted(tk.Weight, demoExpert(tk.Expert, tk.Hidden)))
			}
		}
	}()
	hidden := int(js.VectorLen) - 2*js.ActiveK
	rng := rand.New(rand.NewPCG(*seed, uint64(deploy.MAC("", mf.node, "")[1])))
	x := make([][]float32, *tokens)
	tk := make([][]int, *tokens)
	w := make([][]float32, *tokens)
	for t := range x {
		x[t] = make([]float32, hidden)
		for i := range x[t] {
			x[t][i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(30)-15))
		}
		tk[t] = rng.Perm(len(js.Endpoints))[:js.ActiveK]
		for i := range tk[t] {
			tk[t][i] = js.Endpoints[tk[t][i]].ID
		}
		w[t] = make([]float32, js.ActiveK)
		for i := range w[t] {
			w[t][i] = rng.Float32()
		}
	}
	start := time.Now()
	h, err := m.Dispatch(ctx, x, tk, w)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: dispatch: %v\n%s", err, mf.authReport(port))
		return 1
	}
	out, err := h.Combine(ctx)
	took := time.Since(start)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: combine: %v\n%s", err, mf.authReport(port))
		return 1
	}
	want, err := bitmap.ReferenceMoE(x, tk, w, demoExpert, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl moe run: reference: %v\n", err)
		return 1
	}
	bad := 0
	for t := range want {
		for i := range want[t] {
			if math.Float32bits(want[t][i]) != math.Float32bits(out[t][i]) {
				bad++
			}
		}
	}
	st := h.Stats()
	mode := "bitmap"
	if *unicast {
		mode = "unicast"
	}
	fmt.Printf("%s: %d tokens combined in %v (%.0f tokens/s, %s); dispatch frames %d, re-dispatch %d, return frames at the source %d (%d PARTIAL)\n",
		mf.node, *tokens, took.Round(time.Millisecond), float64(*tokens)/took.Seconds(), mode, st.Frames, st.Redispatches, st.Returns, st.Partials)
	for t0 := time.Now(); (time.Since(t0) < *linger || m.Idle() < *linger) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Print(mf.authReport(port))
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "prismctl moe run: %d values differ from the unicast reference\n", bad)
		return 1
	}
	fmt.Printf("%s: verified against the unicast reference bit for bit; served %d expert calls\n", mf.node, served.Load())
	return 0
}
