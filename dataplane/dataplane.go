// This file owns the Dataplane: the port set, the RX goroutines and the L2
// forwarding / classification of every received frame.

package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prismd/prismd/parser"
)

// Defaults for Options.
const (
	DefaultMACAging = 300 * time.Second // IEEE 802.1D default ageing time
	// DefaultBatch is the RX/TX batch: 128 frames amortize one sendmmsg (and
	// one ring walk) over ~190 KiB at MTU 1500, still within L2 cache; 64
	// spent measurably more per frame in system call entry on the forwarding
	// benchmark, and a worker's 256-slot SPSC ring still holds two full batches.
	DefaultBatch = 128
	// DefaultMACTableSize holds 32768 stations at half load.
	DefaultMACTableSize = 65536
	// maxRxErrors bounds consecutive non-close read errors before an RX
	// goroutine gives up on its port.
	maxRxErrors = 100
)

// Options configure New. Zero fields mean defaults.
type Options struct {
	// Workers is the number of engine workers (goroutines calling Handler); default 1.
	Workers int
	// Handler builds one Handler per worker; nil uses a built-in handler that
	// counts every local PRISM frame as drop reason "unsupported".
	Handler HandlerFactory
	// MACAging is how long a learned MAC stays valid without traffic; default 300s.
	MACAging time.Duration
	// NodeMAC is an extra local MAC for PRISM besides the port MACs; nil for none.
	NodeMAC *[6]byte
	// Batch is the frames per RX/TX system call; default DefaultBatch.
	Batch int
	// MACTableSize is the slot count of the MAC table (rounded up to a power of two).
	MACTableSize int
	// Clock returns monotonic nanoseconds; nil uses the process monotonic clock. For tests.
	Clock func() int64
	// Logger receives port errors; nil uses slog.Default().
	Logger *slog.Logger
	// NoInline makes every local PRISM frame wait for its worker goroutine.
	// By default an RX goroutine that hands frames to a worker nobody is
	// running runs that worker's handler itself (see runInline), which
	// saves a thread wakeup per batch; with a core for every port and
	// every worker, handing off keeps receiving and aggregating in
	// parallel instead.
	NoInline bool
	// NoLend makes every port copy received frames out of its receive
	// ring even when it could lend them in place (Lender): for tests and
	// A/B measurements.
	NoLend bool
}

// portState is one port inside the dataplane. It outlives port-set changes
// that keep the port; its index may change.
type portState struct {
	port  Port
	index atomic.Int32
	mac   uint64 // macKey of port MAC
	// hw is the port's MAC as Sender.PortMAC returns it, read once: the
	// engine stamps it on every RESULT and PROGRESS, and asking the Port
	// (an interface call on to the socket) each time was 9 ns per frame.
	hw        [6]byte
	frameSize int
	ctr       portCounters
	rings     []*spscRing // one per worker
	// prodMu makes the port's two receive loops (rxLoop and laneLoop) take
	// turns as the rings' one producer. A loop takes it only for a batch
	// that hands frames over (rx.lockProd), so it is uncontended but when
	// the lane and the ring both carry PRISM frames, as when the lane
	// takes every frame (PortOptions.SparseFPS) or CONTROL arrives.
	prodMu sync.Mutex
	done   chan struct{}
	// laneDone is closed when the port's lane loop has stopped (at once
	// for a port without a lane).
	laneDone chan struct{}
	// d is the dataplane, for forgetStations.
	d *Dataplane
	// linkDown is set when a send to the port failed for its link
	// (ErrLinkDown) and its stations were forgotten, and cleared by the
	// next batch the port sends or receives: one flush per outage.
	linkDown atomic.Bool
	// past holds the counts of the ports of the same name this one
	// replaced (an interface reopened: re-created, or its MTU changed),
	// which its own continue: Prometheus counters must not go back to 0
	// while prismd runs, nor a port's drop history vanish.
	past atomic.Pointer[portPast]
}

// portPast is what a port's counts continue: the port it replaced, while
// that one still runs, then that port's final counts. One pointer, so a
// Stats never counts the old port twice or not at all.
type portPast struct {
	running *portState
	final   *PortSample
}

// snapshot is the immutable port set; RX goroutines and workers load it once
// per batch.
type snapshot struct {
	ports []*portState
	local []uint64 // macKeys of every local MAC (ports + node)
	aging uint32   // seconds
	// mixedMTU: the ports' MTUs differ, so a bridged frame may be too
	// long for its egress port (DropTxOversize); with one MTU the read
	// buffer's limit already is the egress limit.
	mixedMTU bool
}

