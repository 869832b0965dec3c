// This file owns 'prismd-blast contribute': one rank of a PRISM collective
// (ALLREDUCE or REDUCE of FP32) driven as fast as the protocol allows, so a
// benchmark measures what the switch absorbs rather than what a rank's host
// library can produce. It is a traffic generator of the same class as
// 'prismd-blast send': the same batched AF_PACKET port, one sendmmsg per
// batch of up to 64 prebuilt frames, where a DATA frame costs a header
// patch and one copy of a per-rank payload template.
//
// The protocol is the rank's, as package host speaks it (host/op.go): the
// AM's barrier and grant (control/am Client.Begin), the DATA send window
// (stream.SendWindow) with PROGRESS, NO_CREDIT and retransmissions, the
// RESULT receive window (stream.RecvWindow) answered with PROGRESS, and
// the completion report (Client.Done). Every RESULT group is checked
// against the exact sum (oracle.go); a wrong value ends the run.
//
//	prismd-blast contribute --coordinator http://10.0.0.1:7000 --rank 0 --size 2 \
//	    --job 7 --node h1 --iface eth0 --acc fp32 --count 16777216 --duration 5s
//
// Operations run back to back for --duration. The ranks must agree on when
// to stop, or one of them would wait at a barrier the others never reach;
// they agree through that barrier itself (see contributor.begin). The last
// operation of a run is therefore a short closing one.
//
// Two goroutines move the frames. The reader applies PROGRESS and RESULT
// a batch at a time, answers RESULT and sends the DATA the batch admitted;
// the sender starts each operation and wakes every millisecond (or when
// the reader kicks it) for retransmissions, deadlines and completion.
// They share the operation's windows under one mutex, taken once per
// batch.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/host"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// batchMax is the most frames one sendmmsg or recvmmsg moves, as in
// 'prismd-blast send'.
const batchMax = 64

// rankRTO is the least DATA retransmission timeout, as package host's: a
// switch sharing its cores with the ranks often answers a window's first
// frame only after tens of milliseconds, and a timeout resends one frame.
const rankRTO = int64(40 * time.Millisecond)

// beginWait bounds one barrier wait: above the AM's own barrier timeout
// (2 minutes), which answers first with a clear error when a rank is
// missing; this bound is for an AM that stopped answering altogether.
const beginWait = 150 * time.Second

// progressLen is the largest PROGRESS frame.
const progressLen = parser.EthLen + parser.CWLen + parser.ProgressHdrLen + parser.MaxHoles*parser.HoleLen

// epoch anchors the monotonic nanosecond clock of the stream windows.
var epoch = time.Now()

func mono() int64 { return int64(time.Since(epoch)) }

// contribFlags are the command's flags.
type contribFlags struct {
	coordinator, node, nodeIface, iface string
	coll, acc                           string
	rank, size, root, mtu               int
	job                                 uint64
	count                               uint64
	duration, timeout                   time.Duration
	rxRing                              bool
	progressLane                        string
}

func (f *contribFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.coordinator, "coordinator", "", "the AM's runtime channel URL, e.g. http://10.0.0.1:7000")
	fs.IntVar(&f.rank, "rank", 0, "this rank, 0..size-1")
	fs.IntVar(&f.size, "size", 0, "number of ranks")
	fs.Uint64Var(&f.job, "job", 1, "job ID, the same for every rank of the run (and new for each run)")
	fs.StringVar(&f.node, "node", "", "this host's name in the AM's topology, e.g. h1")
	fs.StringVar(&f.nodeIface, "node-iface", "", "the interface's name in the topology if it differs from --iface")
	fs.StringVar(&f.iface, "iface", "eth0", "interface toward the leaf switch")
	fs.StringVar(&f.coll, "coll", "allreduce", "collective: allreduce or reduce")
	fs.IntVar(&f.root, "root", 0, "reduce: the destination rank")
	fs.StringVar(&f.acc, "acc", "fp32", "accumulator: fp32 (FP32_ARRIVAL) or kulisch (KULISCH_FIXED)")
	fs.Uint64Var(&f.count, "count", 16777216, "FP32 elements per operation")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "run operations back to back until this much time has passed since the first grant (at least one)")
	fs.IntVar(&f.mtu, "mtu", 0, "PRISM MTU: 576, 1500 or 9000 (0: the interface MTU)")
	fs.DurationVar(&f.timeout, "timeout", 0, "operation inactivity bound: an operation without progress for this long fails (0: the AM's default, 5s)")
	// The ring hands over a block of small PROGRESS frames only when it
	// fills or its 1 ms timer expires, which lengthens the round trip that
	// bounds a windowed sender; recvmmsg wakes the reader per batch of
	// whatever arrived, which costs more CPU. Measured in the SINGLE lab
	// on 2 cores (16M FP32, 2 ranks, DATA frames/s per rank, 3 runs each,
	// recvmmsg vs ring): REDUCE FP32 103-138k vs 54-61k, ALLREDUCE FP32
	// 68-82k vs 65-83k, ALLREDUCE KULISCH (the switch busy, the ranks'
	// CPU competing with it) 24-29k vs 28-33k. Transmission is the same
	// port either way.
	fs.BoolVar(&f.rxRing, "rx-ring", false, "read through the TPACKET_V3 ring instead of recvmmsg (fewer wakeups, up to 1 ms longer round trips)")
	// With the ring, PROGRESS (the window's pacing) can take a lane of its
	// own (dataplane.PortOptions.LaneProgress), so it is read when it
	// arrives rather than when its ring block fills or times out. It pays
	// where PROGRESS is all a rank receives: a REDUCE rank other than the
	// root. A rank that receives RESULT fills its ring blocks with them
	// (a block of 12+ frames in well under a millisecond at these rates),
	// so its PROGRESS waits little, and the lane costs: every frame to the
	// rank passes the lane's fanout demux (a classic BPF program), and the
	// lane's reader wakes per PROGRESS, both in the sender's sendmmsg on a
	// veth, that is in the switch's CPU. Measured (SINGLE lab, 16M FP32
	// ALLREDUCE, 2 ranks, lane off vs on interleaved, 4 rounds per run,
	// 2 runs each): 0.794 and 0.811 of forwarding vs 0.710 and 0.757; the
	// switch's kernel time per DATA frame 2323-2391 ns vs 2658-2663 ns;
	// perf on the switch: packet_rcv_fanout + its BPF run 78 ns per frame
	// with the lane. (Earlier sessions measured ALLREDUCE both ways on
	// data paths that have since changed: f1a72f8 off better, a later one
	// on better.) So auto puts PROGRESS on a lane for a REDUCE non-root only.
	fs.StringVar(&f.progressLane, "progress-lane", "auto", "with --rx-ring, read PROGRESS on a recvmmsg socket of its own so the ring's block timeout does not delay it: on, off, or auto (on for a REDUCE rank other than the root, which receives no RESULT)")
}

