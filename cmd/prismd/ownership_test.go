package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/packet"

	"github.com/prismd/prismd/internal/netnstest"
)

// fastLinkChecks makes the link watcher look every 50 ms for the test.
func fastLinkChecks(t *testing.T) {
	old := linkCheckEvery
	linkCheckEvery = 50 * time.Millisecond
	t.Cleanup(func() { linkCheckEvery = old })
}

// startIn runs startDaemon inside namespace ns (on a thread of its own that
// stays there) and returns the daemon or its error.
func startIn(t *testing.T, env *netnstest.Env, ns string, cfg *Config, logs *syncBuf) (*daemon, error) {
	t.Helper()
	var d *daemon
	var err error
	env.Do(ns, func() { d, err = startDaemon("test.yaml", cfg, slog.New(slog.NewTextHandler(logs, nil))) })
	if d != nil {
		t.Cleanup(d.close)
	}
	return d, err
}

func parseCfg(t *testing.T, body string) *Config {
	t.Helper()
	c, err := ParseConfig("test.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecondDaemonRefused: a second prismd on an interface another one
// switches forwarded every frame again (a ping came back with duplicates),
// and one given the same control_listen removed the running one's socket
// as stale. Both are refused, naming the holder, and the first runs on.
func TestSecondDaemonRefused(t *testing.T) {
	env := netnstest.New(t, "po")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	_, x := env.Veth(h, sw)
	_, y := env.Veth(h, sw)
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	var logs syncBuf
	if _, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}]\ncontrol_listen: %s\n", x, sock)), &logs); err != nil {
		t.Fatalf("first daemon: %v\n%s", err, logs.String())
	}
	_, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}]\ncontrol_listen: %s\n", x, filepath.Join(dir, "b.sock"))), &logs)
	want := fmt.Sprintf("port %q: another prismd (pid %d) already switches this interface", x, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second daemon on %s: %v, want %q", x, err, want)
	}
	_, err = startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}]\ncontrol_listen: %s\n", y, sock)), &logs)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("control_listen %q: another process (pid %d", sock, os.Getpid())) {
		t.Fatalf("second daemon on the first's control socket: %v", err)
	}
	// The refused one released what it had claimed (y), and the first
	// one's socket still answers.
	if _, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}]\n", y)), &logs); err != nil {
		t.Errorf("a daemon on %s after the refusals: %v", y, err)
	}
	if _, err := statusOf(sock); err != nil {
		t.Errorf("the first daemon's control socket: %v", err)
	}
}

// TestCheckConfigBesideRunningDaemon: --check-config of a file whose
// port, control_listen and metrics_listen a running prismd holds passed
// without a word, and the start then failed. It warns of each, naming
// the holder, and still exits 0 (it also runs before a reload of that
// same prismd). Many refused probes leave the holder able to say who
// it is (the claim socket accepts and closes them; they stayed queued).
func TestCheckConfigBesideRunningDaemon(t *testing.T) {
	env := netnstest.New(t, "pk")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	_, x := env.Veth(h, sw)
	sock := filepath.Join(t.TempDir(), "a.sock")
	body := fmt.Sprintf("ports: [{name: %s}]\ncontrol_listen: %s\nmetrics_listen: 127.0.0.1:19417\n", x, sock)
	var logs syncBuf
	if _, err := startIn(t, env, sw, parseCfg(t, body), &logs); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	f := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 4200 { // refused probes, each asking the holder's PID: more than the backlog (somaxconn, 4096 by default)
		env.Do(sw, func() { claimPort(x) })
	}
	var out, errb bytes.Buffer
	rc := -1
	env.Do(sw, func() { rc = run([]string{"--config", f, "--check-config"}, &out, &errb) })
	pid := fmt.Sprintf("pid %d", os.Getpid())
	for _, want := range []string{
		fmt.Sprintf("port %q: another prismd (%s) already switches this interface", x, pid),
		fmt.Sprintf("control_listen %q: another process (%s", sock, pid),
		`metrics_listen "127.0.0.1:19417" cannot be bound now`,
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr does not warn %q:\n%s", want, errb.String())
		}
	}
	if rc != 0 || !strings.Contains(out.String(), "is valid") {
		t.Errorf("rc=%d stdout %q, want 0 and valid (warnings only)", rc, out.String())
	}
}

