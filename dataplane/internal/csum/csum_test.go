package csum

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/prismd/prismd/internal/alloctest"
)

// The oracle is gopacket: it serializes a frame with the correct checksum
// (ComputeChecksums). The test then puts into the checksum field what a
// sender with TX checksum offload leaves there, the folded pseudo-header
// sum (computed here word by word, independently of the package), and
// Complete must give the oracle's bytes back.

type frameSpec struct {
	v6      bool
	udp     bool
	vlans   int // 0, 1 or 2 tags (802.1ad outer, 802.1Q inner)
	options int // IPv4 option bytes (multiple of 4)
	payload int
}

func (s frameSpec) String() string {
	l3, l4 := "ipv4", "tcp"
	if s.v6 {
		l3 = "ipv6"
	}
	if s.udp {
		l4 = "udp"
	}
	return fmt.Sprintf("%s/%s/vlans=%d/opts=%d/payload=%d", l3, l4, s.vlans, s.options, s.payload)
}

// build returns the frame with a correct checksum, the offset of the
// checksum field and the offset and length of the L4 segment.
func build(t testing.TB, s frameSpec, rng *rand.Rand) (frame []byte, at, l4, n int) {
	t.Helper()
	src, _ := net.ParseMAC("02:00:00:00:00:01")
	dst, _ := net.ParseMAC("02:00:00:00:00:02")
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}
	if s.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	var ls []gopacket.SerializableLayer
	ls = append(ls, eth)
	hdr := 14
	if s.vlans > 0 {
		inner := eth.EthernetType
		eth.EthernetType = layers.EthernetTypeDot1Q
		if s.vlans == 2 {
			eth.EthernetType = layers.EthernetTypeQinQ
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: 100, Type: layers.EthernetTypeDot1Q})
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 5, Priority: 1, Type: inner})
		hdr += 4 * s.vlans
	}
	var nl gopacket.NetworkLayer
	proto := layers.IPProtocolTCP
	if s.udp {
		proto = layers.IPProtocolUDP
	}
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto,
			SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP(fmt.Sprintf("fd00::%x", rng.IntN(0xffff)+2))}
		ls = append(ls, ip)
		nl = ip
		hdr += 40
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, Id: uint16(rng.Uint32()), Flags: layers.IPv4DontFragment,
			SrcIP: net.IPv4(10, 77, 0, 1), DstIP: net.IPv4(10, 77, byte(rng.IntN(256)), byte(rng.IntN(256)))}
		if s.options == 4 {
			// A router alert: ihl grows, the pseudo-header does not.
			ip.Options = []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}}
		}
		ls = append(ls, ip)
		nl = ip
		hdr += 20 + s.options
	}
	if s.udp {
		u := &layers.UDP{SrcPort: layers.UDPPort(40000 + rng.IntN(20000)), DstPort: 5001}
		if err := u.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, u)
		at = hdr + 6
	} else {
		tc := &layers.TCP{SrcPort: layers.TCPPort(rng.IntN(65536)), DstPort: 5001, Seq: rng.Uint32(), Ack: rng.Uint32(),
			ACK: true, PSH: s.payload > 0, Window: 502,
			Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}}}
		binary.BigEndian.PutUint32(tc.Options[2].OptionData, rng.Uint32())
		if err := tc.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, tc)
		at = hdr + 16
	}
	pl := make([]byte, s.payload)
	for i := range pl {
		pl[i] = byte(rng.Uint32())
	}
	ls = append(ls, gopacket.Payload(pl))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	frame = append([]byte(nil), buf.Bytes()...)
	// Not len(frame)-hdr: gopacket pads a frame to Ethernet's 60 bytes.
	if s.v6 {
		n = int(binary.BigEndian.Uint16(frame[hdr-40+4:]))
	} else {
		n = int(binary.BigEndian.Uint16(frame[hdr-20-s.options+2:])) - 20 - s.options
	}
	return frame, at, hdr, n
}

