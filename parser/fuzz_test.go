// Fuzz targets, one per class and one for the endpoint-set extension. The
// seed corpus under testdata/fuzz/<Target>/ is written by
// PRISMD_UPDATE_CORPUS=1 go test -run TestWriteCorpus ./parser (go:generate below).

//go:generate env PRISMD_UPDATE_CORPUS=1 go test -run TestWriteCorpus .

package parser

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fuzzLims are the limit sets every input is decoded under.
var fuzzLims = []Limits{{}, exLim, {VectorLen: 64, KulischBytes: 8, MTU: 576, ListCap: 2}}

func seedsFor(t testing.TB, classes ...Class) [][]byte {
	var out [][]byte
	for _, e := range examples(t) {
		for _, c := range classes {
			if Class(e.Frame[CWOff+1]) == c {
				out = append(out, e.Frame)
			}
		}
	}
	if classes[0] == ClassControl {
		out = append(out, bitmapStage(t))
	}
	return out
}

// forceClass makes most mutated inputs reach the class decoder under test.
func forceClass(b []byte, c Class) []byte {
	if len(b) > CWOff+1 {
		b[CWOff+1] = byte(c)
	}
	return b
}

type codec interface {
	decodeFrame([]byte, Limits) error
	encodeFrame([]byte) (int, error)
	declared() int // bytes after the Ethernet header the value encodes to
}

type dataCodec struct{ Data }
type controlCodec struct{ Control }
type progressCodec struct{ Progress }

func (x *dataCodec) decodeFrame(b []byte, l Limits) error     { return x.Decode(b, l) }
func (x *dataCodec) encodeFrame(b []byte) (int, error)        { return x.Encode(b, Eth{}) }
func (x *dataCodec) declared() int                            { return x.Len() }
func (x *controlCodec) decodeFrame(b []byte, l Limits) error  { return x.Decode(b, l) }
func (x *controlCodec) encodeFrame(b []byte) (int, error)     { return x.Encode(b, Eth{}) }
func (x *controlCodec) declared() int                         { return x.Len() }
func (x *progressCodec) decodeFrame(b []byte, l Limits) error { return x.Decode(b, l) }
func (x *progressCodec) encodeFrame(b []byte) (int, error)    { return x.Encode(b, Eth{}) }
func (x *progressCodec) declared() int                        { return x.Len() }

// checkRoundTrip is the property every class target checks.
func checkRoundTrip(t *testing.T, in []byte, mk func() codec, dirty []byte) {
	truncChecked := false
	for _, lim := range fuzzLims {
		v := mk()
		if err := v.decodeFrame(in, lim); err != nil {
			if Reason(err) == "invalid" {
				t.Fatalf("error without a reason: %v", err)
			}
			// The error lives in the decoder value: it must survive the
			// value's reset, and a value that decoded another frame first
			// must report exactly what a fresh one does.
			fe, ok := err.(*FieldError)
			if !ok || fe.Field == "" || fe.Err == nil {
				t.Fatalf("malformed error %#v", err)
			}
			want := *fe
			w := mk()
			w.decodeFrame(dirty, Limits{})
			if err2, ok := w.decodeFrame(in, lim).(*FieldError); !ok || *err2 != want {
				t.Fatalf("reused decoder reports %+v, fresh one %+v", err2, want)
			}
			continue
		}
		n := EthLen + v.declared()
		if n > len(in) {
			t.Fatalf("declares %d bytes, frame has %d", n, len(in))
		}
		// Decode twice into one value, the first time from another frame.
		w := mk()
		w.decodeFrame(dirty, Limits{})
		if err := w.decodeFrame(in, lim); err != nil || !reflect.DeepEqual(v, w) {
			t.Fatalf("second decode differs: %v\n%+v\n%+v", err, v, w)
		}
		out := make([]byte, n)
		m, err := v.encodeFrame(out)
		if err != nil || m != n {
			t.Fatalf("encode wrote %d of %d: %v", m, n, err)
		}
		want := append([]byte(nil), in[:n]...)
		copy(want, out[:EthLen]) // MACs are not part of the value
		want[CWOff] = Version    // an accepted minor version is re-sent as 1.0
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encode differs\n got % x\nwant % x", out, want)
		}
		u := mk()
		if err := u.decodeFrame(out, lim); err != nil || !reflect.DeepEqual(v, u) {
			t.Fatalf("decode(encode(decode)) differs: %v\n%+v\n%+v", err, v, u)
		}
		if !truncChecked {
			truncChecked = true
			for cut := 0; cut < n; cut = nextCut(cut, n) {
				if mk().decodeFrame(in[:cut], lim) == nil {
					t.Fatalf("truncated at %d of %d accepted", cut, n)
				}
			}
		}
	}
}

// nextCut visits every offset of small frames; in large frames every offset
// of the first 160 bytes (headers, extension, first groups) and of the last
// 64, and every 13th in between, so one input stays O(n) decodes.
func nextCut(cut, n int) int {
	if n <= 512 || cut < 160 || cut >= n-64 {
		return cut + 1
	}
	return min(cut+13, n-64)
}