type portStatus struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
	MTU  int    `json:"mtu"`
	Link string `json:"link"`
}

func statusOf(sock string) ([]portStatus, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://prismd/v1/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st struct {
		Ports []portStatus `json:"ports"`
	}
	return st.Ports, json.NewDecoder(resp.Body).Decode(&st)
}

// TestRecreatedInterfaceReopened: an interface deleted and created again
// under the same name left its port bound to the dead ifindex until a
// restart (SIGHUP kept it too). The link watcher says the interface is
// gone, then reopens the port on the new one; an MTU change of an
// interface whose port leaves the MTU to it is followed the same way.
func TestRecreatedInterfaceReopened(t *testing.T) {
	fastLinkChecks(t)
	env := netnstest.New(t, "pr")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	a, b := env.Veth(h, sw)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	var logs syncBuf
	if _, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}]\ncontrol_listen: %s\n", b, sock)), &logs); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	macOf := func() string {
		return strings.TrimSpace(env.MustExec(sw, "cat", "/sys/class/net/"+b+"/address"))
	}
	waitPort := func(what string, ok func(p portStatus) bool) {
		t.Helper()
		var last []portStatus
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			st, err := statusOf(sock)
			if err == nil && len(st) == 1 && ok(st[0]) {
				return
			}
			last = st
		}
		t.Fatalf("%s: ports %+v\n%s", what, last, logs.String())
	}
	first := macOf()
	waitPort("at start", func(p portStatus) bool { return p.MAC == first })

	env.MustExec(h, "ip", "link", "del", a)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "port's interface is gone"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the interface gone:\n%s", logs.String())
		}
	}
	// Its link is said to be gone, not set down (show ports' LINK), and
	// the log says so once: a deletion sets the interface down first,
	// which was logged as "set down" and counted a second link change.
	waitPort("interface deleted", func(p portStatus) bool { return p.Link == "gone (interface deleted)" })
	if strings.Contains(logs.String(), "set down") || strings.Count(logs.String(), "port's interface is gone") != 1 {
		t.Errorf("a deleted interface was logged other than gone, once:\n%s", logs.String())
	}
	env.MustExec(sw, "ip", "link", "add", b, "type", "veth", "peer", "name", a, "netns", h)
	env.MustExec(sw, "ip", "link", "set", b, "up")
	env.MustExec(h, "ip", "link", "set", a, "up")
	second := macOf()
	if second == first {
		t.Fatalf("the new %s has the old MAC %s: the test cannot tell the ports apart", b, first)
	}
	waitPort("after re-creation", func(p portStatus) bool { return p.MAC == second && p.Link == "up" })
	if !strings.Contains(logs.String(), "interface re-created") {
		t.Errorf("reopening not logged with its reason:\n%s", logs.String())
	}

	env.MustExec(sw, "ip", "link", "set", b, "mtu", "9000")
	waitPort("after an MTU change", func(p portStatus) bool { return p.MTU == 9000 })
	if !strings.Contains(logs.String(), "interface MTU changed to 9000 (was 1500)") {
		t.Errorf("MTU change not logged:\n%s", logs.String())
	}
}