func (s *snapshot) port(i int) *portState {
	if i < 0 || i >= len(s.ports) {
		return nil
	}
	return s.ports[i]
}

func (s *snapshot) isLocal(key uint64) bool {
	for _, l := range s.local {
		if l == key {
			return true
		}
	}
	return false
}

// Dataplane is a running switch. Its methods are safe for concurrent use.
type Dataplane struct {
	opts  Options
	log   *slog.Logger
	start time.Time
	snap  atomic.Pointer[snapshot]
	table atomic.Pointer[macTable]
	// pastClasses are the frame classes of ports removed for good
	// (Stats.Classes must not go back when a port goes).
	pastClasses [numFrameClasses]atomic.Uint64
	workers     []*worker
	links       links // SetLinkState

	mu      sync.Mutex // serializes configuration changes
	nodeMAC *[6]byte
	aging   time.Duration
	closed  bool
	quit    chan struct{}
	wg      sync.WaitGroup
}

// ErrClosed is returned by methods of a closed Dataplane.
var ErrClosed = errors.New("dataplane: closed")

// New starts a Dataplane with no ports and its workers.
func New(opts Options) (*Dataplane, error) {
	if opts.Workers < 0 || opts.Workers > 1024 {
		return nil, fmt.Errorf("dataplane: workers = %d, want 1..1024", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = 1
	}
	if opts.MACAging < 0 {
		return nil, fmt.Errorf("dataplane: negative MAC aging %v", opts.MACAging)
	}
	if opts.MACAging == 0 {
		opts.MACAging = DefaultMACAging
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.MACTableSize <= 0 {
		opts.MACTableSize = DefaultMACTableSize
	}
	d := &Dataplane{opts: opts, log: opts.Logger, start: time.Now(), quit: make(chan struct{}),
		nodeMAC: opts.NodeMAC, aging: opts.MACAging}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.table.Store(newMACTable(opts.MACTableSize))
	d.snap.Store(d.buildSnapshot(nil))
	factory := opts.Handler
	if factory == nil {
		factory = func(int, int) Handler { return unsupported{d} }
	}
	for w := 0; w < opts.Workers; w++ {
		wk := newWorker(d, w, factory(w, opts.Workers))
		d.workers = append(d.workers, wk)
	}
	for _, wk := range d.workers {
		d.wg.Add(1)
		go wk.run()
	}
	d.wg.Add(1)
	go d.sweeper()
	return d, nil
}

// Now returns the dataplane's monotonic clock in nanoseconds.
func (d *Dataplane) Now() int64 {
	if d.opts.Clock != nil {
		return d.opts.Clock()
	}
	return int64(time.Since(d.start))
}

func (d *Dataplane) buildSnapshot(ports []*portState) *snapshot {
	s := &snapshot{ports: ports, aging: uint32((d.aging + time.Second - 1) / time.Second)}
	for _, p := range ports {
		if p.frameSize != ports[0].frameSize {
			s.mixedMTU = true
		}
		if p.mac != macKey(make([]byte, 6)) {
			s.local = append(s.local, p.mac)
		}
	}
	if d.nodeMAC != nil {
		s.local = append(s.local, macKey(d.nodeMAC[:]))
	}
	return s
}

// SetPorts makes ports the port set, in index order. Ports already running
// (the same Port value) keep running; ports no longer listed are closed;
// new ports start. The MAC table is flushed when an index changes.
func (d *Dataplane) SetPorts(ports []Port) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	old := d.snap.Load()
	byPort := make(map[Port]*portState, len(old.ports))
	oldIndex := make(map[*portState]int, len(old.ports))
	for i, ps := range old.ports {
		byPort[ps.port] = ps
		oldIndex[ps] = i
	}
	seen := make(map[Port]bool, len(ports))
	next := make([]*portState, 0, len(ports))
	var started []*portState
	flush := false
	for i, p := range ports {
		if seen[p] {
			return fmt.Errorf("dataplane: port %q listed twice", p.Name())
		}
		seen[p] = true
		ps := byPort[p]
		if ps == nil {
			ps = d.newPortState(p)
			started = append(started, ps)
		} else if int(ps.index.Load()) != i {
			flush = true
		}
		ps.index.Store(int32(i))
		next = append(next, ps)
	}
	var stopped []*portState
	for _, ps := range old.ports {
		if !seen[ps.port] {
			stopped = append(stopped, ps)
			flush = true
		}
	}
	heir := map[*portState]*portState{} // a stopped port -> the started one of its name
	for _, ps := range stopped {
		for _, n := range started {
			if n.port.Name() == ps.port.Name() && n.past.Load() == nil {
				n.past.Store(&portPast{running: ps})
				heir[ps] = n
				break
			}
		}
	}
	d.snap.Store(d.buildSnapshot(next))
	if flush {
		d.table.Store(d.remapTable(next, oldIndex))
	}
	for _, ps := range started {
		d.wg.Add(1)
		go d.rxLoop(ps)
		if l := laneOf(ps.port); l != nil {
			d.wg.Add(1)
			go d.laneLoop(ps, l)
		} else {
			close(ps.laneDone)
		}
	}
	for _, ps := range stopped {
		_ = ps.port.Close()
		<-ps.done
		<-ps.laneDone
		final := d.sample(ps)
		if n := heir[ps]; n != nil {
			n.past.Store(&portPast{final: &final})
		} else {
			for c, v := range final.classes {
				d.pastClasses[c].Add(v)
			}
		}
	}
	return nil
}

func (d *Dataplane) newPortState(p Port) *portState {
	m := p.MAC()
	ps := &portState{port: p, mac: macKey(m[:]), hw: m, frameSize: FrameSize(p.MTU()), done: make(chan struct{}),
		laneDone: make(chan struct{}), d: d}
	ps.rings = make([]*spscRing, len(d.workers))
	for w := range ps.rings {
		ps.rings[w] = newRing(ps.frameSize)
	}
	return ps
}

// remapTable is the MAC table after the port set changed: the stations
// learned on ports that stay, at those ports' new indices and with their
// ages; those of removed ports are forgotten. The table holds port
// indices, and a reload that removed one port used to flush every station
// (flooding until each was heard again). Entries learned by the RX loops
// while this runs may be missed, which costs a flood, never a wrong port.
func (d *Dataplane) remapTable(next []*portState, oldIndex map[*portState]int) *macTable {
	remap := make(map[int]int, len(next))
	for i, ps := range next {
		if j, ok := oldIndex[ps]; ok {
			remap[j] = i
		}
	}
	return d.movedTable(d.table.Load(), func(port int) (int, bool) { i, ok := remap[port]; return i, ok })
}

// movedTable is a new MAC table with tab's live stations, each at the port
// move gives for its old one (ok false: forgotten), ages kept: a port set
// that changed (remapTable), a port whose link went down (forgetStations).
func (d *Dataplane) movedTable(tab *macTable, move func(port int) (int, bool)) *macTable {
	nt := newMACTable(d.opts.MACTableSize)
	tab.each(d.nowSec(), d.snap.Load().aging, func(key uint64, port int, seen uint32) {
		if i, ok := move(port); ok {
			nt.learn(key, i, seen)
		}
	})
	return nt
}

// SetMACAging changes the aging time (takes effect at once).
func (d *Dataplane) SetMACAging(a time.Duration) {
	if a <= 0 {
		a = DefaultMACAging
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aging = a
	d.snap.Store(d.buildSnapshot(d.snap.Load().ports))
}

// SetNodeMAC changes the extra local PRISM MAC (nil for none).
func (d *Dataplane) SetNodeMAC(m *[6]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodeMAC = m
	d.snap.Store(d.buildSnapshot(d.snap.Load().ports))
}

// Ports returns the current port set in index order.
func (d *Dataplane) Ports() []Port {
	s := d.snap.Load()
	out := make([]Port, len(s.ports))
	for i, ps := range s.ports {
		out[i] = ps.port
	}
	return out
}

// Close closes every port, stops the RX goroutines and workers (flushing
// their TX batches) and waits for them.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	ports := d.snap.Load().ports
	for _, ps := range ports {
		_ = ps.port.Close()
	}
	for _, ps := range ports {
		<-ps.done
		<-ps.laneDone
	}
	close(d.quit)
	d.mu.Unlock()
	d.wg.Wait()
	return nil
}

// Stats snapshots every counter.
func (d *Dataplane) Stats() Stats {
	s := d.snap.Load()
	var st Stats
	for c := range st.Classes {
		st.Classes[c] = d.pastClasses[c].Load()
	}
	for _, ps := range s.ports {
		ps2 := d.sample(ps)
		for c, v := range ps2.classes {
			st.Classes[c] += v
		}
		st.Ports = append(st.Ports, ps2)
	}
	tab := d.table.Load()
	st.MACEntries, _ = tab.live(d.nowSec(), s.aging)
	st.MACCapacity = int(tab.limit)
	return st
}

func (d *Dataplane) nowSec() uint32 { return uint32(d.Now() / int64(time.Second)) }

// sample is ps's counts, continuing those of the ports it replaced.
func (d *Dataplane) sample(ps *portState) PortSample {
	ks := ps.port.Stats()
	ps2 := PortSample{Name: ps.port.Name(), KernelDrops: ks.KernelDrops,
		RxFrames: ps.ctr.rxFrames.Load(), RxBytes: ps.ctr.rxBytes.Load(),
		TxFrames: ps.ctr.txFrames.Load(), TxBytes: ps.ctr.txBytes.Load(), RingWaits: ps.ctr.ringWaits.Load(),
		Unlearned: ps.ctr.unlearned.Load(), Moved: ps.ctr.moved.Load()}
	for r := range ps2.Drops {
		ps2.Drops[r] = ps.ctr.drops[r].Load() + ks.Drops[r]
	}
	ps2.Drops[DropOversize] += ks.Oversize
	ps2.Fault = ks.Fault
	ps2.LaneTuned, ps2.LaneAll, ps2.LaneSwitches = ks.LaneTuned, ks.LaneAll, ks.LaneSwitches
	ps2.Checksum, ps2.RingHeld = ks.Checksum, ks.RingHeld
	ps2.Link, ps2.LinkChanges = d.linkOf(ps2.Name)
	for c := range ps2.classes {
		ps2.classes[c] = ps.ctr.classes[c].Load()
	}
	if p := ps.past.Load(); p != nil {
		if p.final != nil {
			ps2.add(p.final)
		} else {
			old := d.sample(p.running)
			ps2.add(&old)
		}
	}
	return ps2
}

// sweeper rebuilds the MAC table without aged entries, RCU-style.
func (d *Dataplane) sweeper() {
	defer d.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.quit:
			return
		case <-t.C:
			d.sweep()
		}
	}
}

