// Command prismd-blast is a small AF_PACKET traffic generator and counter for
// scripts/bench-forward.sh and scripts/bench.sh: "send" transmits fixed-size
// frames as fast as sendmmsg allows, "recv" counts the ones that arrive, and
// "contribute" is one rank of a PRISM ALLREDUCE or REDUCE sending DATA as
// fast as the protocol allows (contribute.go). It uses the dataplane's
// batched AF_PACKET port, so it needs CAP_NET_RAW.
//
//	prismd-blast send --iface h1v0a --dst 02:..:02 --size 64 --duration 5s
//	prismd-blast recv --iface h2v1a --duration 7s
//	prismd-blast contribute --coordinator http://10.0.0.1:7000 --rank 0 --size 2 --job 7 --node h1
//
// Frames carry EtherType 0x88B6 (IEEE local experimental 2) so the receiver
// counts only generator traffic.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/prismd/prismd/dataplane"
)

const etherType = 0x88B6

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "contribute" {
		os.Exit(runContribute(os.Args[2:]))
	}
	if len(os.Args) < 2 || (os.Args[1] != "send" && os.Args[1] != "recv") {
		fmt.Fprintln(os.Stderr, "usage: prismd-blast send|recv --iface IF [--dst MAC --size N] --duration D")
		fmt.Fprintln(os.Stderr, "       prismd-blast contribute --coordinator URL --rank R --size N --job J --node H [-h for more]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	iface := fs.String("iface", "", "interface")
	dst := fs.String("dst", "ff:ff:ff:ff:ff:ff", "destination MAC (send)")
	size := fs.Int("size", 64, "frame size in bytes including the 14-byte header (send; 60..9018)")
	dur := fs.Duration("duration", 5*time.Second, "how long to send / count")
	batch := fs.Int("batch", 64, "frames per sendmmsg/recvmmsg")
	rxRing := fs.Bool("rx-ring", true, "recv: read through the TPACKET_V3 ring (false: recvmmsg)")
	bypass := fs.Bool("qdisc-bypass", true, "send: PACKET_QDISC_BYPASS")
	fs.Parse(os.Args[2:])
	p, err := dataplane.OpenAFPacket(*iface, dataplane.PortOptions{Batch: *batch, SocketBuffer: 16 << 20,
		NoRxRing: !*rxRing, NoQdiscBypass: !*bypass})
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismd-blast:", err)
		os.Exit(1)
	}
	defer p.Close()
	switch mode {
	case "send":
		d, err := net.ParseMAC(*dst)
		if err != nil || *size < 60 || *size > dataplane.FrameSize(p.MTU()) {
			fmt.Fprintln(os.Stderr, "prismd-blast: bad --dst or --size")
			os.Exit(2)
		}
		f := make([]byte, *size)
		copy(f, d)
		src := p.MAC()
		copy(f[6:], src[:])
		binary.BigEndian.PutUint16(f[12:], etherType)
		bufs := make([][]byte, *batch)
		for i := range bufs {
			bufs[i] = f
		}
		var sent uint64
		start := time.Now()
		for time.Since(start) < *dur {
			n, err := p.WriteBatch(bufs)
			sent += uint64(n)
			if err != nil {
				time.Sleep(50 * time.Microsecond) // ENOBUFS: back off, keep going
			}
		}
		el := time.Since(start).Seconds()
		fmt.Printf("sent %d frames in %.2fs (%.0f frames/s)\n", sent, el, float64(sent)/el)
	case "recv":
		bufs := make([][]byte, *batch)
		for i := range bufs {
			bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
		}
		sizes := make([]int, *batch)
		var got uint64
		go func() {
			time.Sleep(*dur)
			p.Close()
		}()
		for {
			n, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				break
			}
			for i := 0; i < n; i++ {
				if sizes[i] >= 14 && binary.BigEndian.Uint16(bufs[i][12:]) == etherType {
					got++
				}
			}
		}
		fmt.Printf("received %d\n", got)
	}
}