// partial is what a sender with checksum offload puts in the field: the
// ones' complement sum of the pseudo-header, folded, not complemented.
// Word by word, on purpose unlike the package's 64-bit sum.
func partial(frame []byte, l4, n int, v6 bool, proto byte) uint16 {
	var words []uint16
	l3 := l4
	if v6 {
		l3 -= 40
		for i := l3 + 8; i < l3+40; i += 2 {
			words = append(words, binary.BigEndian.Uint16(frame[i:]))
		}
		// 32-bit upper-layer length and 24 zero bits plus next header.
		words = append(words, uint16(n>>16), uint16(n), 0, uint16(proto))
	} else {
		l3 = ipv4Start(frame)
		for i := l3 + 12; i < l3+20; i += 2 {
			words = append(words, binary.BigEndian.Uint16(frame[i:]))
		}
		words = append(words, uint16(proto), uint16(n)) // zero byte + protocol, L4 length
	}
	var s uint32
	for _, w := range words {
		s += uint32(w)
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// ipv4Start finds the IPv4 header after the Ethernet header and tags.
func ipv4Start(f []byte) int {
	off := 12
	for binary.BigEndian.Uint16(f[off:]) != 0x0800 {
		off += 4
	}
	return off + 2
}

// verify is gopacket's receiver check of the frame's TCP or UDP checksum.
func verify(t *testing.T, f []byte) bool {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	var v interface {
		VerifyChecksum() (error, gopacket.ChecksumVerificationResult)
	}
	nl := p.NetworkLayer()
	if l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP); ok && nl != nil {
		_ = l.SetNetworkLayerForChecksum(nl)
		v = l
	} else if l, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && nl != nil {
		_ = l.SetNetworkLayerForChecksum(nl)
		v = l
	} else {
		t.Fatalf("gopacket finds no TCP or UDP in %x", f)
	}
	err, r := v.VerifyChecksum()
	if err != nil {
		t.Fatal(err)
	}
	return r.Valid
}

func TestCompleteAgainstGopacket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var specs []frameSpec
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			for vlans := 0; vlans <= 2; vlans++ {
				for _, payload := range []int{0, 1, 2, 7, 33, 100, 1399, 1400, 1448, 8000} {
					specs = append(specs, frameSpec{v6: v6, udp: udp, vlans: vlans, payload: payload})
				}
			}
			if !v6 {
				specs = append(specs, frameSpec{udp: udp, options: 4, payload: 101})
			}
		}
	}
	for i := 0; i < 2000; i++ {
		specs = append(specs, frameSpec{v6: rng.IntN(2) == 0, udp: rng.IntN(2) == 0, vlans: rng.IntN(3), payload: rng.IntN(1500)})
	}
	for _, s := range specs {
		want, at, l4, n := build(t, s, rng)
		proto := byte(6)
		if s.udp {
			proto = 17
		}
		got := append([]byte(nil), want...)
		binary.BigEndian.PutUint16(got[at:], partial(got, l4, n, s.v6, proto))
		if bytes.Equal(got, want) {
			t.Fatalf("%v: partial checksum equals the full one; the test proves nothing", s)
		}
		if !Complete(got) {
			t.Fatalf("%v: Complete = false", s)
		}
		w, g := binary.BigEndian.Uint16(want[at:]), binary.BigEndian.Uint16(got[at:])
		if w == 0 && g == 0xffff && !s.udp {
			// gopacket sends a TCP sum of 0 as 0; skb_checksum_help (and
			// Complete) as 0xffff, the same number in ones' complement.
			binary.BigEndian.PutUint16(got[at:], 0)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: checksum %#04x, want %#04x\n got %x\nwant %x", s, g, w, got, want)
		}
		// gopacket's own receiver check agrees, 0xffff included.
		if !verify(t, got) {
			t.Fatalf("%v: gopacket finds the completed checksum wrong", s)
		}
	}
}

