package host

// An in-memory network for root-free tests of the whole stack: every prismd
// node of a deploy topology is a real control.Node worker driven by its own
// goroutine in real time; hosts are sets of Conns (the AM's and the ranks')
// sharing one interface; frames are routed by destination MAC along
// deploy.Path, arriving on the port the physical path enters by, so
// forwarding hops are implicit. DATA, RESULT and PROGRESS can be dropped or
// duplicated at random; CONTROL too when ctlLoss is set.

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/internal/testlog"
	"github.com/prismd/prismd/parser"
)

type pkt struct {
	port  int
	frame []byte
}

type memSwitch struct {
	f     *memFabric
	name  string
	ports []string
	w     *control.Worker
	in    chan pkt
	// restart swaps in a fresh node, as a prismd restart does: every
	// operation's state is gone. The switch's goroutine closes the channel
	// it receives once done.
	restart chan chan struct{}
	m       *engine.Metrics // the first node's engine counters
}

func (s *memSwitch) Send(port int, frame []byte) bool {
	if port < 0 || port >= len(s.ports) {
		return false
	}
	s.f.route(s.name, append([]byte(nil), frame...))
	return true
}
func (s *memSwitch) PortMAC(port int) [6]byte { return s.f.topo.MAC(s.name, s.ports[port]) }
func (s *memSwitch) NumPorts() int            { return len(s.ports) }

type memConn struct {
	f      *memFabric
	host   string
	mac    net.HardwareAddr
	in     chan []byte
	closed chan struct{}
	once   sync.Once

	mu        sync.Mutex
	dead      bool // killed: writes vanish, reads never return
	sends     int
	killAfter int // > 0: die after this many writes
	diedAt    time.Time
}

func (c *memConn) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-c.in:
		return copy(b, f), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *memConn) WriteFrame(b []byte) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	c.mu.Lock()
	c.sends++
	if c.killAfter > 0 && c.sends > c.killAfter && !c.dead {
		c.dead, c.diedAt = true, time.Now()
	}
	dead := c.dead
	c.mu.Unlock()
	if !dead {
		c.f.route(c.host, append([]byte(nil), b...))
	}
	return nil
}

func (c *memConn) MAC() net.HardwareAddr { return c.mac }
func (c *memConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

type memFabric struct {
	t     testing.TB
	topo  *deploy.Topology
	sws   map[string]*memSwitch
	owner map[[6]byte]string

	mu      sync.Mutex
	conns   map[string][]*memConn
	paths   map[[2]string]int // (from, to) -> ingress port at to
	rng     *rand.Rand
	loss    float64
	dup     float64
	ctlLoss float64
	stop    chan struct{}
	window  am.Window // AM window wish (zero: the AM's defaults)
	// resultDelay holds each RESULT frame to a host this long before it
	// arrives (a slow path to one rank); other frames are not held.
	resultDelay map[string]time.Duration
	wg          sync.WaitGroup
}

// delayResults holds RESULT frames to host by d from now on (0: no more).
func (f *memFabric) delayResults(host string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resultDelay == nil {
		f.resultDelay = map[string]time.Duration{}
	}
	f.resultDelay[host] = d
}

func newMemFabric(t testing.TB, topoName string) *memFabric {
	topo, err := deploy.Load(topoName)
	if err != nil {
		t.Fatal(err)
	}
	f := &memFabric{t: t, topo: topo, sws: map[string]*memSwitch{}, owner: map[[6]byte]string{},
		conns: map[string][]*memConn{}, paths: map[[2]string]int{}, rng: rand.New(rand.NewPCG(7, 7)), stop: make(chan struct{})}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, name := range topo.NodeNames() {
		n := topo.Nodes[name]
		for _, ifc := range n.Ifaces {
			f.owner[topo.MAC(name, ifc)] = name
		}
		if n.Kind != deploy.KindPrismd {
			continue
		}
		f.owner[topo.MAC(name, deploy.NodeMACIface)] = name
		s := &memSwitch{f: f, name: name, ports: deploy.Ports(topo, name), in: make(chan pkt, 1<<14), restart: make(chan chan struct{})}
		node := control.NewNode(control.NodeConfig{AMMACs: topo.HostMACs(), Ports: len(s.ports), Logger: quiet})
		s.w = node.NewWorker(0, 1)
		s.m = node.EngineMetrics()
		f.sws[name] = s
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			m := node.EngineMetrics()
			t.Logf("switch %s: frames in %v, progress sent %d, frames sent %v, txfull %d, failed %d",
				name, [5]uint64{m.Frames[1].Load(), m.Frames[2].Load(), m.Frames[3].Load(), m.Frames[4].Load()}, m.ProgressSent.Load(),
				[5]uint64{m.FramesSent[1].Load(), m.FramesSent[2].Load(), m.FramesSent[3].Load()}, m.TxFull.Load(), m.OpsFailed.Load())
			for d := range m.Drops {
				if v := m.Drops[d].Load(); v > 0 {
					t.Logf("switch %s: engine drop %v: %d", name, engine.Drop(d), v)
				}
			}
			for i := range m.DecodeDrops {
				if v := m.DecodeDrops[i].Load(); v > 0 {
					t.Logf("switch %s: decode drop %s: %d", name, parser.Reasons[i], v)
				}
			}
		})
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			tk := time.NewTicker(time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case p := <-s.in:
					s.w.Handle(switchNow(), p.port, p.frame, s)
				case <-tk.C:
					s.w.Tick(switchNow(), s)
				case done := <-s.restart:
					fresh := control.NewNode(control.NodeConfig{AMMACs: topo.HostMACs(), Ports: len(s.ports), Logger: quiet})
					s.w = fresh.NewWorker(0, 1)
					close(done)
				case <-f.stop:
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(f.stop)
		f.wg.Wait()
	})
	return f
}