func (d *Dataplane) sweep() {
	s := d.snap.Load()
	tab := d.table.Load()
	now := d.nowSec()
	if _, expired := tab.live(now, s.aging); expired || tab.used.Load() >= tab.limit {
		d.table.CompareAndSwap(tab, tab.rebuilt(now, s.aging))
	}
}

// rx is the per-RX-goroutine state: its batch buffers and TX queues.
type rx struct {
	// waitTimer bounds waitPush; made on the first wait.
	waitTimer *time.Timer
	d         *Dataplane
	ps        *portState
	bufs      [][]byte
	sizes     []int
	// frames[:n] is the batch being processed: bufs[i][:sizes[i]], or
	// frames a Lender lent in place (nil: skip).
	frames [][]byte
	snap   *snapshot
	txq    [][][]byte // per output port index: frames (aliases of frames) to send
	woke   []bool     // per worker: a frame was pushed this batch
	// held[w]: local frames of this batch for worker w, not yet copied
	// anywhere (inline mode): run inline they are handled straight from
	// the receive buffers; otherwise they are pushed to the ring at the
	// end of the batch.
	held [][][]byte
	// stuck[w]: a wait for worker w timed out while its ring's head was
	// stuckAt[w]; until the head moves, full-ring frames drop at once.
	stuck   []bool
	stuckAt []uint64
	// lane: this is the port's lane loop (laneLoop): it always runs
	// workers inline when it can.
	lane bool
	// prodLocked: this loop holds ps.prodMu until the end of the batch.
	prodLocked bool
	// tally counts the batch's frames, bytes and classes; process adds it
	// to the port's counters once per batch. Three locked adds per frame
	// were about 1% of a switch's samples in perf annotate, each waiting
	// for the stores before it to drain.
	tally struct {
		frames, bytes uint64
		classes       [numFrameClasses]uint64
		unlearned     uint64 // sources the full MAC table could not take
		moved         uint64 // sources learned on another port until this frame
	}
}

