// This file owns 'prismctl mcast': reliable multicast of a file through the
// bitmap framework (host/bitmap SendFile / ReceiveFile). The sender plans
// the job from the topology (control/bitmapam), registers it over CONTROL
// from its own interface (it is the job's AM), sends, and releases;
// receivers need only their endpoint (their index among the topology's
// hosts, or --endpoint) and learn everything else from the frames.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/host/bitmap"
	"github.com/prismd/prismd/internal/authkey"
	"github.com/prismd/prismd/parser"
)

func init() {
	register("mcast", "reliable multicast of a file with in-network ACK aggregation (send|recv|blast)", runMcast)
}

// The synopsis of send and recv, shared by 'mcast -h' and the subcommand's
// own -h so the two cannot disagree.
const (
	mcastSendUsage = "prismctl mcast send --file F --receivers h2,h3,... --topology T --node H [--iface eth0] [--auth-key-file K] [--no-aggregation]"
	mcastRecvUsage = "prismctl mcast recv --out F --topology T --node H [--iface eth0] [--auth-key-file K]"
)

func mcastUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n       %s\n", mcastSendUsage, mcastRecvUsage)
	fmt.Fprintln(w, "       prismctl mcast blast --receivers h2,h3,... --topology T --node H [--size 1500 --duration 5s] (replication load)")
}

func runMcast(args []string) int {
	if rc, ok := pickSub("mcast", args, []string{"send", "recv", "blast"}, mcastUsage); !ok {
		return rc
	}
	switch args[0] {
	case "send":
		return mcastSend(args[1:])
	case "blast":
		return mcastBlast(args[1:])
	}
	return mcastRecv(args[1:])
}

// endpointOf is a host's endpoint ID in a multicast job: its index among
// the topology's hosts (sorted), so sender and receivers agree without
// talking.
func endpointOf(topo *deploy.Topology, h string) int { return slices.Index(topo.Hosts(), h) }

// receiverEndpoints parses --receivers (comma-separated hosts of topo).
func receiverEndpoints(topo *deploy.Topology, list string) ([]bitmapam.Endpoint, error) {
	var eps []bitmapam.Endpoint
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		id := endpointOf(topo, h)
		if id < 0 {
			return nil, fmt.Errorf("--receivers: %q is not a host of %s (hosts: %s)", h, topo.Name, strings.Join(topo.Hosts(), ", "))
		}
		eps = append(eps, bitmapam.Endpoint{ID: id, Host: h})
	}
	return eps, nil
}

type mcastFlags struct {
	topology, node, iface string
	job                   uint64
	tenant                uint
	timeout               time.Duration
	cpuprofile            string
	authKeyFile           string
	authKey               []byte // loaded by loadKey
}

func (f *mcastFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.topology, "topology", os.Getenv("PRISM_TOPOLOGY"), "topology file or shipped name (PRISM_TOPOLOGY); in a lab, the lab's saved topology.yaml")
	fs.StringVar(&f.node, "node", os.Getenv("PRISM_NODE"), "this host's name in the topology (PRISM_NODE)")
	fs.StringVar(&f.iface, "iface", "eth0", "interface toward the switches")
	fs.Uint64Var(&f.job, "job", 100, "job ID shared by sender and receivers")
	fs.UintVar(&f.tenant, "tenant", 0, "tenant ID (0 = none)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
}

// registerAuth adds --auth-key-file, for the commands that send or receive
// the job's frames.
func (f *mcastFlags) registerAuth(fs *flag.FlagSet) {
	fs.StringVar(&f.authKeyFile, "auth-key-file", os.Getenv("PRISM_AUTH_KEY_FILE"),
		"the job's authentication key file (hex, mode 0600; 'prismctl keys gen' writes one): every frame of the job is signed and must arrive signed; "+
			"every switch needs the same key ('prismctl keys set') (PRISM_AUTH_KEY_FILE)")
}

// loadKey reads --auth-key-file, if given.
func (f *mcastFlags) loadKey() error {
	if f.authKeyFile == "" {
		return nil
	}
	k, err := authkey.ReadFile(f.authKeyFile)
	if err != nil {
		return fmt.Errorf("--auth-key-file: %v", err)
	}
	f.authKey = k
	return nil
}

// applyKey gives port the job key loaded by loadKey (none: nothing).
func (f *mcastFlags) applyKey(port *bitmap.Port) error {
	if f.authKey == nil {
		return nil
	}
	return port.SetKey(f.job, f.authKey)
}