// attach opens a Conn on host's first interface.
func (f *memFabric) attach(host string) *memConn {
	m := f.topo.MAC(host, f.topo.Nodes[host].Ifaces[0])
	c := &memConn{f: f, host: host, mac: net.HardwareAddr(m[:]), in: make(chan []byte, 1<<14), closed: make(chan struct{})}
	f.mu.Lock()
	f.conns[host] = append(f.conns[host], c)
	f.mu.Unlock()
	return c
}

// ingress returns the port of node to on which frames from node from arrive.
func (f *memFabric) ingress(from, to string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]string{from, to}
	if p, ok := f.paths[k]; ok {
		return p
	}
	hops, err := f.topo.Path(from, to)
	p := -1
	if err == nil && len(hops) > 1 {
		p = deploy.PortIndex(f.topo, to, hops[len(hops)-1].In)
	}
	f.paths[k] = p
	return p
}

func (f *memFabric) route(from string, frame []byte) {
	if len(frame) < parser.EthLen+2 {
		return
	}
	to, ok := f.owner[[6]byte(frame[0:6])]
	if os.Getenv("MEMTRACE") != "" && !ok {
		f.t.Logf("%s -> unknown %x", from, frame[0:6])
	}
	if !ok || to == from {
		return
	}
	ctl := parser.Class(frame[parser.CWOff+1]) == parser.ClassControl
	if os.Getenv("MEMTRACE") != "" {
		f.t.Logf("%s -> %s %v len %d", from, to, parser.Class(frame[parser.CWOff+1]), len(frame))
	}
	f.mu.Lock()
	loss, dup := f.loss, f.dup
	if ctl {
		loss, dup = f.ctlLoss, f.ctlLoss
	}
	copies := 1
	if f.rng.Float64() < loss {
		copies = 0
	} else if f.rng.Float64() < dup {
		copies = 2
	}
	conns := f.conns[to]
	hold := time.Duration(0)
	if parser.Class(frame[parser.CWOff+1]) == parser.ClassResult {
		hold = f.resultDelay[to]
	}
	f.mu.Unlock()
	if hold > 0 && len(conns) > 0 {
		time.AfterFunc(hold, func() {
			for _, c := range conns {
				select {
				case c.in <- frame:
				default:
				}
			}
		})
		return
	}
	for i := 0; i < copies; i++ {
		if s, ok := f.sws[to]; ok {
			p := f.ingress(from, to)
			if p < 0 {
				return
			}
			select {
			case s.in <- pkt{p, frame}:
			default:
			}
			continue
		}
		for _, c := range conns {
			select {
			case c.in <- frame:
			default:
			}
		}
	}
}

// startAM runs the AM on host amHost and serves its runtime channel.
func (f *memFabric) startAM(amHost string) string {
	m, err := am.New(am.Config{Topology: f.topo, Conn: f.attach(amHost), RTO: 10 * time.Millisecond,
		CtlTimeout: 3 * time.Second, Logf: testlog.Until(f.t), DefaultTimeoutMS: 15000, Window: f.window})
	if err != nil {
		f.t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	f.t.Cleanup(func() {
		m.StopStreams() // httptest's Close waits for open requests
		srv.Close()
		m.Close()
	})
	return srv.URL
}

// switchNow is the fabric's switches' clock: the host's without monoSkew,
// so that a test can stop a rank's clock alone.
func switchNow() int64 { return int64(time.Since(epoch)) }