// wantProgressLane resolves --progress-lane: auto puts PROGRESS on a lane
// for a REDUCE rank other than the root, the one rank that receives no
// RESULT.
func (f *contribFlags) wantProgressLane() bool {
	switch f.progressLane {
	case "on":
		return true
	case "off":
		return false
	}
	return f.coll == "reduce" && f.rank != f.root
}

// check says what is wrong with the flags and how to fix it.
func (f *contribFlags) check() error {
	var errs []string
	if f.coordinator == "" {
		errs = append(errs, "--coordinator is required: the URL 'prismctl am --listen' serves, e.g. http://10.0.0.1:7000")
	}
	if f.node == "" {
		errs = append(errs, "--node is required: this host's name in the AM's topology, e.g. h1")
	}
	if f.size < 1 {
		errs = append(errs, fmt.Sprintf("--size %d: give the number of ranks (>= 1)", f.size))
	} else if f.rank < 0 || f.rank >= f.size {
		errs = append(errs, fmt.Sprintf("--rank %d is outside 0..%d (--size %d)", f.rank, f.size-1, f.size))
	}
	switch f.coll {
	case "allreduce":
	case "reduce":
		if f.size >= 1 && (f.root < 0 || f.root >= f.size) {
			errs = append(errs, fmt.Sprintf("--root %d is outside 0..%d", f.root, f.size-1))
		}
	default:
		errs = append(errs, fmt.Sprintf("--coll %q: use allreduce or reduce", f.coll))
	}
	if f.acc != "fp32" && f.acc != "kulisch" {
		errs = append(errs, fmt.Sprintf("--acc %q: use fp32 (FP32_ARRIVAL) or kulisch (KULISCH_FIXED)", f.acc))
	}
	if f.count < 1 || f.count > math.MaxUint32-1 {
		errs = append(errs, fmt.Sprintf("--count %d: use 1..%d", f.count, uint32(math.MaxUint32-1)))
	}
	if f.mtu != 0 && !parser.IsDefinedMTU(f.mtu) {
		errs = append(errs, fmt.Sprintf("--mtu %d: use 576, 1500 or 9000", f.mtu))
	}
	switch f.progressLane {
	case "auto", "on", "off":
	default:
		errs = append(errs, fmt.Sprintf("--progress-lane %q: use auto, on or off", f.progressLane))
	}
	if f.timeout < 0 || f.timeout > 600*time.Second {
		errs = append(errs, fmt.Sprintf("--timeout %v: use 0 (the AM's default) up to 10m", f.timeout))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n  "))
	}
	return nil
}

