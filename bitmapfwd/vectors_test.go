package bitmapfwd

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestVectors checks the hand-built bodies of testdata/endpoint_sets.txt in
// both directions: decode gives the listed members, encode gives the bytes.
func TestVectors(t *testing.T) {
	f, err := os.Open("testdata/endpoint_sets.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	count := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fld := strings.Fields(line)
		if len(fld) < 6 {
			t.Fatalf("bad vector line %q", line)
		}
		name, enc := fld[0], fld[1]
		n, _ := strconv.Atoi(fld[2])
		param, _ := strconv.Atoi(fld[3])
		body := unhex(t, strings.Join(fld[5:], ""))
		want := oracle{}
		if fld[4] != "-" {
			for _, m := range strings.Split(fld[4], ",") {
				e, _ := strconv.Atoi(m)
				want[e] = true
			}
		}
		s := fromOracle(t, n, want)
		var p Params
		switch enc {
		case "FLAT":
			p = Params{Encoding: Flat, WordCount: param}
			if len(body) >= 2 {
				p.SetID = int(body[0])<<8 | int(body[1])
			}
		case "HIER":
			p = Params{Encoding: Hier, BlockBits: param}
		case "LIST":
			p = Params{Encoding: List, ListCap: param}
		default:
			t.Fatalf("%s: encoding %q", name, enc)
		}
		got := NewSet(n)
		if err := Decode(body, got, p); err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		checkSet(t, name, got, want)
		out, err := Append(nil, s, p)
		if err != nil || !bytes.Equal(out, body) {
			t.Fatalf("%s: encode %x (%v), want %x", name, out, err, body)
		}
		count++
	}
	if count < 10 {
		t.Fatalf("only %d vectors read", count)
	}
}
