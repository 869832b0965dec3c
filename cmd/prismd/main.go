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
	"reflect"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

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
	check := fs.Bool("check-config", false, "validate the configuration, print the result and exit 0 (valid) or 1 (invalid)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	format := fs.String("log-format", "text", "log format: text or json")
	cpuprof := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `file` (for go tool pprof; stopped on shutdown)")
	if err := fs.Parse(args); err != nil {
		return 2
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
		fmt.Fprintf(stdout, "prismd: configuration %s is valid (%d ports, %d workers)\n", *cfgFile, len(cfg.Ports), cfg.Workers)
		return 0
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
	d.close()
	log.Info("stopped")
	return 0
}

type openPort struct {
	cfg  PortConfig
	port dataplane.Port
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
}

func startDaemon(file string, cfg *Config, log *slog.Logger) (*daemon, error) {
	opts := dataplane.Options{Workers: cfg.Workers, NoInline: cfg.WorkerHandoff, MACAging: cfg.Aging(), NodeMAC: cfg.NodeMACAddr(), Logger: log}
	if handlerFactory != nil {
		opts.Handler = handlerFactory(cfg)
	}
	dp, err := dataplane.New(opts)
	if err != nil {
		return nil, err
	}
	d := &daemon{file: file, log: log, cfg: cfg, dp: dp, ports: map[string]openPort{}}
	if err := d.applyPorts(cfg); err != nil {
		dp.Close()
		return nil, err
	}
	if err := d.startServers(cfg); err != nil {
		d.close()
		return nil, err
	}
	log.Info("prismd running", "version", version, "ports", len(cfg.Ports), "workers", cfg.Workers,
		"metrics", cfg.MetricsListen, "control", cfg.ControlListen)
	return d, nil
}

// applyPorts opens the ports cfg adds or changes and installs the new port
// set. Unchanged ports keep their socket and RX goroutine. On error nothing changes.
func (d *daemon) applyPorts(cfg *Config) error {
	var list []dataplane.Port
	next := map[string]openPort{}
	var opened []dataplane.Port
	for _, pc := range cfg.Ports {
		if old, ok := d.ports[pc.Name]; ok && reflect.DeepEqual(old.cfg, pc) {
			list = append(list, old.port)
			next[pc.Name] = old
			continue
		}
		p, err := openBackend(pc)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return err
		}
		p = dataplane.WithFault(p, pc.fault())
		opened = append(opened, p)
		list = append(list, p)
		next[pc.Name] = openPort{cfg: pc, port: p}
		d.log.Info("port opened", "port", pc.Name, "mtu", p.MTU(), "mac", net.HardwareAddr(macSlice(p.MAC())).String())
	}
	if err := d.dp.SetPorts(list); err != nil {
		for _, o := range opened {
			o.Close()
		}
		return err
	}
	for name := range d.ports {
		if _, ok := next[name]; !ok {
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
		// A stale socket from a crashed run would make Listen fail.
		if fi, err := os.Lstat(cfg.ControlListen); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(cfg.ControlListen)
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
	}
	out := struct {
		Version    string            `json:"version"`
		Ports      []port            `json:"ports"`
		Classes    map[string]uint64 `json:"frames"`
		MACEntries int               `json:"mac_table_entries"`
	}{Version: version, Classes: map[string]uint64{}, MACEntries: st.MACEntries}
	ports := d.dp.Ports()
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
	cfg, err := LoadConfig(d.file)
	if err != nil {
		d.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	if cfg.Workers != d.cfg.Workers {
		d.log.Warn("workers changed; takes effect only after a restart", "running", d.cfg.Workers, "configured", cfg.Workers)
	}
	if cfg.WorkerHandoff != d.cfg.WorkerHandoff {
		d.log.Warn("worker_handoff changed; takes effect only after a restart", "running", d.cfg.WorkerHandoff, "configured", cfg.WorkerHandoff)
	}
	if cfg.MetricsListen != d.cfg.MetricsListen || cfg.ControlListen != d.cfg.ControlListen {
		d.log.Warn("metrics_listen/control_listen changed; takes effect only after a restart")
	}
	if cfg.PlainKulischPartials() != d.cfg.PlainKulischPartials() || cfg.CompactKulischPartials() != d.cfg.CompactKulischPartials() {
		d.log.Warn("kulisch_partials changed; takes effect only after a restart", "configured", cfg.KulischPartials)
	}
	if err := d.applyPorts(cfg); err != nil {
		d.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	d.dp.SetMACAging(cfg.Aging())
	d.dp.SetNodeMAC(cfg.NodeMACAddr())
	keepW, keepH, keepM, keepC := d.cfg.Workers, d.cfg.WorkerHandoff, d.cfg.MetricsListen, d.cfg.ControlListen
	d.cfg = cfg
	d.cfg.Workers, d.cfg.WorkerHandoff, d.cfg.MetricsListen, d.cfg.ControlListen = keepW, keepH, keepM, keepC
	if onReload != nil {
		onReload(cfg)
	}
	d.log.Info("configuration reloaded", "ports", len(cfg.Ports), "mac_aging", cfg.Aging())
}

func (d *daemon) close() {
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
