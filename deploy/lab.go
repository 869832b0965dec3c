// This file owns building and removing labs: namespaces, veth pairs,
// addresses, bridges and prismd processes, and running code inside a node.

package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultStateDir is where labs keep their state (configs, logs, PIDs,
// control sockets), one subdirectory per lab.
const DefaultStateDir = "/run/prismd-lab"

// netnsDir is where named namespaces live (iproute2's convention, which
// `ip netns exec` reads).
const netnsDir = "/run/netns"

// Options tune Up, Down, Attach and Status. A nil *Options means defaults;
// so does every zero field.
type Options struct {
	// StateDir is the parent of the lab's state directory
	// (<StateDir>/<lab>/). Default DefaultStateDir.
	StateDir string
	// Prismd is the prismd binary. Default: FindPrismd.
	Prismd string
	// ReadyTimeout bounds the wait for every prismd to serve /metrics or
	// create its control socket. Default 15s.
	ReadyTimeout time.Duration
	// StopTimeout is how long Down waits after SIGTERM before SIGKILL.
	// Default 3s.
	StopTimeout time.Duration
	// Parallel bounds concurrent namespace and link operations. Default 8.
	Parallel int
	// Log receives one line per step; nil discards.
	Log io.Writer
	// SwitchProcs is the GOMAXPROCS each prismd of the lab runs with.
	// 0 means: GOMAXPROCS from the environment if set, else the machine's
	// CPUs shared out among the lab's switches and its hosts (SwitchProcsFor).
	SwitchProcs int
}

// SwitchProcsFor is the GOMAXPROCS a lab gives each of its n prismd when
// neither Options.SwitchProcs nor the environment sets one: the machine's
// cpus shared out among the n switches and, as one more party, the hosts'
// processes (ranks, generators), at least 1. They all share the machine's
// cores; a Go process with more Ps than its share of the cores hands
// goroutines between threads that then wake each other across cores, and a
// cross-core wakeup is the dearest thing on a virtual machine. Measured on
// a 2-core VM: spine-leaf-jumbo (3 switches, 4 ranks; 3 interleaved pairs,
// per operation) 1M FP32 ALLREDUCE 55-59 ms with GOMAXPROCS=1 against
// 70-74 ms with 2, 2 FP32 15.4-16.0 against 16.0-17.4 ms, 16M 500-630
// against 639-648 ms; the SINGLE lab (1 switch, 2 ranks; 5 interleaved
// pairs of 3 s runs) forwarding 639-653k against 494-550k frames/s and
// FP32 ALLREDUCE from two 'prismd-blast contribute' ranks 400-421k against
// 341-362k DATA frames/s, and 2 'prismctl bench' ranks 4M FP32 71.8-73.0
// against 77.7-79.0 ms, which is why the ranks count as a party.
func SwitchProcsFor(cpus, n int) int {
	return max(cpus/(max(n, 0)+1), 1)
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.StateDir == "" {
		r.StateDir = DefaultStateDir
	}
	if r.ReadyTimeout <= 0 {
		r.ReadyTimeout = 15 * time.Second
	}
	if r.StopTimeout <= 0 {
		r.StopTimeout = 3 * time.Second
	}
	if r.Parallel <= 0 {
		r.Parallel = 8
	}
	if r.Log == nil {
		r.Log = io.Discard
	}
	return r
}

var (
	// ErrExists is returned by Up when a namespace of the lab already exists.
	ErrExists = errors.New("lab already exists")
	// ErrNotUp is returned by Attach when the lab's namespaces are missing.
	ErrNotUp = errors.New("lab is not up")
	// ErrPrismdDied is returned by Up when a prismd exits before it is ready.
	ErrPrismdDied = errors.New("prismd exited during start-up")
)

// NetNSName is the namespace of node in lab: "pl-<lab>-<node>".
func NetNSName(lab, node string) string { return "pl-" + lab + "-" + node }

// tmpPrefix prefixes the temporary root-namespace veth names of lab. A hash
// rather than the name keeps "<prefix><link><a|b>" within IFNAMSIZ for every
// valid lab name: 2+5+1+4+1 = 13 characters.
func tmpPrefix(lab string) string {
	h := sha256.Sum256([]byte(lab))
	return "pl" + hex.EncodeToString(h[:3])[:5] + "-"
}

func tmpName(lab string, link int, side byte) string {
	return tmpPrefix(lab) + strconv.Itoa(link) + string(side)
}

// Lab is a lab that is up (or was, until Down).
type Lab struct {
	Topo *Topology
	opts Options
	dir  string

	mu    sync.Mutex
	procs map[string]*proc // prismd processes this process started
}

type proc struct {
	pid   int
	done  chan struct{}    // closed when Wait returned
	state *os.ProcessState // how it ended; set before done is closed
}

// NetNS returns the namespace name of node.
func (l *Lab) NetNS(node string) string { return NetNSName(l.Topo.Name, node) }

// Dir returns the lab's state directory.
func (l *Lab) Dir() string { return l.dir }

// TopologyFile returns the copy of the topology saved in the state
// directory; prismctl lab status/exec/down accept it.
func (l *Lab) TopologyFile() string { return filepath.Join(l.dir, "topology.yaml") }

// LogFile returns the path of prismd node's log.
func (l *Lab) LogFile(node string) string { return filepath.Join(l.dir, node+".log") }

// ConfigFile returns the path of prismd node's generated configuration.
func (l *Lab) ConfigFile(node string) string { return filepath.Join(l.dir, node+".yaml") }

// ControlSocket returns the control socket path of prismd node.
func (l *Lab) ControlSocket(node string) string { return filepath.Join(l.dir, node+".sock") }

func pidFile(dir, node string) string { return filepath.Join(dir, node+".pid") }

// PID returns the recorded PID of prismd node, 0 if none.
func (l *Lab) PID(node string) int { return readPID(l.dir, node) }

func readPID(dir, node string) int {
	b, err := os.ReadFile(pidFile(dir, node))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func newLab(t *Topology, o *Options) *Lab {
	opts := o.withDefaults()
	return &Lab{Topo: t, opts: opts, dir: filepath.Join(opts.StateDir, t.Name), procs: map[string]*proc{}}
}

func (l *Lab) logf(format string, args ...any) {
	fmt.Fprintf(l.opts.Log, "lab %s: "+format+"\n", append([]any{l.Topo.Name}, args...)...)
}

func nsExists(name string) bool {
	_, err := os.Lstat(filepath.Join(netnsDir, name))
	return err == nil
}

// Up builds the lab described by t and starts its prismd nodes. On any
// error it removes what it built (as Down does) and returns the error; if the
// lab already exists it returns ErrExists and touches nothing.
func Up(ctx context.Context, t *Topology, o *Options) (*Lab, error) {
	l := newLab(t, o)
	unlock, err := l.lock()
	if err != nil {
		return nil, err
	}
	up := false
	defer func() { unlock(!up) }()
	for _, n := range t.names {
		if nsExists(l.NetNS(n)) {
			up = true // not ours to remove the lock file of
			return nil, fmt.Errorf("deploy: %w: namespace %s is present; run 'prismctl lab down' on the lab first", ErrExists, l.NetNS(n))
		}
	}
	if len(t.NodesOf(KindPrismd)) > 0 && l.opts.Prismd == "" {
		p, err := FindPrismd()
		if err != nil {
			return nil, err
		}
		l.opts.Prismd = p
	}
	// No namespace means the lab is not up: whatever a crashed run left (a
	// recorded prismd, temporary veths, a state directory) can go.
	if err := l.down(); err != nil {
		return nil, fmt.Errorf("deploy: clearing what an earlier run of lab %s left: %w", t.Name, err)
	}
	start := time.Now()
	if err := l.build(ctx); err != nil {
		if derr := l.down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", derr))
		}
		return nil, err
	}
	l.logf("up in %v", time.Since(start).Round(time.Millisecond))
	up = true
	return l, nil
}

// lock serialises Up and Down of one lab across processes, so a second Up
// of the same lab cannot roll back the first one's namespaces. The lock
// file sits beside the lab's state directory; Down removes it (remove is
// true) while holding it, so a waiter that locked the removed file retries
// on a fresh one (the usual open, flock, compare inode loop).
func (l *Lab) lock() (unlock func(remove bool), err error) {
	if err := os.MkdirAll(l.opts.StateDir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(l.opts.StateDir, "."+l.Topo.Name+".lock")
	for {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, os.NewSyscallError("flock "+p, err)
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(p, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return func(remove bool) {
				if remove {
					os.Remove(p)
				}
				f.Close()
			}, nil
		}
		f.Close()
	}
}

// Attach returns the Lab of a lab that is already up (brought up by another
// process, e.g. prismctl lab up). It fails with ErrNotUp if any node's
// namespace is missing.
func Attach(t *Topology, o *Options) (*Lab, error) {
	l := newLab(t, o)
	for _, n := range t.names {
		if !nsExists(l.NetNS(n)) {
			return nil, fmt.Errorf("deploy: %w: namespace %s of lab %s does not exist; run 'prismctl lab up' first", ErrNotUp, l.NetNS(n), t.Name)
		}
	}
	return l, nil
}

// parallel runs f(i) for i < n with at most p at a time and joins the errors.
func parallel(n, p int, f func(i int) error) error {
	sem := make(chan struct{}, p)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// inThread runs f on a fresh OS thread that is thrown away afterwards, so a
// namespace switch (setns, unshare) can never leak into other goroutines:
// a goroutine that exits while locked takes its thread with it.
func inThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("deploy: panic in namespace: %v", r)
			}
		}()
		errc <- f()
	}()
	return <-errc
}