// unlockProd ends lockProd at the end of a batch.
func (r *rx) unlockProd() {
	if r.prodLocked {
		r.prodLocked = false
		r.ps.prodMu.Unlock()
	}
}

// lockProd makes this loop the producer of the port's rings until the end
// of the batch (process).
func (r *rx) lockProd() {
	if !r.prodLocked {
		r.ps.prodMu.Lock()
		r.prodLocked = true
	}
}

func (d *Dataplane) newRx(ps *portState, lane bool) *rx {
	r := &rx{d: d, ps: ps, bufs: make([][]byte, d.opts.Batch), sizes: make([]int, d.opts.Batch), frames: make([][]byte, d.opts.Batch),
		woke: make([]bool, len(d.workers)), stuck: make([]bool, len(d.workers)), stuckAt: make([]uint64, len(d.workers)),
		lane: lane}
	if !d.opts.NoInline || lane {
		r.held = make([][][]byte, len(d.workers))
		for w := range r.held {
			r.held[w] = make([][]byte, 0, d.opts.Batch)
		}
	}
	for i := range r.bufs {
		r.bufs[i] = getBuffer(ps.frameSize)
	}
	return r
}

// release drops the loop's buffers when it stops (port removed, prismd
// exiting). They are not pooled: putBuffer clears a buffer, and most of a
// loop's 64 have never been written, so clearing them only faulted in
// pages (a third of the samples of a switch profile that caught a lab's
// teardown).
func (r *rx) release() {
	clear(r.bufs)
}

