// This file owns 'prismctl allreduce' (and 'prismctl reduce'): one rank of a
// collective through the host library, with deterministic per-rank data so
// every rank can verify the result bit for bit against math/big on its own.

package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/host"
)

func init() {
	register("allreduce", "run one rank of an ALLREDUCE (or REDUCE with --root) through the PRISM switches", runAllReduce)
}

// rankFlags are the flags every rank command shares; PRISM_* variables give
// the defaults.
type rankFlags struct {
	coordinator, iface, node, nodeIface string
	rank, size                          int
	job                                 uint64
	group                               uint
	format, acc, output                 string
	data                                string // input distribution (genSpec.data)
	mtu                                 int
	timeout                             time.Duration
	ordinary                            bool
	cpuprofile, memprofile              string
	configFile                          string // --config (PRISM_CONFIG)
	// env is what PRISM_* and the config file gave (host.ConfigFromEnv):
	// the settings without a flag of their own (ConnectTimeout,
	// PersistentShapes) come from it.
	env host.Config
	// envErr is what was wrong in PRISM_* or the config file, which check
	// reports alone: the settings after a bad one were not read, and
	// "required" errors about them misled.
	envErr error
}

// register defines the flags, their defaults from PRISM_* and the config
// file. args are the command's arguments: a --config among them names the
// file before the defaults are read (flags > PRISM_* > the file).
func (f *rankFlags) register(fs *flag.FlagSet, args []string) {
	if p, ok := configArg(args); ok {
		os.Setenv("PRISM_CONFIG", p)
	}
	env, err := host.ConfigFromEnv()
	f.env, f.envErr = env, err
	// The library's job is Config.Job, 0 unless set; a rank with nothing
	// configured runs job 1. Set anywhere (PRISM_JOB or the file), the
	// value stands, 0 included: ranks that set job 0 one way and the other
	// met in two different jobs.
	job := uint64(1)
	if os.Getenv("PRISM_JOB") != "" || os.Getenv("PRISM_CONFIG") != "" {
		job = env.Job
	}
	fs.StringVar(&f.configFile, "config", os.Getenv("PRISM_CONFIG"), "JSON file with the rank's settings (PRISM_CONFIG): keys "+host.ConfigKeys+
		"; flags override PRISM_* variables, which override the file")
	fs.StringVar(&f.coordinator, "coordinator", env.Coordinator, "coordinator URL, e.g. http://10.0.0.1:7000 (PRISM_COORDINATOR)")
	fs.StringVar(&f.iface, "iface", env.Iface, "interface toward the leaf switch (PRISM_IFACE)")
	fs.StringVar(&f.node, "node", env.Node, "this host's name in the topology, e.g. h1 (PRISM_NODE)")
	fs.StringVar(&f.nodeIface, "node-iface", env.NodeIface, "the interface's name in the topology if it differs from --iface")
	fs.IntVar(&f.rank, "rank", env.Rank, "this rank, 0..size-1 (PRISM_RANK)")
	fs.IntVar(&f.size, "size", env.Size, "number of ranks (PRISM_SIZE)")
	fs.Uint64Var(&f.job, "job", job, "job ID shared by all ranks (PRISM_JOB; 1 when neither it nor a config file sets one)")
	fs.UintVar(&f.group, "group", uint(env.Group), "communicator within the job (PRISM_GROUP)")
	fs.StringVar(&f.format, "format", "fp32", "element format: fp32, fp16, bf16 or int8")
	fs.StringVar(&f.acc, "acc", "kulisch", "accumulator: kulisch (KULISCH_FIXED, exact) or fp32 (FP32_ARRIVAL, fp32 input only); any case, the protocol's names too")
	fs.StringVar(&f.output, "output", "", "RESULT format: fp32, fp16, bf16 or int8 (default: the input format); e.g. --format int8 --output fp32 keeps sums INT8 cannot hold")
	fs.StringVar(&f.data, "data", "", "fp32 input values: gradient (N(0,1) scaled by 2^-12..2^-4, like training gradients; default with --acc kulisch), "+
		"mixed (subnormals to 1e30: the exactness stress, whose exact partials cost the switches far more CPU and bytes) "+
		"or integral (integers: exact in any order, default with --acc fp32)")
	fs.IntVar(&f.mtu, "mtu", 1500, "PRISM MTU: 576, 1500 or 9000")
	fs.DurationVar(&f.timeout, "timeout", 0, "operation inactivity timeout, 1ms..10m in whole milliseconds (0: the AM's default, 'prismctl am --timeout-ms')")
	fs.BoolVar(&f.ordinary, "ordinary", false, "run every repetition through the AM (barrier, grant, CONTROL) as an ordinary collective; by default the library runs a repeated ALLREDUCE shape as a persistent collective from its second call (host.Config.PersistentShapes; a REDUCE always goes through the AM)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the collectives to this file (go tool pprof)")
	fs.StringVar(&f.memprofile, "memprofile", "", "write an allocation profile (every allocation sampled) to this file at exit")
}