// Do runs f on a locked OS thread inside node's namespace. Sockets f opens
// belong to that namespace for their lifetime; goroutines f starts do not
// run in it. A panic in f is returned as an error.
func (l *Lab) Do(node string, f func() error) error {
	if _, ok := l.Topo.Nodes[node]; !ok {
		return fmt.Errorf("deploy: lab %s has no node %q", l.Topo.Name, node)
	}
	h, err := netns.GetFromName(l.NetNS(node))
	if err != nil {
		return fmt.Errorf("deploy: open namespace %s: %w", l.NetNS(node), err)
	}
	defer h.Close()
	return inThread(func() error {
		if err := netns.Set(h); err != nil {
			return os.NewSyscallError("setns "+l.NetNS(node), err)
		}
		return f()
	})
}

// Exec returns a command that runs argv inside node's namespace via
// `ip netns exec`, which also gives it the namespace's /sys.
func (l *Lab) Exec(node string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.NetNS(node)}, argv...)...)
}

// Dial connects from inside node's namespace.
func (l *Lab) Dial(ctx context.Context, node, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := l.Do(node, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections are made inside node's
// namespace (an http.Transport dials on its own goroutines, so Do alone
// would not do).
func (l *Lab) HTTPClient(node string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return l.Dial(ctx, node, network, addr)
			},
		},
	}
}

