// The "Fields" lists of the worked examples: every field of every example
// frame, decoded from the frame itself, so that an implementer can build
// each example from the prose and compare with its hex (the conformance
// test of e2e/conformance does exactly that).

package parser

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"reflect"
	"strings"
)

// fieldNames renders the exported scalar fields of struct v as "Name value"
// pairs: enums as NAME (code), other integers in decimal, MACs as MACs.
// Slices and arrays are left to the caller.
func fieldNames(v any) string {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	var parts []string
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		x := rv.Field(i)
		name := spaced(f.Name)
		switch {
		case f.Type == reflect.TypeOf([6]byte{}):
			mac := x.Interface().([6]byte)
			parts = append(parts, name+" "+net.HardwareAddr(mac[:]).String())
		case x.Kind() == reflect.Slice || x.Kind() == reflect.Array || x.Kind() == reflect.Struct:
			continue
		case x.Type().Implements(reflect.TypeOf((*fmt.Stringer)(nil)).Elem()) && x.Kind() != reflect.String:
			parts = append(parts, fmt.Sprintf("%s %v (%d)", name, x.Interface(), x.Uint()))
		case x.CanUint() && strings.HasSuffix(f.Name, "Flags"):
			parts = append(parts, fmt.Sprintf("%s 0x%02x", name, x.Uint()))
		case x.CanUint():
			parts = append(parts, fmt.Sprintf("%s %d", name, x.Uint()))
		case x.CanInt():
			parts = append(parts, fmt.Sprintf("%s %d", name, x.Int()))
		}
	}
	return strings.Join(parts, ", ")
}

// specNames are the spec's names of fields whose Go names differ.
var specNames = map[string]string{
	"AccPolicy": "Accumulator Policy", "VectorLen": "Vector Length", "TimeoutMs": "Timeout (ms)",
	"SetCount": "Set Record Count", "Tenant": "Tenant ID", "LocalEP": "Local Endpoint", "PeerEP": "Peer Endpoint",
	"Stream": "Stream ID", "SrcEP": "Source Endpoint", "DstEP": "Destination Endpoint", "AckedCmd": "Acked Command",
	"State": "Operation State", "FailCause": "Failure Cause", "FailHops": "Failure Hops", "Completed": "Completed Elements",
	"MaxVectorLen": "Max Vector Length", "MaxReplayDepth": "Max Replay Depth", "Committed": "Committed Element",
	"NHoles": "Hole Count", "KulischWidth": "Kulisch Width",
}

