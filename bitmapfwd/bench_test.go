package bitmapfwd

import (
	"testing"
	"time"
)

// BenchmarkReplicate4x256: a switch with 4 neighbours, 64 endpoints behind
// each, a 256-bit D-BM with every bit set (4 copies).
func BenchmarkReplicate4x256(b *testing.B) {
	bift, _ := NewBIFT(256, 4)
	for p := range 4 {
		m := NewSet(256)
		for e := p * 64; e < (p+1)*64; e++ {
			m.Add(e)
		}
		_ = bift.SetMask(p, m)
	}
	d, scratch := NewSet(256), NewSet(256)
	for e := range 256 {
		d.Add(e)
	}
	sink := 0
	emit := func(port int, sub *Set) { sink += port }
	b.ReportAllocs()
	for b.Loop() {
		bift.Replicate(d, -1, scratch, emit)
	}
	_ = sink
}

// BenchmarkReplicate65536x64: 64 neighbours over a 65536-endpoint domain,
// 1% of the bits set.
func BenchmarkReplicate65536x64(b *testing.B) {
	const n, ports = 65536, 64
	bift, _ := NewBIFT(n, ports)
	for p := range ports {
		m := NewSet(n)
		for e := p * (n / ports); e < (p+1)*(n/ports); e++ {
			m.Add(e)
		}
		_ = bift.SetMask(p, m)
	}
	d, scratch := NewSet(n), NewSet(n)
	for e := 0; e < n; e += 100 {
		d.Add(e)
	}
	b.ReportAllocs()
	for b.Loop() {
		bift.Replicate(d, 0, scratch, func(int, *Set) {})
	}
}

// BenchmarkAdmit256: one new P-BM bit against a 256-bit A-BM, then a reset.
func BenchmarkAdmit256(b *testing.B) {
	c := NewCompletion(256)
	target, p := NewSet(256), NewSet(256)
	for e := range 256 {
		target.Add(e)
	}
	p.Add(100)
	c.Reset(target)
	b.ReportAllocs()
	for b.Loop() {
		if c.Admit(p) != AdmitNew {
			c.Restart()
			c.Admit(p)
		}
		c.Restart()
	}
}

func BenchmarkSoftTableInstallAdmitRelease(b *testing.B) {
	st, _ := NewSoftTable(SoftTableConfig{Slots: 4096, Bits: 256, Timeout: time.Second})
	_ = st.SetQuota(1, 4096)
	cbm, p1, p2 := NewSet(256), NewSet(256), NewSet(256)
	cbm.Add(3)
	cbm.Add(200)
	p1.Add(3)
	p2.Add(200)
	tok := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		tok++
		slot, _ := st.Install(1, tok, cbm, 0)
		st.Admit(1, tok, p1)
		st.Admit(1, tok, p2)
		st.Release(slot)
	}
}

func BenchmarkDecodeFlat4096(b *testing.B) {
	s := NewSet(4096)
	for e := 0; e < 4096; e += 3 {
		s.Add(e)
	}
	body, _ := AppendFlat(nil, s, 0, 64)
	into := NewSet(4096)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_ = DecodeFlat(body, into)
	}
}

func BenchmarkDecodeList8of65536(b *testing.B) {
	s := NewSet(65536)
	for e := 0; e < 65536; e += 8192 {
		s.Add(e)
	}
	body, _ := AppendList(nil, s, 16)
	into := NewSet(65536)
	b.ReportAllocs()
	for b.Loop() {
		_ = DecodeList(body, into, 16)
	}
}
