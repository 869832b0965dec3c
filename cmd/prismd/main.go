package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/netif"
	"github.com/prismd/prismd/metrics"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("prismd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgFile := fs.String("config", "/etc/prismd/prismd.yaml", "configuration `file` (YAML)")
	check := fs.Bool("check-config", false, "validate the configuration and its ports' interfaces in this network namespace, print the result and exit 0 (valid) or 1 (invalid)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	cpuprof := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (for go tool pprof; stopped on shutdown)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: not a usage error
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "prismd %s (revision %s)\n", version, revision())
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "prismd: unexpected argument %q; all options are flags (see -h)\n", fs.Arg(0))
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "prismd: --log-level %q: use debug, info, warn or error\n", *level)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch *format {
	case "text":
		h = slog.NewTextHandler(stderr, hopts)
	case "json":
		h = slog.NewJSONHandler(stderr, hopts)
	default:
		fmt.Fprintf(stderr, "prismd: --log-format %q: use text or json\n", *format)
		return 2
	}
	log := slog.New(h)
	slog.SetDefault(log)

	cfg, err := LoadConfig(*cfgFile)
	if *check {
		if err != nil {
			fmt.Fprintf(stderr, "prismd: configuration invalid: %v\n", err)
			return 1
		}
		return checkInterfaces(*cfgFile, cfg, stdout, stderr)
	}
	if err != nil {
		log.Error("cannot start: configuration invalid", "err", err)
		return 1
	}
	if *cpuprof != "" {
		// Profiles come from the real daemon on real ports: the per-frame
		// cost in a lab is what the micro-benchmarks cannot show.
		f, err := os.Create(*cpuprof)
		if err != nil {
			log.Error("cannot start: --cpuprofile", "err", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error("cannot start: --cpuprofile", "err", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	d, err := startDaemon(*cfgFile, cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			d.reload()
			continue
		}
		log.Info("shutting down", "signal", sig.String())
		break
	}
	d.logTotals()
	d.close()
	log.Info("stopped")
	return 0
}

// heldNowHint follows --check-config's warning of a port or socket another
// process holds: a warning, since the check also runs before a reload of
// the prismd that holds it.
const heldNowHint = "(a new prismd with this configuration would refuse to start now; a reload of that one is fine)"

// keepRestartOnly sets c's keys that are read at start only (the ones a
// reload warns of as awaiting a restart) to running's values.
func (c *Config) keepRestartOnly(running *Config) {
	c.Workers, c.WorkerHandoff, c.MetricsListen, c.ControlListen = running.Workers, running.WorkerHandoff, running.MetricsListen, running.ControlListen
	c.KulischPartials, c.MACTableSize = running.KulischPartials, running.MACTableSize
	c.MaxContexts, c.AccumulatorMemoryMB = running.MaxContexts, running.AccumulatorMemoryMB
}

// checkInterfaces is --check-config's look at the ports' interfaces as
// this network namespace has them, after the file itself passed. One that
// is missing or cannot carry frames fails the check: the daemon refuses to
// start with it, and a reload with it is rejected, so a check that passed
// it could not guard an ExecStartPre. A configured MTU above the
// interface's is a warning only: the interface may be raised before start.
func checkInterfaces(file string, cfg *Config, stdout, stderr io.Writer) int {
	ifaces := currentIfaces()
	rc := 0
	for _, pc := range cfg.Ports {
		switch _, err := netif.Ethernet(pc.Name); {
		case errors.Is(err, netif.ErrNotEthernet):
			fmt.Fprintf(stderr, "prismd: configuration invalid: %s: port %q: %v\n", file, pc.Name, err)
			rc = 1
		case err != nil:
			fmt.Fprintf(stderr, "prismd: configuration invalid: %s: port %q: %v; prismd would refuse to start with this configuration "+
				"(and a reload with it is rejected): create the interface or correct the name, and run the check in the network namespace prismd runs in\n",
				file, pc.Name, err)
			rc = 1
		default:
			if w := mtuAbove(pc, ifaces[pc.Name].mtu); w != "" {
				fmt.Fprintf(stderr, "prismd: warning: %s: port %q: %s\n", file, pc.Name, w)
			}
			// Held now is a warning, not a failure: the check also
			// runs beside the prismd a reload of this file is for.
			if ln, err := claimPort(pc.Name); err != nil {
				fmt.Fprintf(stderr, "prismd: warning: %s: %v %s\n", file, err, heldNowHint)
			} else {
				ln.Close()
			}
		}
	}
	if cfg.MetricsListen != "" {
		if ln, err := net.Listen("tcp", cfg.MetricsListen); err != nil {
			fmt.Fprintf(stderr, "prismd: warning: %s: metrics_listen %q cannot be bound now: %v (a new prismd with this configuration would refuse to start; "+
				"see who holds it with 'ss -ltnp', or choose another port)\n", file, cfg.MetricsListen, err)
		} else {
			ln.Close()
		}
	}
	if cfg.ControlListen != "" {
		if _, err := checkControlSocket(cfg.ControlListen); err != nil {
			fmt.Fprintf(stderr, "prismd: warning: %s: %v %s\n", file, err, heldNowHint)
		}
	}
	if cfg.ControlListen != "" {
		// The daemon binds it at start and stops when it cannot: a
		// missing directory passed the check and failed the start.
		dir := filepath.Dir(cfg.ControlListen)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			fmt.Fprintf(stderr, "prismd: configuration invalid: %s: control_listen %q: directory %s does not exist; prismd would refuse to start: "+
				"create it (systemd: RuntimeDirectory=prismd makes /run/prismd) or choose another path\n", file, cfg.ControlListen, dir)
			rc = 1
		}
	}
	if rc == 0 {
		fmt.Fprintf(stdout, "prismd: configuration %s is valid (%s, %s)\n", file, plural(len(cfg.Ports), "port"), plural(cfg.Workers, "worker"))
	}
	return rc
}

// mtuAbove says what goes wrong when port pc's configured mtu is above
// its interface's MTU ifMTU, or "" when it is not: the port then reads and
// forwards frames the kernel refuses to send on the interface, and each is
// lost as tx_error, while the port opened without a word.
func mtuAbove(pc PortConfig, ifMTU int) string {
	if pc.MTU == 0 || ifMTU == 0 || pc.MTU <= ifMTU {
		return ""
	}
	return fmt.Sprintf("mtu %d is above interface %s's MTU %d: frames longer than %d bytes cannot be sent on it and are dropped as tx_error; "+
		"raise the interface's MTU (ip link set %s mtu %d) or leave mtu out to follow the interface",
		pc.MTU, pc.Name, ifMTU, ifMTU, pc.Name, pc.MTU)
}

// warnMTUs warns, at start and on every reload, of each port whose
// configured mtu is above its interface's (mtuAbove).
// Callers hold d.mu (or run before any goroutine that takes it).
func (d *daemon) warnMTUs(cfg *Config) {
	ifaces := currentIfaces()
	for _, pc := range cfg.Ports {
		if ifMTU := ifaces[pc.Name].mtu; mtuAbove(pc, ifMTU) != "" {
			d.mtuLow[pc.Name] = ifMTU
			d.log.Warn("port's mtu is above its interface's MTU: frames longer than the interface's MTU cannot be sent on it and are dropped as tx_error",
				"port", pc.Name, "mtu", pc.MTU, "interface_mtu", ifMTU,
				"fix", fmt.Sprintf("ip link set %s mtu %d, or leave mtu out to follow the interface", pc.Name, pc.MTU))
		} else {
			delete(d.mtuLow, pc.Name)
		}
	}
}

// watchMTU says when a running port's interface MTU falls below its
// configured mtu, and when it is back: without it, lowering an
// interface's MTU under a running prismd was said only by tx_error
// counts. (A port without mtu follows its interface and is reopened.)
// Callers hold d.mu.
func (d *daemon) watchMTU(pc PortConfig, ifMTU int) {
	low, said := d.mtuLow[pc.Name]
	switch {
	case mtuAbove(pc, ifMTU) != "":
		if said && low == ifMTU {
			return
		}
		d.mtuLow[pc.Name] = ifMTU
		d.log.Warn("port's interface MTU changed to below its mtu: frames longer than the interface's MTU cannot be sent on it and are dropped as tx_error",
			"port", pc.Name, "mtu", pc.MTU, "interface_mtu", ifMTU,
			"fix", fmt.Sprintf("ip link set %s mtu %d, or lower mtu in the configuration and reload", pc.Name, pc.MTU))
	case said && ifMTU != 0:
		delete(d.mtuLow, pc.Name)
		d.log.Info("port's interface MTU is back at or above its mtu", "port", pc.Name, "mtu", pc.MTU, "interface_mtu", ifMTU)
	}
}

type openPort struct {
	cfg   PortConfig
	port  dataplane.Port
	claim net.Listener // this process's claim on the interface (ownership.go)
	iface ifaceState   // the interface when the port was opened
}

type daemon struct {
	file    string
	log     *slog.Logger
	cfg     *Config
	dp      *dataplane.Dataplane
	ports   map[string]openPort
	metrics *metrics.Server
	control *http.Server
	ctlLn   net.Listener
	// mu serialises what changes the port set: a reload and the link
	// watcher's reopening of a re-created interface.
	mu   sync.Mutex
	gone map[string]bool // ports whose interface is missing, said once
	// mtuLow holds each port whose interface MTU was said to be below its
	// configured mtu, with that MTU (warnMTUs, watchMTU).
	mtuLow map[string]int
	// link is the state of each port's interface the log last said, or
	// found at start (carrier).
	link map[string]linkState
	// oversize is each dropWarning's count per port ("kind/port") at the
	// last look, oversizeAt when it was last warned of
	// (oversizeWarnEvery) and oversizeSaid the count then (or at the
	// first look): a warning's "dropped" is every drop since the last
	// one, also those of the looks it kept quiet.
	oversize     map[string]uint64
	oversizeAt   map[string]time.Time
	oversizeSaid map[string]uint64
	quit         chan struct{}
	done         chan struct{}
}

func startDaemon(file string, cfg *Config, log *slog.Logger) (*daemon, error) {
	opts := dataplane.Options{Workers: cfg.Workers, NoInline: cfg.WorkerHandoff, MACAging: cfg.Aging(), NodeMAC: cfg.NodeMACAddr(), Logger: log,
		MACTableSize: cfg.MACTableSlots()}
	if handlerFactory != nil {
		opts.Handler = handlerFactory(cfg)
	}
	dp, err := dataplane.New(opts)
	if err != nil {
		return nil, err
	}
	d := &daemon{file: file, log: log, cfg: cfg, dp: dp, ports: map[string]openPort{}, gone: map[string]bool{}, mtuLow: map[string]int{}, link: map[string]linkState{},
		oversize: map[string]uint64{}, oversizeAt: map[string]time.Time{}, oversizeSaid: map[string]uint64{}, quit: make(chan struct{}), done: make(chan struct{})}
	if err := d.applyPorts(cfg); err != nil {
		dp.Close()
		return nil, err
	}
	if err := d.startServers(cfg); err != nil {
		close(d.done)
		d.close()
		return nil, err
	}
	// The watcher looks interfaces up by name from a thread of its own: in
	// the daemon's network namespace, which a goroutine's thread is in
	// only if the whole process is (ip netns exec), not when the caller
	// moved just its own locked thread (tests).
	ns, err := netns.Get()
	if err != nil {
		close(d.done)
		d.close()
		return nil, fmt.Errorf("reading this thread's network namespace: %w", err)
	}
	ifaces := currentIfaces()
	for _, pc := range cfg.Ports {
		d.carrier(pc.Name, ifaces[pc.Name], true)
	}
	d.warnMTUs(cfg) // before the watcher, which shares its state
	go d.watchLinks(ns, linkCheckEvery)
	warnNoAM(log, cfg)
	log.Info("prismd running", "version", version, "ports", len(cfg.Ports), "workers", cfg.Workers,
		"metrics", cfg.MetricsListen, "control", cfg.ControlListen)
	return d, nil
}

// applyPorts opens the ports cfg adds or changes, and reopens those whose
// interface was re-created (a new ifindex: the old socket is bound to the
// dead one) or, with no mtu configured, changed its MTU, then installs the
// new port set. Unchanged ports keep their socket and RX goroutine. On
// error nothing changes. Callers hold d.mu (or run before any goroutine
// that takes it).
func (d *daemon) applyPorts(cfg *Config) error {
	var list []dataplane.Port
	next := map[string]openPort{}
	var opened []dataplane.Port
	var claimed []net.Listener // new claims, released if this fails
	undo := func() {
		for _, o := range opened {
			o.Close()
		}
		for _, c := range claimed {
			c.Close()
		}
	}
	ifaces := currentIfaces()
	for _, pc := range cfg.Ports {
		old, had := d.ports[pc.Name]
		cur, present := ifaces[pc.Name]
		why := ""
		if had && reflect.DeepEqual(old.cfg, pc) {
			switch {
			case present && cur.index != old.iface.index:
				why = fmt.Sprintf("interface re-created (ifindex %d, was %d)", cur.index, old.iface.index)
			case present && pc.MTU == 0 && cur.mtu != old.iface.mtu:
				why = fmt.Sprintf("interface MTU changed to %d (was %d)", cur.mtu, old.iface.mtu)
			default:
				list = append(list, old.port)
				next[pc.Name] = old
				continue
			}
		}
		claim := old.claim
		if !had {
			c, err := claimPort(pc.Name)
			if err != nil {
				undo()
				return err
			}
			claim = c
			claimed = append(claimed, c)
		}
		p, err := openBackend(pc)
		if err != nil {
			undo()
			return err
		}
		p = dataplane.WithFault(p, pc.fault())
		if f := pc.fault(); f.Active() {
			// An impairment left in a config looks like a mystery
			// slowdown: say it where an operator looks first.
			d.log.Warn("port impairs its frames on purpose (its fault: config, for tests and labs; remove it in production). "+
				"The ingress fault spares CONTROL, which the port reads on its lane", "port", pc.Name, "fault", f.String())
		}
		opened = append(opened, p)
		list = append(list, p)
		now := currentIfaces()[pc.Name] // as opened (the listing above may predate a re-creation)
		next[pc.Name] = openPort{cfg: pc, port: p, claim: claim, iface: now}
		if why != "" {
			d.log.Warn("port reopened", "port", pc.Name, "why", why, "mtu", p.MTU(), "mac", net.HardwareAddr(macSlice(p.MAC())).String())
		} else {
			d.log.Info("port opened", "port", pc.Name, "mtu", p.MTU(), "mac", net.HardwareAddr(macSlice(p.MAC())).String())
		}
	}
	before := map[string]int{}
	var beforeNames []string
	for i, p := range d.dp.Ports() {
		before[p.Name()] = i
		beforeNames = append(beforeNames, p.Name())
	}
	if err := d.dp.SetPorts(list); err != nil {
		undo()
		return err
	}
	for i, pc := range cfg.Ports {
		if j, ok := before[pc.Name]; ok && j != i {
			// The AM's topology and the operations it set up name ports
			// by index (their order in this file): a reorder breaks them
			// (DATA then arrives on the 'wrong_port').
			d.log.Warn("port moved to another index: operations set up by the AM refer to ports by index, "+
				"so the AM's topology must list this switch's ports in the new order, and operations in flight here will fail",
				"port", pc.Name, "index", i, "was", j)
		}
		if _, existed := before[pc.Name]; !existed && i < len(beforeNames) {
			// A new interface at an index another one held: the same
			// break, and no port moved to say it.
			d.log.Warn("port index now names another interface: operations set up by the AM refer to ports by index, "+
				"so the AM's topology must name this interface at this index, and operations in flight here will fail",
				"index", i, "port", pc.Name, "was", beforeNames[i])
		}
	}
	for name, o := range d.ports {
		if _, ok := next[name]; !ok {
			o.claim.Close()
			delete(d.gone, name)
			delete(d.link, name)
			d.log.Info("port removed", "port", name)
		}
	}
	d.ports = next
	if onPorts != nil && len(list) > 0 {
		m := list[0].MTU()
		for _, p := range list[1:] {
			m = min(m, p.MTU())
		}
		onPorts(m)
	}
	return nil
}

// oversizeWarnEvery bounds each of warnDrops's warnings per port.
var oversizeWarnEvery = time.Minute // tests shorten it

// dropWarning is a per-port count that was only counted, at line rate too
// fast to log each, and the warning warnDrops gives when it grew.
type dropWarning struct {
	key   string
	count func(dataplane.PortSample) uint64
	// min is the growth between two looks (linkCheckEvery) that is
	// worth a warning; 0 means any.
	min uint64
	// say logs the warning for port (its MTU, or 0 if unknown) that
	// counted n more since the last look.
	say func(d *daemon, port string, mtu int, n uint64)
}

var dropWarnings = []dropWarning{
	// The usual cause of oversize drops is not the link's MTU but a sender
	// on a veth with segmentation offload on (TSO/GSO, on by default), whose
	// TCP reaches prismd as frames of up to 64 KB: TCP through the switch
	// then crawls or hangs while ping works.
	{"oversize", func(p dataplane.PortSample) uint64 { return p.Drops[dataplane.DropOversize] }, 0,
		func(d *daemon, port string, mtu int, n uint64) {
			d.log.Warn("port dropped frames longer than its MTU: a sender with segmentation offload on (TSO/GSO, the default on a veth: "+
				"frames up to 64 KB) or a larger MTU across the link; turn offload off on the sender (ethtool -K IF tso off gso off) "+
				"or match the MTUs (prismd_port_drops_total{reason=\"oversize\"} counts them; this repeats at most every minute, counting every one since the last time)",
				"port", port, "mtu", mtu, "dropped", n)
		}},
	{"tx_oversize", func(p dataplane.PortSample) uint64 { return p.Drops[dataplane.DropTxOversize] }, 0,
		func(d *daemon, port string, mtu int, n uint64) {
			d.log.Warn("port could not send frames longer than its MTU that came in on a port with a larger one: "+
				"give the ports one MTU, or the hosts behind the larger one this port's "+
				"(prismd_port_drops_total{reason=\"tx_oversize\"} counts them; this repeats at most every minute, counting every one since the last time)",
				"port", port, "mtu", mtu, "dropped", n)
		}},
	{"tx_error", func(p dataplane.PortSample) uint64 { return p.Drops[dataplane.DropTxError] }, 0,
		func(d *daemon, port string, mtu int, n uint64) {
			d.log.Warn("sending on the port failed: the kernel refused the frames (ip -s link show "+port+" may say why) "+
				"(prismd_port_drops_total{reason=\"tx_error\"} counts them; this repeats at most every minute, counting every one since the last time)",
				"port", port, "mtu", mtu, "dropped", n)
		}},
	{"unlearned", func(p dataplane.PortSample) uint64 { return p.Unlearned }, 0,
		func(d *daemon, port string, _ int, n uint64) {
			st := d.dp.Stats()
			d.log.Warn("the MAC table is full: stations behind this port are not learned and frames to them are flooded to every port; "+
				"raise mac_table_size (a restart), shorten mac_aging, or find what sends from so many MACs "+
				"(prismd_port_mac_unlearned_total counts the frames; this repeats at most every minute, counting every one since the last time)",
				"port", port, "stations", st.MACEntries, "capacity", st.MACCapacity, "frames", n)
		}},
	// A frame of this switch's own coming back, or stations that keep
	// moving between ports, is what a loop looks like; prismd runs no
	// spanning tree, so a loop circulates every broadcast for ever. A
	// station that moves its cable moves once: a few moves say nothing.
	{"loopback", func(p dataplane.PortSample) uint64 { return p.Drops[dataplane.DropLoopback] }, 0,
		func(d *daemon, port string, _ int, n uint64) {
			d.log.Warn("frames sent by this switch came back in on the port: the network loops back to it, and prismd runs no spanning tree; "+
				"remove the loop, or run STP on a neighbouring bridge "+
				"(prismd_port_drops_total{reason=\"loopback\"} counts them; this repeats at most every minute, counting every one since the last time)",
				"port", port, "frames", n)
		}},
	{"moves", func(p dataplane.PortSample) uint64 { return p.Moved }, 100,
		func(d *daemon, port string, _ int, n uint64) {
			d.log.Warn("stations keep moving to this port from others: most likely a loop through this switch, which runs no spanning tree "+
				"(every broadcast circulates for ever); remove the loop, or run STP on a neighbouring bridge "+
				"(prismd_port_mac_moves_total counts them; this repeats at most every minute, counting every one since the last time)",
				"port", port, "moves", n)
		}},
}

// warnDrops gives each dropWarning for the ports whose count grew since
// the last look, at most once every oversizeWarnEvery per port and kind.
func (d *daemon) warnDrops(now time.Time) {
	for _, ps := range d.dp.Stats().Ports {
		for _, w := range dropWarnings {
			key := w.key + "/" + ps.Name
			n := w.count(ps)
			last, seen := d.oversize[key]
			d.oversize[key] = n
			if !seen {
				d.oversizeSaid[key] = n
			}
			if !seen || n <= last || n-last < w.min || now.Sub(d.oversizeAt[key]) < oversizeWarnEvery {
				continue
			}
			d.oversizeAt[key] = now
			since := d.oversizeSaid[key]
			d.oversizeSaid[key] = n
			mtu := 0
			if o, ok := d.ports[ps.Name]; ok {
				mtu = o.port.MTU()
			}
			w.say(d, ps.Name, mtu, n-since)
		}
	}
}

// logTotals logs each port's counters at shutdown: the last word of a
// daemon whose metrics are no longer scraped.
func (d *daemon) logTotals() {
	for _, p := range d.dp.Stats().Ports {
		drops := p.KernelDrops // as /v1/status counts them
		for _, n := range p.Drops {
			drops += n
		}
		d.log.Info("port totals", "port", p.Name, "rx_frames", p.RxFrames, "tx_frames", p.TxFrames, "drops", drops)
	}
}

// warnNoAM says, when the collective engine runs, that an empty am_sources
// trusts no one: every CONTROL is dropped and no collective can be set up
// here, which otherwise showed only as setups timing out at the AM.
func warnNoAM(log *slog.Logger, cfg *Config) {
	if handlerFactory != nil && len(cfg.AMSources) == 0 {
		log.Warn("am_sources is empty: this switch accepts CONTROL from no one, so no collective can be set up on it; " +
			"list the MAC of the AM's interface (prismctl am prints it when it starts)")
	}
}

// setNetns is netns.Set (tests replace it).
var setNetns = netns.Set

// enterNetns moves the calling, locked thread into ns unless it is there
// already: setns can be refused (systemd's RestrictNamespaces=yes makes
// it EPERM) even into the namespace the thread is in.
func enterNetns(ns netns.NsHandle) error {
	if cur, err := netns.Get(); err == nil {
		same := cur.Equal(ns)
		cur.Close()
		if same {
			return nil
		}
	}
	return setNetns(ns)
}

// linkCheckEvery is how often the link watcher looks at the ports'
// interfaces: a re-created interface is back in service within it.
var linkCheckEvery = 2 * time.Second

// watchLinks follows the ports' interfaces: one that disappears is said
// once (its frames are lost until it is back), and one re-created, or
// whose MTU changed while the configuration leaves the MTU to the
// interface, is reopened. Without it such a port stayed bound to the dead
// ifindex until a restart, counting tx_link_down, and a SIGHUP kept it too.
func (d *daemon) watchLinks(ns netns.NsHandle, every time.Duration) {
	defer close(d.done)
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	// Entered only when this thread is elsewhere: under the shipped
	// systemd unit (RestrictNamespaces=yes) setns fails with EPERM even
	// into the namespace the thread is already in, and the watcher, with
	// every link line, reopen and rate-limited warning it runs, was off.
	err := enterNetns(ns)
	ns.Close()
	if err != nil {
		d.log.Error("link watcher: cannot enter the daemon's network namespace: link states, the reopening of re-created interfaces "+
			"and the rate-limited drop warnings (loops, oversize, a full MAC table) are off until a restart", "err", err)
		<-d.quit
		return
	}
	// Link events say a lost carrier at once: polled, a flap shorter
	// than every went unsaid. Without them the polling below still says
	// the longer ones.
	updates := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(updates, d.quit, netlink.LinkSubscribeOptions{}); err != nil {
		d.log.Debug("link watcher: no netlink link events; carrier changes are seen by polling only", "err", err)
		updates = nil
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.quit:
			return
		case u, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			d.mu.Lock()
			if a := u.Attrs(); a != nil && d.ports[a.Name].port != nil && !d.gone[a.Name] {
				cur := ifaceState{up: a.RawFlags&unix.IFF_UP != 0, running: a.RawFlags&unix.IFF_RUNNING != 0}
				switch {
				case u.Header.Type == unix.RTM_DELLINK:
					d.markGone(a.Name)
				case u.Header.Type != unix.RTM_NEWLINK:
				case !cur.up && !ifaceExists(a.Name):
					// Deleting an interface first sets it down: said
					// as "set down" and then "gone", it was two link
					// changes for one deletion.
					d.markGone(a.Name)
				default:
					d.carrier(a.Name, cur, false)
				}
			}
			d.mu.Unlock()
			continue
		case <-t.C:
		}
		d.mu.Lock()
		stale := false
		ifaces := currentIfaces()
		for name, o := range d.ports {
			cur, present := ifaces[name]
			switch {
			case !present:
				d.markGone(name)
				continue
			case d.gone[name]:
				delete(d.gone, name)
				d.log.Info("port's interface is back", "port", name)
			}
			d.carrier(name, cur, false)
			d.watchMTU(o.cfg, cur.mtu)
			stale = stale || cur.index != o.iface.index || o.cfg.MTU == 0 && cur.mtu != o.iface.mtu
		}
		if stale {
			if err := d.applyPorts(d.cfg); err != nil {
				d.log.Error("reopening a re-created interface failed; retrying", "err", err)
			}
		}
		d.warnDrops(time.Now())
		d.mu.Unlock()
	}
}