// TestMetricsPromtool runs promtool over the whole daemon's /metrics: the
// dataplane's, the engine's, the control plane's and the bitmap engine's
// collectors (metrics' own test sees only the first; promtool refused
// prismd_bitmap_dropped_bits_total, "use base unit bytes").
func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found in PATH: `make deps` installs it (Debian package prometheus)")
	}
	env := netnstest.New(t, "pm")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	_, x := env.Veth(h, sw)
	var logs syncBuf
	// The limits the configuration sets are the ones the workers report.
	cfg := fmt.Sprintf("ports: [{name: %s}]\nmetrics_listen: 127.0.0.1:9100\nworkers: 2\nmax_contexts: 10\naccumulator_memory_mb: 64\n", x)
	if _, err := startIn(t, env, sw, parseCfg(t, cfg), &logs); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	var body []byte
	env.Do(sw, func() {
		// Dialled here, on the thread in sw: http.Transport dials from a
		// goroutine of its own, which may be on any thread (namespace).
		c, e := net.Dial("tcp", "127.0.0.1:9100")
		if e != nil {
			err = e
			return
		}
		defer c.Close()
		if _, err = io.WriteString(c, "GET /metrics HTTP/1.0\r\n\r\n"); err != nil {
			return
		}
		resp, e := http.ReadResponse(bufio.NewReader(c), nil)
		if e != nil {
			err = e
			return
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range []string{"prismd_port_receive_frames_total", "prismd_engine_frames_total", "prismd_control_drops_total", "prismd_bitmap_drops_total"} {
		if !strings.Contains(string(body), "# TYPE "+family) {
			t.Errorf("/metrics lacks %s: the check would not cover its collector", family)
		}
	}
	for _, line := range []string{`prismd_engine_contexts_limit{worker="0"} 5`, `prismd_engine_contexts_limit{worker="1"} 5`,
		`prismd_engine_accumulator_limit_bytes{worker="1"} 6.7108864e+07`} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics lacks %q (max_contexts 10 over 2 workers, accumulator_memory_mb 64)", line)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestOversizeWarned: frames longer than a port's MTU were dropped and
// only counted; a veth sender with TSO on (the default) then had TCP hang
// through the switch with nothing in the log. The watcher says so, with
// the likely cause, at most once a minute per port.
func TestOversizeWarned(t *testing.T) {
	fastLinkChecks(t)
	old := oversizeWarnEvery
	oversizeWarnEvery = 2 * time.Second // a minute in production
	t.Cleanup(func() { oversizeWarnEvery = old })
	env := netnstest.New(t, "pv")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	a, b := env.Veth(h, sw)
	// A veth refuses frames over its peer's MTU, so the port is told a
	// smaller MTU than its interface's, and 1400-byte frames are over it.
	var logs syncBuf
	if _, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s, mtu: 1000}]\n", b)), &logs); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	time.Sleep(3 * linkCheckEvery) // the watcher's first look: nothing dropped yet
	send := func() {
		t.Helper()
		f := bcastFrame(1400, 2, 0, 0, 0, 0, 1) // over the port's 1000
		broadcastFrom(t, env, h, a, f, f, f)
	}
	send()
	const warning = "port dropped frames longer than its MTU"
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), warning); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning of oversize frames:\n%s", logs.String())
		}
	}
	first := time.Now()
	if !strings.Contains(logs.String(), "port="+b+" mtu=1000") || !strings.Contains(logs.String(), "ethtool -K IF tso off gso off") {
		t.Errorf("the warning names neither the port and its MTU nor the fix:\n%s", logs.String())
	}
	send()
	time.Sleep(5 * linkCheckEvery)
	if c := strings.Count(logs.String(), warning); c != 1 {
		t.Errorf("%d warnings within the period, want 1", c)
	}
	// The next warning counts every drop since the first, those of the
	// quiet looks too: it said only its last look's.
	for range 3 {
		time.Sleep(2 * linkCheckEvery)
		send() // three more each, in looks of their own
	}
	time.Sleep(time.Until(first.Add(oversizeWarnEvery + 200*time.Millisecond)))
	send()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), warning) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second warning:\n%s", logs.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var second string
	for _, l := range lines {
		if strings.Contains(l, warning) {
			second = l
		}
	}
	if !strings.Contains(second, "dropped=15") {
		t.Errorf("second warning %q, want dropped=15 (every frame sent after the first warning: 3 + 3x3 + 3)", second)
	}
}

