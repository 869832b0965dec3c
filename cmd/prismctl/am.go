// This file owns 'prismctl am': the Aggregation Manager and Host Coordinator
// daemon (package control/am) serving the runtime channel over HTTP and
// sending CONTROL from one host interface.

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
)

func init() {
	register("am", "run the Aggregation Manager / Host Coordinator (HTTP runtime channel + CONTROL)", runAM)
}

func runAM(args []string) int {
	fs := flag.NewFlagSet("am", flag.ContinueOnError)
	topo := fs.String("topology", "", "topology file or shipped topology name (single, spine-leaf, fat-tree, ...) (required)")
	listen := fs.String("listen", ":7000", "TCP address of the runtime channel (HTTP/JSON)")
	iface := fs.String("iface", "", "interface CONTROL frames are sent from, e.g. eth0 (required)")
	// Int, not Uint: flag's own error for a negative Uint ("parse
	// error") says neither what is wrong nor the range.
	timeoutMS := fs.Int("timeout-ms", 5000, "default contributor inactivity timeout of operations, in milliseconds, 1..600000 (ranks' --timeout overrides it)")
	ctlTimeout := fs.Duration("control-timeout", 2*time.Second, "bound on one CONTROL transaction (retransmissions included), > 0")
	rto := fs.Duration("rto", 20*time.Millisecond, "first CONTROL retransmission timeout, > 0 (it doubles up to 8x)")
	barrier := fs.Duration("barrier-timeout", 2*time.Minute, "how long ranks of one invocation wait for each other, > 0")
	quiet := fs.Bool("quiet", false, "do not log setup events")
	window := fs.Int("window", 0, "intervals (frames) in flight per stream, 1..65535 (0 = the AM's default, 64); switches' CAPS bound it")
	prepare := fs.Bool("prepare", true, "install a job's next invocation (same parameters and hosts) while the current one runs, so its grant needs no CONTROL exchange; an unused one is ABORTed after --prepare-ttl")
	prepareTTL := fs.Duration("prepare-ttl", 0, "how long a prepared operation waits for its ranks (0 = min(2s, half the operation timeout))")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismctl am --topology FILE --iface IF [--listen :7000]")
		fs.PrintDefaults()
	}
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if fs.NArg() > 0 {
		return amFlagErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if *topo == "" {
		return amFlagErr(fs, "--topology is required: a topology file, or one of %v", deploy.EmbeddedNames())
	}
	if *iface == "" {
		return amFlagErr(fs, "--iface is required: the interface of this host that reaches the switches (e.g. eth0)")
	}
	if *timeoutMS < 1 || *timeoutMS > 600000 {
		return amFlagErr(fs, "--timeout-ms %d: use 1..600000 (milliseconds; the default is 5000)", *timeoutMS)
	}
	// A zero or negative duration is refused rather than taken for the
	// default: with --barrier-timeout -5s every rank failed at once with
	// "did not arrive within -5s".
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"control-timeout", *ctlTimeout}, {"rto", *rto}, {"barrier-timeout", *barrier}} {
		if d.v <= 0 {
			return amFlagErr(fs, "--%s %v: use a positive duration (the default is %s)", d.name, d.v, fs.Lookup(d.name).DefValue)
		}
	}
	if *prepareTTL < 0 {
		return amFlagErr(fs, "--prepare-ttl %v: use 0 (the default: min(2s, half the operation timeout)) or a positive duration", *prepareTTL)
	}
	if *window < 0 || *window > 65535 {
		return amFlagErr(fs, "--window %d: use 1..65535 intervals (0 for the default, 64)", *window)
	}
	t, err := deploy.Load(*topo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl am: %v\n", err)
		return 1
	}
	conn, err := am.OpenConn(*iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl am: %v\n", err)
		return 1
	}
	cfg := am.Config{Topology: t, Conn: conn, RTO: *rto, CtlTimeout: *ctlTimeout, BarrierTimeout: *barrier,
		DefaultTimeoutMS: uint32(*timeoutMS), Window: am.Window{Intervals: uint16(*window)}, Prepare: *prepare, PrepareTTL: *prepareTTL}
	if *quiet {
		cfg.Logf = func(string, ...any) {}
	}
	m, err := am.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl am: %v\n", err)
		return 1
	}
	defer m.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl am: listen on %s: %v (%s)\n", *listen, err, listenHint(err))
		return 1
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: am.ConnContext}
	srv.RegisterOnShutdown(m.StopStreams)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("prismctl am: topology %s, CONTROL on %s (%s), runtime channel on http://%s", t.Name, *iface, conn.MAC(), ln.Addr())
	if !macIn(conn.MAC(), t.HostMACs()) {
		// The switches take CONTROL only from host interfaces of their
		// topology (am_sources): said at start, not at the first
		// collective's setup two seconds of retransmissions later.
		log.Printf("prismctl am: WARNING: %s (%s) is no host interface of topology %s: its switches will drop this AM's CONTROL "+
			"unless their am_sources name this MAC. A lab's MACs follow its name: give the AM the topology file 'prismctl lab up' wrote "+
			"(STATE_DIR/LAB/topology.yaml), and run it in a host namespace of that lab", *iface, conn.MAC(), t.Name)
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "prismctl am: %v\n", err)
		return 1
	}
	return 0
}

// usageErr prints what is wrong with the flags and how to see them all.
func amFlagErr(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "prismctl %s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(os.Stderr, "run 'prismctl %s -h' for all flags\n", fs.Name())
	return 2
}

// listenHint says what to do about a --listen that failed: another
// process holds the port, the address is not this host's, or it is not
// written HOST:PORT.
func listenHint(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "is another AM running there? pick another --listen"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no interface in this network namespace has that address; use one it has, or 0.0.0.0:PORT"
	}
	return "write --listen as HOST:PORT, e.g. 10.0.0.1:7000"
}

// macIn reports whether mac is one of macs.
func macIn(mac net.HardwareAddr, macs [][6]byte) bool {
	for _, m := range macs {
		if bytes.Equal(mac, m[:]) {
			return true
		}
	}
	return false
}