// profile starts the profiles the flags ask for; the returned function
// stops and writes them. Profiling covers the collectives, not flag parsing.
func (f *rankFlags) profile() (stop func(), err error) {
	var cpu *os.File
	if f.cpuprofile != "" {
		if cpu, err = os.Create(f.cpuprofile); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err = pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if f.memprofile != "" {
		runtime.MemProfileRate = 1
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			cpu.Close()
		}
		if f.memprofile != "" {
			if m, err := os.Create(f.memprofile); err == nil {
				pprof.Lookup("allocs").WriteTo(m, 0)
				m.Close()
			} else {
				fmt.Fprintf(os.Stderr, "--memprofile: %v\n", err)
			}
		}
	}, nil
}

// check says what is wrong with the flags and how to fix it.
func (f *rankFlags) check() error {
	if f.envErr != nil {
		return fmt.Errorf("%v: fix or unset it", f.envErr)
	}
	var errs []string
	f.format, f.output = strings.ToLower(f.format), strings.ToLower(f.output) // FP32 as the library takes it
	if f.coordinator == "" {
		errs = append(errs, "--coordinator is required (or PRISM_COORDINATOR): the URL 'prismctl am --listen' serves, e.g. http://10.0.0.1:7000")
	}
	if f.iface == "" {
		errs = append(errs, "--iface is required (or PRISM_IFACE): the interface toward the leaf switch, e.g. eth0")
	}
	if f.node == "" {
		errs = append(errs, "--node is required (or PRISM_NODE): this host's name in the AM's topology, e.g. h1")
	}
	if f.size < 1 || f.size > am.MaxRanks {
		errs = append(errs, fmt.Sprintf("--size %d: give the number of ranks (1..%d)", f.size, am.MaxRanks))
	} else if f.rank < 0 || f.rank >= f.size {
		errs = append(errs, fmt.Sprintf("--rank %d is outside 0..%d (--size %d)", f.rank, f.size-1, f.size))
	}
	switch f.format {
	case "fp32", "fp16", "bf16", "int8":
	default:
		errs = append(errs, fmt.Sprintf("--format %q: use fp32, fp16, bf16 or int8", f.format))
	}
	// The library's and the runtime channel's names too, in any case
	// (kulisch_fixed, FP32_ARRIVAL): one spelling worked in Options and
	// not on the command line.
	if p, err := am.ParseAcc(f.acc); err == nil {
		f.acc = am.AccName(p)
	} else {
		errs = append(errs, fmt.Sprintf("--acc %q: use kulisch (KULISCH_FIXED, exact) or fp32 (FP32_ARRIVAL)", f.acc))
	}
	switch f.output {
	case "", "fp32", "fp16", "bf16", "int8":
	default:
		errs = append(errs, fmt.Sprintf("--output %q: use fp32, fp16, bf16 or int8 (default: the input format)", f.output))
	}
	if f.acc == "fp32" && f.format != "fp32" {
		errs = append(errs, fmt.Sprintf("--acc fp32 needs --format fp32 (FP32_ARRIVAL has no %s input); use --acc kulisch", f.format))
	}
	switch f.data {
	case "":
		// Real data, not the worst case: a user's first 'prismctl bench'
		// with mixed data measured the exactness stress (8.6 MB/s at 32M
		// against 100+ on gradients) and read it as prismd's speed.
		f.data = "gradient"
		if f.acc == "fp32" {
			f.data = "integral"
		}
	case "mixed", "gradient", "integral":
		if f.format != "fp32" {
			errs = append(errs, fmt.Sprintf("--data %s applies to --format fp32 only; drop it for %s", f.data, f.format))
		}
	default:
		errs = append(errs, fmt.Sprintf("--data %q: use mixed, gradient or integral", f.data))
	}
	if f.mtu != 576 && f.mtu != 1500 && f.mtu != 9000 {
		errs = append(errs, fmt.Sprintf("--mtu %d: use 576, 1500 or 9000", f.mtu))
	}
	if err := host.CheckTimeout("--timeout", f.timeout); err != nil {
		errs = append(errs, err.Error())
	} else if f.timeout%time.Millisecond != 0 {
		errs = append(errs, fmt.Sprintf("--timeout %v is not a whole number of milliseconds, the unit the AM counts in: "+
			"use 1ms..10m (0 = the AM's default, 'prismctl am --timeout-ms') in whole milliseconds, e.g. %v", f.timeout, f.timeout.Truncate(time.Millisecond)))
	}
	if f.group > math.MaxUint16 {
		errs = append(errs, fmt.Sprintf("--group %d: at most 65535", f.group))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n  "))
	}
	return nil
}