// authReport is one line about the job key for the end of a run: which key
// (by fingerprint) and how many frames failed its check here.
func (f *mcastFlags) authReport(port *bitmap.Port) string {
	if f.authKey == nil {
		return ""
	}
	return fmt.Sprintf("job key %s: %d frames dropped here for a missing or wrong AUTH tag\n", authkey.Fingerprint(f.authKey), port.AuthDrops())
}

// profile starts the --cpuprofile profile, if asked for, and returns its
// stop.
func (f *mcastFlags) profile() (func(), error) {
	if f.cpuprofile == "" {
		return func() {}, nil
	}
	w, err := os.Create(f.cpuprofile)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); w.Close() }, nil
}

func (f *mcastFlags) load() (*deploy.Topology, error) {
	var errs []string
	if f.topology == "" {
		errs = append(errs, "--topology is required: a topology file, or the lab's saved topology.yaml (prismctl lab status shows it)")
	}
	if f.node == "" {
		errs = append(errs, "--node is required: this host's name in the topology, e.g. h1")
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n  "))
	}
	topo, err := deploy.Load(f.topology)
	if err != nil {
		return nil, err
	}
	if n, ok := topo.Nodes[f.node]; !ok || n.Kind != deploy.KindHost {
		return nil, fmt.Errorf("--node %q is not a host of topology %s (hosts: %s)", f.node, topo.Name, strings.Join(topo.Hosts(), ", "))
	}
	return topo, nil
}

func signalContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	return ctx, func() { stop(); cancel() }
}

