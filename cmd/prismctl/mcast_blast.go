// This file owns 'prismctl mcast blast': the replication load of
// scripts/bench-bitmap.sh. It registers a multicast job from this host to
// the receivers (no ACK aggregation: nothing is acknowledged), builds one
// RESULT + EXT frame whose D-BM is every receiver, and sends it as fast as
// batched sendmmsg allows for a while, like prismd-blast does for plain
// forwarding; the switches replicate each copy by their BIFT masks. What
// arrives is counted at the switches (/metrics port transmit counters), not
// here: receivers run nothing.

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/parser"
)

func mcastBlast(args []string) int {
	fs := flag.NewFlagSet("mcast blast", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	mf.registerAuth(fs)
	receivers := fs.String("receivers", "", "comma-separated receiver hosts, e.g. h2,h3,h4,h5")
	size := fs.Int("size", 1500, "frame size in bytes including the 14-byte Ethernet header (at most MTU + 14)")
	dur := fs.Duration("duration", 5*time.Second, "how long to send")
	batch := fs.Int("batch", 64, "frames per sendmmsg")
	mtu := fs.Int("mtu", 1500, "PRISM MTU: 576, 1500 or 9000")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismctl mcast blast --receivers h2,h3,... --topology T --node H [--size 1500 --duration 5s]")
		fs.PrintDefaults()
	}
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	topo, err := mf.load()
	if err != nil {
		return flagErr(fs, err)
	}
	if *receivers == "" {
		return flagErr(fs, errors.New("--receivers is required"))
	}
	if err := mf.loadKey(); err != nil {
		return flagErr(fs, err)
	}
	eps, err := receiverEndpoints(topo, *receivers)
	if err != nil {
		return flagErr(fs, err)
	}
	if *size < parser.EthLen+parser.CWLen+parser.DataHdrLen+parser.ExtHdrLen+parser.GroupDescLen+16 || *size > parser.EthLen+*mtu {
		return flagErr(fs, fmt.Errorf("--size %d: must hold the PRISM headers and fit the MTU %d (+14)", *size, *mtu))
	}
	spec := bitmapam.JobSpec{Kind: bitmapam.Multicast, Op: parser.OpKey{Job: mf.job, Group: 1, GroupGen: 1, Op: 1, OpGen: uint32(time.Now().Unix())},
		Tenant: uint32(mf.tenant), Endpoints: eps, Root: mf.node, VectorLen: uint32(*mtu), MTU: *mtu, NoAggregation: true}
	plan, err := bitmapam.Compute(topo, spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err)
		return 1
	}
	op := plan.Ops[0]
	l := op.Hosts[mf.node].RootOut
	if l == nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %s has no link toward the receivers\n", mf.node)
		return 1
	}
	// The frame: D-BM = every receiver, INT8 values filling it to --size.
	target := bitmapfwd.NewSet(plan.Bits)
	for _, e := range eps {
		target.Add(e.ID)
	}
	enc, body, err := bitmapam.EncodeSet(target, plan.Choice.Params, int(plan.Ops[0].Switches[0].Context.MaxTerms))
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err)
		return 1
	}
	var xf uint8
	tag := 0
	if mf.authKey != nil {
		xf, tag = parser.XFlagAuth, parser.TagLen
	}
	n := (*size - parser.EthLen - parser.CWLen - parser.DataHdrLen - parser.ExtHdrLen - len(body) - tag - parser.GroupDescLen) &^ 3
	if n <= 0 {
		return flagErr(fs, fmt.Errorf("--size %d leaves no room for values next to a %d-byte endpoint set", *size, len(body)))
	}
	port, err := dataplane.OpenAFPacket(mf.iface, dataplane.PortOptions{Batch: *batch, SocketBuffer: 16 << 20})
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err)
		return 1
	}
	defer port.Close()
	h := parser.DataFields{Class: parser.ClassResult, Op: op.Op, SrcEP: l.SrcEP, DstEP: l.DstEP, PacketID: 1, Stream: l.Stream}
	copy(h.Eth.Dst[:], l.Peer)
	h.Eth.Src = port.MAC()
	frame, err := parser.AppendData(nil, &h, &parser.Ext{Encoding: uint8(enc), XFlags: xf, Tenant: spec.Tenant, Token: 1, Set: body},
		parser.Group{Format: parser.FormatINT8, Count: uint16(n), Values: make([]byte, n)})
	if err == nil && mf.authKey != nil {
		// Every copy is the same frame: signed once.
		err = parser.NewAuthenticator(mf.authKey).Sign(frame)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err)
		return 1
	}
	ctx, cancel := signalContext(mf.timeout)
	defer cancel()
	release, err := registerPlan(ctx, mf.iface, plan)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err)
		return 1
	}
	defer release(func(err error) { fmt.Fprintf(os.Stderr, "prismctl mcast blast: %v\n", err) })
	bufs := make([][]byte, *batch)
	for i := range bufs {
		bufs[i] = frame
	}
	var sent uint64
	start := time.Now()
	for time.Since(start) < *dur && ctx.Err() == nil {
		k, err := port.WriteBatch(bufs)
		sent += uint64(k)
		if err != nil {
			time.Sleep(50 * time.Microsecond) // ENOBUFS: back off, keep going
		}
	}
	el := time.Since(start).Seconds()
	fmt.Printf("sent %d frames of %d bytes (D-BM %d receivers) in %.2fs (%.0f frames/s)\n", sent, len(frame), len(eps), el, float64(sent)/el)
	return 0
}
