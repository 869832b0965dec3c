// This file owns the PRISM gopacket layer: decode, serialize, registration.

package layer

import (
	"errors"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/prismd/prismd/parser"
)

// LayerTypePRISM is PRISM's gopacket layer type. 1088 echoes the EtherType
// 0x88B5 and lies in the 1000-1999 range gopacket leaves to other projects.
var LayerTypePRISM = gopacket.RegisterLayerType(1088, gopacket.LayerTypeMetadata{
	Name:    "PRISM",
	Decoder: gopacket.DecodeFunc(decodePRISM),
})

// EthernetTypePRISM is the EtherType as a gopacket enum value.
const EthernetTypePRISM = layers.EthernetType(parser.EtherType)

func init() {
	layers.EthernetTypeMetadata[EthernetTypePRISM] = layers.EnumMetadata{
		DecodeWith: gopacket.DecodeFunc(decodePRISM),
		Name:       "PRISM",
		LayerType:  LayerTypePRISM,
	}
}

// PRISM is one decoded PRISM frame (everything after the Ethernet header).
// Exactly one of Control, Data (DATA and RESULT) and Progress is meaningful,
// selected by Class; the others are zero. Contents is the control word, class
// header and (DATA/RESULT) extension; Payload is the body (CONTROL body,
// NumberGroups, or PROGRESS holes). Bytes after the declared end are Ethernet
// padding and belong to neither.
type PRISM struct {
	layers.BaseLayer
	Version uint8
	Class   parser.Class

	Control  parser.Control
	Data     parser.Data
	Progress parser.Progress

	// Limits are applied by DecodeFromBytes; zero checks nothing that needs
	// the operation (vector length, Kulisch width, MTU, list cap). They are
	// configuration and survive a decode.
	Limits parser.Limits

	err parser.FieldError // what DecodeFromBytes returns; valid until the next decode
}

// LayerType implements gopacket.Layer.
func (p *PRISM) LayerType() gopacket.LayerType { return LayerTypePRISM }

// CanDecode implements gopacket.DecodingLayer.
func (p *PRISM) CanDecode() gopacket.LayerClass { return LayerTypePRISM }

// NextLayerType implements gopacket.DecodingLayer: PRISM carries no further
// protocol layer; its body is numeric data, decoded by the fields above.
func (p *PRISM) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }

// DecodeFromBytes implements gopacket.DecodingLayer. Every field is reset
// first, so a reused layer keeps nothing from an earlier frame.
func (p *PRISM) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	lim := p.Limits
	*p = PRISM{Limits: lim}
	if len(data) < parser.CWLen {
		df.SetTruncated()
		return errors.New("prism: frame shorter than the control word")
	}
	var (
		err    error
		hdr    int
		body   []byte
		length int
	)
	switch p.Class = parser.Class(data[1]); p.Class {
	case parser.ClassControl:
		err = p.Control.DecodePRISM(data, lim)
		hdr, body, length = parser.CWLen+parser.ControlHdrLen, p.Control.Body, p.Control.Len()
	case parser.ClassData, parser.ClassResult:
		err = p.Data.DecodePRISM(data, lim)
		body, length = p.Data.Body, p.Data.Len()
		hdr = length - len(body)
	case parser.ClassProgress:
		err = p.Progress.DecodePRISM(data, lim)
		hdr, length = parser.CWLen+parser.ProgressHdrLen, p.Progress.Len()
		body = data[hdr:length]
	default:
		err = &parser.FieldError{Class: p.Class, Field: "class", Offset: parser.CWOff + 1, Err: parser.ErrClass}
	}
	if err != nil {
		if errors.Is(err, parser.ErrTruncated) {
			df.SetTruncated()
		}
		// A parser error lives inside the decoder value the reset below
		// clears (package parser's errors allocate nothing): keep a copy
		// in p, which the reset spares.
		fe, ok := err.(*parser.FieldError)
		if !ok {
			*p = PRISM{Limits: lim}
			return err
		}
		*p = PRISM{Limits: lim, err: *fe}
		return &p.err
	}
	p.Version = data[0]
	p.Contents = data[:hdr:hdr]
	p.Payload = body
	if len(body) == 0 {
		p.Payload = nil
	}
	_ = length
	return nil
}

// Len is the number of bytes SerializeTo writes.
func (p *PRISM) Len() int {
	switch p.Class {
	case parser.ClassControl:
		return p.Control.Len()
	case parser.ClassData, parser.ClassResult:
		return p.Data.Len()
	case parser.ClassProgress:
		return p.Progress.Len()
	}
	return 0
}

// SerializeTo implements gopacket.SerializableLayer. Body Length and Hole
// Count always follow the slices; with opts.FixLengths the DATA/RESULT
// Element Count and Group Count are recomputed from the NumberGroups too.
// Version is always written as 1.0.
func (p *PRISM) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	n := p.Len()
	if n == 0 {
		return errors.New("prism: unknown class " + p.Class.String())
	}
	buf, err := b.PrependBytes(n)
	if err != nil {
		return err
	}
	switch p.Class {
	case parser.ClassControl:
		_, err = p.Control.EncodePRISM(buf)
	case parser.ClassData, parser.ClassResult:
		d := p.Data
		d.Class = p.Class
		if opts.FixLengths {
			d.Count, d.Groups = countGroups(d.Body)
		}
		_, err = d.EncodePRISM(buf)
	case parser.ClassProgress:
		_, err = p.Progress.EncodePRISM(buf)
	}
	return err
}

// countGroups walks NumberGroup descriptors (best effort: it stops at the
// first one that does not fit).
func countGroups(body []byte) (count uint16, groups uint8) {
	for o := 0; o+parser.GroupDescLen <= len(body) && groups < parser.MaxGroups; groups++ {
		g := parser.GroupDescriptor(body[o:])
		f, kb := g.Format(), int(g.KulischBytes())
		if f.Width(kb) == 0 {
			break
		}
		count += g.Count()
		o += parser.GroupLen(f, kb, int(g.Count()))
	}
	return
}

func decodePRISM(data []byte, pb gopacket.PacketBuilder) error {
	p := &PRISM{}
	if err := p.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(p)
	return nil
}

var (
	_ gopacket.DecodingLayer     = (*PRISM)(nil)
	_ gopacket.SerializableLayer = (*PRISM)(nil)
)