// TestDropWarnings: what the dataplane only counts at line rate is said
// in the log, once, with the fix: frames too long for a port with a
// smaller MTU than their ingress port's (tx_oversize), and stations a full
// MAC table (mac_table_size) could not learn.
func TestDropWarnings(t *testing.T) {
	fastLinkChecks(t)
	env := netnstest.New(t, "pw")
	sw, h1, h2 := env.Namespace("sw"), env.Namespace("h1"), env.Namespace("h2")
	a1, b1 := env.Veth(h1, sw)
	_, b2 := env.Veth(h2, sw)
	env.MustExec(h1, "ip", "link", "set", a1, "mtu", "9000")
	env.MustExec(sw, "ip", "link", "set", b1, "mtu", "9000")
	var logs syncBuf
	if _, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("mac_table_size: 32\nports: [{name: %s}, {name: %s}]\n", b1, b2)), &logs); err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	time.Sleep(3 * linkCheckEvery)                         // the watcher's first look: nothing dropped yet
	frames := [][]byte{bcastFrame(4000, 2, 0, 0, 0, 0, 1)} // fits p1's 9000, not p2's 1500
	for i := range 40 {                                    // 40 stations, a table of 32
		frames = append(frames, bcastFrame(60, 2, 0xaa, 0, 0, 0, byte(i)))
	}
	broadcastFrom(t, env, h1, a1, frames...)
	for _, want := range []string{"port could not send frames longer than its MTU", "port=" + b2 + " mtu=1500",
		"the MAC table is full", "port=" + b1, "capacity=32", "raise mac_table_size"} {
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log:\n%s", want, logs.String())
			}
		}
	}
}

// TestLoopWarned: two ports of one switch cabled to each other make a
// loop; one broadcast then circulates for ever, its sender's MAC moving
// between ports at the loop's rate, and the log says it is a loop.
func TestLoopWarned(t *testing.T) {
	fastLinkChecks(t)
	env := netnstest.New(t, "pl")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	a, b := env.Veth(h, sw)
	l1, l2 := env.Veth(sw, sw)
	var logs syncBuf
	d, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}, {name: %s}, {name: %s}]\n", b, l1, l2)), &logs)
	if err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	time.Sleep(3 * linkCheckEvery)
	broadcastFrom(t, env, h, a, bcastFrame(60, 2, 0xbb, 0, 0, 0, 1))
	const want = "stations keep moving to this port from others: most likely a loop"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no loop warning; moves per port: %v\n%s", moves(d), logs.String())
		}
	}
}

func moves(d *daemon) map[string]uint64 {
	m := map[string]uint64{}
	for _, p := range d.dp.Stats().Ports {
		m[p.Name] = p.Moved
	}
	return m
}

// broadcastFrom sends frames (each starting with its Ethernet header) from
// iface in namespace ns to the broadcast address, with a raw socket.
func broadcastFrom(t *testing.T, env *netnstest.Env, ns, iface string, frames ...[]byte) {
	t.Helper()
	var err error
	env.Do(ns, func() { // (no t.Fatal here: Do may run fn on another goroutine)
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(iface); err != nil {
			return
		}
		var c *packet.Conn
		if c, err = packet.Listen(ifi, packet.Raw, 0x88b6, nil); err != nil {
			return
		}
		defer c.Close()
		for _, f := range frames {
			if _, err = c.WriteTo(f, &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bcastFrame is a frame of size bytes to the broadcast address from src,
// EtherType 0x88B6.
func bcastFrame(size int, src ...byte) []byte {
	f := make([]byte, size)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], src)
	f[12], f[13] = 0x88, 0xb6
	return f
}
