package main

import (
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// runCaptured runs a prismctl command and returns its exit code and what
// it wrote to stderr.
func runCaptured(t *testing.T, run func([]string) int, args ...string) (int, string) {
	t.Helper()
	for _, v := range []string{"PRISM_CONFIG", "PRISM_RANK", "PRISM_SIZE", "PRISM_IFACE", "PRISM_JOB", "PRISM_GROUP",
		"PRISM_COORDINATOR", "PRISM_NODE", "PRISM_NODE_IFACE", "PRISM_PERSISTENT_SHAPES"} {
		t.Setenv(v, "")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// Both streams: help goes to stdout, errors to stderr.
	oldErr, oldOut := os.Stderr, os.Stdout
	os.Stderr, os.Stdout = w, w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := run(args)
	os.Stderr, os.Stdout = oldErr, oldOut
	w.Close()
	return code, <-out
}

// wfnone0 does not exist: a command that got past its flags fails at once.
var rankArgs = []string{"--coordinator", "http://127.0.0.1:1", "--iface", "wfnone0", "--node", "h1", "--size", "2", "--rank", "0"}

// A --timeout the AM cannot take is refused at flag parsing, with the
// range: it used to reach the AM as timeout_ms 4294966296 (-1s) or
// 3600000000 (1000h), or as 0, the AM's default (500us).
func TestTimeoutFlag(t *testing.T) {
	for _, cmd := range []struct {
		name string
		run  func([]string) int
	}{{"allreduce", runAllReduce}, {"bench", runBench}} {
		for timeout, want := range map[string]string{
			"-1s":    "--timeout -1s is negative",
			"500us":  "--timeout 500µs is under a millisecond",
			"1000h":  "--timeout 1000h0m0s is above the AM's limit of 10m0s",
			"10m1s":  "--timeout 10m1s is above the AM's limit",
			"1500us": "--timeout 1.5ms is not a whole number of milliseconds",
		} {
			code, stderr := runCaptured(t, cmd.run, append(slices.Clone(rankArgs), "--timeout", timeout)...)
			if code != 2 || !strings.Contains(stderr, "prismctl "+cmd.name+": bad flags:") || !strings.Contains(stderr, want) ||
				!strings.Contains(stderr, "use 1ms..10m (0 = the AM's default") {
				t.Errorf("%s --timeout %s: exit %d, stderr %q; want 2, bad flags, %q and the range", cmd.name, timeout, code, stderr, want)
			}
		}
	}
	base := rankFlags{coordinator: "http://x", iface: "eth0", node: "h1", size: 2, format: "fp32", acc: "kulisch", mtu: 1500}
	for _, d := range []string{"0", "1ms", "5s", "10m"} {
		f := base
		var err error
		if f.timeout, err = time.ParseDuration(d); err != nil {
			t.Fatal(err)
		}
		if err := f.check(); err != nil {
			t.Errorf("--timeout %s refused: %v", d, err)
		}
	}
}

// Every numeric flag of 'prismctl am' out of range is refused before the
// AM starts, saying the range: negative durations used to start an AM
// whose ranks failed at once ("did not arrive within -5s"), and zero ones
// silently meant a default the help did not mention.
func TestAMFlags(t *testing.T) {
	for flagVal, want := range map[string]string{
		"--rto=-1s":             "--rto -1s: use a positive duration (the default is 20ms)",
		"--rto=0":               "--rto 0s: use a positive duration",
		"--control-timeout=0":   "--control-timeout 0s: use a positive duration (the default is 2s)",
		"--control-timeout=-1s": "--control-timeout -1s: use a positive duration",
		"--barrier-timeout=0":   "--barrier-timeout 0s: use a positive duration (the default is 2m0s)",
		"--barrier-timeout=-5s": "--barrier-timeout -5s: use a positive duration",
		"--prepare-ttl=-1s":     "--prepare-ttl -1s: use 0 (the default",
		"--window=-1":           "--window -1: use 1..65535 intervals (0 for the default, 64)",
		"--window=65536":        "--window 65536: use 1..65535",
		"--timeout-ms=-1":       "--timeout-ms -1: use 1..600000 (milliseconds",
		"--timeout-ms=0":        "--timeout-ms 0: use 1..600000",
		"--timeout-ms=600001":   "--timeout-ms 600001: use 1..600000",
	} {
		code, stderr := runCaptured(t, runAM, "--topology", "single", "--iface", "wfnone0", flagVal)
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("prismctl am %s: exit %d, stderr %q; want 2 and %q", flagVal, code, stderr, want)
		}
	}
}

// Sizes are whole elements: -b 3 with fp16 sends one 2-byte element, and
// the row and every other line say 2, not 3; steps that round to the same
// length are one row.
func TestBenchCounts(t *testing.T) {
	for _, c := range []struct {
		lo, hi int64
		factor int
		width  int64
		want   []int
	}{
		{3, 3, 2, 2, []int{1}},
		{3, 24, 2, 2, []int{1, 3, 6, 12}},
		{1, 16, 2, 4, []int{1, 2, 4}},
		{8, 32 << 20, 2, 4, nil},
	} {
		got := benchCounts(c.lo, c.hi, c.factor, c.width)
		if c.want == nil {
			if len(got) != 23 || got[0] != 2 || got[22] != 8<<20 {
				t.Errorf("8..32M fp32: %v", got)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("-b %d -e %d -f %d, %d-byte elements: %v, want %v", c.lo, c.hi, c.factor, c.width, got, c.want)
		}
	}
	// The sweep ends even when the next step would overflow.
	if got := benchCounts(1, math.MaxInt64, 2, 1); len(got) != 63 {
		t.Errorf("1..MaxInt64: %d steps", len(got))
	}
}

// bench's default warm-up covers the calls that set up a size's
// collective: its first timed call used to be the one that set up the
// persistent collective (5615 us among 501 and 916).
func TestBenchWarmup(t *testing.T) {
	if got := setupCalls(false, false); got != 2 {
		t.Errorf("automatic persistence: %d setup calls, want 2 (the AM's, then the persistent collective's)", got)
	}
	if setupCalls(true, false) != 1 || setupCalls(false, true) != 1 {
		t.Error("--persistent and --ordinary set up at their first call")
	}
	code, usage := runCaptured(t, runBench, "-h")
	if code != 0 || !strings.Contains(usage, "at least twice") || !strings.Contains(usage, "(default 2)") {
		t.Errorf("usage does not say how many warm-up calls are made and why: %s", usage)
	}
}

// With --root R the root prints the table: it holds the REDUCE's result,
// so the check column is its verdict (rank 0 used to print "check -").
func TestBenchPrinter(t *testing.T) {
	if benchPrinter(-1) != 0 || benchPrinter(2) != 2 {
		t.Errorf("printer: allreduce %d, reduce to 2: %d", benchPrinter(-1), benchPrinter(2))
	}
	code, usage := runCaptured(t, runBench, "-h")
	if code != 0 || !strings.Contains(usage, "with --root R rank R") {
		t.Errorf("usage does not say who prints the table: %s", usage)
	}
}

// allreduce's line names the RESULT format when --output makes it differ
// from the input's.
func TestDescribeOutput(t *testing.T) {
	for _, c := range []struct{ format, output, want string }{
		{"int8", "fp32", "int8 (kulisch, fp32 result)"},
		{"int8", "", "int8 (kulisch)"},
		{"int8", "int8", "int8 (kulisch)"},
	} {
		if got := (genSpec{format: c.format, output: c.output}).describe("kulisch"); got != c.want {
			t.Errorf("--format %s --output %q: %q, want %q", c.format, c.output, got, c.want)
		}
	}
}