func (f *rankFlags) comm(ctx context.Context) (*host.Comm, error) {
	oneProc()
	return host.NewComm(ctx, f.config())
}

func (f *rankFlags) config() host.Config {
	return host.Config{Rank: f.rank, Size: f.size, Iface: f.iface, Job: f.job, Group: uint16(f.group),
		Coordinator: f.coordinator, Node: f.node, NodeIface: f.nodeIface,
		ConnectTimeout: f.env.ConnectTimeout, PersistentShapes: f.env.PersistentShapes,
		Notify: func(msg string) { fmt.Fprintf(os.Stderr, "prismctl: %s\n", msg) }}
}

// onlyRankOutside reports whether check refused the flags for --rank
// outside 0..--size-1 alone, with what the AM needs to hear of it (its
// coordinator and node) right: the rank can still say it will not come,
// and the other ranks, whose --size is probably the right one, fail at
// once naming it instead of waiting the barrier timeout (2 minutes).
func (f *rankFlags) onlyRankOutside() bool {
	if f.envErr != nil || f.coordinator == "" || f.node == "" || f.size < 1 || f.rank < 0 || f.rank < f.size {
		return false
	}
	g := *f
	g.size = f.rank + 1 // the same flags with a size that holds the rank: nothing else wrong?
	return g.check() == nil
}

// giveUp tells the AM, for a rank whose communicator could not start, that
// it will not come to its first call (coll of n elements of the input
// format, to root): the other ranks fail at once, quoting why, instead of
// waiting out the AM's barrier timeout for it.
func (f *rankFlags) giveUp(ctx context.Context, coll string, n, root int, cause error) {
	if f.coordinator == "" || errors.Is(cause, am.ErrUnreachable) {
		return
	}
	send := genSpec{format: f.format}.alloc(n)
	if err := host.GiveUpFirstCall(ctx, f.config(), coll, send, max(root, 0), f.options(), "it could not start: "+cause.Error()); err == nil {
		fmt.Fprintln(os.Stderr, "prismctl: told the AM, so that the other ranks' first call fails at once instead of waiting for this rank")
	}
}

// oneProc runs a rank on one P unless GOMAXPROCS is set. A rank's work is
// one goroutine (the Comm's event loop) while the caller waits, and with a
// second P the runtime wakes an idle thread at every handoff between the
// two: on the 2-core lab VM (4 ranks, 3 switches) GOMAXPROCS=1 took a
// 2-value persistent ALLREDUCE from 522-559 to 408-465 us, 1M FP32 from
// 34-40 to 31-33 ms and 16M from 374-392 to 332-378 ms (spine-leaf-jumbo,
// A/B pairs, same binary).
func oneProc() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

func (f *rankFlags) options() *host.Options {
	return &host.Options{Acc: f.acc, Output: f.output, MTU: f.mtu, Timeout: f.timeout, Ordinary: f.ordinary}
}

// configArg finds --config's value among args (-config, --config F,
// --config=F) before the flags are defined, so without knowing which flags
// take a value: the rank commands take no positional arguments, so any
// -config before a "--" is the flag.
func configArg(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return "", false
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "config" {
			continue
		}
		if eq {
			return val, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
		return "", false
	}
	return "", false
}

func flagErr(fs *flag.FlagSet, err error) int {
	fmt.Fprintf(os.Stderr, "prismctl %s: bad flags:\n  %v\nrun 'prismctl %s -h' for all flags\n", fs.Name(), err, fs.Name())
	return 2
}