// markGone says once that port name's interface is gone. Callers hold
// d.mu.
func (d *daemon) markGone(name string) {
	delete(d.link, name) // said again of the new one, if so
	if d.gone[name] {
		return
	}
	d.gone[name] = true
	d.dp.SetLinkState(name, dataplane.LinkGone) // not "set down": show ports and LINK_DOWN say what happened
	d.log.Warn("port's interface is gone: its frames are lost until an interface of that name exists again, and prismd then reopens it",
		"port", name)
}

// ifaceExists reports whether this network namespace has an interface
// called name.
func ifaceExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// carrier says when port name's link loses its carrier and when it has
// it again, one line each, and at start a port whose link is down then.
// The dataplane's sockets are told only of an interface set down (ip link
// set IF down), which the dataplane logs; a link without carrier (a veth
// whose peer is down, an unplugged cable) loses every frame without a
// word from them. An interface set down is left to the dataplane's line.
// Callers hold d.mu (or run before any goroutine that takes it).
func (d *daemon) carrier(name string, cur ifaceState, start bool) {
	now := linkUp
	switch {
	case !cur.up:
		now = linkAdminDown
	case !cur.running:
		now = linkNoCarrier
	}
	prev, seen := d.link[name]
	if seen && prev == now {
		return
	}
	d.link[name] = now
	if d.dp != nil {
		// The engine asks it when a stream times out: a port down
		// makes the failure LINK_DOWN, which the AM blames on the link.
		d.dp.SetLinkState(name, [...]dataplane.LinkState{linkUp: dataplane.LinkUp, linkAdminDown: dataplane.LinkAdminDown,
			linkNoCarrier: dataplane.LinkNoCarrier}[now])
	}
	switch now {
	case linkAdminDown:
		if start || !seen {
			d.log.Info("port is set down (administratively): its frames are lost until it is set up ('ip link set "+name+" up')", "port", name)
		} else {
			d.log.Info("port was set down (administratively): its frames are lost until it is set up again", "port", name)
		}
	case linkNoCarrier:
		switch {
		case start || !seen:
			d.log.Info("port's link is down at start (no carrier: its peer, cable or switch port is down); its frames are dropped until it comes up", "port", name)
		case prev == linkAdminDown:
			// Set up: a veth or NIC has no carrier for a moment; the
			// line that follows says when it has.
			d.log.Info("port was set up; it has no carrier yet", "port", name)
		default:
			d.log.Info("port's link went down (no carrier: its peer, cable or switch port is down); its frames are dropped until it comes up again", "port", name)
		}
	case linkUp:
		switch {
		case start || !seen:
		case prev == linkAdminDown:
			d.log.Info("port was set up again: its link is up", "port", name)
		default:
			d.log.Info("port's link is up again (carrier back)", "port", name)
		}
	}
}