// runContribute is the 'contribute' subcommand; it returns the exit status.
func runContribute(args []string) int {
	fs := flag.NewFlagSet("contribute", flag.ContinueOnError)
	var f contribFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismd-blast contribute --coordinator URL --rank R --size N --job J --node H [--iface eth0]\n"+
			"         [--coll allreduce|reduce --root 0] [--acc fp32|kulisch] [--count N] [--duration 5s]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "prismd-blast contribute: unexpected argument %q (flags start with --)\n", fs.Arg(0))
		return 2
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(os.Stderr, "prismd-blast contribute: bad flags:\n  %v\nrun 'prismd-blast contribute -h' for all flags\n", err)
		return 2
	}
	// The port of 'prismd-blast send', so DATA costs the source what the
	// forwarding peer's frames cost it.
	p, err := dataplane.OpenAFPacket(f.iface, dataplane.PortOptions{Batch: batchMax, SocketBuffer: 16 << 20, NoRxRing: !f.rxRing,
		LaneProgress: f.rxRing && f.wantProgressLane()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismd-blast contribute: %v (run as root, inside the rank's namespace, on an existing interface)\n", err)
		return 1
	}
	if f.mtu == 0 {
		f.mtu = p.MTU()
		if !parser.IsDefinedMTU(f.mtu) {
			p.Close()
			fmt.Fprintf(os.Stderr, "prismd-blast contribute: %s has MTU %d, which PRISM does not define; pass --mtu 576, 1500 or 9000\n", f.iface, f.mtu)
			return 2
		}
	}
	c := newContributor(f, p)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var readers sync.WaitGroup
	for _, r := range c.readers {
		readers.Go(func() { c.readLoop(r) })
	}
	runErr := c.run(ctx)
	p.Close() // unblocks the readers (a TPACKET_V3 ring never returns on an idle link)
	readers.Wait()
	fmt.Println(c.summary(runErr == nil))
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "prismd-blast contribute: rank %d: %v\n", f.rank, runErr)
		return 1
	}
	return 0
}

// totals are the run's counters, summed over operations: ops and elements
// over those that completed, the frames and seconds over every one (a
// failed operation's frames reached the switch too).
type totals struct {
	ops, elements                         uint64
	dataFrames, resultFrames, retransmits uint64
	resultDups, txRefused                 uint64
	seconds                               float64
}

// contributor is the running command: the port, the AM client and the
// operation the two goroutines share.
type contributor struct {
	f      contribFlags
	port   dataplane.Port
	mac    [6]byte
	client *am.Client
	// session tells the AM this run's requests from an earlier run's.
	session uint64
	orc     *oracle // for the MTU the AM granted last
	wake    chan struct{}

	// txMu orders DATA on the wire: whoever takes frames from the window
	// (the reader or the sender) holds it until they are sent, so frames
	// leave in Packet ID order and a reordering never looks like a loss.
	// It is taken before mu.
	txMu sync.Mutex
	// mu guards cur and prev, every field of the operations they point to,
	// and readErr.
	mu sync.Mutex
	// cur is the operation the sender is running (nil between operations).
	cur *op
	// prev is the operation finished last: the reader still answers its
	// late RESULT duplicates (our last PROGRESS may have been lost) while
	// the AM completes it.
	prev    *op
	readErr error

	// readers are the ring's and, with a PROGRESS lane, the lane's.
	readers []*reader

	// Sender-only: the batch being sent, and the replay buffers of the
	// last operation that completed.
	tx   [][]byte
	slab []byte

	tot totals
}

// reader is one receive path's goroutine state: its buffers, its PROGRESS
// arena, and what the batch being applied sends: its answers, then the
// DATA it admitted.
type reader struct {
	// read fills frames[:n] (nil: skip), in place in the port's ring when
	// it lends them (valid until release) or copied into bufs.
	read    func() (int, error)
	release func()
	bufs    [][]byte
	sizes   []int
	frames  [][]byte
	parena  []byte
	nprog   int
	pq      [][]byte
}

func newReader(frameSize int) *reader {
	r := &reader{bufs: make([][]byte, batchMax), sizes: make([]int, batchMax), frames: make([][]byte, batchMax),
		// One answer per received frame plus one coalesced answer per
		// operation (cur and prev).
		parena: make([]byte, (batchMax+2)*progressLen), pq: make([][]byte, 0, 2*batchMax+2), release: func() {}}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, frameSize)
	}
	return r
}

// copying makes r read with read, into its own buffers.
func (r *reader) copying(read func(bufs [][]byte, sizes []int) (int, error)) *reader {
	r.read = dataplane.CopyingReader(read, r.bufs, r.sizes, r.frames)
	return r
}

// lending makes r read the frames in place in l's ring: a REDUCE root
// copied every RESULT frame out of it (a tenth of its CPU in perf).
func (r *reader) lending(l dataplane.Lender) *reader {
	r.read = func() (int, error) { return l.ReadLent(r.bufs, r.frames) }
	r.release = l.ReleaseLent
	return r
}