func runAllReduce(args []string) int {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	var rf rankFlags
	rf.register(fs, args)
	count := fs.Int("count", 1000000, "elements per rank")
	seed := fs.Uint64("seed", 1, "data seed: every rank derives every rank's input from it")
	verify := fs.Bool("verify", false, "check the result of every repetition (--iters), every element, bit for bit against the exact sum (math/big) rounded once; "+
		"the exact sums are computed once, before the first collective (about 0.6 s per million elements with 4 ranks), "+
		"and the receive buffer is overwritten with wrong values before each repetition so one that leaves an element unwritten fails; "+
		"the first repetition that differs is reported (iteration, element, got and want) and the exit code is 1")
	root := fs.Int("root", -1, "REDUCE to this rank instead of ALLREDUCE")
	iters := fs.Int("iters", 1, "repeat the collective this many times")
	saveIn := fs.String("save-input", "", "write this rank's input vector to FILE before the collective: --count raw little-endian values of --format (int8, or IEEE binary16/bfloat16/binary32 bits), "+
		"so a program of your own can compute the expected result from every rank's file")
	saveOut := fs.String("save-result", "", "write the result of the last repetition to FILE: --count raw little-endian values of --output (default --format); every rank of an ALLREDUCE, the root of a REDUCE")
	persistent := fs.Bool("persistent", false, "run the --iters repetitions as one persistent collective (like MPI_Allreduce_init): the AM is asked once, then every repetition runs without it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismctl allreduce --coordinator URL --rank R --size N --iface IF --node H [--count N] [--format fp32] [--acc kulisch|fp32] [--verify] [--iters N]")
		fmt.Fprintln(fs.Output(), "With --verify the result of every repetition is checked, on every rank of an ALLREDUCE and on the root of a REDUCE.")
		fmt.Fprintln(fs.Output(), "Every rank setting also comes from a PRISM_* variable (named in its flag's text) or a JSON file (--config FILE or")
		fmt.Fprintln(fs.Output(), "PRISM_CONFIG), e.g. {\"coordinator\": \"http://10.0.0.1:7000\", \"size\": 4, \"iface\": \"eth0\", \"connect_timeout\": \"5s\"};")
		fmt.Fprintln(fs.Output(), "a flag overrides the variable, which overrides the file. PRISM_CONNECT_TIMEOUT and PRISM_PERSISTENT_SHAPES have no flag.")
		fs.PrintDefaults()
	}
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if fs.NArg() > 0 {
		return flagErr(fs, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0)))
	}
	if err := rf.check(); err != nil {
		rc := flagErr(fs, err)
		if rf.onlyRankOutside() && *count >= 1 && *count <= math.MaxUint32 {
			coll := "allreduce"
			if *root >= 0 {
				coll = "reduce"
			}
			rf.giveUp(context.Background(), coll, *count, *root, err)
		}
		return rc
	}
	if *count < 1 || *count > math.MaxUint32 {
		return flagErr(fs, fmt.Errorf("--count %d: use 1..%d", *count, uint32(math.MaxUint32)))
	}
	if *root >= rf.size {
		return flagErr(fs, fmt.Errorf("--root %d is outside 0..%d", *root, rf.size-1))
	}
	if *iters < 1 {
		return flagErr(fs, fmt.Errorf("--iters %d: at least 1", *iters))
	}
	if *persistent && rf.ordinary {
		return flagErr(fs, errors.New("--persistent and --ordinary exclude each other: pick one way to repeat the collective"))
	}
	if *saveOut != "" && *root >= 0 && rf.rank != *root {
		return flagErr(fs, fmt.Errorf("--save-result on rank %d of a REDUCE to rank %d: only the root receives the result; drop it here", rf.rank, *root))
	}
	if *verify && rf.acc == "fp32" && rf.data != "integral" {
		return flagErr(fs, fmt.Errorf("--verify with --acc fp32 needs --data integral: FP32_ARRIVAL rounds in arrival order, so %s data has no single exact answer", rf.data))
	}
	gen := genSpec{seed: *seed, format: rf.format, size: rf.size, data: rf.data, output: rf.output}
	coll := "allreduce"
	if *root >= 0 {
		coll = "reduce"
	}
	// Every repetition sends the same input, so one exact reference serves
	// them all. It is computed before the communicator exists: between
	// repetitions of a persistent collective the other ranks would not
	// wait for it, and the AM's barrier before the first one does.
	var ref *reference
	if *verify && (coll == "allreduce" || rf.rank == *root) {
		ref = gen.reference(*count)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := rf.comm(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl allreduce: %v\n", err)
		rf.giveUp(ctx, coll, *count, *root, err)
		return 1
	}
	defer c.Close()
	stopProf, err := rf.profile()
	if err != nil {
		return flagErr(fs, err)
	}
	defer stopProf()
	send := gen.vector(rf.rank, *count)
	recv := gen.alloc(*count)
	if *saveIn != "" {
		if err := saveVector(*saveIn, send); err != nil {
			fmt.Fprintf(os.Stderr, "prismctl allreduce: --save-input: %v\n", err)
			return 1
		}
	}
	run, err := newRepeater(c, *persistent, coll, send, recv, *root, rf.options())
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl allreduce: %v\n", err)
		return 1
	}
	defer run.close()
	rep := repetitions{rank: rf.rank, coll: coll, count: *count, what: gen.describe(rf.acc), width: gen.width(), iters: *iters,
		start: func(ctx context.Context) collRequest { return run.start(ctx) }, recv: recv, ref: ref, out: os.Stdout, errOut: os.Stderr}
	rc := rep.run(ctx)
	if rc == 0 && *saveOut != "" {
		if err := saveVector(*saveOut, recv); err != nil {
			fmt.Fprintf(os.Stderr, "prismctl allreduce: --save-result: %v\n", err)
			return 1
		}
	}
	return rc
}