// linkState is a port interface's state as carrier logs it.
type linkState uint8

const (
	linkUp        linkState = iota // up, with carrier
	linkAdminDown                  // set down (no IFF_UP)
	linkNoCarrier                  // up, no carrier (no IFF_RUNNING)
)

// openBackend opens pc with its backend (afpacket or afxdp).
func openBackend(pc PortConfig) (dataplane.Port, error) {
	if pc.Backend == BackendAFXDP {
		p, err := dataplane.OpenAFXDP(pc.Name, pc.XDPOptions())
		if err != nil {
			alt := "set backend: afpacket for this port to use AF_PACKET instead"
			if pc.XDPMode == "native" {
				alt = "try xdp_mode: generic (works on every driver), or " + alt
			}
			return nil, fmt.Errorf("port %q: backend afxdp: %w (the kernel refused XDP/AF_XDP on interface %q; prismd needs root or CAP_NET_ADMIN+CAP_NET_RAW+CAP_BPF; %s)", pc.Name, err, pc.Name, alt)
		}
		return p, nil
	}
	p, err := dataplane.OpenAFPacket(pc.Name, pc.Options())
	if errors.Is(err, netif.ErrNotEthernet) {
		return nil, fmt.Errorf("port %q: %w", pc.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("port %q: %w (check the interface exists in this network namespace and prismd has CAP_NET_RAW)", pc.Name, err)
	}
	return p, nil
}

func macSlice(m [6]byte) []byte { return m[:] }

func (d *daemon) startServers(cfg *Config) error {
	if cfg.MetricsListen != "" {
		bi := metrics.BuildInfo{Version: version, Revision: revision()}
		s, err := metrics.New(d.dp, bi)
		if err != nil {
			return err
		}
		if registerMetrics != nil {
			if err := registerMetrics(s); err != nil {
				return fmt.Errorf("engine metrics: %w", err)
			}
		}
		if err := s.Serve(cfg.MetricsListen); err != nil {
			return err
		}
		d.metrics = s
	}
	if cfg.ControlListen != "" {
		// A stale socket from a crashed run would make Listen fail; one a
		// running prismd answers on is not stale, and removing it took
		// that prismd's control socket away.
		if fi, err := os.Lstat(cfg.ControlListen); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if _, err := checkControlSocket(cfg.ControlListen); err != nil {
				return err
			}
			_ = os.Remove(cfg.ControlListen)
		}
		if fi, err := os.Lstat(cfg.ControlListen); err == nil && fi.Mode()&os.ModeSocket == 0 {
			// "address already in use (does the directory exist?)" sent
			// an operator whose path was a file or a directory looking
			// for a missing directory.
			what := "a " + fi.Mode().Type().String()
			switch {
			case fi.Mode().IsRegular():
				what = "a regular file"
			case fi.IsDir():
				what = "a directory"
			}
			return fmt.Errorf("control_listen %q exists and is %s, not a socket: remove it or choose another path", cfg.ControlListen, what)
		}
		ln, err := net.Listen("unix", cfg.ControlListen)
		if err != nil {
			return fmt.Errorf("control_listen %q: %w (does the directory exist? systemd's RuntimeDirectory=prismd creates /run/prismd)", cfg.ControlListen, err)
		}
		_ = os.Chmod(cfg.ControlListen, 0o660)
		mux := http.NewServeMux()
		mux.HandleFunc("GET /v1/status", d.status)
		mux.HandleFunc("GET /v1/macs", d.macs)
		if controlRoutes != nil {
			controlRoutes(mux)
		}
		d.ctlLn = ln
		d.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := d.control.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("control server stopped", "err", err)
			}
		}()
	}
	return nil
}

