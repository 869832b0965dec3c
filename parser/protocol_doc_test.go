// Keeps the "Worked examples" section of docs/protocol.md identical to what
// the encoder produces. PRISMD_UPDATE_DOC=1 rewrites the section.

package parser

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

const docPath = "../docs/protocol.md"

var workedHeading = regexp.MustCompile(`(?m)^## (?:\d+\. )?Worked examples\n`)

// hexDump renders 16 bytes per line with a 4-digit hex offset.
func hexDump(b []byte) string {
	var sb strings.Builder
	for o := 0; o < len(b); o += 16 {
		end := min(o+16, len(b))
		fmt.Fprintf(&sb, "%04x ", o)
		for _, x := range b[o:end] {
			fmt.Fprintf(&sb, " %02x", x)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// layout names the byte ranges of a valid example frame.
func layout(e Example) string {
	f := e.Frame
	parts := []string{"Ethernet 0-13", "control word 14-15"}
	rng := func(name string, from, n int) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d-%d", name, from, from+n-1))
		}
	}
	switch Class(f[CWOff+1]) {
	case ClassControl:
		var c Control
		c.Decode(f, Limits{})
		rng("CONTROL header", HdrOff, ControlHdrLen)
		rng(c.Cmd.String()+" body", ControlBodyOff, len(c.Body))
	case ClassData, ClassResult:
		var d Data
		d.Decode(f, e.Limits)
		rng(d.Class.String()+" header", HdrOff, DataHdrLen)
		off := DataBodyOff
		if d.Flags&FlagExt != 0 {
			n := d.Ext.Len()
			rng("extension header", off, ExtHdrLen)
			rng("endpoint set", off+ExtHdrLen, len(d.Ext.Set))
			rng("auth tag", off+ExtHdrLen+len(d.Ext.Set), len(d.Ext.Tag))
			off += n
		}
		var it GroupIter
		for i := 1; ; i++ {
			g, ok := d.NextGroup(&it)
			if !ok {
				break
			}
			vb, sl := len(g.Values), g.Format.ScaleLen()
			rng(fmt.Sprintf("group %d descriptor", i), off, GroupDescLen)
			rng(fmt.Sprintf("group %d Scale Word", i), off+GroupDescLen, sl)
			name := fmt.Sprintf("group %d values (%d x %s)", i, g.Count, g.Format)
			rng(name, off+GroupDescLen+sl, vb)
			rng(fmt.Sprintf("group %d padding", i), off+GroupDescLen+sl+vb, pad4(sl+vb)-sl-vb)
			off += GroupDescLen + pad4(sl+vb)
		}
	case ClassProgress:
		var g Progress
		g.Decode(f, e.Limits)
		rng("PROGRESS header", HdrOff, ProgressHdrLen)
		rng("holes", ProgressHoleOff, g.NHoles*HoleLen)
	}
	return strings.Join(parts, "; ")
}

func renderWorkedExamples() string {
	var sb strings.Builder
	sb.WriteString("## 12. Worked examples\n\n")
	sb.WriteString("Generated from the encoder (`parser/examples.go`) by `parser/protocol_doc_test.go`, which fails when\n" +
		"this section differs from what the encoder produces; `PRISMD_UPDATE_DOC=1 go test ./parser -run TestProtocolDoc`\n" +
		"rewrites it. Each block is a whole Ethernet frame (destination 02:00:00:00:00:01, source 02:00:00:00:00:02,\n" +
		"EtherType 88b5; replies too, although a real reply goes back to the request's source) without FCS and without\n" +
		"Ethernet padding; offsets are hexadecimal, ranges in the layout lines decimal. The Fields list under each\n" +
		"example gives every field the frame carries, decoded from it. Unless stated otherwise the operation identity is Job 0x0102030405060708, Group 1, Group Gen 1, Op 7,\n" +
		"Op Gen 1, and DATA/RESULT frames belong to an operation with Vector Length 1024, Kulisch W = 280 and MTU 1500.\n")
	for i, e := range Examples() {
		fmt.Fprintf(&sb, "\n### 12.%d %s\n\n%s %d bytes.\n\nLayout: %s.\n\nFields:\n\n%s\n\n", i+1, e.Title, e.Note, len(e.Frame), layout(e), exampleFields(e))
		fmt.Fprintf(&sb, "```text prism-example:%s\n%s```\n", e.Marker, hexDump(e.Frame))
	}
	return sb.String()
}

func TestProtocolDoc(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	want := renderWorkedExamples()
	loc := workedHeading.FindStringIndex(doc)
	update := os.Getenv("PRISMD_UPDATE_DOC") == "1"
	if update {
		head := doc
		if loc != nil {
			head = doc[:loc[0]]
		} else if !strings.HasSuffix(head, "\n\n") {
			head = strings.TrimRight(head, "\n") + "\n\n"
		}
		if err := os.WriteFile(docPath, []byte(head+want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if loc == nil {
		t.Fatalf("%s has no \"Worked examples\" section; run PRISMD_UPDATE_DOC=1 go test ./parser -run TestProtocolDoc", docPath)
	}
	got := doc[loc[0]:]
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/protocol.md worked examples differ from the encoder at section line %d:\n doc: %q\n enc: %q\n"+
				"(the section must be last; rewrite it with PRISMD_UPDATE_DOC=1 go test ./parser -run TestProtocolDoc)", i+1, g, w)
		}
	}
}

// Every fenced example in the document decodes (guards hand edits that the
// text comparison would also catch, with a clearer message).
func TestProtocolDocBlocksDecode(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```text prism-example:([a-z0-9-]+)\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	if len(blocks) != len(Examples()) {
		t.Fatalf("%d example blocks in the document, %d examples", len(blocks), len(Examples()))
	}
	lims := map[string]Limits{}
	for _, e := range Examples() {
		lims[e.Marker] = e.Limits
	}
	for _, b := range blocks {
		var frame []byte
		for _, line := range strings.Split(strings.TrimSpace(b[2]), "\n") {
			for _, h := range strings.Fields(line)[1:] {
				var x byte
				fmt.Sscanf(h, "%02x", &x)
				frame = append(frame, x)
			}
		}
		if err := decodeAny(frame, lims[b[1]]); err != nil {
			t.Errorf("%s: %v", b[1], err)
		}
	}
}