func fuzzClass(f *testing.F, c Class, mk func() codec, classes ...Class) {
	for _, s := range seedsFor(f, classes...) {
		f.Add(s)
	}
	dirty := seedsFor(f, classes...)[0]
	f.Fuzz(func(t *testing.T, in []byte) {
		checkRoundTrip(t, forceClass(in, c), mk, dirty)
	})
}

func FuzzControl(f *testing.F) {
	fuzzClass(f, ClassControl, func() codec { return &controlCodec{} }, ClassControl)
}

func FuzzData(f *testing.F) {
	fuzzClass(f, ClassData, func() codec { return &dataCodec{} }, ClassData)
}

func FuzzResult(f *testing.F) {
	fuzzClass(f, ClassResult, func() codec { return &dataCodec{} }, ClassResult)
}

func FuzzProgress(f *testing.F) {
	fuzzClass(f, ClassProgress, func() codec { return &progressCodec{} }, ClassProgress)
}

// extSeeds are the extensions of the examples, prefixed by the class byte.
func extSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, e := range examples(t) {
		if len(e.Frame) > DataBodyOff && (e.Frame[CWOff+1] == 2 || e.Frame[CWOff+1] == 3) && e.Frame[HdrOff+dataFlags]&FlagExt != 0 {
			out = append(out, append([]byte{e.Frame[CWOff+1]}, e.Frame[DataBodyOff:]...))
		}
	}
	return out
}

// FuzzExt: input = class byte, then an extension (and whatever follows).
// Valid extensions must re-encode identically, enumerate strictly ascending
// endpoints, and be rebuilt byte for byte from their endpoint list (each
// encoding has exactly one valid form per set: the naive oracle).
func FuzzExt(f *testing.F) {
	for _, s := range extSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 1 {
			return
		}
		c := ClassData + Class(in[0]&1)
		b := in[1:]
		for _, lim := range fuzzLims {
			var e Ext
			n, err := e.Decode(b, c, lim)
			if err != nil {
				continue
			}
			if n != e.Len() || n > len(b) {
				t.Fatalf("length %d, Len %d, have %d", n, e.Len(), len(b))
			}
			out := make([]byte, n)
			if e.put(out) != n || !bytes.Equal(out, b[:n]) {
				t.Fatalf("re-encode differs\n got % x\nwant % x", out, b[:n])
			}
			var e2 Ext
			e2.Token = 1
			if _, err := e2.decode(&e2.err, out, c, DataBodyOff, &lim); err != nil || !reflect.DeepEqual(e, e2) {
				t.Fatalf("second decode differs: %v", err)
			}
			for cut := 0; cut < n; cut = nextCut(cut, n) {
				var e3 Ext
				if _, err := e3.decode(&e3.err, b[:cut], c, DataBodyOff, &lim); err == nil {
					t.Fatalf("truncated ext at %d of %d accepted", cut, n)
				}
			}
			var eps []uint32
			var it SetIter
			for ep, ok := e.NextEndpoint(&it); ok; ep, ok = e.NextEndpoint(&it) {
				if len(eps) > 0 && ep <= eps[len(eps)-1] {
					t.Fatalf("endpoints not ascending: %v then %d", eps, ep)
				}
				eps = append(eps, ep)
				if len(eps) > 1<<20 {
					t.Fatal("runaway iterator")
				}
			}
			if len(eps) == 0 {
				t.Fatal("valid set with no endpoints")
			}
			a, bb := be.Uint16(e.Set[0:]), be.Uint16(e.Set[2:])
			var rebuilt []byte
			switch e.Encoding {
			case EncFlat:
				rebuilt = AppendFlatSet(nil, a, bb, eps...)
			case EncHier:
				rebuilt = AppendHierSet(nil, a, bb, eps...)
			case EncList:
				rebuilt = AppendListSet(nil, eps...)
			}
			if !bytes.Equal(rebuilt, e.Set) {
				t.Fatalf("set rebuilt from %v differs\n got % x\nwant % x", eps, rebuilt, e.Set)
			}
		}
	})
}

// TestWriteCorpus writes the seed corpus (valid frames of every kind).
func TestWriteCorpus(t *testing.T) {
	if os.Getenv("PRISMD_UPDATE_CORPUS") != "1" {
		t.Skip("set PRISMD_UPDATE_CORPUS=1 to rewrite testdata/fuzz")
	}
	write := func(target string, seeds [][]byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("FuzzControl", seedsFor(t, ClassControl))
	write("FuzzData", seedsFor(t, ClassData))
	write("FuzzResult", seedsFor(t, ClassResult))
	write("FuzzProgress", seedsFor(t, ClassProgress))
	write("FuzzExt", extSeeds(t))
}

// TestCorpusPresent keeps the committed corpus in step with the examples.
func TestCorpusPresent(t *testing.T) {
	for target, n := range map[string]int{"FuzzControl": len(seedsFor(t, ClassControl)), "FuzzData": len(seedsFor(t, ClassData)),
		"FuzzResult": len(seedsFor(t, ClassResult)), "FuzzProgress": 1, "FuzzExt": len(extSeeds(t))} {
		m, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "seed-*"))
		if len(m) < n {
			t.Errorf("%s: %d seed files, want %d (run go generate ./parser)", target, len(m), n)
		}
	}
}
