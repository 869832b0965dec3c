// Package layer is the gopacket decoder for PRISM (EtherType 0x88B5): a
// DecodingLayer and SerializableLayer registered as LayerTypePRISM (1088, in
// gopacket's 1000-1999 range for layers defined outside gopacket) and hooked
// into layers.EthernetTypeMetadata, so gopacket.NewPacket on an Ethernet
// frame, DecodingLayerParser and pcapgo files all see PRISM.
//
// It uses github.com/gopacket/gopacket, the maintained fork of
// google/gopacket: the original's last release is v1.1.19 from 2020, while
// the fork is maintained and keeps the same API, so code and knowledge carry
// over unchanged.
//
// It owns only the adaptation to gopacket's interfaces. Every byte rule lives
// in package parser and is reused here, so a frame the dataplane accepts is
// exactly a frame this layer decodes. It is for tools, pcaps and tests and must
// never be imported by the hot path (engine, dataplane): gopacket allocates
// per packet and registers global state at init.
package layer