// saveVector writes v (a typed slice) as raw little-endian values.
func saveVector(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := binary.Write(bw, binary.LittleEndian, v); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// collRequest is a started collective (a *host.Request).
type collRequest interface {
	Wait() error
	Stats() host.Stats
}

// repetitions runs one collective --iters times, printing each, and with
// ref checks the result of every one of them: the input is the same every
// time, so every result must equal ref.
type repetitions struct {
	rank        int
	coll        string
	count       int
	what        string // the input and accumulator (genSpec.describe)
	width       int    // input bytes per element
	iters       int
	start       func(context.Context) collRequest
	recv        any        // the receive buffer every repetition writes
	ref         *reference // nil: no --verify, or a rank without the result
	out, errOut io.Writer
}

// run returns the exit code. A repetition whose result differs from the
// reference is reported at once (iteration, how many elements, the first
// one with got and want); the rest still run, so the other ranks finish
// their collectives rather than time out on this one, and the summary
// says how many repetitions differed.
func (r *repetitions) run(ctx context.Context) int {
	failed, first := 0, 0
	times := make([]time.Duration, 0, r.iters)
	defer func() { r.summary(times) }()
	for it := 1; it <= r.iters; it++ {
		if r.ref != nil {
			// What the previous repetition left would pass for a result
			// this one never wrote.
			r.ref.poison(r.recv)
		}
		t0 := time.Now()
		q := r.start(ctx)
		if err := q.Wait(); err != nil {
			fmt.Fprintf(r.errOut, "prismctl allreduce: %v\n", err)
			return 1
		}
		el := time.Since(t0)
		times = append(times, el)
		s := q.Stats()
		bytes := float64(r.count * r.width)
		how := ""
		if s.AutoPersistent {
			how = " (repeated shape: an invocation of its persistent collective)"
		}
		var op, tree any = "-", "-"
		if s.Grant != nil {
			// "tree TREE" named the kind, not a switch.
			op, tree = s.Grant.ID, "a tree from leaf "+s.Grant.Leaf
			if s.Grant.Tree == "SINGLE" {
				tree = "switch " + s.Grant.Leaf + " alone"
			}
		}
		// The call's rate includes the wait at the AM's barrier for the
		// slowest rank (setup): a REDUCE's non-root ranks read 0.6 MB/s
		// next to their root's 12 for the same transfer. Both are said.
		xfer := "-"
		if s.Transfer > 0 {
			xfer = fmt.Sprintf("%.3f", bytes/s.Transfer.Seconds()/1e6)
		}
		fmt.Fprintf(r.out, "rank %d: %s of %d %s op %v on %v: %v (setup %v, transfer %v), %.3f MB/s (%s over the transfer alone), %d frames, %d retransmitted, %d dropped by the kernel%s\n",
			r.rank, r.coll, r.count, r.what, op, tree, el.Round(time.Microsecond),
			s.Setup.Round(time.Microsecond), s.Transfer.Round(time.Microsecond), bytes/el.Seconds()/1e6, xfer, s.Frames, s.Retransmits, s.KernelDrops, how)
		if r.ref == nil {
			continue
		}
		if bad, firstBad := r.ref.check(r.recv); bad > 0 {
			fmt.Fprintf(r.errOut, "prismctl allreduce: rank %d: VERIFY FAILED at iteration %d of %d: %d of %d elements differ from the exact sum (first: %s)\n",
				r.rank, it, r.iters, bad, r.count, firstBad)
			if failed == 0 {
				first = it
			}
			failed++
		}
	}
	switch {
	case r.ref == nil:
	case failed > 0:
		fmt.Fprintf(r.errOut, "prismctl allreduce: rank %d: VERIFY FAILED: %d of %d iterations differ from the exact sum, the first at iteration %d\n",
			r.rank, failed, r.iters, first)
		return 1
	case r.iters == 1:
		fmt.Fprintf(r.out, "rank %d: verified %d elements bit for bit against math/big\n", r.rank, r.count)
	default:
		fmt.Fprintf(r.out, "rank %d: verified %d elements bit for bit against math/big in each of the %d iterations\n", r.rank, r.count, r.iters)
	}
	return 0
}

// summary prints, after several repetitions, the distribution of their
// times: with --iters 1000 the per-call lines were all a user had.
func (r *repetitions) summary(times []time.Duration) {
	if len(times) < 2 {
		return
	}
	s := slices.Clone(times)
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	pct := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	fmt.Fprintf(r.out, "rank %d: %d repetitions: median %v, p10 %v, p90 %v, min %v, max %v, mean %v, total %v\n", r.rank, len(s),
		pct(0.5).Round(time.Microsecond), pct(0.1).Round(time.Microsecond), pct(0.9).Round(time.Microsecond),
		s[0].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond), (total / time.Duration(len(s))).Round(time.Microsecond), total.Round(time.Microsecond))
}

