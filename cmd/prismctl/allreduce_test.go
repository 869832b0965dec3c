package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/host"
)

// roundTo against the standard library's binary32 conversion (big.Float.Float32
// rounds to nearest even with subnormals) and hand-checked binary16 values.
func TestRoundTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		x := new(big.Float).SetPrec(200).SetFloat64(rng.NormFloat64() * math.Ldexp(1, rng.IntN(300)-150))
		x.Add(x, new(big.Float).SetFloat64(rng.NormFloat64()*math.Ldexp(1, rng.IntN(300)-150)))
		want, _ := x.Float32()
		got, ok := roundTo(x, "fp32", false)
		if !ok || got != math.Float32bits(want) {
			t.Fatalf("%s: got %#x want %#x", x.Text('g', 30), got, math.Float32bits(want))
		}
	}
	for _, c := range []struct {
		x    float64
		want uint32
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {math.Ldexp(1, -24), 0x0001},
		{math.Ldexp(1, -25), 0x0000}, {math.Ldexp(3, -26), 0x0001}, {1 + math.Ldexp(1, -11), 0x3c00}, {1 + math.Ldexp(3, -11), 0x3c02},
	} {
		if got, _ := roundTo(big.NewFloat(c.x), "fp16", false); got != c.want {
			t.Errorf("fp16(%g) = %#x, want %#x", c.x, got, c.want)
		}
	}
	if got, _ := roundTo(big.NewFloat(1+math.Ldexp(1, -8)), "bf16", false); got != 0x3f80 {
		t.Errorf("bf16 tie: %#x", got)
	}
	if _, ok := roundTo(big.NewFloat(128), "int8", false); ok {
		t.Error("int8 128 accepted")
	}
	for b := uint16(0); b < 0x7c00; b++ {
		if f32ToF16Exact(f16ToF32(b)) != b || f32ToF16Exact(f16ToF32(b|0x8000)) != b|0x8000 {
			t.Fatalf("fp16 %#x does not round trip", b)
		}
	}
}

