// This file owns 'prismctl bench': an nccl-tests style sweep of ALLREDUCE
// (or REDUCE) sizes through the host library, one process per rank, rank 0
// (the root of a REDUCE) printing the table.

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	register("bench", "sweep collective sizes like nccl-tests (-b begin -e end -f factor) and print time and bandwidth", runBench)
}

// parseSize reads "8", "64K", "1M", "1G" (powers of 1024) as bytes.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	u := strings.ToUpper(strings.TrimSpace(s))
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, strings.TrimSuffix(u, "K")
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, strings.TrimSuffix(u, "M")
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, strings.TrimSuffix(u, "G")
	}
	v, err := strconv.ParseInt(u, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes with an optional K, M or G suffix (e.g. 8, 64K, 128M)", s)
	}
	return v * mult, nil
}

func humanBytes(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

// benchCounts lists the sweep's vector lengths in elements of width bytes:
// lo, lo*factor, ... up to hi bytes, each rounded down to whole elements
// (at least one). A step that rounds to the length before it is left out:
// it would repeat a row.
func benchCounts(lo, hi int64, factor int, width int64) []int {
	var counts []int
	for size := lo; size <= hi; size *= int64(factor) {
		if n := int(max(size/width, 1)); len(counts) == 0 || n != counts[len(counts)-1] {
			counts = append(counts, n)
		}
		if size > hi/int64(factor) {
			break // the next step is past hi (and could overflow)
		}
	}
	return counts
}

// setupCalls is how many calls of one size set up its collective, so that
// later calls show the steady state. The library runs a shape's first call
// through the AM like any collective and sets up the shape's persistent
// collective at its second (host.Config.PersistentShapes): timing that
// one put a 5 ms setup among 0.5 ms invocations. --persistent sets up at
// the first Start, and --ordinary's later calls find their operation
// prepared by the AM while the previous one ran.
func setupCalls(persistent, ordinary bool) int {
	if persistent || ordinary {
		return 1
	}
	return 2
}

// benchPrinter is the rank that prints the table: rank 0, or the root of a
// REDUCE, the one rank that holds the result (so --check can verify it)
// and whose time covers the whole collective (another rank's ends when
// the leaf has its DATA).
func benchPrinter(root int) int { return max(root, 0) }

func runBench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var rf rankFlags
	rf.register(fs, args)
	begin := fs.String("b", "8", "smallest message size in bytes (K, M, G suffixes)")
	end := fs.String("e", "32M", "largest message size in bytes")
	factor := fs.Int("f", 2, "multiply the size by this factor at each step")
	iters := fs.Int("n", 5, "timed iterations per size")
	warmup := fs.Int("w", 2, "untimed warm-up calls per size; at least the calls that set up the size's collective are made (2, or 1 with --persistent or --ordinary), so the timed ones are the steady state")
	root := fs.Int("root", -1, "bench REDUCE to this rank instead of ALLREDUCE (the root prints the table)")
	check := fs.Bool("check", false, "verify the result of every call (warm-ups included) bit for bit against the exact sum (math/big, computed once per size: slow for large sizes); the table's check column says exact")
	persistent := fs.Bool("persistent", false, "run each size as one persistent collective (AllReduceInit, like MPI_Allreduce_init): one AM setup per size, then invocations with no AM round trip")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismctl bench --coordinator URL --rank R --size N --iface IF --node H [-b 8] [-e 32M] [-f 2] [-n 5]")
		fmt.Fprintln(fs.Output(), "Run one process per rank with the same flags (except --rank/--node/--iface); rank 0 prints the table, or with --root R rank R,")
		fmt.Fprintln(fs.Output(), "the rank the REDUCE delivers to (it verifies --check). Sizes are rounded down to whole elements of --format (at least one).")
		fmt.Fprintln(fs.Output(), "Each size is called -w times untimed first: at least twice, because the library runs a size's first call through the AM")
		fmt.Fprintln(fs.Output(), "and sets up its persistent collective at the second (an ALLREDUCE; a REDUCE (--root) always goes through the AM; once with --persistent or --ordinary). To time setups, use")
		fmt.Fprintln(fs.Output(), "'prismctl allreduce --iters N', which prints each call's setup.")
		fmt.Fprintln(fs.Output(), "Columns (per timed call, means): size(B) and count as sent; time(us) from the call to its completion on the printing rank;")
		fmt.Fprintln(fs.Output(), "algbw = size / time; busbw = algbw x 2(n-1)/n for ALLREDUCE (1 for REDUCE), nccl-tests' ring-equivalent figure;")
		fmt.Fprintln(fs.Output(), "link(MB) = bytes of PRISM frames on the printing rank's own link, both directions (DATA, RESULT, PROGRESS, retransmissions,")
		fmt.Fprintln(fs.Output(), "headers), counted by the library: 2 x size plus headers for an ALLREDUCE that lost nothing (a ring moves 2(n-1)/n x size per link);")
		fmt.Fprintln(fs.Output(), "setup(us) = time at the AM (barrier, grant) when the call went through it; retrans = DATA frames resent (total over the timed calls);")
		fmt.Fprintln(fs.Output(), "check = exact when --check verified every call; kdrops = frames the kernel dropped on the rank's socket (receive buffer full).")
		fmt.Fprintln(fs.Output(), "Settings may also come from PRISM_* variables and a JSON file (--config or PRISM_CONFIG; see 'prismctl allreduce -h').")
		fs.PrintDefaults()
	}
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if fs.NArg() > 0 {
		return flagErr(fs, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0)))
	}
	if err := rf.check(); err != nil {
		return flagErr(fs, err)
	}
	lo, err := parseSize(*begin)
	if err != nil {
		return flagErr(fs, fmt.Errorf("-b: %v", err))
	}
	hi, err := parseSize(*end)
	if err != nil {
		return flagErr(fs, fmt.Errorf("-e: %v", err))
	}
	switch {
	case hi < lo:
		return flagErr(fs, fmt.Errorf("-e %s is smaller than -b %s", *end, *begin))
	case *factor < 2:
		return flagErr(fs, fmt.Errorf("-f %d: the factor must be at least 2", *factor))
	case *iters < 1 || *warmup < 0:
		return flagErr(fs, fmt.Errorf("-n must be >= 1 and -w >= 0"))
	case *root >= rf.size:
		return flagErr(fs, fmt.Errorf("--root %d is outside 0..%d", *root, rf.size-1))
	case *persistent && rf.ordinary:
		return flagErr(fs, fmt.Errorf("--persistent and --ordinary exclude each other: pick one way to repeat each size"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := rf.comm(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl bench: %v\n", err)
		coll := "allreduce"
		if *root >= 0 {
			coll = "reduce"
		}
		first := benchCounts(lo, hi, *factor, int64(genSpec{format: rf.format}.width()))
		rf.giveUp(ctx, coll, first[0], *root, err)
		return 1
	}
	defer c.Close()
	stopProf, err := rf.profile()
	if err != nil {
		return flagErr(fs, err)
	}
	defer stopProf()
	gen := genSpec{seed: 1, format: rf.format, size: rf.size, data: rf.data, output: rf.output}
	w := int64(gen.width())
	counts := benchCounts(lo, hi, *factor, w)
	warm := max(*warmup, setupCalls(*persistent, rf.ordinary))
	printer := benchPrinter(*root)
	coll := "allreduce"
	if *root >= 0 {
		coll = "reduce"
	}
	n := float64(rf.size)
	// nccl-tests' bus bandwidth factor: ALLREDUCE moves 2(n-1)/n of the
	// data over the busiest link of a ring; REDUCE 1. With in-network
	// aggregation each rank link carries the vector once up (DATA) and,
	// for ALLREDUCE, once down (RESULT): "link MB" is what the printing
	// rank's link carried per call, both ways, as the library counted its
	// frames (Stats.WireSent + WireReceived: headers, PROGRESS and
	// retransmissions included), so the two models can be compared.
	busFactor := 2 * (n - 1) / n
	if coll == "reduce" {
		busFactor = 1
	}
	if rf.rank == printer {
		kind := coll + " (repeated sizes kept persistent by the library)"
		if coll == "reduce" {
			kind = coll + " (every call through the AM: the library keeps no REDUCE persistent; --persistent for ReduceInit)"
		}
		switch {
		case *persistent:
			kind = "persistent " + coll
		case rf.ordinary:
			kind = "ordinary " + coll + " (every call through the AM)"
		}
		input := rf.format + " input"
		if rf.format == "fp32" {
			input += " (" + rf.data + " data)"
		}
		if rf.output != "" && rf.output != rf.format {
			input += ", " + rf.output + " result"
		}
		fmt.Printf("# prismctl bench: %s, %d ranks, %s, %s accumulator, MTU %d\n", kind, rf.size, input, rf.acc, rf.mtu)
		if coll == "reduce" {
			fmt.Printf("# printed by rank %d, the root: the rank that holds the result (--check verifies it), so its times cover the whole REDUCE\n", printer)
		}
		if lo%w != 0 {
			fmt.Printf("# -b %s is not a whole number of %d-byte %s elements: sizes are rounded down to whole elements (at least one)\n", *begin, w, rf.format)
		}
		calls := "calls"
		if warm == 1 {
			calls = "call"
		}
		fmt.Printf("# %d untimed warm-up %s per size, then %d timed\n", warm, calls, *iters)
		fmt.Printf("# %12s %12s %6s %12s %11s %11s %10s %8s %8s %5s %s\n", "size(B)", "count", "type", "time(us)", "algbw(MB/s)", "busbw(MB/s)", "link(MB)", "setup(us)", "retrans", "check", "kdrops")
	}
	for _, count := range counts {
		size := int64(count) * w // what is sent, after rounding to whole elements
		send := gen.vector(rf.rank, count)
		recv := gen.alloc(count)
		// Every call of a size sends the same input: one exact reference
		// checks them all. It is computed before the size's first call,
		// which waits for every rank at the AM.
		var ref *reference
		if *check && (coll == "allreduce" || rf.rank == *root) {
			ref = gen.reference(count)
		}
		var total, setup time.Duration
		var retrans, wire, drops uint64
		var cpu time.Duration
		times := make([]string, 0, *iters)
		wrong := 0 // calls whose result differs from ref
		run, err := newRepeater(c, *persistent, coll, send, recv, *root, rf.options())
		if err != nil {
			fmt.Fprintf(os.Stderr, "prismctl bench: size %s: %v\n", humanBytes(size), err)
			return 1
		}
		for it := 0; it < warm+*iters; it++ {
			if ref != nil {
				ref.poison(recv) // a call that writes nothing must not pass on the previous one's result
			}
			c0 := processCPU()
			t0 := time.Now()
			q := run.start(ctx)
			if err := q.Wait(); err != nil {
				fmt.Fprintf(os.Stderr, "prismctl bench: size %s: %v\n", humanBytes(size), err)
				return 1
			}
			if it >= warm {
				el := time.Since(t0)
				total += el
				times = append(times, strconv.FormatInt(el.Microseconds(), 10))
				cpu += processCPU() - c0
				s := q.Stats()
				setup += s.Setup
				retrans += s.Retransmits
				wire += s.WireSent + s.WireReceived
				drops += s.KernelDrops
			}
			if ref != nil {
				if bad, first := ref.check(recv); bad > 0 {
					kind := "timed call"
					n := it - warm + 1
					if it < warm {
						kind, n = "warm-up call", it+1
					}
					// The size's other calls still run, so the other
					// ranks finish them rather than time out on this one.
					fmt.Fprintf(os.Stderr, "prismctl bench: size %s: %s %d: %d of %d elements wrong (%s)\n", humanBytes(size), kind, n, bad, count, first)
					wrong++
				}
			}
		}
		if wrong > 0 {
			fmt.Fprintf(os.Stderr, "prismctl bench: size %s: %d of %d calls gave wrong results\n", humanBytes(size), wrong, warm+*iters)
			run.close()
			return 1
		}
		if err := run.close(); err != nil {
			fmt.Fprintf(os.Stderr, "prismctl bench: size %s: %v\n", humanBytes(size), err)
			return 1
		}
		ok := "-"
		if ref != nil {
			ok = "exact" // every call of the size, warm-ups included
		}
		// Every rank says what one collective cost its process (user +
		// system, the kernel's share of its frames included), so the
		// host side can be compared with the switches' CPU.
		cpuLine := fmt.Sprintf("# rank %d size %s: %.1f ms CPU per collective\n", rf.rank, humanBytes(size),
			float64((cpu/time.Duration(*iters)).Microseconds())/1e3)
		if rf.rank != printer {
			fmt.Print(cpuLine)
			continue
		}
		avg := total / time.Duration(*iters)
		bytes := float64(count) * float64(w)
		alg := bytes / avg.Seconds() / 1e6
		link := float64(wire) / float64(*iters) / 1e6
		// link(MB) to 4 significant digits: a small size's few hundred
		// bytes read 0.000 at a fixed 3 decimals.
		fmt.Printf("  %12d %12d %6s %12.1f %11.3f %11.3f %10.4g %8.0f %8d %5s %d\n", count*int(w), count, rf.format,
			float64(avg.Microseconds()), alg, alg*busFactor, link, float64((setup / time.Duration(*iters)).Microseconds()), retrans, ok, drops)
		fmt.Print(cpuLine)
		fmt.Printf("# times(us): %s\n", strings.Join(times, " "))
	}
	return 0
}

// processCPU is the user + system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