func newContributor(f contribFlags, p dataplane.Port) *contributor {
	c := &contributor{f: f, port: p, mac: p.MAC(), client: am.NewClient(f.coordinator), wake: make(chan struct{}, 1),
		tx: make([][]byte, 0, batchMax), session: am.NewSession()}
	fs := dataplane.FrameSize(max(p.MTU(), f.mtu))
	if l, ok := p.(dataplane.Lender); ok && l.Lends() {
		c.readers = []*reader{newReader(fs).lending(l)}
	} else {
		c.readers = []*reader{newReader(fs).copying(p.ReadBatch)}
	}
	if l, ok := p.(dataplane.Laner); ok && l.HasLane() {
		c.readers = append(c.readers, newReader(fs).copying(l.ReadLane))
	}
	return c
}

// summary is the one machine-readable line the run ends with.
func (c *contributor) summary(ok bool) string {
	t := &c.tot
	fps := 0.0
	if t.seconds > 0 {
		fps = float64(t.dataFrames) / t.seconds
	}
	v := "no"
	if ok {
		v = "yes"
	}
	return fmt.Sprintf("contribute rank=%d coll=%s acc=%s ops=%d elements=%d data_frames=%d result_frames=%d retransmits=%d seconds=%.3f data_fps=%.0f verified=%s result_dups=%d tx_refused=%d kernel_drops=%d",
		c.f.rank, c.f.coll, c.f.acc, t.ops, t.elements, t.dataFrames, t.resultFrames, t.retransmits, t.seconds, fps, v,
		t.resultDups, t.txRefused, c.port.Stats().KernelDrops)
}

// run runs operations until --duration has passed since the first grant,
// then the closing operation.
func (c *contributor) run(ctx context.Context) error {
	var start time.Time
	for seq := uint64(0); ; seq++ {
		stop := seq > 0 && time.Since(start) >= c.f.duration
		g, closing, used, err := c.begin(ctx, seq, stop)
		seq = used
		if err != nil {
			return fmt.Errorf("operation %d (seq %d): begin: %w", c.tot.ops, seq, err)
		}
		if seq == 0 {
			start = time.Now()
		}
		if err := c.runOp(ctx, g); err != nil {
			return err
		}
		if closing {
			return nil
		}
	}
}

// request is this rank's barrier request for invocation seq: the run's
// operation, or the closing one.
func (c *contributor) request(seq uint64, closing bool) am.BeginRequest {
	n := uint32(c.f.count)
	if closing {
		n = closingLen(n)
	}
	return am.BeginRequest{Job: c.f.job, Seq: seq, Rank: c.f.rank, Size: c.f.size, Collective: c.f.coll, RootRank: c.f.root,
		InputFormat: "fp32", AccPolicy: c.f.acc, VectorLen: n, MTU: c.f.mtu, TimeoutMS: uint32(c.f.timeout / time.Millisecond),
		Node: c.f.node, Iface: c.f.nodeIface, MAC: net.HardwareAddr(c.mac[:]).String(), Session: c.session}
}

// closingLen is the closing operation's vector length: one element, or two
// when the run's own operations have one, so the two never look alike.
func closingLen(count uint32) uint32 {
	if count == 1 {
		return 2
	}
	return 1
}

// begin meets the other ranks at invocation seq. A rank that wants to stop
// asks for the closing operation, one that wants to go on for another of
// the run's. If they disagree, the AM fails invocation seq for every rank
// with "mismatch" (protocol 9.1), so every rank knows that one of them
// wanted to stop, and all of them meet again at seq+1 for the closing
// operation. So every rank runs the same operations, whichever way their
// clocks fall, and none waits at a barrier the others never reach. It
// reports whether the operation granted is the closing one, and the
// invocation it used.
func (c *contributor) begin(ctx context.Context, seq uint64, stop bool) (*am.Grant, bool, uint64, error) {
	bctx, cancel := context.WithTimeout(ctx, beginWait)
	defer cancel()
	g, err := c.client.Begin(bctx, c.request(seq, stop))
	var ae *am.APIError
	if seq > 0 && errors.As(err, &ae) && ae.Code == am.CodeMismatch {
		seq, stop = seq+1, true
		g, err = c.client.Begin(bctx, c.request(seq, stop))
	}
	if err != nil && bctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("no grant after %v: is the AM at %s stuck? (%w)", beginWait, c.f.coordinator, err)
	}
	return g, stop, seq, err
}

// runOp runs one granted operation and reports it to the AM.
func (c *contributor) runOp(ctx context.Context, g *am.Grant) error {
	t0 := time.Now()
	o, err := c.newOp(g)
	if err != nil {
		return fmt.Errorf("op %s: %w%s", g.ID, err, c.report(g, err))
	}
	c.mu.Lock()
	c.cur = o
	c.mu.Unlock()
	runErr := c.sendLoop(ctx, o)
	el := time.Since(t0)
	c.mu.Lock()
	o.done = true
	c.cur, c.prev = nil, o
	rt, _ := o.sw.Stats()
	t := &c.tot
	if runErr == nil {
		t.ops++
		t.elements += uint64(o.n)
	}
	t.dataFrames += o.frames
	t.resultFrames += o.results
	t.retransmits += rt
	t.resultDups += o.dups
	t.txRefused += o.refused
	t.seconds += el.Seconds()
	if runErr == nil {
		// Every DATA frame is acknowledged; the reader only answers the
		// operation's late RESULT: the replay buffers serve the next one.
		c.slab = o.sw.Buffer()
	}
	c.mu.Unlock()
	if runErr == nil {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.client.Done(dctx, g.ID, am.DoneRequest{Rank: c.f.rank, OK: true})
		cancel()
		if err != nil {
			return fmt.Errorf("op %s: reporting completion to the AM: %w", g.ID, err)
		}
		return nil
	}
	return fmt.Errorf("op %s %s: %w%s", g.ID, c.f.coll, runErr, c.report(g, runErr))
}

