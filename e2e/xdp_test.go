package e2e

// prismd with AF_XDP ports: a real prismd binary forwards between two hosts
// in their own namespaces, every port configured "backend: afxdp".

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
	"github.com/prismd/prismd/internal/netnstest"
)

type xdpLab struct {
	env              *netnstest.Env
	h1, h2, sw       string
	h1If, h2If       string
	swA, swB         string
	dir, cfg, socket string
}

func newXDPLab(t *testing.T) *xdpLab {
	env := netnstest.New(t, "xd")
	l := &xdpLab{env: env, h1: env.Namespace("h1"), h2: env.Namespace("h2"), sw: env.Namespace("sw"), dir: t.TempDir()}
	l.h1If, l.swA = env.Veth(l.h1, l.sw)
	l.h2If, l.swB = env.Veth(l.h2, l.sw)
	for _, x := range [][2]string{{l.h1, l.h1If}, {l.h2, l.h2If}, {l.sw, l.swA}, {l.sw, l.swB}} {
		env.DisableOffloads(x[0], x[1])
		// IPv6 off everywhere: the frame counts compared below are then
		// exactly the pings and ARPs the test causes.
		env.MustExec(x[0], "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	}
	env.MustExec(l.h1, "ip", "addr", "add", "10.79.0.1/24", "dev", l.h1If)
	env.MustExec(l.h2, "ip", "addr", "add", "10.79.0.2/24", "dev", l.h2If)
	l.cfg = filepath.Join(l.dir, "prismd.yaml")
	l.socket = filepath.Join(l.dir, "prismd.sock")
	cfg := fmt.Sprintf("ports:\n  - name: %s\n    backend: afxdp\n  - name: %s\n    backend: afxdp\nworkers: 1\ncontrol_listen: %q\n",
		l.swA, l.swB, l.socket)
	if err := os.WriteFile(l.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// start runs prismd in the switch namespace and waits for its control socket.
func (l *xdpLab) start(t *testing.T) *exec.Cmd {
	cmd := exec.Command("ip", "netns", "exec", l.sw, labtest.Prismd(t), "--config", l.cfg, "--log-level", "warn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(l.socket); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("prismd exited at start: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prismd did not open its control socket in 10s\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd
}

type xdpStatus struct {
	Ports []struct {
		Name     string `json:"name"`
		RxFrames uint64 `json:"rx_frames"`
		TxFrames uint64 `json:"tx_frames"`
	} `json:"ports"`
}

func (l *xdpLab) status(t *testing.T) xdpStatus {
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", l.socket)
	}}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://prismd/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st xdpStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// ifCounter reads a statistics counter of iface in ns (e.g. "tx_packets").
func (l *xdpLab) ifCounter(t *testing.T, ns, iface, name string) uint64 {
	out := l.env.MustExec(ns, "cat", "/sys/class/net/"+iface+"/statistics/"+name)
	v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hostCounters returns h1 tx, h1 rx, h2 tx, h2 rx packets.
func (l *xdpLab) hostCounters(t *testing.T) [4]uint64 {
	return [4]uint64{l.ifCounter(t, l.h1, l.h1If, "tx_packets"), l.ifCounter(t, l.h1, l.h1If, "rx_packets"),
		l.ifCounter(t, l.h2, l.h2If, "tx_packets"), l.ifCounter(t, l.h2, l.h2If, "rx_packets")}
}

// TestXDPForwarding: hosts ping each other through prismd on two AF_XDP
// ports, and every frame is forwarded exactly once: each port received
// exactly what its host sent (so no frame prismd transmitted came back in on
// its own receive path, which would loop broadcasts), and each host received
// exactly what the other sent. Stopping prismd detaches the XDP programs.
func TestXDPForwarding(t *testing.T) {
	l := newXDPLab(t)
	cmd := l.start(t)
	// Baselines: the hosts may have sent (and the switch namespace's stack
	// answered) a frame or two at link up, before prismd ran.
	c0 := l.hostCounters(t)
	for _, c := range [][2]string{{l.h1, "10.79.0.2"}, {l.h2, "10.79.0.1"}} {
		if out, err := l.env.Exec(c[0], "ping", "-c", "5", "-i", "0.2", "-W", "2", c[1]); err != nil {
			t.Fatalf("ping from %s to %s through prismd (afxdp) failed: %v\n%s", c[0], c[1], err, out)
		}
	}
	// A burst of broadcasts (flooded by the switch): each must reach the
	// other host once, and h2 answers each.
	l.env.MustExec(l.h2, "sysctl", "-qw", "net.ipv4.icmp_echo_ignore_broadcasts=0")
	l.env.MustExec(l.h1, "ping", "-b", "-c", "20", "-i", "0.01", "-W", "1", "10.79.0.255")
	time.Sleep(200 * time.Millisecond)
	st := l.status(t)
	if len(st.Ports) != 2 {
		t.Fatalf("status has %d ports, want 2", len(st.Ports))
	}
	c1 := l.hostCounters(t)
	h1Tx, h1Rx, h2Tx, h2Rx := c1[0]-c0[0], c1[1]-c0[1], c1[2]-c0[2], c1[3]-c0[3]
	a, b := st.Ports[0], st.Ports[1]
	t.Logf("h1 tx %d rx %d, h2 tx %d rx %d; %s rx %d tx %d, %s rx %d tx %d", h1Tx, h1Rx, h2Tx, h2Rx, a.Name, a.RxFrames, a.TxFrames, b.Name, b.RxFrames, b.TxFrames)
	if a.RxFrames != h1Tx || b.RxFrames != h2Tx {
		t.Errorf("port rx (%d, %d) != host tx (%d, %d): prismd saw frames no host sent (its own transmissions?)", a.RxFrames, b.RxFrames, h1Tx, h2Tx)
	}
	if b.TxFrames != h1Tx || a.TxFrames != h2Tx || h2Rx != h1Tx || h1Rx != h2Tx {
		t.Errorf("frames not forwarded exactly once: h1 sent %d, %s sent %d, h2 got %d; h2 sent %d, %s sent %d, h1 got %d",
			h1Tx, b.Name, b.TxFrames, h2Rx, h2Tx, a.Name, a.TxFrames, h1Rx)
	}
	if h1Tx < 30 {
		t.Errorf("h1 sent only %d frames; the test did not run", h1Tx)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		out := l.env.MustExec(l.sw, "ip", "link", "show")
		if !strings.Contains(out, "xdp") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("XDP programs still attached 5s after SIGTERM:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestXDPRefusedNamesFix: when the kernel refuses XDP on a port (here: the
// interface already has an XDP program, held by this test), prismd exits
// with an error naming the interface and suggesting backend: afpacket.
func TestXDPRefusedNamesFix(t *testing.T) {
	l := newXDPLab(t)
	var holder dataplane.Port
	var err error
	l.env.Do(l.sw, func() { holder, err = dataplane.OpenAFXDP(l.swB, dataplane.XDPOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	cmd := exec.Command("ip", "netns", "exec", l.sw, labtest.Prismd(t), "--config", l.cfg, "--log-level", "warn")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("prismd started on an interface whose XDP hook is taken:\n%s", out)
	}
	t.Logf("prismd said:\n%s", out)
	for _, want := range []string{l.swB, "backend: afpacket"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("prismd error does not mention %q:\n%s", want, out)
		}
	}
	// The port opened before the failing one was released: no program left on it.
	if o := l.env.MustExec(l.sw, "ip", "link", "show", "dev", l.swA); strings.Contains(o, "xdp") {
		t.Errorf("XDP program left on %s after prismd failed:\n%s", l.swA, o)
	}
}

// TestXDPLab: the shipped single-afxdp lab, whose topology file gives its
// switch "backend: afxdp", is brought up by deploy.Up; the generated prismd
// config carries the backend on every port, prismd attaches XDP programs,
// the hosts ping each other through it, and the switch's /metrics count
// exactly the frames the hosts' interfaces sent and received, with no drop
// of any kind. lab down then leaves no namespace, state or process behind.
func TestXDPLab(t *testing.T) {
	labtest.RequireRoot(t)
	src, err := deploy.Embedded("single-afxdp")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := deploy.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	tp = labtest.Rename(t, tp, labtest.UniqueName())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab, err := deploy.Up(ctx, tp, &deploy.Options{Prismd: labtest.Prismd(t)})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	down := false
	t.Cleanup(func() {
		if !down {
			_ = lab.Down()
		}
	})
	pid := lab.PID("sw1")
	cfg, err := os.ReadFile(lab.ConfigFile("sw1"))
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(cfg), "backend: afxdp"); c != 2 {
		t.Fatalf("generated config has %d ports with backend: afxdp, want 2:\n%s", c, cfg)
	}
	for _, p := range deploy.Ports(tp, "sw1") {
		out, err := lab.Exec("sw1", "ip", "link", "show", "dev", p).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "xdpgeneric") {
			t.Fatalf("sw1:%s has no generic XDP program (%v):\n%s", p, err, out)
		}
	}
	hostCounter := func(node, name string) uint64 {
		out, err := lab.Exec(node, "cat", "/sys/class/net/eth0/statistics/"+name).Output()
		if err != nil {
			t.Fatalf("%s eth0 %s: %v", node, name, err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	type snap struct {
		h1Tx, h1Rx, h2Tx, h2Rx uint64
		m                      string
	}
	take := func() snap {
		m, err := lab.Metrics(ctx, "sw1")
		if err != nil {
			t.Fatal(err)
		}
		return snap{hostCounter("h1", "tx_packets"), hostCounter("h1", "rx_packets"),
			hostCounter("h2", "tx_packets"), hostCounter("h2", "rx_packets"), m}
	}
	s0 := take()
	for _, c := range [][2]string{{"h1", "h2"}, {"h2", "h1"}} {
		addr, _ := tp.HostAddr(c[1])
		if err := lab.Ping(ctx, c[0], addr, 5, 2*time.Second); err != nil {
			t.Fatalf("ping %s -> %s through prismd (afxdp): %v\nsw1 log:\n%s", c[0], c[1], err, lab.LogTail("sw1", 20))
		}
	}
	time.Sleep(200 * time.Millisecond)
	s1 := take()
	metric := func(s snap, series string) uint64 {
		for _, line := range strings.Split(s.m, "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return uint64(f)
			}
		}
		t.Fatalf("no %s in sw1's /metrics", series)
		return 0
	}
	delta := func(series string) uint64 { return metric(s1, series) - metric(s0, series) }
	h1Tx, h1Rx, h2Tx, h2Rx := s1.h1Tx-s0.h1Tx, s1.h1Rx-s0.h1Rx, s1.h2Tx-s0.h2Tx, s1.h2Rx-s0.h2Rx
	t.Logf("h1 sent %d, received %d; h2 sent %d, received %d", h1Tx, h1Rx, h2Tx, h2Rx)
	// p1 is cabled to h1, p2 to h2: each port received what its host sent
	// and transmitted what the other host received.
	for _, c := range []struct {
		series string
		want   uint64
	}{
		{`prismd_port_receive_frames_total{port="p1"}`, h1Tx},
		{`prismd_port_receive_frames_total{port="p2"}`, h2Tx},
		{`prismd_port_transmit_frames_total{port="p2"}`, h2Rx},
		{`prismd_port_transmit_frames_total{port="p1"}`, h1Rx},
	} {
		if got := delta(c.series); got != c.want {
			t.Errorf("%s moved by %d, want %d (host counters: h1 tx %d rx %d, h2 tx %d rx %d)", c.series, got, c.want, h1Tx, h1Rx, h2Tx, h2Rx)
		}
	}
	if h1Tx < 10 || h2Rx != h1Tx || h1Rx != h2Tx {
		t.Errorf("h1 sent %d and h2 got %d, h2 sent %d and h1 got %d: want 10 or more, forwarded exactly once", h1Tx, h2Rx, h2Tx, h1Rx)
	}
	// No loss of any kind was counted (every drop, kernel and fault series
	// of the port is zero).
	for _, line := range strings.Split(s1.m, "\n") {
		if strings.HasPrefix(line, "prismd_port_") && strings.Contains(line, "drops_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("sw1 counted a drop: %s", line)
		}
	}

	down = true
	if err := lab.Down(); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pl-"+tp.Name+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	if _, err := os.Stat(lab.Dir()); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind (%v)", lab.Dir(), err)
	}
	if pid <= 0 {
		t.Errorf("no prismd pid was recorded for sw1")
	} else if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("prismd pid %d still exists after lab down (kill 0: %v)", pid, err)
	}
}