// repeater starts one collective over the same buffers again and again:
// each time through the AM, or as invocations of one persistent collective.
type repeater struct {
	c          *host.Comm
	p          *host.Persistent
	coll       string
	send, recv any
	root       int
	opts       *host.Options
}

func newRepeater(c *host.Comm, persistent bool, coll string, send, recv any, root int, opts *host.Options) (*repeater, error) {
	r := &repeater{c: c, coll: coll, send: send, recv: recv, root: root, opts: opts}
	if !persistent {
		return r, nil
	}
	var err error
	if coll == "allreduce" {
		r.p, err = c.AllReduceInit(send, recv, opts)
	} else {
		r.p, err = c.ReduceInit(send, recv, root, opts)
	}
	return r, err
}

func (r *repeater) start(ctx context.Context) *host.Request {
	switch {
	case r.p != nil:
		return r.p.Start(ctx)
	case r.coll == "allreduce":
		return r.c.AllReduceAsync(ctx, r.send, r.recv, r.opts)
	}
	return r.c.ReduceAsync(ctx, r.send, r.recv, r.root, r.opts)
}

// close frees a persistent collective (the switches' contexts once every
// rank did).
func (r *repeater) close() error {
	if r.p == nil {
		return nil
	}
	return r.p.Close()
}

// genSpec generates every rank's deterministic input and the exact expected
// result.
type genSpec struct {
	seed   uint64
	format string
	size   int
	// data is the fp32 distribution: "integral" (integers only, exact in
	// any order, for FP32_ARRIVAL), "gradient" (normal, a narrow exponent
	// band, as training gradients: what traffic figures should use) or
	// "mixed" (subnormals to 1e30: the exactness stress).
	data string
	// output is the RESULT format (--output; "" = format): what alloc
	// makes and verify rounds the exact sum to.
	output string
}

// out is the RESULT format.
func (g genSpec) out() string {
	if g.output != "" {
		return g.output
	}
	return g.format
}

// describe names the input and how it is summed, e.g. "int8 (kulisch, fp32
// result)": the RESULT format only when --output makes it differ from the
// input's, where it changes what recv holds.
func (g genSpec) describe(acc string) string {
	if g.out() != g.format {
		return fmt.Sprintf("%s (%s, %s result)", g.format, acc, g.out())
	}
	return fmt.Sprintf("%s (%s)", g.format, acc)
}

func (g genSpec) width() int {
	switch g.format {
	case "int8":
		return 1
	case "fp16", "bf16":
		return 2
	}
	return 4
}

func (g genSpec) rng(rank int) *rand.Rand { return rand.New(rand.NewPCG(g.seed, uint64(rank)+1)) }

// value returns element i of rank r's input as a float64 (exact).
func (g genSpec) raw(rng *rand.Rand) float64 {
	switch g.format {
	case "int8":
		// Sums that fit INT8 when the RESULT is INT8; the whole INT8
		// range when a wider RESULT format can hold what INT8 cannot.
		lim := 127 / g.size
		if g.out() != "int8" {
			lim = 127
		}
		return float64(rng.IntN(2*lim+1) - lim)
	case "fp16":
		for {
			b := uint16(rng.Uint32())
			if b&0x7c00 != 0x7c00 { // finite
				return float64(f16ToF32(b))
			}
		}
	case "bf16":
		// Exponents within +-2^60 keep sums far from overflow.
		e := rng.IntN(120) + 67
		b := uint16(rng.Uint32()&0x807f) | uint16(e)<<7
		return float64(math.Float32frombits(uint32(b) << 16))
	}
	switch g.data {
	case "integral":
		return float64(rng.IntN(1<<20) - 1<<19)
	case "gradient":
		return float64(float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9))))
	}
	switch rng.IntN(6) {
	case 0:
		return float64(float32(rng.NormFloat64() * 1e-40))
	case 1:
		return float64(float32(rng.NormFloat64() * 1e30))
	}
	return float64(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20)))
}