// kernelDrops is the drops key of /v1/status for PortSample.KernelDrops
// (prismd_port_kernel_drops_total).
const kernelDrops = "kernel"

// status is the introspection endpoint: port set and counters as JSON.
func (d *daemon) status(w http.ResponseWriter, r *http.Request) {
	st := d.dp.Stats()
	type port struct {
		Index    int               `json:"index"`
		Name     string            `json:"name"`
		MAC      string            `json:"mac"`
		MTU      int               `json:"mtu"`
		RxFrames uint64            `json:"rx_frames"`
		TxFrames uint64            `json:"tx_frames"`
		Drops    map[string]uint64 `json:"drops"`
		// RxPath is where the port reads its frames now, for a port
		// that moves them by rate (rx_sparse_fps): "lane" (every frame
		// at once) or "ring" (batched; CONTROL on the lane).
		RxPath       string `json:"rx_path,omitempty"`
		LaneSwitches uint64 `json:"lane_switches,omitempty"`
		// Fault is the port's configured impairment (dataplane.Fault's
		// String), absent without one.
		Fault string `json:"fault,omitempty"`
		// Link is what the link watcher last saw: "up", "set down" or
		// "without carrier", since LinkSinceUnixMs (absent if it never
		// changed while prismd ran).
		Link            string `json:"link"`
		LinkSinceUnixMs int64  `json:"link_since_unix_ms,omitempty"`
	}
	out := struct {
		Version    string            `json:"version"`
		Ports      []port            `json:"ports"`
		Classes    map[string]uint64 `json:"frames"`
		MACEntries int               `json:"mac_table_entries"`
	}{Version: version, Classes: map[string]uint64{}, MACEntries: st.MACEntries}
	ports := d.dp.Ports()
	faults := map[string]string{}
	d.mu.Lock()
	for name, o := range d.ports {
		faults[name] = o.cfg.fault().String()
	}
	d.mu.Unlock()
	for i, ps := range st.Ports {
		p := port{Index: i, Name: ps.Name, RxFrames: ps.RxFrames, TxFrames: ps.TxFrames, Drops: map[string]uint64{}}
		if ps.LaneTuned {
			p.RxPath, p.LaneSwitches = "ring", ps.LaneSwitches
			if ps.LaneAll {
				p.RxPath = "lane"
			}
		}
		if i < len(ports) {
			p.MAC = net.HardwareAddr(macSlice(ports[i].MAC())).String()
			p.MTU = ports[i].MTU()
		}
		for _, r := range dataplane.DropReasons() {
			if ps.Drops[r] != 0 {
				p.Drops[r.String()] = ps.Drops[r]
			}
		}
		// Frames the kernel dropped because the port's socket buffer or
		// ring was full: not a dataplane DropReason, but the loss an
		// operator looking at a port's drops most needs to see.
		if ps.KernelDrops != 0 {
			p.Drops[kernelDrops] = ps.KernelDrops
		}
		// The configured fault and what it dropped, next to the drops the
		// dataplane decided: with only those, 40% injected loss showed
		// as a port with next to no drops.
		p.Fault = faults[ps.Name]
		ls, since := d.dp.LinkState(ps.Name)
		p.Link = ls.String()
		if !since.IsZero() {
			p.LinkSinceUnixMs = since.UnixMilli()
		}
		if ps.Fault.IngressDrops != 0 {
			p.Drops["fault_ingress"] = ps.Fault.IngressDrops
		}
		if ps.Fault.EgressDrops != 0 {
			p.Drops["fault_egress"] = ps.Fault.EgressDrops
		}
		out.Ports = append(out.Ports, p)
	}
	for _, c := range dataplane.FrameClasses() {
		out.Classes[c.String()] = st.Classes[c]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// reload re-reads the configuration. On error the old one stays in force.
func (d *daemon) reload() {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg, err := LoadConfig(d.file)
	if err != nil {
		d.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	// What needs a restart: warned each, and named in the summary too (it
	// said changed=nothing right after these warnings).
	var restart []string
	needsRestart := func(key string, running, configured any) {
		restart = append(restart, key)
		d.log.Warn(key+" changed; takes effect only after a restart", "running", running, "configured", configured)
	}
	if cfg.Workers != d.cfg.Workers {
		needsRestart("workers", d.cfg.Workers, cfg.Workers)
	}
	if cfg.WorkerHandoff != d.cfg.WorkerHandoff {
		needsRestart("worker_handoff", d.cfg.WorkerHandoff, cfg.WorkerHandoff)
	}
	if cfg.MetricsListen != d.cfg.MetricsListen {
		needsRestart("metrics_listen", d.cfg.MetricsListen, cfg.MetricsListen)
	}
	if cfg.ControlListen != d.cfg.ControlListen {
		needsRestart("control_listen", d.cfg.ControlListen, cfg.ControlListen)
	}
	if cfg.MACTableSize != d.cfg.MACTableSize {
		needsRestart("mac_table_size", d.cfg.MACTableSize, cfg.MACTableSize)
	}
	if cfg.MaxContexts != d.cfg.MaxContexts {
		needsRestart("max_contexts", d.cfg.MaxContexts, cfg.MaxContexts)
	}
	if cfg.AccumulatorMemoryMB != d.cfg.AccumulatorMemoryMB {
		needsRestart("accumulator_memory_mb", d.cfg.AccumulatorMemoryMB, cfg.AccumulatorMemoryMB)
	}
	if cfg.PlainKulischPartials() != d.cfg.PlainKulischPartials() || cfg.CompactKulischPartials() != d.cfg.CompactKulischPartials() {
		named := func(v string) string {
			if v == "" {
				return "f64 (the default)"
			}
			return v
		}
		needsRestart("kulisch_partials", named(d.cfg.KulischPartials), named(cfg.KulischPartials))
	}
	if err := d.applyPorts(cfg); err != nil {
		d.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	d.warnMTUs(cfg)
	d.dp.SetMACAging(cfg.Aging())
	d.dp.SetNodeMAC(cfg.NodeMACAddr())
	// What took effect, by key: "configuration reloaded" alone left the
	// operator to diff the file.
	changed := portChanges(d.cfg.Ports, cfg.Ports)
	if cfg.Aging() != d.cfg.Aging() {
		changed = append(changed, fmt.Sprintf("mac_aging %s -> %s", seconds(d.cfg.Aging()), seconds(cfg.Aging())))
	}
	if cfg.NodeMAC != d.cfg.NodeMAC {
		changed = append(changed, fmt.Sprintf("node_mac %q -> %q", d.cfg.NodeMAC, cfg.NodeMAC))
	}
	if !slices.Equal(cfg.AMSources, d.cfg.AMSources) {
		changed = append(changed, fmt.Sprintf("am_sources %v -> %v", d.cfg.AMSources, cfg.AMSources))
	}
	// What needs a restart stays as it runs, so the next reload compares
	// against what runs (it warned of kulisch_partials after a reload
	// back to the running value, and not on a second reload of a change).
	next := *cfg
	next.keepRestartOnly(d.cfg)
	d.cfg = &next
	if onReload != nil {
		onReload(cfg)
	}
	warnNoAM(d.log, cfg)
	if len(changed) == 0 {
		changed = []string{"nothing"}
	}
	if len(restart) == 0 {
		d.log.Info("configuration reloaded", "ports", len(cfg.Ports), "changed", strings.Join(changed, "; "))
		return
	}
	d.log.Info("configuration reloaded", "ports", len(cfg.Ports), "changed", strings.Join(changed, "; "),
		"awaiting_restart", strings.Join(restart, ", "))
}

// portChanges lists, for the reload summary, the ports the new list adds,
// removes, configures differently (naming the keys) or puts in another
// order. "port opened" and "port removed" lines say it too, but a summary
// that left them out read as if the reload changed nothing.
func portChanges(old, cur []PortConfig) []string {
	was := map[string]PortConfig{}
	for _, pc := range old {
		was[pc.Name] = pc
	}
	is := map[string]bool{}
	var added, removed, keys, oldOrder, newOrder []string
	for _, pc := range cur {
		is[pc.Name] = true
		o, ok := was[pc.Name]
		if !ok {
			added = append(added, pc.Name)
			continue
		}
		newOrder = append(newOrder, pc.Name)
		if k := changedKeys(o, pc); len(k) > 0 {
			keys = append(keys, fmt.Sprintf("port %s %s", pc.Name, strings.Join(k, ", ")))
		}
	}
	for _, pc := range old {
		if !is[pc.Name] {
			removed = append(removed, pc.Name)
		} else {
			oldOrder = append(oldOrder, pc.Name)
		}
	}
	var out []string
	if len(added) > 0 {
		out = append(out, "ports added: "+strings.Join(added, ", "))
	}
	if len(removed) > 0 {
		out = append(out, "ports removed: "+strings.Join(removed, ", "))
	}
	out = append(out, keys...)
	if !slices.Equal(oldOrder, newOrder) {
		out = append(out, fmt.Sprintf("port order %s -> %s", strings.Join(oldOrder, ", "), strings.Join(newOrder, ", ")))
	}
	return out
}

// changedKeys names the YAML keys whose values differ between a and b.
func changedKeys(a, b PortConfig) []string {
	var keys []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			k := strings.Split(va.Type().Field(i).Tag.Get("yaml"), ",")[0]
			if k == "" {
				k = va.Type().Field(i).Name
			}
			keys = append(keys, k)
		}
	}
	return keys
}

// seconds prints a duration in seconds, as the configuration's examples
// write them (300s): Duration's own String printed 5s but 5m0s, so one
// summary showed "5s -> 10s" and "5m0s -> 3m20s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

func (d *daemon) close() {
	if d.quit != nil { // nil for a daemon built without startDaemon (tests)
		close(d.quit)
		<-d.done // the link watcher no longer touches the ports
	}
	for _, o := range d.ports {
		o.claim.Close()
	}
	if d.control != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = d.control.Shutdown(ctx)
		cancel()
		_ = os.Remove(d.cfg.ControlListen)
	}
	if d.metrics != nil {
		_ = d.metrics.Close()
	}
	_ = d.dp.Close() // closes ports, flushes worker TX batches
}

func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// plural is "1 port", "2 ports".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