// Metrics fetches http://MetricsAddr/metrics of prismd node.
func (l *Lab) Metrics(ctx context.Context, node string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+MetricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := l.HTTPClient(node).Do(req)
	if err != nil {
		return "", fmt.Errorf("deploy: metrics of %s: %w", node, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("deploy: metrics of %s: %s", node, resp.Status)
	}
	return string(b), nil
}

// build does the work of Up; any error leaves a half-built lab for Down.
func (l *Lab) build(ctx context.Context) error {
	t := l.Topo
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(l.TopologyFile(), t.Marshal(), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	// 1. Namespaces, each with loopback up and IPv6 off: no router
	// solicitations, MLD or DAD frames, so switch counters count only
	// what a test sends.
	handles := make(map[string]netns.NsHandle, len(t.names))
	defer func() {
		for _, h := range handles {
			h.Close()
		}
	}()
	var hmu sync.Mutex
	phase := time.Now()
	err := parallel(len(t.names), l.opts.Parallel, func(i int) error {
		node := t.names[i]
		h, err := l.newNS(node)
		if err != nil {
			return err
		}
		hmu.Lock()
		handles[node] = h
		hmu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.logf("%d namespaces in %v", len(t.names), time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	// 2. Veth pairs, created with unique temporary names directly in the two
	// node namespaces and renamed there in step 3. Creating them in the
	// root namespace and moving them costs about 50 ms per end (each move
	// waits for an RCU grace period under the RTNL lock) and can leave
	// debris in the root namespace on a crash; this way nothing of the lab
	// ever appears there.
	err = parallel(len(t.Links), l.opts.Parallel, func(i int) error {
		lk := t.Links[i]
		v := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{
				Name:         tmpName(t.Name, i, 'a'),
				MTU:          lk.MTU,
				HardwareAddr: HardwareAddr(t.MAC(lk.A.Node, lk.A.Iface)),
				Namespace:    netlink.NsFd(handles[lk.A.Node]),
			},
			PeerName:         tmpName(t.Name, i, 'b'),
			PeerHardwareAddr: HardwareAddr(t.MAC(lk.B.Node, lk.B.Iface)),
			PeerMTU:          uint32(lk.MTU),
			PeerNamespace:    netlink.NsFd(handles[lk.B.Node]),
		}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("deploy: create veth pair for link %v - %v: %w", lk.A, lk.B, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.logf("%d veth pairs in %v", len(t.Links), time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	// 3. Inside each node: final names, up, addresses, bridges, offloads.
	err = parallel(len(t.names), l.opts.Parallel, func(i int) error {
		return l.setupNode(t.names[i], handles[t.names[i]])
	})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// 3b. Wait until every interface is operationally up. Until the kernel's
	// link watcher has seen the carrier, a device's queueing discipline is
	// the no-op one and frames sent on it (a first ping, prismd's first
	// flood) are silently dropped; on a loaded host that lasts long enough
	// to make tests flaky.
	err = parallel(len(t.names), l.opts.Parallel, func(i int) error {
		return l.waitCarrier(ctx, t.names[i], handles[t.names[i]])
	})
	if err != nil {
		return err
	}
	l.logf("interfaces configured in %v", time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	// 4. prismd nodes.
	sw := t.NodesOf(KindPrismd)
	procs := l.switchProcs(len(sw))
	if len(sw) > 0 {
		if err := l.writeStart(procs); err != nil {
			return err
		}
	}
	for _, node := range sw {
		if err := l.startPrismd(node, procs, false); err != nil {
			return err
		}
	}
	if len(sw) > 0 {
		l.logf("started %d prismd (%s, GOMAXPROCS=%d)", len(sw), l.opts.Prismd, procs)
	}
	if err := parallel(len(sw), len(sw)+1, func(i int) error { return l.waitReady(ctx, sw[i]) }); err != nil {
		return err
	}
	if len(sw) > 0 {
		l.logf("%d prismd ready in %v", len(sw), time.Since(phase).Round(time.Millisecond))
	}
	return nil
}

// newNS creates node's named namespace the way `ip netns add` does: unshare
// a fresh namespace on a throw-away thread and bind-mount it under
// /run/netns. It returns an open handle.
func (l *Lab) newNS(node string) (netns.NsHandle, error) {
	name := l.NetNS(node)
	path := filepath.Join(netnsDir, name)
	var h netns.NsHandle = -1
	err := inThread(func() error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			return fmt.Errorf("deploy: create namespace %s: %w", name, err)
		}
		f.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return os.NewSyscallError("unshare "+name, err)
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return os.NewSyscallError("mount "+path, err)
		}
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("deploy: disable IPv6 in %s: %w", name, err)
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("deploy: loopback up in %s: %w", name, err)
		}
		h, err = netns.Get()
		return err
	})
	return h, err
}

func (l *Lab) setupNode(node string, h netns.NsHandle) error {
	t := l.Topo
	n := t.Nodes[node]
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("deploy: netlink in %s: %w", l.NetNS(node), err)
	}
	defer nh.Close()
	links := make([]netlink.Link, len(n.Ifaces))
	for i, ifc := range n.Ifaces {
		li := t.ends[Endpoint{node, ifc}]
		side := byte('a')
		if t.Links[li].B == (Endpoint{node, ifc}) {
			side = 'b'
		}
		tmp := tmpName(t.Name, li, side)
		link, err := nh.LinkByName(tmp)
		if err != nil {
			return fmt.Errorf("deploy: find %s in %s: %w", tmp, l.NetNS(node), err)
		}
		if err := nh.LinkSetName(link, ifc); err != nil {
			return fmt.Errorf("deploy: rename %s to %s in %s: %w", tmp, ifc, l.NetNS(node), err)
		}
		links[i] = link
	}
	if n.Kind == KindBridge {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeIface, HardwareAddr: HardwareAddr(t.MAC(node, NodeMACIface))}}
		if err := nh.LinkAdd(br); err != nil {
			return fmt.Errorf("deploy: bridge in %s: %w", l.NetNS(node), err)
		}
		for _, link := range links {
			if err := nh.LinkSetMasterByIndex(link, br.Index); err != nil {
				return fmt.Errorf("deploy: enslave %s to %s in %s: %w", link.Attrs().Name, BridgeIface, l.NetNS(node), err)
			}
		}
		if err := nh.LinkSetUp(br); err != nil {
			return err
		}
	}
	if n.IPv4.IsValid() {
		pfx := n.IPv4
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), 32)}}
		if err := nh.AddrAdd(links[0], addr); err != nil {
			return fmt.Errorf("deploy: address %v on %s:%s: %w", pfx, node, n.Ifaces[0], err)
		}
	}
	// Offloads off (tx, rx, tso, gso, gro, as ethtool -K would) on every lab
	// interface, before it is up: with TSO/GSO a host hands the veth 64 KB
	// super-frames and with tx checksum offload frames carry partial
	// checksums; an AF_PACKET switch would see both as they are.
	if err := l.offloadsOff(node, h, n.Ifaces); err != nil {
		return err
	}
	for i, link := range links {
		if err := nh.LinkSetUp(link); err != nil {
			return fmt.Errorf("deploy: %s:%s up: %w", node, n.Ifaces[i], err)
		}
	}
	return nil
}