// A frame padded to Ethernet's 60-byte minimum: the sum covers the L4
// length the IP header gives, not the padding.
func TestCompleteIgnoresPadding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	want, at, l4, n := build(t, frameSpec{udp: true, payload: 2}, rng)
	got := append([]byte(nil), want...)
	binary.BigEndian.PutUint16(got[at:], partial(got, l4, n, false, 17))
	got = append(got, 0xde, 0xad, 0xbe, 0xef, 0x55, 0xaa, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08)
	if !Complete(got) {
		t.Fatal("Complete = false")
	}
	if !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("got %x\nwant %x", got[:len(want)], want)
	}
}

// Frames Complete must leave alone, and report so.
func TestCompleteLeavesOthersUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	withPartial := func(s frameSpec) []byte {
		f, at, l4, n := build(t, s, rng)
		proto := byte(6)
		if s.udp {
			proto = 17
		}
		binary.BigEndian.PutUint16(f[at:], partial(f, l4, n, s.v6, proto))
		return f
	}
	cases := map[string][]byte{
		"short":    make([]byte, 13),
		"arp":      append(bytes.Repeat([]byte{0xff}, 12), 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1),
		"prism":    append(bytes.Repeat([]byte{2}, 12), append([]byte{0x88, 0xb5}, bytes.Repeat([]byte{0x10}, 60)...)...),
		"3 tags":   nil,
		"ipv4 cut": withPartial(frameSpec{payload: 100})[:80],
		"ipv6 cut": withPartial(frameSpec{v6: true, udp: true, payload: 100})[:80],
		// The field holds something else than the pseudo-header sum
		// (here the complete checksum): the partial one is elsewhere.
		"complete": func() []byte { f, _, _, _ := build(t, frameSpec{payload: 50}, rng); return f }(),
		"udp zero": func() []byte {
			f, at, _, _ := build(t, frameSpec{udp: true, payload: 50}, rng)
			f[at], f[at+1] = 0, 0 // no checksum (a VXLAN outer header)
			return f
		}(),
		"fragment": func() []byte {
			f := withPartial(frameSpec{udp: true, payload: 50})
			f[14+6] |= 0x20 // more fragments
			return f
		}(),
		"icmp": func() []byte {
			f := withPartial(frameSpec{payload: 50})
			f[14+9] = 1
			return f
		}(),
		"ipv6 hop-by-hop": func() []byte {
			f := withPartial(frameSpec{v6: true, payload: 50})
			f[14+6] = 0
			return f
		}(),
	}
	// Three VLAN tags: past what Complete parses.
	f3 := withPartial(frameSpec{vlans: 2, payload: 20})
	f3 = append(f3[:12:12], append([]byte{0x81, 0x00, 0, 7}, f3[12:]...)...)
	cases["3 tags"] = f3
	for name, f := range cases {
		orig := append([]byte(nil), f...)
		if Complete(f) {
			t.Errorf("%s: Complete = true", name)
		}
		if !bytes.Equal(f, orig) {
			t.Errorf("%s: frame changed", name)
		}
	}
}

func TestCompleteZeroAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	f, at, l4, n := build(t, frameSpec{vlans: 1, payload: 1448}, rng)
	p := partial(f, l4, n, false, 6)
	if a := alloctest.PerRun(100, func() {
		binary.BigEndian.PutUint16(f[at:], p)
		if !Complete(f) {
			t.Fatal("Complete = false")
		}
	}); a != 0 {
		t.Errorf("%.1f allocations per Complete, want 0", a)
	}
}

// What a marked frame costs (an unmarked one costs one bit test in the
// receive paths, not this).
func BenchmarkComplete(b *testing.B) {
	for _, size := range []int{64, 1500} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(9, 10))
			f, at, l4, n := build(b, frameSpec{payload: max(size-14-20-32, 0)}, rng)
			p := partial(f, l4, n, false, 6)
			b.SetBytes(int64(len(f)))
			for b.Loop() {
				binary.BigEndian.PutUint16(f[at:], p)
				Complete(f)
			}
		})
	}
}