func (g genSpec) vector(rank, n int) any {
	rng := g.rng(rank)
	switch g.format {
	case "int8":
		v := make([]int8, n)
		for i := range v {
			v[i] = int8(g.raw(rng))
		}
		return v
	case "fp16":
		v := make([]host.Float16, n)
		for i := range v {
			v[i] = host.Float16(f32ToF16Exact(float32(g.raw(rng))))
		}
		return v
	case "bf16":
		v := make([]host.BFloat16, n)
		for i := range v {
			v[i] = host.BFloat16(math.Float32bits(float32(g.raw(rng))) >> 16)
		}
		return v
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(g.raw(rng))
	}
	return v
}

// alloc makes a receive buffer of n elements in the RESULT format.
func (g genSpec) alloc(n int) any {
	switch g.out() {
	case "int8":
		return make([]int8, n)
	case "fp16":
		return make([]host.Float16, n)
	case "bf16":
		return make([]host.BFloat16, n)
	}
	return make([]float32, n)
}

// reference is the exact result of a collective over genSpec's inputs:
// every element the exact sum of every rank's input, rounded once (ties to
// even) in the RESULT format.
type reference struct {
	g    genSpec
	n    int
	want any // the RESULT format's buffer (genSpec.alloc)
	// none lists the elements whose exact sum the RESULT format cannot
	// hold (INT8): any value there is wrong.
	none []int
}

// reference computes the exact result of n elements: math/big, every
// rank's input regenerated, so it costs size x n big additions.
func (g genSpec) reference(n int) *reference {
	r := &reference{g: g, n: n, want: g.alloc(n)}
	rngs := make([]*rand.Rand, g.size)
	for k := range rngs {
		rngs[k] = g.rng(k)
	}
	set := bitsSetter(r.want)
	sum := new(big.Float).SetPrec(4096)
	term := new(big.Float).SetPrec(4096)
	for i := 0; i < n; i++ {
		sum.SetInt64(0)
		allNeg := true
		for k := range rngs {
			x := g.raw(rngs[k])
			if !(x == 0 && math.Signbit(x)) {
				allNeg = false
			}
			sum.Add(sum, term.SetFloat64(x))
		}
		want, ok := roundTo(sum, g.out(), allNeg)
		if !ok {
			r.none = append(r.none, i)
			continue
		}
		set(i, want)
	}
	return r
}

// exactSum recomputes element i's exact sum (for a report: it regenerates
// every rank's input up to i).
func (g genSpec) exactSum(i int) *big.Float {
	sum := new(big.Float).SetPrec(4096)
	for k := 0; k < g.size; k++ {
		rng := g.rng(k)
		var x float64
		for j := 0; j <= i; j++ {
			x = g.raw(rng)
		}
		sum.Add(sum, new(big.Float).SetPrec(4096).SetFloat64(x))
	}
	return sum
}

// check compares recv (the RESULT format, n elements) with the reference
// bit for bit: how many elements differ, and the first of them described
// with got, want and the exact sum.
func (r *reference) check(recv any) (bad int, first string) {
	got, want := bitsGetter(recv), bitsGetter(r.want)
	firstAt := -1
	for i := 0; i < r.n; i++ {
		if got(i) != want(i) {
			if firstAt < 0 {
				firstAt = i
			}
			bad++
		}
	}
	for _, i := range r.none {
		if got(i) == want(i) { // not counted above
			bad++
		}
		if firstAt < 0 || i < firstAt {
			firstAt = i
		}
	}
	if bad == 0 {
		return 0, ""
	}
	sum := r.g.exactSum(firstAt).Text('g', 20)
	if slices.Contains(r.none, firstAt) {
		return bad, fmt.Sprintf("element %d: got %#x, want none: the exact sum %s does not fit %s", firstAt, got(firstAt), sum, r.g.out())
	}
	return bad, fmt.Sprintf("element %d: got %#x, want %#x (exact sum %s)", firstAt, got(firstAt), want(firstAt), sum)
}

// poison overwrites every element of recv with a value the reference
// says is wrong (the complement of the right one), so that an element a
// collective does not write fails the check.
func (r *reference) poison(recv any) {
	set, want := bitsSetter(recv), bitsGetter(r.want)
	for i := 0; i < r.n; i++ {
		set(i, ^want(i))
	}
}

// verify compares recv with the exact sum of n elements; see reference.
func (g genSpec) verify(recv any, n int) (bad int, first string) {
	return g.reference(n).check(recv)
}