func isTTY(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func mcastSend(args []string) int {
	fs := flag.NewFlagSet("mcast send", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	mf.registerAuth(fs)
	file := fs.String("file", "", "file to send")
	receivers := fs.String("receivers", "", "comma-separated receiver hosts, e.g. h2,h3,h4")
	noAgg := fs.Bool("no-aggregation", false, "register no A-BM and send repairs without INSTALL: every receiver's ACK reaches the source (the comparison)")
	window := fs.Int("window", 16, "packets per window (one ACK per window)")
	outstanding := fs.Int("outstanding", 8, "windows in flight at the start (the sender adapts it, AIMD)")
	maxOutstanding := fs.Int("max-outstanding", 16, "most windows in flight the sender grows to (<= --outstanding: fixed)")
	timeoutMS := fs.Uint("switch-timeout-ms", 200, "context timeout of the switches: PARTIAL ACK deadline")
	mtu := fs.Int("mtu", 1500, "PRISM MTU: 576, 1500 or 9000")
	register := fs.Bool("register", true, "register the job (STAGE/COMMIT) from this host before sending and release it after")
	fs.Usage = subUsage(fs, mcastSendUsage)
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	topo, err := mf.load()
	if err != nil {
		return flagErr(fs, err)
	}
	if *file == "" || *receivers == "" {
		return flagErr(fs, errors.New("--file and --receivers are required"))
	}
	if err := mf.loadKey(); err != nil {
		return flagErr(fs, err)
	}
	fh, err := os.Open(*file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	eps, err := receiverEndpoints(topo, *receivers)
	if err != nil {
		return flagErr(fs, err)
	}
	spec := bitmapam.JobSpec{Kind: bitmapam.Multicast, Op: parser.OpKey{Job: mf.job, Group: 1, GroupGen: 1, Op: 1, OpGen: uint32(time.Now().Unix())},
		Tenant: uint32(mf.tenant), Endpoints: eps, Root: mf.node, VectorLen: bitmap.McastVectorLen(fi.Size()),
		MTU: *mtu, TimeoutMS: uint32(*timeoutMS), NoAggregation: *noAgg}
	plan, err := bitmapam.Compute(topo, spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	ctx, cancel := signalContext(mf.timeout)
	defer cancel()
	if *register {
		release, err := registerPlan(ctx, mf.iface, plan)
		if err != nil {
			fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
			return 1
		}
		defer release(func(err error) { fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err) })
	}
	port, err := bitmap.Open(mf.iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	defer port.Close()
	if err := mf.applyKey(port); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	opts := &bitmap.McastOptions{WindowPackets: *window, Outstanding: *outstanding, MaxOutstanding: *maxOutstanding}
	stop, err := mf.profile()
	if err != nil {
		return flagErr(fs, err)
	}
	defer stop()
	tty := isTTY(os.Stderr)
	if tty {
		opts.Progress = func(acked, total int64) {
			const width = 40
			n := 0
			if total > 0 {
				n = int(acked * width / total)
			}
			fmt.Fprintf(os.Stderr, "\r[%s%s] %3d%% %d/%d bytes acknowledged by all", strings.Repeat("#", n), strings.Repeat(".", width-n),
				acked*100/max(total, 1), acked, total)
		}
	}
	start := time.Now()
	st, err := bitmap.SendFile(ctx, port, plan, fh, fi.Size(), filepath.Base(*file), opts)
	if tty {
		fmt.Fprintln(os.Stderr)
	}
	took := time.Since(start)
	mn, mx := 0, 0
	for i, a := range st.AcksPerWindow {
		if i == 0 || a < mn {
			mn = a
		}
		mx = max(mx, a)
	}
	mode := "aggregated"
	if *noAgg {
		mode = "no aggregation"
	}
	fmt.Printf("sent %s (%d bytes) to %d receivers in %v (%.1f MB/s), %s\n", *file, fi.Size(), len(eps), took.Round(time.Millisecond),
		float64(fi.Size())/took.Seconds()/1e6, mode)
	fmt.Printf("windows %d (+manifest), data frames %d, repairs %d (%d frames, %d inferred from send order), PARTIAL ACKs %d, at most %d windows in flight\n",
		st.Windows, st.DataFrames, st.Repairs, st.RepairFrames, st.Inferred, st.Partials, st.MaxInFlight)
	cmn, cmx, cn := st.CleanAcks()
	fmt.Printf("ACK frames at the source: %d total, per window min %d max %d mean %.2f; per window without repair (%d of %d): min %d max %d\n",
		st.AckFrames, mn, mx, float64(st.AckFrames)/float64(max(1, len(st.AcksPerWindow))), cn, len(st.AcksPerWindow), cmn, cmx)
	fmt.Print(mf.authReport(port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast send: %v\n", err)
		return 1
	}
	return 0
}

func mcastRecv(args []string) int {
	fs := flag.NewFlagSet("mcast recv", flag.ContinueOnError)
	var mf mcastFlags
	mf.register(fs)
	mf.registerAuth(fs)
	out := fs.String("out", "", "where to write the file")
	endpoint := fs.Int("endpoint", -1, "this receiver's endpoint ID (default: the host's index among the topology's hosts)")
	linger := fs.Duration("linger", 2*time.Second, "after the last window, keep answering repeats until idle this long")
	fs.Usage = subUsage(fs, mcastRecvUsage)
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if *out == "" {
		return flagErr(fs, errors.New("--out is required"))
	}
	if err := mf.loadKey(); err != nil {
		return flagErr(fs, err)
	}
	ep := *endpoint
	if ep < 0 {
		topo, err := mf.load()
		if err != nil {
			return flagErr(fs, err)
		}
		ep = endpointOf(topo, mf.node)
	}
	ctx, cancel := signalContext(mf.timeout)
	defer cancel()
	port, err := bitmap.Open(mf.iface)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast recv: %v\n", err)
		return 1
	}
	defer port.Close()
	if err := mf.applyKey(port); err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast recv: %v\n", err)
		return 1
	}
	stop, err := mf.profile()
	if err != nil {
		return flagErr(fs, err)
	}
	defer stop()
	m, st, err := bitmap.ReceiveFile(ctx, port, bitmap.ReceiverConfig{Job: mf.job, Endpoint: ep, Tenant: uint32(mf.tenant)}, *out,
		&bitmap.McastOptions{Linger: *linger})
	fmt.Print(mf.authReport(port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl mcast recv: %v\n", err)
		return 1
	}
	fmt.Printf("received %s (%d bytes) into %s: SHA-256 %s verified; %d frames, %d duplicates suppressed, %d ACKs sent\n",
		m.Name, m.Size, *out, m.SHA256, st.Frames, st.Duplicates, st.Acks)
	return 0
}

// registerPlan STAGEs and COMMITs plan on its switches from iface (the
// caller acts as the AM) and returns the function that RELEASEs it,
// reporting a failed release through warn.
func registerPlan(ctx context.Context, iface string, plan *bitmapam.Plan) (release func(warn func(error)), err error) {
	conn, err := am.OpenConn(iface)
	if err != nil {
		return nil, err
	}
	reg := bitmapam.NewRegistrar(conn, bitmapam.RegistrarConfig{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "prismctl mcast: "+format+"\n", args...)
	}})
	if err := reg.Register(ctx, plan); err != nil {
		reg.Close()
		return nil, fmt.Errorf("registration: %w", err)
	}
	return func(warn func(error)) {
		defer reg.Close()
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		if err := reg.Release(rctx, plan); err != nil {
			warn(fmt.Errorf("release: %w", err))
		}
	}, nil
}