// The --data distributions: defaults per accumulator, the errors, and what
// each generates (integral: integers; gradient: a narrow exponent band).
func TestDataFlag(t *testing.T) {
	base := rankFlags{coordinator: "http://x", iface: "eth0", node: "h1", size: 2, format: "fp32", mtu: 1500}
	for _, c := range []struct {
		acc, format, data, want string
		ok                      bool
	}{
		{"kulisch", "fp32", "", "gradient", true},
		{"kulisch", "fp32", "mixed", "mixed", true},
		{"fp32", "fp32", "", "integral", true},
		{"kulisch", "fp32", "gradient", "gradient", true},
		{"kulisch", "fp16", "gradient", "", false},
		{"kulisch", "fp32", "normal", "", false},
	} {
		f := base
		f.acc, f.format, f.data = c.acc, c.format, c.data
		err := f.check()
		if (err == nil) != c.ok || c.ok && f.data != c.want {
			t.Errorf("acc %s format %s data %q: err %v, data %q; want ok=%v data %q", c.acc, c.format, c.data, err, f.data, c.ok, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 10000; i++ {
		if x := (genSpec{data: "integral"}).raw(rng); x != math.Trunc(x) || math.Abs(x) > 1<<19 {
			t.Fatalf("integral value %g", x)
		}
		if x := (genSpec{data: "gradient"}).raw(rng); x != 0 && (math.Abs(x) > 1 || math.Abs(x) < 0x1p-40) {
			t.Fatalf("gradient value %g outside the band", x)
		}
	}
}

// --output: the RESULT formats are accepted, anything else is refused up
// front with the formats to use; verify rounds to the RESULT format.
func TestOutputFlag(t *testing.T) {
	base := rankFlags{coordinator: "http://x", iface: "eth0", node: "h1", size: 2, format: "int8", acc: "kulisch", mtu: 1500}
	for out, ok := range map[string]bool{"": true, "fp32": true, "fp16": true, "bf16": true, "int8": true, "kulisch": false, "auto": false, "f32": false} {
		f := base
		f.output = out
		err := f.check()
		if (err == nil) != ok || !ok && !strings.Contains(err.Error(), "use fp32, fp16, bf16 or int8") {
			t.Errorf("--output %q: %v", out, err)
		}
	}
	// Two ranks of INT8 whose sums leave INT8: the FP32 RESULT holds them.
	g := genSpec{seed: 5, format: "int8", size: 2, output: "fp32"}
	n := 500
	recv := g.alloc(n).([]float32)
	r0, r1 := g.vector(0, n).([]int8), g.vector(1, n).([]int8)
	for i := range recv {
		recv[i] = float32(int(r0[i]) + int(r1[i]))
	}
	if bad, first := g.verify(recv, n); bad != 0 {
		t.Fatalf("exact FP32 sums refused: %d, %s", bad, first)
	}
	recv[7]++
	if bad, _ := g.verify(recv, n); bad != 1 {
		t.Errorf("one wrong element: %d refused", bad)
	}
	wide := 0
	for i := range r0 {
		if s := int(r0[i]) + int(r1[i]); s > 127 || s < -128 {
			wide++
		}
	}
	if wide < n/10 {
		t.Errorf("%d of %d sums outside INT8: the generator does not use the wider RESULT", wide, n)
	}
}

// A PRISM_* variable that does not parse is reported, not dropped (the
// ones after it were not read, and the errors about them misled).
func TestEnvErrorReported(t *testing.T) {
	t.Setenv("PRISM_RANK", "x")
	var f rankFlags
	f.register(flag.NewFlagSet("allreduce", flag.ContinueOnError), nil)
	err := f.check()
	if err == nil || !strings.Contains(err.Error(), `PRISM_RANK="x" is not an integer: fix or unset it`) {
		t.Fatalf("check: %v", err)
	}
	// Alone: the settings after the bad one were not read, and "--iface
	// is required" for a PRISM_IFACE that is set misled.
	if strings.Contains(err.Error(), "required") || strings.Contains(err.Error(), "--size") {
		t.Fatalf("check reports settings it did not read: %v", err)
	}
}

// TestRankSettingsFromEnvAndFile: every PRISM_* setting reaches the
// library's Config, the ones without a flag of their own included; a
// --config file gives defaults that PRISM_* and flags override; job 0
// set anywhere stays 0.
func TestRankSettingsFromEnvAndFile(t *testing.T) {
	for _, k := range []string{"PRISM_CONFIG", "PRISM_RANK", "PRISM_SIZE", "PRISM_IFACE", "PRISM_JOB", "PRISM_GROUP",
		"PRISM_COORDINATOR", "PRISM_NODE", "PRISM_NODE_IFACE", "PRISM_CONNECT_TIMEOUT", "PRISM_PERSISTENT_SHAPES"} {
		t.Setenv(k, "")
	}
	parse := func(args ...string) host.Config {
		t.Helper()
		var f rankFlags
		fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
		f.register(fs, args)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if f.envErr != nil {
			t.Fatal(f.envErr)
		}
		return f.config()
	}
	if c := parse(); c.Job != 1 {
		t.Fatalf("nothing set: job %d, want 1", c.Job)
	}
	t.Setenv("PRISM_JOB", "0")
	t.Setenv("PRISM_CONNECT_TIMEOUT", "2s")
	t.Setenv("PRISM_PERSISTENT_SHAPES", "-1")
	if c := parse(); c.Job != 0 || c.ConnectTimeout != 2*time.Second || c.PersistentShapes != -1 {
		t.Fatalf("from PRISM_*: job %d connect timeout %v persistent shapes %d, want 0 2s -1", c.Job, c.ConnectTimeout, c.PersistentShapes)
	}
	t.Setenv("PRISM_JOB", "")
	t.Setenv("PRISM_CONNECT_TIMEOUT", "")
	t.Setenv("PRISM_PERSISTENT_SHAPES", "")
	file := filepath.Join(t.TempDir(), "rank.json")
	if err := os.WriteFile(file, []byte(`{"rank": 1, "size": 4, "job": 0, "iface": "eth9", "coordinator": "http://a:1", "node": "h2", "connect_timeout": "3s", "persistent_shapes": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PRISM_IFACE", "eth1")
	c := parse("--rank", "3", "--config", file)
	want := host.Config{Rank: 3, Size: 4, Job: 0, Iface: "eth1", Coordinator: "http://a:1", Node: "h2", ConnectTimeout: 3 * time.Second, PersistentShapes: 2}
	if c.Rank != want.Rank || c.Size != want.Size || c.Job != want.Job || c.Iface != want.Iface || c.Coordinator != want.Coordinator ||
		c.Node != want.Node || c.ConnectTimeout != want.ConnectTimeout || c.PersistentShapes != want.PersistentShapes {
		t.Fatalf("--config with PRISM_IFACE and --rank: %+v, want %+v", c, want)
	}
	if c := parse("--config=" + file); c.Rank != 1 {
		t.Fatalf("--config=FILE: rank %d, want the file's 1", c.Rank)
	}
}

// fakeRequest is a collective that completed at once.
type fakeRequest struct{}

func (fakeRequest) Wait() error       { return nil }
func (fakeRequest) Stats() host.Stats { return host.Stats{} }

// TestVerifyEveryIteration: 'allreduce --verify --iters N' checks the
// result of every repetition, not only the last one's: a wrong element in
// an intermediate repetition, or a repetition that writes nothing (the
// previous result still in the buffer), fails with the iteration, the
// element, got and want, even when the last repetition is right.
func TestVerifyEveryIteration(t *testing.T) {
	const n, iters = 200, 3
	g := genSpec{seed: 9, format: "fp32", size: 3, data: "integral"}
	// Integers below 2^19 from 3 ranks: the float64 sum is exact and its
	// float32 rounding is the one rounding, so this is the right answer
	// independently of reference.
	right := make([]float32, n)
	for r := 0; r < g.size; r++ {
		for i, x := range g.vector(r, n).([]float32) {
			right[i] += x
		}
	}
	for _, c := range []struct {
		name    string
		iter    func(it int, recv []float32) // what repetition it (1-based) leaves in recv
		rc      int
		stderrs []string
		stdout  string
	}{
		{"all-right", func(_ int, recv []float32) { copy(recv, right) }, 0, nil,
			"rank 0: verified 200 elements bit for bit against math/big in each of the 3 iterations\n"},
		{"second-wrong", func(it int, recv []float32) {
			copy(recv, right)
			if it == 2 {
				recv[5]++
			}
		}, 1, []string{
			fmt.Sprintf("rank 0: VERIFY FAILED at iteration 2 of 3: 1 of 200 elements differ from the exact sum (first: element 5: got %#x, want %#x (exact sum ",
				math.Float32bits(right[5]+1), math.Float32bits(right[5])),
			"rank 0: VERIFY FAILED: 1 of 3 iterations differ from the exact sum, the first at iteration 2\n",
		}, ""},
		{"second-writes-nothing", func(it int, recv []float32) {
			if it != 2 {
				copy(recv, right)
			}
		}, 1, []string{
			"rank 0: VERIFY FAILED at iteration 2 of 3: 200 of 200 elements differ from the exact sum (first: element 0: ",
			"rank 0: VERIFY FAILED: 1 of 3 iterations differ from the exact sum, the first at iteration 2\n",
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			recv := g.alloc(n).([]float32)
			it := 0
			var out, errOut strings.Builder
			rep := repetitions{rank: 0, coll: "allreduce", count: n, what: g.describe("kulisch"), width: g.width(), iters: iters,
				start: func(context.Context) collRequest {
					it++
					c.iter(it, recv)
					return fakeRequest{}
				},
				recv: recv, ref: g.reference(n), out: &out, errOut: &errOut}
			rc := rep.run(context.Background())
			if it != iters {
				t.Errorf("%d repetitions ran, want %d (all of them, so the other ranks are not left waiting)", it, iters)
			}
			if rc != c.rc {
				t.Errorf("exit code %d, want %d\nstdout:\n%sstderr:\n%s", rc, c.rc, out.String(), errOut.String())
			}
			for _, want := range c.stderrs {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
				}
			}
			if c.stdout != "" && !strings.Contains(out.String(), c.stdout) {
				t.Errorf("stdout lacks %q:\n%s", c.stdout, out.String())
			}
			if c.rc != 0 && strings.Contains(out.String(), "verified") {
				t.Errorf("a wrong repetition, yet stdout says verified:\n%s", out.String())
			}
			if got := strings.Count(out.String(), "rank 0: allreduce of 200 fp32 (kulisch)"); got != iters {
				t.Errorf("%d repetition lines, want %d:\n%s", got, iters, out.String())
			}
		})
	}
}

// TestSaveVector: --save-input and --save-result write each element's bits
// little-endian, as a program of the user's reads them back.
func TestSaveVector(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		v    any
		want []byte
	}{
		{[]float32{1, -2.5}, func() []byte {
			b := make([]byte, 8)
			binary.LittleEndian.PutUint32(b, math.Float32bits(1))
			binary.LittleEndian.PutUint32(b[4:], math.Float32bits(-2.5))
			return b
		}()},
		{[]host.Float16{0x3c00, 0xc100}, []byte{0x00, 0x3c, 0x00, 0xc1}},
		{[]host.BFloat16{0x3f80}, []byte{0x80, 0x3f}},
		{[]int8{-1, 127}, []byte{0xff, 0x7f}},
	}
	for i, c := range cases {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := saveVector(p, c.v); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%T: % x (%v), want % x", c.v, got, err, c.want)
		}
	}
	if err := saveVector(filepath.Join(dir, "no", "such", "dir"), []int8{1}); err == nil {
		t.Fatal("a path that cannot be created gave no error")
	}
}

// TestNamesInAnyCase: --acc takes the protocol's and the library's names
// in any case, and --format/--output any case, as host.Options does.
func TestNamesInAnyCase(t *testing.T) {
	for _, acc := range []string{"KULISCH_FIXED", "kulisch_fixed", "Kulisch"} {
		f := rankFlags{coordinator: "http://x", iface: "eth0", node: "h1", size: 2, format: "FP32", output: "BF16", acc: acc, mtu: 1500}
		if err := f.check(); err != nil || f.acc != "kulisch" || f.format != "fp32" || f.output != "bf16" {
			t.Fatalf("--acc %s --format FP32 --output BF16: %v, acc %q format %q output %q", acc, err, f.acc, f.format, f.output)
		}
	}
	f := rankFlags{coordinator: "http://x", iface: "eth0", node: "h1", size: 2, format: "fp32", acc: "FP32_ARRIVAL", mtu: 1500}
	if err := f.check(); err != nil || f.acc != "fp32" {
		t.Fatalf("--acc FP32_ARRIVAL: %v, acc %q", err, f.acc)
	}
	f.acc = "fp23"
	if err := f.check(); err == nil || !strings.Contains(err.Error(), `--acc "fp23"`) {
		t.Fatalf("--acc fp23: %v", err)
	}
}

// TestOnlyRankOutside: a rank whose flags fail for --rank outside its
// --size alone tells the AM it will not come (the others then fail at
// once); one with any other mistake, or without the AM's address, does not.
func TestOnlyRankOutside(t *testing.T) {
	base := rankFlags{coordinator: "http://x", iface: "eth0", node: "h4", size: 3, rank: 3, format: "fp32", acc: "kulisch", mtu: 1500}
	for _, c := range []struct {
		what string
		edit func(*rankFlags)
		want bool
	}{
		{"rank 3 of size 3", func(*rankFlags) {}, true},
		{"valid flags", func(f *rankFlags) { f.size = 4 }, false},
		{"no coordinator", func(f *rankFlags) { f.coordinator = "" }, false},
		{"no node", func(f *rankFlags) { f.node = "" }, false},
		{"a bad format too", func(f *rankFlags) { f.format = "fp23" }, false},
		{"a negative rank", func(f *rankFlags) { f.rank = -1 }, false},
	} {
		f := base
		c.edit(&f)
		if f.check() == nil && c.want {
			t.Fatalf("%s: check passed", c.what)
		}
		if got := f.onlyRankOutside(); got != c.want {
			t.Errorf("%s: onlyRankOutside %v, want %v", c.what, got, c.want)
		}
	}
}