// bitsGetter returns element i of a RESULT buffer as its bit pattern.
func bitsGetter(buf any) func(i int) uint32 {
	switch v := buf.(type) {
	case []int8:
		return func(i int) uint32 { return uint32(uint8(v[i])) }
	case []host.Float16:
		return func(i int) uint32 { return uint32(v[i]) }
	case []host.BFloat16:
		return func(i int) uint32 { return uint32(v[i]) }
	case []float32:
		return func(i int) uint32 { return math.Float32bits(v[i]) }
	}
	panic(fmt.Sprintf("prismctl: no RESULT buffer: %T", buf))
}

// bitsSetter sets element i of a RESULT buffer to a bit pattern (the low
// bits of b that the format has).
func bitsSetter(buf any) func(i int, b uint32) {
	switch v := buf.(type) {
	case []int8:
		return func(i int, b uint32) { v[i] = int8(uint8(b)) }
	case []host.Float16:
		return func(i int, b uint32) { v[i] = host.Float16(b) }
	case []host.BFloat16:
		return func(i int, b uint32) { v[i] = host.BFloat16(b) }
	case []float32:
		return func(i int, b uint32) { v[i] = math.Float32frombits(b) }
	}
	panic(fmt.Sprintf("prismctl: no RESULT buffer: %T", buf))
}

// formatSpec: precision p (bits incl. the implicit one), minimum normal
// exponent, maximum finite exponent, exponent bias and field widths.
type formatSpec struct{ p, emin, emax, ebits int }

var fmtSpecs = map[string]formatSpec{
	"fp32": {24, -126, 127, 8},
	"fp16": {11, -14, 15, 5},
	"bf16": {8, -126, 127, 8},
}

// roundTo rounds the exact x once, to nearest with ties to even, into the
// format's bit pattern. Subnormals are kept; overflow gives infinity.
func roundTo(x *big.Float, format string, negZero bool) (uint32, bool) {
	if format == "int8" {
		if !x.IsInt() {
			return 0, false
		}
		v, acc := x.Int64()
		if acc != big.Exact || v < -128 || v > 127 {
			return 0, false
		}
		return uint32(uint8(int8(v))), true
	}
	fs := fmtSpecs[format]
	sign := uint32(0)
	if x.Sign() < 0 {
		sign = 1
	}
	if x.Sign() == 0 {
		if negZero {
			sign = 1
		}
		return sign << (fs.ebits + fs.p - 1), true
	}
	a := new(big.Float).SetPrec(4096).Abs(x)
	e := a.MantExp(nil) // a = m * 2^e, m in [0.5, 1): leading bit weight 2^(e-1)
	q := max(e-fs.p, fs.emin-fs.p+1)
	// Scale so the quantum is 1, round to an integer (ties to even).
	s := new(big.Float).SetPrec(4096).SetMantExp(a, -q)
	ip, _ := s.Int(nil) // truncation
	frac := new(big.Float).SetPrec(4096).Sub(s, new(big.Float).SetInt(ip))
	half := big.NewFloat(0.5)
	if c := frac.Cmp(half); c > 0 || (c == 0 && ip.Bit(0) == 1) {
		ip.Add(ip, big.NewInt(1))
	}
	// ip * 2^q; renormalize when rounding carried into a new binade.
	m := ip.Uint64()
	if m == 0 {
		return sign << (fs.ebits + fs.p - 1), true
	}
	if m >= 1<<fs.p {
		m >>= 1
		q++
	}
	exp := q + fs.p - 1 // unbiased exponent of the leading bit when normal
	bias := (1 << (fs.ebits - 1)) - 1
	var bits uint32
	if m < 1<<(fs.p-1) { // subnormal
		bits = uint32(m)
	} else {
		if exp > fs.emax {
			return sign<<(fs.ebits+fs.p-1) | uint32((1<<fs.ebits)-1)<<(fs.p-1), true
		}
		bits = uint32(exp+bias)<<(fs.p-1) | uint32(m)&(1<<(fs.p-1)-1)
	}
	return sign<<(fs.ebits+fs.p-1) | bits, true
}

// f16ToF32 widens a binary16 (exact).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	e := int(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch {
	case e == 0:
		v := float64(m) * math.Ldexp(1, -24)
		if sign != 0 {
			v = -v
		}
		return float32(v)
	case e == 31:
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	}
	return math.Float32frombits(sign | uint32(e-15+127)<<23 | m<<13)
}

// f32ToF16Exact narrows a float32 that is exactly a binary16 value.
func f32ToF16Exact(f float32) uint16 {
	b, _ := roundTo(new(big.Float).SetFloat64(float64(f)), "fp16", math.Signbit(float64(f)))
	return uint16(b)
}
