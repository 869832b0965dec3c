package bitmap

import (
	"testing"

	"github.com/prismd/prismd/parser"
)

// BenchmarkReplicate4 replicates one RESULT (64 FP32 values, FLAT D-BM) to
// 4 RESULT_OUT bindings: decode, binding check, BIFT split, 4 re-encoded
// copies with new headers. BenchmarkPlainCopy4 is the floor: the same frame
// handed to the Sender 4 times unchanged. Compare frames/s.
func BenchmarkReplicate4(b *testing.B) {
	f := fan4(b)
	sh := f.nodes["sx"].sh
	fr := f.hostFrame("src", parser.ClassResult, 1, 0, flat(0, 1, 2, 3), parser.EncFlat, 0, make([]float32, 64))
	var tx sink
	b.ReportAllocs()
	b.SetBytes(int64(len(fr)))
	for b.Loop() {
		sh.HandleData(f.now, 0, fr, &tx)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

func BenchmarkPlainCopy4(b *testing.B) {
	f := fan4(b)
	fr := f.hostFrame("src", parser.ClassResult, 1, 0, flat(0, 1, 2, 3), parser.EncFlat, 0, make([]float32, 64))
	var tx sink
	b.ReportAllocs()
	b.SetBytes(int64(len(fr)))
	for b.Loop() {
		for p := 1; p <= 4; p++ {
			tx.Send(p, fr)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

// BenchmarkReplicate4Auth is BenchmarkReplicate4 for a keyed job: one tag
// verified and four computed per input frame.
func BenchmarkReplicate4Auth(b *testing.B) {
	f := fan4(b)
	key := []byte("0123456789abcdef0123456789abcdef")
	f.keys.Set(testOp.Job, key)
	sh := f.nodes["sx"].sh
	fr := f.hostFrame("src", parser.ClassResult, 1, parser.XFlagAuth, flat(0, 1, 2, 3), parser.EncFlat, 0, make([]float32, 64))
	var tx sink
	b.ReportAllocs()
	for b.Loop() {
		sh.HandleData(f.now, 0, fr, &tx)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

// BenchmarkAggregate2 is Fig. 1's s1 per token: two 16-value FP32
// contributions added exactly (Kulisch-288) and one KULISCH partial emitted.
func BenchmarkAggregate2(b *testing.B) {
	f := fig1(b, nil)
	sh := f.nodes["s1"].sh
	vals := make([]float32, chunk)
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	w1 := workerFrame(f, 0, 1, vals)
	w2 := workerFrame(f, 1, 1, vals)
	var tx sink
	tok := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		tok++
		setToken(w1, tok)
		setToken(w2, tok)
		sh.HandleData(f.now, 0, w1, &tx)
		sh.HandleData(f.now, 1, w2, &tx)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