// spaced turns a Go field name into the spec's words: "WindowIntervals" ->
// "Window Intervals", "SrcEP" -> "Source Endpoint".
func spaced(s string) string {
	if n, ok := specNames[s]; ok {
		return n
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' && !(s[i-1] >= 'A' && s[i-1] <= 'Z') {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func opText(k OpKey) string {
	return fmt.Sprintf("Job 0x%016x, Group %d, Group Gen %d, Op %d, Op Gen %d", k.Job, k.Group, k.GroupGen, k.Op, k.OpGen)
}

// groupValues renders a group's values: numbers for the float and integer
// formats, hex for Kulisch integers.
func groupValues(g Group) string {
	w := len(g.Values) / max(1, int(g.Count))
	var vs []string
	for i := 0; i < int(g.Count); i++ {
		v := g.Values[i*w : (i+1)*w]
		switch g.Format {
		case FormatFP32:
			vs = append(vs, fmt.Sprint(math.Float32frombits(binary.LittleEndian.Uint32(v))))
		case FormatBF16:
			vs = append(vs, fmt.Sprint(math.Float32frombits(uint32(binary.LittleEndian.Uint16(v))<<16)))
		case FormatINT8:
			vs = append(vs, fmt.Sprint(int8(v[0])))
		case FormatKulischF64:
			// The number and its bit pattern: the pattern is what an
			// implementer compares with the hex (the sign of a zero, the
			// one NaN encoding).
			x := binary.LittleEndian.Uint64(v)
			vs = append(vs, fmt.Sprintf("%v (0x%016X)", math.Float64frombits(x), x))
		default:
			vs = append(vs, "0x"+fmt.Sprintf("%x", v))
		}
	}
	return strings.Join(vs, ", ")
}

// exampleFields lists every field of e's frame, one bullet per structure.
func exampleFields(e Example) string {
	f := e.Frame
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, "- "+fmt.Sprintf(format, a...)) }
	switch Class(f[CWOff+1]) {
	case ClassControl:
		var c Control
		if err := c.Decode(f, e.Limits); err != nil {
			return "- (does not decode: " + err.Error() + ")"
		}
		add("CONTROL header: %s; Transaction ID 0x%08x, Source Endpoint 0x%04x, Destination Endpoint 0x%04x, Command %v (%d), Status %v (%d), Body Length %d, Fragment Index %d, Fragment Count %d",
			opText(c.Op), c.Txn, c.SrcEP, c.DstEP, c.Cmd, c.Cmd, c.Status, c.Status, len(c.Body), c.FragIndex, c.FragCount)
		switch c.Cmd {
		case CmdStage:
			s := c.Stage()
			add("context record: %s", fieldNames(s.Context))
			for i := 0; i < s.NBindings(); i++ {
				add("binding %d: %s", i, fieldNames(s.Binding(i)))
			}
			var it SetRecordIter
			for i := 0; ; i++ {
				r, ok := s.NextSet(&it)
				if !ok {
					break
				}
				add("set record %d: Binding Index 0x%02x, Encoding %d, Length %d (4 + %d-byte set body: % x)", i, r.BindingIndex, r.Encoding, 4+len(r.Set), len(r.Set), r.Set)
			}
		case CmdAck:
			add("ACK body: %s", fieldNames(c.Ack()))
		case CmdCapsQuery:
			add("CAPS_QUERY body: Page %d", c.CapsQueryPage())
		case CmdCapsResponse:
			p := c.CapsPage()
			add("page header: Record Count %d, Port Count %d, Max MTU %d, Max Operations %d", p.NRecords, p.PortCount, p.MaxMTU, p.MaxOps)
			for i := 0; i < p.NRecords; i++ {
				add("record %d: %s", i, fieldNames(p.Records[i]))
			}
		}
	case ClassData, ClassResult:
		var d Data
		if err := d.Decode(f, e.Limits); err != nil {
			return "- (does not decode: " + err.Error() + ")"
		}
		add("%v header: %s; Source Endpoint 0x%04x, Destination Endpoint 0x%04x, Packet ID %d, First Element %d, Element Count %d, Group Count %d, Flags 0x%02x, Body Length %d, Stream ID %d",
			d.Class, opText(d.Op), d.SrcEP, d.DstEP, d.PacketID, d.First, d.Count, d.Groups, d.Flags, d.BodyLen, d.Stream)
		if d.Flags&FlagExt != 0 {
			x := d.Ext
			add("extension: Extension Length %d, Encoding %d, Extension Flags 0x%02x, Tenant ID %d, Token 0x%016x, set body (%d bytes): % x; tag (%d bytes): % x",
				x.Len(), x.Encoding, x.XFlags, x.Tenant, x.Token, len(x.Set), x.Set, len(x.Tag), x.Tag)
		}
		var it GroupIter
		for i := 1; ; i++ {
			g, ok := d.NextGroup(&it)
			if !ok {
				break
			}
			extra := ""
			if g.Format == FormatKulisch || g.Format == FormatKulischScaled {
				extra = fmt.Sprintf(", integer bytes %d", g.KBytes)
			}
			if g.Format == FormatKulischScaled {
				extra += fmt.Sprintf(", Shift %d", g.Shift)
			}
			add("group %d: Format %v (%d), Count %d (elements %d..%d)%s; values %s", i, g.Format, g.Format, g.Count, g.First, g.First+uint32(g.Count)-1, extra, groupValues(g))
		}
	case ClassProgress:
		var p Progress
		if err := p.Decode(f, e.Limits); err != nil {
			return "- (does not decode: " + err.Error() + ")"
		}
		add("PROGRESS header: %s; %s", opText(p.Op), strings.TrimPrefix(fieldNames(p), ""))
		for i := 0; i < p.NHoles; i++ {
			add("hole %d: Start %d, End %d", i, p.Holes[i].Start, p.Holes[i].End)
		}
	}
	return strings.Join(lines, "\n")
}