// report tells the AM that the operation failed and returns its diagnosis
// (which node, which rank) for the error message.
func (c *contributor) report(g *am.Grant, err error) string {
	dctx, cancel := context.WithTimeout(context.Background(), time.Duration(g.TimeoutMS)*time.Millisecond+15*time.Second)
	defer cancel()
	s, derr := c.client.Done(dctx, g.ID, am.DoneRequest{Rank: c.f.rank, OK: false, Error: err.Error(), Wait: true})
	switch {
	case derr != nil:
		return "; could not report the failure to the AM: " + derr.Error()
	case s.Error != nil:
		return "; AM: " + s.Error.Message
	}
	return ""
}

// op is one granted operation; the reader and the sender change it only
// under contributor.mu.
type op struct {
	g       *am.Grant
	key     parser.OpKey
	leafMAC [6]byte
	n       uint32 // vector length
	per     uint32 // elements per full DATA frame
	mtu     int
	orc     *oracle
	sw      *stream.SendWindow
	rw      *stream.RecvWindow // nil: this rank receives no RESULT
	// hdr is a full DATA frame's header and group descriptor; a frame is
	// hdr with its Packet ID and First patched, then the template.
	hdr  []byte
	next uint32 // next element to send

	lastResult     int64 // when RESULT last moved (or the grant)
	resultDeadline int64 // RESULT inactivity bound (ns)

	err  error // the reader's verdict: the operation failed
	done bool  // finished: the reader only answers late RESULT

	frames, results, dups, refused uint64
	ackPID                         uint32 // newest in-order RESULT not yet answered (0: none)

	// Scratch reused by every frame: as locals they would escape.
	holes  [parser.MaxHoles]stream.Hole
	fields parser.DataFields
	b      parser.DataBuilder
	pin    parser.Progress
	pout   parser.Progress
	din    parser.Data
	conv   []byte // RESULT groups converted to FP32 (not FP32 on the wire)
}

// newOp builds a granted operation's windows, templates and oracle.
func (c *contributor) newOp(g *am.Grant) (*op, error) {
	if g.InputFormat != "fp32" {
		return nil, fmt.Errorf("the AM granted input format %q; this generator sends fp32 only", g.InputFormat)
	}
	if !parser.IsDefinedMTU(g.MTU) {
		return nil, fmt.Errorf("the AM granted MTU %d", g.MTU)
	}
	o := &op{g: g, n: g.VectorLen, mtu: g.MTU,
		key: parser.OpKey{Job: g.Op.Job, Group: g.Op.Group, GroupGen: g.Op.GroupGen, Op: g.Op.OpID, OpGen: g.Op.OpGen}}
	mac, err := net.ParseMAC(g.LeafMAC)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("the grant has a bad leaf MAC %q", g.LeafMAC)
	}
	copy(o.leafMAC[:], mac)
	o.per = uint32(min(parser.MaxPacketElements(g.MTU)/4, 0xFFFF))
	if c.orc == nil || c.orc.per != int(o.per) {
		if c.orc, err = newOracle(c.f.rank, c.f.size, int(o.per)); err != nil {
			return nil, err
		}
	}
	o.orc = c.orc
	timeout := time.Duration(g.TimeoutMS) * time.Millisecond
	o.sw = stream.NewSendWindow(stream.SendConfig{
		Name:        fmt.Sprintf("op %s rank %d DATA stream %d to %s", g.ID, g.Rank, g.Data.StreamID, g.Leaf),
		ReplayDepth: int(g.Window.ReplayDepth), FrameSize: parser.EthLen + g.MTU,
		Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
		Deadline: int64(timeout), RTO: rankRTO, MaxRTO: 10 * rankRTO,
		Buffer: c.slab, // the last operation's, as package host does
	})
	c.slab = nil
	if g.Result != nil {
		o.rw = stream.NewRecvWindow(stream.RecvConfig{
			Name: fmt.Sprintf("op %s rank %d RESULT path %d", g.ID, g.Rank, g.Result.StreamID), VectorLen: g.VectorLen,
			Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
			MaxFrame: parser.EthLen + g.MTU,
		})
	}
	// As package host: the switches' own contributor timeout plus a
	// margin, so the AM's diagnosis already names the node that failed.
	o.resultDeadline = int64(timeout + time.Second)
	o.lastResult = mono()
	o.fields = parser.DataFields{Eth: parser.Eth{Dst: o.leafMAC, Src: c.mac}, Class: parser.ClassData, Op: o.key,
		SrcEP: g.Data.SrcEndpoint, DstEP: g.Data.DstEndpoint, Stream: g.Data.StreamID}
	// The full-frame header: Packet ID, First and Flags are patched per frame.
	buf := make([]byte, parser.EthLen+g.MTU)
	if err := o.b.Reset(buf, &o.fields, nil, g.MTU); err != nil {
		return nil, err
	}
	if _, err := o.b.AddGroup(parser.FormatFP32, 0, int(o.per)); err != nil {
		return nil, err
	}
	o.b.Finish()
	o.hdr = buf[:parser.DataBodyOff+parser.GroupDescLen]
	return o, nil
}