// refresh rebuilds the TX queues when the port set changed; it allocates
// only on a configuration change.
func (r *rx) refresh(s *snapshot) {
	if s == r.snap {
		return
	}
	r.snap = s
	r.txq = make([][][]byte, len(s.ports))
	for i := range r.txq {
		r.txq[i] = make([][]byte, 0, len(r.bufs))
	}
}

func (d *Dataplane) rxLoop(ps *portState) {
	defer d.wg.Done()
	defer close(ps.done)
	r := d.newRx(ps, false)
	defer r.release()
	read, done := r.portReader()
	defer done()
	r.loop(read)
}

// portReader returns the port's batch reader into r.frames, and what to
// call when the reading stops. Only the port itself lends (Lender): a
// fault wrapper holds frames past the batch (delay, reordering), so
// through one the frames are copied.
func (r *rx) portReader() (read func() (int, error), done func()) {
	if l, ok := r.ps.port.(Lender); ok && l.Lends() && !r.d.opts.NoLend {
		return func() (int, error) { return l.ReadLent(r.bufs, r.frames) }, l.ReleaseLent
	}
	return r.copyReader(r.ps.port.ReadBatch), func() {}
}

// copyReader reads batches into the rx's own buffers with read.
func (r *rx) copyReader(read func(bufs [][]byte, sizes []int) (int, error)) func() (int, error) {
	return CopyingReader(read, r.bufs, r.sizes, r.frames)
}

// CopyingReader returns a batch reader with ReadLent's shape over a copying
// read (ReadBatch, ReadLane): it reads into bufs and sizes and sets
// frames[:n] to the frames received, nil for one to skip (size 0).
func CopyingReader(read func(bufs [][]byte, sizes []int) (int, error), bufs [][]byte, sizes []int, frames [][]byte) func() (int, error) {
	return func() (int, error) {
		n, err := read(bufs, sizes)
		for i := 0; i < n; i++ {
			frames[i] = bufs[i][:sizes[i]]
			if sizes[i] == 0 {
				frames[i] = nil
			}
		}
		return n, err
	}
}

// Lender is implemented by a Port that can hand out received frames in
// place, in its receive ring, instead of copying them into the caller's
// buffers (the copy was 5-6% of a switch's CPU, at every hop). ReadLent
// blocks like ReadBatch and sets frames[:n]: a frame in place, bufs[i]
// holding a copy when the port must rewrite it, or nil for one to skip
// (counted as oversize, as ReadBatch's size 0). The frames stay valid
// until the next ReadLent or ReleaseLent call and nothing may keep them
// past it; Close waits for that call. ReadLent, ReleaseLent and Lends must
// be called from the one reading goroutine.
type Lender interface {
	Lends() bool
	ReadLent(bufs, frames [][]byte) (int, error)
	ReleaseLent()
}

// Laner is implemented by a Port with a control lane (PortOptions.Lane):
// PRISM CONTROL frames do not come out of ReadBatch but out of ReadLane,
// as soon as they arrive, while ReadBatch may hold a sparse frame for a
// ring block's timeout. ReadLane must be called from one goroutine at a
// time, not the one calling ReadBatch; after Close it returns an error
// wrapping net.ErrClosed.
type Laner interface {
	HasLane() bool
	ReadLane(bufs [][]byte, sizes []int) (int, error)
}

// laneOf returns p's lane, looking through wrappers (the fault options
// impair frames of ReadBatch and WriteBatch only), or nil.
func laneOf(p Port) Laner {
	for {
		if l, ok := p.(Laner); ok && l.HasLane() {
			return l
		}
		u, ok := p.(interface{ Unwrap() Port })
		if !ok {
			return nil
		}
		p = u.Unwrap()
	}
}

// laneLoop is the receive loop of a port's lane: the same classification,
// learning and forwarding as rxLoop, on its own goroutine.
func (d *Dataplane) laneLoop(ps *portState, l Laner) {
	defer d.wg.Done()
	defer close(ps.laneDone)
	r := d.newRx(ps, true)
	defer r.release()
	r.loop(r.copyReader(l.ReadLane))
}

