// This file owns running tshark with prismd.lua over a pcap and turning its PDML
// output into per-packet field lists the assertions can compare.

package wireshark

import (
	"bytes"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// field is one decoded tree item: its filter name, tshark's "show" (the value as
// a display filter would see it) and "showname" (the label, with value-string
// names).
type field struct {
	Name, Show, ShowName string
}

// packet is every field of one frame, in tree order (depth first).
type packet struct {
	Fields []field
}

// values returns the Show of every field called name, in order.
func (p *packet) values(name string) []string {
	var out []string
	for _, f := range p.Fields {
		if f.Name == name {
			out = append(out, f.Show)
		}
	}
	return out
}

// labels returns the value-string name of every field called name: the text of
// its showname between ": " and the trailing " (n)".
func (p *packet) labels(name string) []string {
	var out []string
	for _, f := range p.Fields {
		if f.Name == name {
			out = append(out, labelOf(f.ShowName))
		}
	}
	return out
}

var labelRE = regexp.MustCompile(`^[^:]*: (.*) \((?:0x)?[0-9a-fA-F]+\)$`)

func labelOf(showname string) string {
	if m := labelRE.FindStringSubmatch(showname); m != nil {
		return m[1]
	}
	return showname
}

// experts returns the names of the prismd expert items of the packet.
func (p *packet) experts() []string {
	var out []string
	for _, f := range p.Fields {
		if strings.HasPrefix(f.Name, "prismd.expert.") {
			out = append(out, f.Name)
		}
	}
	return out
}

// writePcap writes frames as an Ethernet pcap.
func writePcap(t *testing.T, path string, frames [][]byte) { writePcapSnap(t, path, frames, 0) }

// writePcapSnap is writePcap with a snapshot length: each frame longer
// than snap keeps its first snap bytes and its length on the wire, as
// tshark -s snap captures it (0: whole frames).
func writePcapSnap(t *testing.T, path string, frames [][]byte, snap int) {
	t.Helper()
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	w := pcapgo.NewWriter(fh)
	hdrSnap := uint32(65535)
	if snap > 0 {
		hdrSnap = uint32(snap)
	}
	if err := w.WriteFileHeader(hdrSnap, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i, fr := range frames {
		kept := fr
		if snap > 0 && len(kept) > snap {
			kept = kept[:snap]
		}
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(kept), Length: len(fr)}
		if err := w.WritePacket(ci, kept); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}

// pdml mirrors the parts of tshark's PDML output the test reads.
type pdmlField struct {
	Name     string      `xml:"name,attr"`
	Show     string      `xml:"show,attr"`
	ShowName string      `xml:"showname,attr"`
	Fields   []pdmlField `xml:"field"`
	Protos   []pdmlField `xml:"proto"`
}

type pdmlPacket struct {
	Protos []pdmlField `xml:"proto"`
}

type pdmlDoc struct {
	Packets []pdmlPacket `xml:"packet"`
}

func flatten(dst *[]field, fs []pdmlField) {
	for _, f := range fs {
		*dst = append(*dst, field{Name: f.Name, Show: f.Show, ShowName: f.ShowName})
		flatten(dst, f.Fields)
		flatten(dst, f.Protos)
	}
}

// luaScript is the dissector under test, next to this file.
func luaScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("prismd.lua")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tshark runs tshark over pcap with the dissector and returns the decoded packets
// and tshark's complete PDML output (for "Lua Error" checks). It fails, never
// skips, when tshark is missing: CI installs it with `make deps`.
func runTshark(t *testing.T, pcap string) ([]packet, string) {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not found (%v): run make deps (installs tshark)", err)
	}
	// A private HOME and XDG config keep a user's own Wireshark profile and
	// personal plugins (possibly an older installed prismd.lua, which would
	// register the protocol twice) out of the test.
	home := t.TempDir()
	cmd := exec.Command(bin, "-n", "-X", "lua_script:"+luaScript(t), "-r", pcap, "-T", "pdml")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"WIRESHARK_CONFIG_DIR="+filepath.Join(home, ".wireshark"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark: %v\nstderr:\n%s", err, stderr.String())
	}
	checkStderr(t, stderr.String())
	out := stdout.String()
	var doc pdmlDoc
	if err := xml.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("parse PDML: %v", err)
	}
	pkts := make([]packet, len(doc.Packets))
	for i, p := range doc.Packets {
		flatten(&pkts[i].Fields, p.Protos)
	}
	return pkts, out
}

// checkStderr fails on anything tshark printed on stderr except the warning
// it prints when run as root: a Lua load error or a field registered twice
// shows up there.
func checkStderr(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "Running as user \"root\"") {
			continue
		}
		t.Errorf("tshark stderr: %s", line)
	}
}