// sendLoop sends the operation's DATA, batch by batch, until it completed
// or failed.
func (c *contributor) sendLoop(ctx context.Context, o *op) error {
	// Retransmission timers and deadlines. A quarter of the host library's
	// 40 ms least RTO is fine grained enough; a 1 ms ticker woke the
	// sender a thousand times a second and cost the generator 5-10% of its
	// CPU in part 3 of make bench (3 A/B pairs, rate unchanged).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		c.txMu.Lock()
		c.mu.Lock()
		batch, done, err := o.step(mono(), c.tx[:0])
		if err == nil && c.readErr != nil {
			err = c.readErr
		}
		c.mu.Unlock()
		refused := false
		if len(batch) > 0 {
			var werr error
			if refused, werr = c.write(o, batch); werr != nil && err == nil {
				err = werr
			}
			clear(batch) // no reference to a replay buffer outlives the send
		}
		c.txMu.Unlock()
		if refused {
			time.Sleep(50 * time.Microsecond) // let the device queue drain
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if len(batch) == cap(batch) {
			continue // the window may admit more right away
		}
		select {
		case <-c.wake:
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("cancelled: %w", ctx.Err())
		}
	}
}

// write sends a batch of DATA. The port skips a frame the kernel refuses
// (ENOBUFS: the device queue is full) and sends the rest, so a refused
// frame is lost like one dropped on the wire and the window resends it
// when a later frame's PROGRESS shows the gap; refused tells the caller to
// back off so the queue drains meanwhile.
func (c *contributor) write(o *op, batch [][]byte) (refused bool, err error) {
	n, err := c.port.WriteBatch(batch)
	if err == nil {
		return false, nil
	}
	switch {
	case errors.Is(err, net.ErrClosed):
		return false, fmt.Errorf("sending on %s: %w", c.f.iface, err)
	case errors.Is(err, syscall.ENETDOWN) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV):
		return false, fmt.Errorf("sending on %s: the interface is down or gone: %w", c.f.iface, err)
	}
	c.mu.Lock()
	o.refused += uint64(len(batch) - n)
	c.mu.Unlock()
	return true, nil
}

// step fills batch with what the window admits (new DATA, then
// retransmissions) and checks completion and the deadlines. It allocates
// nothing.
func (o *op) step(now int64, batch [][]byte) ([][]byte, bool, error) {
	if o.err != nil {
		return batch, false, o.err
	}
	batch = o.sendData(now, batch)
	for len(batch) < cap(batch) {
		f, ok := o.sw.NextRetransmit(now)
		if !ok {
			break
		}
		f[parser.HdrOff+33] |= parser.FlagRetransmit
		batch = append(batch, f)
	}
	resDone := o.rw == nil || o.rw.Done()
	if o.next == o.n && o.sw.Idle() && resDone {
		return batch, true, nil
	}
	if err := o.sw.Check(now); err != nil {
		return batch, false, fmt.Errorf("leaf %s did not acknowledge DATA: %w", o.g.Leaf, err)
	}
	if !resDone && now-o.lastResult > o.resultDeadline {
		return batch, false, fmt.Errorf("RESULT stream %d from leaf %s silent for %v: missing elements [%d, %d) of %d",
			o.g.Result.StreamID, o.g.Leaf, time.Duration(now-o.lastResult).Round(time.Millisecond), o.rw.Committed(), o.n, o.n)
	}
	return batch, false, nil
}