// carrierTimeout bounds waitCarrier; the link watcher normally reacts to a
// veth carrier change within milliseconds, a loaded host within a second.
const carrierTimeout = 10 * time.Second

func (l *Lab) waitCarrier(ctx context.Context, node string, h netns.NsHandle) error {
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("deploy: netlink in %s: %w", l.NetNS(node), err)
	}
	defer nh.Close()
	deadline := time.Now().Add(carrierTimeout)
	for _, ifc := range l.Topo.Nodes[node].Ifaces {
		for {
			link, err := nh.LinkByName(ifc)
			if err != nil {
				return fmt.Errorf("deploy: %s:%s: %w", node, ifc, err)
			}
			if link.Attrs().OperState == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("deploy: %s:%s still %v after %v", node, ifc, link.Attrs().OperState, carrierTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

func (l *Lab) offloadsOff(node string, h netns.NsHandle, ifaces []string) error {
	return inThread(func() error {
		if err := netns.Set(h); err != nil {
			return os.NewSyscallError("setns", err)
		}
		// A socket made on this thread lives in the node's namespace, so the
		// ioctl finds the node's interfaces.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		defer unix.Close(fd)
		if err := offloadsOffHere(fd, ifaces); err != nil {
			return fmt.Errorf("%w (in %s)", err, l.NetNS(node))
		}
		return nil
	})
}

// startPrismd starts prismd on node with GOMAXPROCS procs, its output
// appended to the node's log, and records its PID. It writes the node's
// configuration first, unless keepConfig and the file exists (a restart
// runs the configuration the lab started the node with).
func (l *Lab) startPrismd(node string, procs int, keepConfig bool) error {
	if _, err := os.Stat(l.ConfigFile(node)); !keepConfig || err != nil {
		c, err := NewPrismdConfig(l.Topo, node, l.dir)
		if err != nil {
			return err
		}
		b, err := c.Marshal()
		if err != nil {
			return err
		}
		if err := os.WriteFile(l.ConfigFile(node), b, 0o644); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(l.LogFile(node), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := l.Exec(node, l.opts.Prismd, "--config", l.ConfigFile(node))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	// Own session: Ctrl-C on prismctl must not reach the switches; Down
	// stops them in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("deploy: start prismd on %s: %w", node, err)
	}
	p := &proc{pid: cmd.Process.Pid, done: make(chan struct{})}
	// Reap in this process, or a dead prismd would linger as a zombie that
	// looks alive to Down.
	go func() { cmd.Wait(); p.state = cmd.ProcessState; close(p.done) }()
	l.mu.Lock()
	l.procs[node] = p
	l.mu.Unlock()
	if err := os.WriteFile(pidFile(l.dir, node), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		return err
	}
	return nil
}

// LogTail returns the last n lines of prismd node's log.
func (l *Lab) LogTail(node string, n int) string {
	b, _ := os.ReadFile(l.LogFile(node))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logReport ends a start-up error with the tail of node's log, or says the
// log is empty: "ends with:" and nothing reads like a lost message.
func (l *Lab) logReport(node string) string {
	tail := l.LogTail(node, 20)
	if strings.TrimSpace(tail) == "" {
		return " and wrote nothing to its log " + l.LogFile(node)
	}
	return "; log " + l.LogFile(node) + " ends with:\n" + tail
}

// howEnded says how a process ended: "exited with status 1", "was killed by
// SIGSEGV"; a silent prismd leaves only this to go on.
func howEnded(ps *os.ProcessState) string {
	if ps == nil {
		return "exited"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}

func (l *Lab) waitReady(ctx context.Context, node string) error {
	l.mu.Lock()
	p := l.procs[node]
	l.mu.Unlock()
	deadline := time.Now().Add(l.opts.ReadyTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("deploy: %w: prismd on %s (pid %d) %s%s", ErrPrismdDied, node, p.pid, howEnded(p.state), l.logReport(node))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if _, err := os.Stat(l.ControlSocket(node)); err == nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := l.Metrics(cctx, node)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("deploy: prismd on %s (pid %d) not ready after %v (no /metrics at %s, no socket %s)%s",
				node, p.pid, l.opts.ReadyTimeout, MetricsAddr, l.ControlSocket(node), l.logReport(node))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Down removes lab t: stops the prismd processes recorded in its state
// directory, deletes its namespaces and any leftover temporary veths, and
// removes the state directory. It is idempotent and works on a half-built
// lab; of a lab that is not up it logs "was not up".
//
// When the state directory has no state for the lab but its namespaces
// exist and processes run in them (the lab was brought up with another
// Options.StateDir), Down removes nothing and returns a *NoStateError:
// deleting the namespaces would leave those processes running, unnamed.
// Namespaces with no process in them are removed.
func Down(t *Topology, o *Options) error { return newLab(t, o).Down() }

// Down removes the lab; see the package-level Down.
func (l *Lab) Down() error {
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	present := l.presentNS()
	wasUp := len(present) > 0 || l.hasState()
	if e := l.checkState(present); e != nil {
		if len(e.Procs) > 0 {
			// The lock file is this call's own: the state, if any, is
			// under another directory.
			unlock(true)
			return e
		}
		l.logf("no state in %s, and no process runs in its namespaces; removing them", l.dir)
	}
	if err := l.down(); err != nil {
		unlock(false)
		return err
	}
	unlock(true)
	if wasUp {
		l.logf("down")
	} else {
		l.logf("was not up")
	}
	return nil
}

func (l *Lab) down() error {
	var errs []error
	nodes := l.Topo.NodesOf(KindPrismd)
	errs = append(errs, parallel(len(nodes), len(nodes)+1, func(i int) error { return l.stop(nodes[i]) }))
	// Processes the user started in the lab (an AM, ranks, through lab
	// exec) outlive its namespaces, unreachable and holding their ports:
	// name them, with what ends them. Down said only "down".
	if left := nsProcesses(l.presentNS()); len(left) > 0 {
		var b strings.Builder
		for _, p := range left {
			fmt.Fprintf(&b, "\n  %s", p)
		}
		l.logf("%d processes still run in its namespaces and keep running once they are gone (end them with kill PID):%s", len(left), b.String())
	}
	for _, n := range l.Topo.names {
		if err := deleteNS(l.NetNS(n)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, l.cleanup())
	return errors.Join(errs...)
}

// cleanup removes the temporary veths left in the root namespace and the
// state directory.
func (l *Lab) cleanup() error {
	var errs []error
	links, err := listLinks(netlink.LinkList)
	if err != nil {
		errs = append(errs, err)
	}
	pfx := tmpPrefix(l.Topo.Name)
	for _, link := range links {
		if strings.HasPrefix(link.Attrs().Name, pfx) {
			if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("deploy: delete leftover %s: %w", link.Attrs().Name, err))
			}
		}
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dumpRetries bounds the retries of a netlink dump that another process's
// link changes interrupted.
const dumpRetries = 10

// listLinks runs list (a netlink link dump) again while the kernel reports
// the dump interrupted (NLM_F_DUMP_INTR: links were added or removed while
// it ran, as other labs and tests on the host do), so one lab's Down or
// Status does not fail because another lab was coming up. After
// dumpRetries interrupted dumps the last one is used: the links it lists
// exist, and only a link created meanwhile can be missing.
func listLinks(list func() ([]netlink.Link, error)) ([]netlink.Link, error) {
	for i := 0; ; i++ {
		links, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
		if i == dumpRetries {
			return links, nil
		}
	}
}

func deleteNS(name string) error {
	path := filepath.Join(netnsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		return os.NewSyscallError("umount "+path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ours reports whether pid is still the prismd this lab started for node:
// its command line names the node's config file. A recycled PID is left
// alone.
func (l *Lab) ours(pid int, node string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("\x00"+l.ConfigFile(node)))
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// stoppedProc reports whether pid is stopped by a signal (SIGSTOP,
// SIGTSTP) or a tracer: alive, but a stopped prismd forwards nothing.
func stoppedProc(pid int) bool {
	st := procState(pid)
	return st == 'T' || st == 't'
}

// procState is pid's state letter from /proc/PID/stat, 0 if it has none.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 'R'
}

func (l *Lab) stop(node string) error {
	l.mu.Lock()
	p := l.procs[node]
	l.mu.Unlock()
	pid := readPID(l.dir, node)
	if p != nil {
		pid = p.pid
	}
	if p != nil {
		// Our own child: the pid cannot be reused before it is reaped, and
		// its command line may not show prismd yet (stopped between fork
		// and exec, as a cancelled Up does), so it is signalled without
		// the command-line check that guards pids read from files.
		select {
		case <-p.done:
			return nil
		default:
		}
	} else if pid <= 0 || !alive(pid) || !l.ours(pid, node) {
		return nil
	}
	gone := func(d time.Duration) bool {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if p != nil {
				select {
				case <-p.done:
					return true
				default:
				}
			} else if !alive(pid) {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	syscall.Kill(pid, syscall.SIGTERM)
	if gone(l.opts.StopTimeout) {
		return nil
	}
	l.logf("prismd on %s (pid %d) ignored SIGTERM for %v; sending SIGKILL", node, pid, l.opts.StopTimeout)
	syscall.Kill(pid, syscall.SIGKILL)
	if gone(5 * time.Second) {
		return nil
	}
	return fmt.Errorf("deploy: prismd on %s (pid %d) survived SIGKILL", node, pid)
}
