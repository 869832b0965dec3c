package am

import (
	"testing"
	"time"

	"github.com/prismd/prismd/internal/netnstest"
	"github.com/prismd/prismd/parser"
)

// TestConnReadsOnlyControl: on a real veth, the AM's socket never sees the
// DATA, RESULT and PROGRESS frames of a rank sharing its interface (the BPF
// filter drops them in the kernel), and still reads every CONTROL frame, in
// order.
func TestConnReadsOnlyControl(t *testing.T) {
	env := netnstest.New(t, "amf")
	ns := env.Namespace("x")
	ifa, ifb := env.Veth(ns, ns)
	var a, b *PacketConn
	var err error
	env.Do(ns, func() {
		if a, err = OpenConn(ifa); err != nil {
			return
		}
		b, err = OpenConn(ifb)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	frame := func(class parser.Class, tag byte) []byte {
		f := make([]byte, 60)
		copy(f, a.MAC())
		copy(f[6:], b.MAC())
		f[12], f[13] = 0x88, 0xB5 // parser.EtherType
		f[parser.CWOff], f[parser.CWOff+1] = 0x10, byte(class)
		f[59] = tag
		return f
	}
	got := make(chan []byte, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := a.ReadFrame(buf)
			if err != nil {
				close(got)
				return
			}
			got <- append([]byte(nil), buf[:n]...)
		}
	}()
	for round := byte(1); round <= 3; round++ {
		for _, c := range []parser.Class{parser.ClassData, parser.ClassResult, parser.ClassProgress, 7} {
			if err := b.WriteFrame(frame(c, round)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.WriteFrame(frame(parser.ClassControl, round)); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-got:
			if parser.Class(f[parser.CWOff+1]) != parser.ClassControl || f[59] != round {
				t.Fatalf("round %d: read class %d tag %d, want the CONTROL frame of this round", round, f[parser.CWOff+1], f[59])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the CONTROL frame never arrived", round)
		}
	}
}