// sendData encodes new DATA into the window's replay buffers while it
// admits more and the batch has room: a header patch and one copy of the
// payload template per frame (the DataBuilder only for the last frame,
// which is shorter or carries LAST).
func (o *op) sendData(now int64, batch [][]byte) [][]byte {
	for o.next < o.n && len(batch) < cap(batch) {
		cnt := min(o.per, o.n-o.next)
		size := parser.DataBodyOff + parser.GroupDescLen + 4*int(cnt)
		buf, pid, ok := o.sw.Reserve(now, o.next, cnt, size)
		if !ok {
			break
		}
		if o.next+cnt < o.n {
			copy(buf, o.hdr)
			h := parser.DataHeader(buf[parser.HdrOff:parser.DataBodyOff])
			h.SetPacketID(pid)
			h.SetFirst(o.next)
			copy(buf[len(o.hdr):size], o.orc.tmpl)
		} else {
			o.fields.PacketID, o.fields.First, o.fields.Flags = pid, o.next, parser.FlagLast
			// Cannot fail: the header fitted the same MTU in newOp and
			// cnt is at most a full frame's.
			_ = o.b.Reset(buf, &o.fields, nil, o.mtu)
			slot, _ := o.b.AddGroup(parser.FormatFP32, 0, int(cnt))
			copy(slot, o.orc.tmpl)
			size = len(o.b.Finish())
		}
		batch = append(batch, o.sw.Commit(now, size))
		o.frames++
		o.next += cnt
	}
	return batch
}

// maxReadErrs bounds consecutive unexplained read errors (1 ms apart)
// before the reader gives up.
const maxReadErrs = 1000

// readLoop applies received frames a batch at a time until the port is
// closed: PROGRESS to the DATA window, RESULT to the RESULT window and the
// oracle, then sends the batch's PROGRESS answers and wakes the sender.
func (c *contributor) readLoop(r *reader) {
	defer r.release()
	errs := 0
	for {
		n, err := r.read()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errs++; errs < maxReadErrs && !errors.Is(err, syscall.ENETDOWN) && !errors.Is(err, syscall.ENODEV) {
				time.Sleep(time.Millisecond)
				continue
			}
			c.mu.Lock()
			c.readErr = fmt.Errorf("reading %s: %w", c.f.iface, err)
			c.mu.Unlock()
			c.kick()
			return
		}
		errs = 0
		now := mono()
		c.mu.Lock()
		r.pq, r.nprog = r.pq[:0], 0
		wake := false
		for i := 0; i < n; i++ {
			f := r.frames[i]
			if len(f) < parser.HdrOff+parser.OpIDLen {
				continue
			}
			if binary.BigEndian.Uint16(f[12:]) != parser.EtherType {
				continue
			}
			key, _ := parser.PeekOpKey(f[parser.EthLen:])
			o := c.cur
			if o == nil || o.key != key {
				if o = c.prev; o == nil || o.key != key {
					continue
				}
			}
			w, err := c.handle(r, o, now, f)
			wake = wake || w
			if err != nil && !o.done && o.err == nil {
				o.err, wake = err, true
			}
		}
		for _, o := range [2]*op{c.cur, c.prev} {
			if o != nil && o.ackPID != 0 {
				c.progress(r, o, o.ackPID, parser.ProgressStatusOK)
			}
		}
		o := c.cur
		send := wake && o != nil && o.err == nil
		c.mu.Unlock()
		if send {
			// Send what the batch just admitted from here: handing it
			// to the sender cost a thread wakeup per batch, measured as
			// the generator's largest cost (REDUCE FP32: 83k -> 143k
			// DATA frames/s per rank).
			c.txMu.Lock()
			c.mu.Lock()
			if c.cur == o && o.err == nil { // the sender may have ended it meanwhile
				d, done, err := o.step(mono(), r.pq[len(r.pq):len(r.pq):len(r.pq)+batchMax])
				r.pq = r.pq[:len(r.pq)+len(d)]
				o.err = err
				wake = done || err != nil
			}
			c.mu.Unlock()
		}
		if len(r.pq) > 0 {
			// A lost answer is like a lost PROGRESS: the leaf resends
			// the RESULT and we answer again. A refused DATA frame is
			// resent by the window (see write).
			if n, err := c.port.WriteBatch(r.pq); err != nil && n < len(r.pq) {
				c.mu.Lock()
				if c.cur != nil {
					c.cur.refused += uint64(len(r.pq) - n)
				}
				c.mu.Unlock()
			}
			clear(r.pq) // no reference to a replay buffer outlives the send
		}
		if send {
			c.txMu.Unlock()
		}
		if wake {
			c.kick()
		}
	}
}