// loop reads batches into r.frames with read and processes them until the
// port closes or keeps failing.
func (r *rx) loop(read func() (int, error)) {
	d, ps := r.d, r.ps
	errs := 0
	for {
		n, err := read()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.ENETDOWN) {
				// The kernel tells each packet socket once that the link
				// went down, and the socket receives again when it is back
				// up: a link event, not a failing read. Counted, it stopped
				// an idle port for good after maxRxErrors flaps. Its
				// stations are forgotten at once. The link's state is the
				// daemon's to log (netlink events): said from here, per
				// socket, a read of frames queued before the outage on the
				// port's other socket logged the link up again while it
				// was down.
				if ps.linkDown.CompareAndSwap(false, true) {
					d.forgetStations(ps)
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			errs++
			d.log.Warn("port read failed", "port", ps.port.Name(), "err", err, "consecutive", errs)
			if errs >= maxRxErrors {
				d.log.Error("port read keeps failing; stopping its receive loop", "port", ps.port.Name(), "err", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		errs = 0
		r.process(n)
	}
}

// process handles one received batch: classify and forward every frame, then
// flush the TX queues and wake the workers that got frames.
func (r *rx) process(n int) {
	defer r.unlockProd()
	s := r.d.snap.Load()
	r.refresh(s)
	in := int(r.ps.index.Load())
	tab := r.d.table.Load()
	nowNs := r.d.Now()
	now := uint32(nowNs / int64(time.Second))
	for _, f := range r.frames[:n] {
		if f == nil {
			continue
		}
		r.ingress(s, tab, in, now, f)
	}
	r.publish()
	r.flush(s)
	for w, woke := range r.woke {
		if !woke {
			continue
		}
		r.woke[w] = false
		if r.d.opts.NoInline && !r.lane {
			r.lockProd()
			r.ps.rings[w].publish()
			r.d.workers[w].wake()
			continue
		}
		held := r.held[w]
		r.held[w] = held[:0]
		if r.d.workers[w].runInline(in, held) {
			continue
		}
		// Someone else runs the worker: hand the frames over. The holder
		// looks at the rings after letting go (runInline, run), so no
		// wakeup is needed.
		r.lockProd()
		for _, f := range held {
			if !r.ps.rings[w].push(in, f) && !r.waitPush(w, in, f) {
				r.ps.ctr.drops[DropRingFull].Add(1)
			}
		}
		r.ps.rings[w].publish()
		r.d.workers[w].runInline(in, nil) // in case the holder just let go
	}
}

// publish adds the batch's tally to the port's counters.
func (r *rx) publish() {
	t, c := &r.tally, &r.ps.ctr
	c.rxFrames.Add(t.frames)
	c.rxBytes.Add(t.bytes)
	for i, v := range t.classes {
		if v != 0 {
			c.classes[i].Add(v)
		}
	}
	if t.unlearned != 0 {
		c.unlearned.Add(t.unlearned)
	}
	if t.moved != 0 {
		c.moved.Add(t.moved)
	}
	t.frames, t.bytes, t.classes, t.unlearned, t.moved = 0, 0, [numFrameClasses]uint64{}, 0, 0
	if r.ps.linkDown.Load() { // it receives: its link is up again
		r.ps.linkDown.Store(false)
	}
}

func (r *rx) ingress(s *snapshot, tab *macTable, in int, now uint32, f []byte) {
	c, t := &r.ps.ctr, &r.tally
	t.frames++
	t.bytes += uint64(len(f))
	if len(f) < 14 {
		c.drops[DropShortFrame].Add(1)
		return
	}
	if len(f) > r.ps.frameSize-4 && !vlanTagged(f) {
		// The read buffer leaves 4 bytes for an 802.1Q tag; an untagged
		// frame that uses them is over the MTU (a peer with a larger
		// one). Relayed, every egress port's send failed (tx_error).
		c.drops[DropOversize].Add(1)
		return
	}
	if f[6]&1 != 0 {
		c.drops[DropBadSrcMAC].Add(1)
		return
	}
	src := macKey(f[6:12])
	if src == zeroMACKey {
		c.drops[DropBadSrcMAC].Add(1) // not a station: nothing to learn or answer
		return
	}
	if s.isLocal(src) {
		c.drops[DropLoopback].Add(1)
		return
	}
	switch tab.learn(src, in, now) {
	case learnFull:
		t.unlearned++
	case learnMoved:
		t.moved++
	}
	groupDst := f[0]&1 != 0
	var dst uint64
	if !groupDst {
		dst = macKey(f[0:6])
		if s.isLocal(dst) {
			if uint16(f[12])<<8|uint16(f[13]) != parser.EtherType {
				// The host stack receives its own frames from the NIC
				// directly; bridging them would flood them to every port.
				t.classes[ClassHost]++
				return
			}
			r.local(s, in, f)
			return
		}
		if uint16(f[12])<<8|uint16(f[13]) == parser.EtherType {
			t.classes[ClassTransit]++
		} else {
			t.classes[ClassL2]++
		}
		if out, ok := tab.lookup(dst, now, s.aging); ok && out < len(r.txq) {
			if out == in {
				c.drops[DropHairpin].Add(1)
				return
			}
			if s.mixedMTU && len(f) > s.ports[out].frameSize {
				s.ports[out].ctr.drops[DropTxOversize].Add(1)
				return
			}
			r.txq[out] = append(r.txq[out], f)
			return
		}
	} else if linkLocal(f) {
		c.drops[DropLinkLocal].Add(1)
		return
	} else if uint16(f[12])<<8|uint16(f[13]) == parser.EtherType {
		t.classes[ClassTransit]++
	} else {
		t.classes[ClassL2]++
	}
	for out := range r.txq {
		if out == in {
			continue
		}
		if s.mixedMTU && len(f) > s.ports[out].frameSize {
			s.ports[out].ctr.drops[DropTxOversize].Add(1)
			continue
		}
		r.txq[out] = append(r.txq[out], f)
	}
}

// zeroMACKey is macKey of 00:00:00:00:00:00.
const zeroMACKey = 1 << 48

// linkLocal reports whether group frame f is addressed to an IEEE 802.1
// reserved link-local address a bridge must not relay (DropLinkLocal):
// 01:80:C2:00:00:01 to 0F.
func linkLocal(f []byte) bool {
	return f[0] == 0x01 && f[1] == 0x80 && f[2] == 0xc2 && f[3] == 0 && f[4] == 0 && f[5] >= 0x01 && f[5] <= 0x0f
}

// local hands a locally addressed PRISM frame to the worker owning its shard.
func (r *rx) local(s *snapshot, in int, f []byte) {
	c, t := &r.ps.ctr, &r.tally
	class, reason := classifyLocal(f)
	if reason != 0 {
		c.drops[reason].Add(1)
		return
	}
	t.classes[class]++
	w := int(shardHash(f) % uint32(len(r.d.workers)))
	if r.held != nil {
		r.held[w] = append(r.held[w], f)
		r.woke[w] = true
		return
	}
	r.lockProd()
	if !r.ps.rings[w].push(in, f) && !r.waitPush(w, in, f) {
		c.drops[DropRingFull].Add(1)
		return
	}
	r.woke[w] = true
}

// RingWait bounds how long a receive loop holds a local PRISM frame for a
// worker whose ring is full. A sender only has in flight what the engine
// granted it credit for, so a full ring is a worker that lost its core
// for a moment, not an overload: dropping there would cost a
// retransmission timeout (tens of milliseconds) for a frame the engine
// would have taken microseconds later. While the loop waits, the kernel's
// own ring keeps receiving. Beyond the bound the worker is stuck or
// overloaded: the frame is dropped as ring_full, and so is every frame
// that finds the ring full before the worker takes one, without waiting
// (a stuck worker costs the port one RingWait, not one per frame).
const RingWait = 5 * time.Millisecond

// waitPush wakes worker w and waits, up to RingWait, for it to free a
// slot. The worker signals through the ring only while a producer waits,
// so the common path pays one atomic load per frame and a wait burns no
// CPU the worker needs.
func (r *rx) waitPush(w, in int, f []byte) bool {
	rg := r.ps.rings[w]
	if r.stuck[w] {
		// The last wait on this worker timed out and it has not taken a
		// frame since: drop at once rather than stall the port for
		// every frame of a worker that is stuck.
		if rg.head.Load() == r.stuckAt[w] {
			return false
		}
		r.stuck[w] = false
	}
	rg.publish() // what this batch pushed so far is what the worker must drain
	if !r.d.opts.NoInline {
		// Nobody may be running the worker: drain it from here.
		r.d.workers[w].runInline(in, nil)
		if rg.push(in, f) {
			return true
		}
	}
	r.ps.ctr.ringWaits.Add(1)
	rg.waiting.Store(true)
	defer rg.waiting.Store(false)
	r.d.workers[w].wake()
	if r.waitTimer == nil {
		r.waitTimer = time.NewTimer(RingWait)
	} else {
		r.waitTimer.Reset(RingWait)
	}
	defer r.waitTimer.Stop()
	for {
		// Checked after waiting is set: a slot freed before that
		// sent no signal, but is seen here.
		if rg.push(in, f) {
			return true
		}
		select {
		case <-rg.space:
		case <-r.waitTimer.C:
			if rg.push(in, f) {
				return true
			}
			r.stuck[w], r.stuckAt[w] = true, rg.head.Load()
			return false
		}
	}
}

// classifyLocal checks the control word of a locally addressed PRISM frame.
// It mirrors parser.Classify without building an error value, so a flood of
// malformed frames allocates nothing; the operation identity must be present
// because the shard hash reads it.
func classifyLocal(f []byte) (FrameClass, DropReason) {
	if len(f) < parser.EthLen+parser.CWLen {
		return 0, DropTruncated
	}
	if f[parser.EthLen]>>4 != parser.VersionMajor {
		return 0, DropBadVersion
	}
	switch parser.Class(f[parser.EthLen+1]) {
	case parser.ClassControl:
		return checkOpID(f, ClassControl)
	case parser.ClassData:
		return checkOpID(f, ClassData)
	case parser.ClassResult:
		return checkOpID(f, ClassResult)
	case parser.ClassProgress:
		return checkOpID(f, ClassProgress)
	}
	return 0, DropUnknownClass
}

func checkOpID(f []byte, c FrameClass) (FrameClass, DropReason) {
	if len(f) < parser.HdrOff+parser.OpIDLen {
		return 0, DropTruncated
	}
	return c, 0
}

// shardHash picks the worker of a local PRISM frame. It is the one place to
// change if the sharding key changes.
func shardHash(f []byte) uint32 { return parser.ShardHash(f) }

// flush sends every TX queue of this RX goroutine with one batch call per port.
func (r *rx) flush(s *snapshot) {
	for out, q := range r.txq {
		if len(q) == 0 {
			continue
		}
		sendCounted(s.ports[out], q)
		clear(q)
		r.txq[out] = q[:0]
	}
}

// sendCounted writes q to ps and counts what was sent and what failed. Bytes
// are summed over the first n frames: exact unless the port skipped a
// rejected frame in the middle of the batch.
func sendCounted(ps *portState, q [][]byte) {
	n, err := ps.port.WriteBatch(q)
	if n > len(q) {
		n = len(q)
	}
	var bytes uint64
	for _, f := range q[:n] {
		bytes += uint64(len(f))
	}
	ps.ctr.txFrames.Add(uint64(n))
	ps.ctr.txBytes.Add(bytes)
	if n < len(q) {
		// Counted, not logged: the log would flood at line rate.
		if r := txDropReason(err); r != 0 {
			ps.ctr.drops[r].Add(uint64(len(q) - n))
			if r == DropTxLinkDown && ps.linkDown.CompareAndSwap(false, true) {
				ps.d.forgetStations(ps)
			}
		}
	} else if ps.linkDown.Load() {
		ps.linkDown.Store(false)
	}
}

// forgetStations drops the MAC table's entries on ps, whose link is down:
// a station kept there had its frames dropped (tx_link_down) until it aged
// out, 300 s by default, while one that moved its cable to another port
// and stayed silent was unreachable; forgotten, its frames are flooded
// and reach it wherever it is (a Linux bridge flushes on carrier loss
// too). Done once per outage, by the goroutine whose send found the link
// down; a station learned meanwhile on another port may be missed, which
// costs a flood.
func (d *Dataplane) forgetStations(ps *portState) {
	down := int(ps.index.Load())
	for range 3 {
		tab := d.table.Load()
		nt := d.movedTable(tab, func(port int) (int, bool) { return port, port != down })
		if d.table.CompareAndSwap(tab, nt) {
			return
		}
	}
}

// txDropReason is the reason the frames a WriteBatch did not send are
// dropped for, chosen by its error (only on that failure path: errors.Is
// allocates nothing but walks the chain). 0 means the port counted them
// itself: an egress fault whose queue was full counts its own drops.
func txDropReason(err error) DropReason {
	switch {
	case errors.Is(err, errFaultQueueFull):
		return 0
	case errors.Is(err, ErrTxFull):
		return DropTxRingFull
	case errors.Is(err, ErrLinkDown):
		return DropTxLinkDown
	}
	return DropTxError
}

// vlanTagged reports whether f carries an 802.1Q or 802.1ad tag, which may
// take the 4 bytes past MTU + 14.
func vlanTagged(f []byte) bool {
	et := uint16(f[12])<<8 | uint16(f[13])
	return et == 0x8100 || et == 0x88A8
}
