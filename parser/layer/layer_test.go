package layer

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/prismd/prismd/parser"
)

// want decodes an example with package parser directly: the oracle.
func want(t *testing.T, e parser.Example) *PRISM {
	t.Helper()
	p := &PRISM{Class: parser.Class(e.Frame[parser.CWOff+1]), Version: e.Frame[parser.CWOff]}
	var err error
	switch p.Class {
	case parser.ClassControl:
		err = p.Control.Decode(e.Frame, parser.Limits{})
	case parser.ClassData, parser.ClassResult:
		err = p.Data.Decode(e.Frame, parser.Limits{})
	case parser.ClassProgress:
		err = p.Progress.Decode(e.Frame, parser.Limits{})
	}
	if err != nil {
		t.Fatalf("%s: %v", e.Marker, err)
	}
	return p
}

func sameValue(t *testing.T, name string, got, w *PRISM) {
	t.Helper()
	if got.Class != w.Class || got.Version != w.Version || !reflect.DeepEqual(got.Control, w.Control) ||
		!reflect.DeepEqual(got.Data, w.Data) || !reflect.DeepEqual(got.Progress, w.Progress) {
		t.Fatalf("%s:\n got %+v\nwant %+v", name, got, w)
	}
}

func TestNewPacket(t *testing.T) {
	for _, e := range parser.Examples() {
		pkt := gopacket.NewPacket(e.Frame, layers.LayerTypeEthernet, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			t.Fatalf("%s: %v", e.Marker, el.Error())
		}
		l, ok := pkt.Layer(LayerTypePRISM).(*PRISM)
		if !ok {
			t.Fatalf("%s: no PRISM layer in %v", e.Marker, pkt)
		}
		sameValue(t, e.Marker, l, want(t, e))
		if got := len(l.LayerContents()) + len(l.LayerPayload()); got != len(e.Frame)-parser.EthLen {
			t.Fatalf("%s: contents+payload %d bytes, frame has %d after Ethernet", e.Marker, got, len(e.Frame)-parser.EthLen)
		}
	}
}

func TestDecodingLayerParserReuse(t *testing.T) {
	var eth layers.Ethernet
	var pr PRISM
	dlp := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &pr)
	var decoded []gopacket.LayerType
	ex := parser.Examples()
	// Every example after every other one: a reused layer must hold exactly
	// what a fresh decode holds (the gopacket Geneve lesson).
	for _, a := range ex {
		for _, b := range ex {
			for _, e := range []parser.Example{a, b} {
				if err := dlp.DecodeLayers(e.Frame, &decoded); err != nil {
					t.Fatalf("%s: %v", e.Marker, err)
				}
				if len(decoded) != 2 || decoded[1] != LayerTypePRISM {
					t.Fatalf("%s: decoded %v", e.Marker, decoded)
				}
			}
			sameValue(t, a.Marker+" then "+b.Marker, &pr, want(t, b))
		}
	}
	// A failed decode leaves nothing behind either.
	bad := append([]byte(nil), ex[0].Frame...)
	bad[parser.CWOff] = 0x20
	if err := dlp.DecodeLayers(bad, &decoded); err == nil {
		t.Fatal("bad version accepted")
	} else if fe, ok := errors.AsType[*parser.FieldError](err); !ok || fe.Field != "version" || !errors.Is(err, parser.ErrVersion) {
		t.Fatalf("bad version: %v", err) // the error must survive the layer's reset
	}
	if pr.Class != 0 || pr.Control.Body != nil || pr.Contents != nil {
		t.Fatalf("stale after error: %+v", pr)
	}
}

func TestLimitsApplied(t *testing.T) {
	var pr PRISM
	pr.Limits = parser.Limits{VectorLen: 2}
	for _, e := range parser.Examples() {
		if e.Marker == "data-fp32" {
			if err := pr.DecodeFromBytes(e.Frame[parser.EthLen:], gopacket.NilDecodeFeedback); err == nil {
				t.Fatal("vector length not applied")
			}
			if pr.Limits.VectorLen != 2 {
				t.Fatal("limits lost")
			}
		}
	}
}

func TestTruncatedFeedback(t *testing.T) {
	e := parser.Examples()[0]
	pkt := gopacket.NewPacket(e.Frame[:40], layers.LayerTypeEthernet, gopacket.Default)
	if pkt.ErrorLayer() == nil || !pkt.Metadata().Truncated {
		t.Fatalf("truncated frame: %v truncated=%v", pkt.ErrorLayer(), pkt.Metadata().Truncated)
	}
}

func TestSerialize(t *testing.T) {
	for _, e := range parser.Examples() {
		pkt := gopacket.NewPacket(e.Frame, layers.LayerTypeEthernet, gopacket.Default)
		eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		pr := pkt.Layer(LayerTypePRISM).(*PRISM)
		for _, fix := range []bool{false, true} {
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: fix}, eth, pr); err != nil {
				t.Fatalf("%s: %v", e.Marker, err)
			}
			out := buf.Bytes()
			// Ethernet pads to 60 bytes; padding follows the declared end.
			if len(out) < len(e.Frame) || !bytes.Equal(out[:len(e.Frame)], e.Frame) {
				t.Fatalf("%s (fix=%v):\n got % x\nwant % x", e.Marker, fix, out, e.Frame)
			}
			for _, x := range out[len(e.Frame):] {
				if x != 0 {
					t.Fatalf("%s: nonzero padding", e.Marker)
				}
			}
		}
	}
}

func TestPcapRoundTrip(t *testing.T) {
	var f bytes.Buffer
	w := pcapgo.NewWriter(&f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ex := parser.Examples()
	ts := time.Unix(1_800_000_000, 0)
	for i, e := range ex {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(e.Frame), Length: len(e.Frame)}
		if err := w.WritePacket(ci, e.Frame); err != nil {
			t.Fatal(err)
		}
	}
	r, err := pcapgo.NewReader(&f)
	if err != nil {
		t.Fatal(err)
	}
	src := gopacket.NewPacketSource(r, r.LinkType())
	n := 0
	for pkt := range src.Packets() {
		if n >= len(ex) {
			t.Fatal("extra packet")
		}
		l, ok := pkt.Layer(LayerTypePRISM).(*PRISM)
		if !ok {
			t.Fatalf("%s: no PRISM layer", ex[n].Marker)
		}
		sameValue(t, ex[n].Marker, l, want(t, ex[n]))
		n++
	}
	if n != len(ex) {
		t.Fatalf("read %d of %d packets", n, len(ex))
	}
}

func TestRegistration(t *testing.T) {
	if LayerTypePRISM != 1088 || LayerTypePRISM.String() != "PRISM" {
		t.Fatalf("layer type %d %q", LayerTypePRISM, LayerTypePRISM)
	}
	if layers.EthernetTypeMetadata[0x88B5].LayerType != LayerTypePRISM || EthernetTypePRISM.String() != "PRISM" {
		t.Fatal("EtherType 0x88B5 not registered")
	}
}