// kick wakes the sender without blocking (one pending wakeup is enough).
func (c *contributor) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// handle applies one received frame of o, as package host does; wake says
// the sender has something new to look at (credit, acknowledgements, the
// RESULT completed).
func (c *contributor) handle(r *reader, o *op, now int64, f []byte) (wake bool, err error) {
	g := o.g
	switch parser.Class(f[parser.CWOff+1]) {
	case parser.ClassProgress:
		p := &o.pin
		if err := p.Decode(f, parser.Limits{VectorLen: g.VectorLen}); err != nil {
			return false, nil // a broken PROGRESS is like a lost one
		}
		if p.Flags&parser.ProgressFlagResult != 0 || p.Stream != g.Data.StreamID || p.DstEP != g.Data.SrcEndpoint {
			return false, nil
		}
		switch p.Status {
		case parser.ProgressStatusFailed:
			return true, fmt.Errorf("leaf %s reports the operation FAILED", g.Leaf)
		case parser.ProgressStatusUnknownOperation:
			return true, fmt.Errorf("leaf %s does not know the operation (aborted?)", g.Leaf)
		case parser.ProgressStatusInvalid:
			return true, fmt.Errorf("leaf %s rejected DATA packet %d as invalid", g.Leaf, p.PacketID)
		}
		o.sw.ApplyProgress(now, p, &o.holes)
		return true, nil
	case parser.ClassResult:
		if o.rw == nil {
			return false, nil
		}
		d := &o.din
		if err := d.Decode(f, parser.Limits{VectorLen: g.VectorLen, KulischBytes: g.KulischWidth / 8, MTU: g.MTU}); err != nil {
			return false, nil
		}
		if d.Stream != g.Result.StreamID || d.DstEP != g.Result.DstEndpoint {
			return false, nil
		}
		if d.Flags&parser.FlagInexact != 0 {
			return true, fmt.Errorf("RESULT stream %d elements [%d, %d): the switch reports ACCUMULATION_INEXACT, "+
				"but every sum of this data is exact in FP32", g.Result.StreamID, d.First, d.First+uint32(d.Count))
		}
		status := parser.ProgressStatusOK
		switch o.rw.Admit(d.PacketID, d.First, uint32(d.Count), len(f), stream.Hash(d.Body)) {
		case stream.Accepted:
			if err := o.verify(d); err != nil {
				return true, fmt.Errorf("RESULT stream %d packet %d elements [%d, %d): %w",
					g.Result.StreamID, d.PacketID, d.First, d.First+uint32(d.Count), err)
			}
			o.results++
			o.rw.Release(o.rw.Committed())
			o.lastResult = now
			if o.rw.Pending() == 0 && !o.rw.Done() {
				// In order: one coalesced PROGRESS after the batch,
				// naming the newest frame, answers them all; an
				// out-of-order frame is answered at once.
				o.ackPID = d.PacketID
				return false, nil
			}
			wake = o.rw.Done()
		case stream.Duplicate:
			status = parser.ProgressStatusDuplicate
			o.dups++
		case stream.Invalid:
			status = parser.ProgressStatusInvalid
		case stream.NoCredit:
			status = parser.ProgressStatusNoCredit
		}
		c.progress(r, o, d.PacketID, status)
		return wake, nil
	}
	return false, nil
}

// verify checks every group of an accepted RESULT against the oracle.
func (o *op) verify(d *parser.Data) error {
	var it parser.GroupIter
	for {
		grp, ok := d.NextGroup(&it)
		if !ok {
			return nil
		}
		vals := grp.Values
		if grp.Format != parser.FormatFP32 {
			var err error
			if vals, err = o.convert(grp); err != nil {
				return err
			}
		}
		if err := o.orc.check(grp.First, vals); err != nil {
			return err
		}
	}
}

// convert turns a RESULT group in another format (a Kulisch or AUTO
// output) into FP32 the way package host does, with host's own converter.
// The AM grants FP32 RESULT for FP32 input, so this is the rare path and
// may allocate.
func (o *op) convert(grp parser.Group) ([]byte, error) {
	if n := 4 * int(grp.Count); cap(o.conv) < n {
		o.conv = make([]byte, n)
	} else {
		o.conv = o.conv[:n]
	}
	if err := host.ConvertGroup(o.conv, parser.FormatFP32, grp, o.g.KulischWidth); err != nil {
		return nil, fmt.Errorf("RESULT group of %v: %w", grp.Format, err)
	}
	return o.conv, nil
}

// progress queues the PROGRESS answering RESULT frame pid (and every
// in-order frame before it).
func (c *contributor) progress(r *reader, o *op, pid uint32, status parser.ProgressStatus) {
	o.ackPID = 0
	if r.nprog == batchMax+2 {
		return // cannot happen: one answer per frame plus two
	}
	g := o.g
	ic, bc := o.rw.Credits()
	p := &o.pout
	*p = parser.Progress{Op: o.key, SrcEP: g.Result.DstEndpoint, DstEP: g.Result.SrcEndpoint, Stream: g.Result.StreamID,
		PacketID: pid, Committed: o.rw.Committed(), IntervalCredits: uint16(min(ic, 0xFFFF)), ByteCredits: bc,
		Status: status, Flags: parser.ProgressFlagResult}
	if o.rw.Done() {
		p.Flags |= parser.ProgressFlagComplete
	}
	p.NHoles = o.rw.Holes(o.holes[:])
	for i := 0; i < p.NHoles; i++ {
		p.Holes[i] = parser.Hole{Start: o.holes[i].Start, End: o.holes[i].End}
	}
	buf := r.parena[r.nprog*progressLen : (r.nprog+1)*progressLen]
	n, err := p.Encode(buf, parser.Eth{Dst: o.leafMAC, Src: c.mac})
	if err != nil {
		return // cannot happen: the buffer holds the largest PROGRESS
	}
	r.nprog++
	r.pq = append(r.pq, buf[:n])
}
