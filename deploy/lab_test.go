package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
	"github.com/vishvananda/netlink"
)

var (
	fakeOnce sync.Once
	fakePath string
	fakeErr  error
)

// fakePrismd builds testdata/fakeprismd once: a stand-in that lets these
// tests exercise start, readiness, stop and rollback on their own, including
// a prismd that dies, hangs or ignores SIGTERM.
func fakePrismd(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fakeprismd-")
		if err != nil {
			fakeErr = err
			return
		}
		fakePath = filepath.Join(dir, "fakeprismd")
		out, err := exec.Command("go", "build", "-o", fakePath, "./testdata/fakeprismd").CombinedOutput()
		if err != nil {
			fakeErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatalf("build fakeprismd: %v", fakeErr)
	}
	return fakePath
}

func shipped(t *testing.T, name, labName string) *deploy.Topology {
	t.Helper()
	b, err := deploy.Embedded(name)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := deploy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return labtest.Rename(t, tp, labName)
}

// pids returns the recorded prismd PIDs of a lab that is up.
func pids(t *testing.T, lab *deploy.Lab) []int {
	t.Helper()
	var r []int
	for _, n := range lab.Topo.NodesOf(deploy.KindPrismd) {
		pid := lab.PID(n)
		if pid <= 0 || !deploy.Alive(pid) {
			t.Errorf("prismd %s: recorded pid %d is not running", n, pid)
		}
		r = append(r, pid)
	}
	return r
}

// assertGone checks that nothing of lab topo is left: no namespace, no
// temporary veth in the root namespace, no live recorded process, no state.
func assertGone(t *testing.T, topo *deploy.Topology, stateDir string, pids []int) {
	t.Helper()
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pl-"+topo.Name+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	links, err := deploy.ListLinks(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, deploy.TmpPrefix(topo.Name)) {
			t.Errorf("root namespace link %s left behind", l.Attrs().Name)
		}
	}
	for _, pid := range pids {
		if deploy.Alive(pid) {
			t.Errorf("prismd pid %d still running", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, "."+topo.Name+".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left behind (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, topo.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory %s left behind (%v)", filepath.Join(stateDir, topo.Name), err)
	}
}

func ping(t *testing.T, lab *deploy.Lab, from, to string) {
	t.Helper()
	addr, ok := lab.Topo.HostAddr(to)
	if !ok {
		t.Fatalf("%s has no address", to)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lab.Ping(ctx, from, addr, 2, 2*time.Second); err != nil {
		t.Errorf("ping %s -> %s: %v", from, to, err)
	}
}

// TestSingleLabPing brings up single.yaml with the real prismd and pings
// between the hosts through it.
func TestSingleLabPing(t *testing.T) {
	labtest.RequireRoot(t)
	lab := labtest.Up(t, "single")
	tp := lab.Topo
	ping(t, lab, "h1", "h2")
	ping(t, lab, "h2", "h1")
	// The kernel's view matches the topology: names, MACs, MTU, address.
	for _, node := range tp.NodeNames() {
		err := lab.Do(node, func() error {
			for _, ifc := range deploy.Ports(tp, node) {
				l, err := netlink.LinkByName(ifc)
				if err != nil {
					return err
				}
				m := tp.MAC(node, ifc)
				if got := l.Attrs().HardwareAddr.String(); got != deploy.HardwareAddr(m).String() {
					t.Errorf("%s:%s MAC %s, want %s", node, ifc, got, deploy.HardwareAddr(m))
				}
				if l.Attrs().MTU != 1500 {
					t.Errorf("%s:%s MTU %d", node, ifc, l.Attrs().MTU)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Do(%s): %v", node, err)
		}
	}
	out, err := lab.Exec("h1", "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.0.0.1/24") {
		t.Errorf("h1 eth0 address: %v %s", err, out)
	}
	// The switch runs with its share of the cores (one switch: all of
	// them, unless the test's environment names a GOMAXPROCS).
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", lab.PID("sw1")))
	if err != nil {
		t.Fatal(err)
	}
	want := "GOMAXPROCS=" + strconv.Itoa(deploy.SwitchProcsFor(runtime.NumCPU(), 1))
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		want = "GOMAXPROCS=" + v
	}
	var got []string
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			got = append(got, kv)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("sw1 environment has %q, want exactly %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := lab.Metrics(ctx, "sw1"); err != nil || !strings.Contains(m, "prism") {
		t.Errorf("sw1 /metrics: %v (%d bytes)", err, len(m))
	}
	st, err := deploy.Status(tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Present || (s.Kind == deploy.KindPrismd && !s.Alive) || len(s.Ifaces) == 0 {
			t.Errorf("status %+v", s)
		}
	}
}

// TestLabRepeated brings a 20-namespace lab (2 prismd switches, 18 hosts)
// up and down ten times, checking after each down that nothing is left:
// no namespace, no temporary link in the root namespace, no recorded
// process, no state directory or lock file.
// TestSwitchProcsFor: the lab shares the machine's cores out among its
// switches and its hosts (one more party), never below one.
func TestSwitchProcsFor(t *testing.T) {
	for _, tc := range []struct{ cpus, n, want int }{
		{2, 1, 1}, {2, 3, 1}, {4, 1, 2}, {8, 3, 2}, {16, 4, 3}, {1, 5, 1}, {4, 0, 4}, {64, 1, 32},
	} {
		if got := deploy.SwitchProcsFor(tc.cpus, tc.n); got != tc.want {
			t.Errorf("SwitchProcsFor(%d cpus, %d switches) = %d, want %d", tc.cpus, tc.n, got, tc.want)
		}
	}
}

func TestLabRepeated(t *testing.T) {
	labtest.RequireRoot(t)
	prismd := labtest.Prismd(t)
	nodes := []deploy.Node{{Name: "s1", Kind: deploy.KindPrismd}, {Name: "s2", Kind: deploy.KindPrismd}}
	links := []deploy.Link{{A: deploy.Endpoint{Node: "s1", Iface: "up"}, B: deploy.Endpoint{Node: "s2", Iface: "up"}}}
	for i := 1; i <= 18; i++ {
		h := fmt.Sprintf("h%d", i)
		nodes = append(nodes, deploy.Node{Name: h, Kind: deploy.KindHost, IPv4: netip.MustParsePrefix(fmt.Sprintf("10.0.1.%d/24", i))})
		sw := "s1"
		if i > 9 {
			sw = "s2"
		}
		links = append(links, deploy.Link{A: deploy.Endpoint{Node: h, Iface: "eth0"}, B: deploy.Endpoint{Node: sw, Iface: fmt.Sprintf("p%d", i)}})
	}
	tp, err := deploy.Build(labtest.UniqueName(), 0, nodes, links)
	if err != nil {
		t.Fatal(err)
	}
	repeatLab(t, tp, prismd, 10, "h1", "h18")
}

// TestSoakLabRepeated is the long version (make soak): the fat-tree lab,
// 100 rounds, every host pair pinged in the first.
func TestSoakLabRepeated(t *testing.T) {
	if os.Getenv("PRISMD_SOAK") != "1" {
		t.Skip("soak test: set PRISMD_SOAK=1 (make soak)")
	}
	labtest.RequireRoot(t)
	repeatLab(t, shipped(t, "fat-tree", labtest.UniqueName()), labtest.Prismd(t), 100, "h1", "h8")
}

// repeatLab brings tp up and down rounds times, pinging from -> to in the
// first round and checking after each down that nothing is left.
func repeatLab(t *testing.T, tp *deploy.Topology, prismd string, rounds int, from, to string) {
	opts := &deploy.Options{Prismd: prismd}
	t.Cleanup(func() { deploy.Down(tp, opts) })
	var upTotal, downTotal time.Duration
	for round := 0; round < rounds; round++ {
		start := time.Now()
		lab, err := deploy.Up(context.Background(), tp, opts)
		if err != nil {
			t.Fatalf("round %d: up: %v", round, err)
		}
		upTotal += time.Since(start)
		ents, _ := os.ReadDir("/run/netns")
		n := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "pl-"+tp.Name+"-") {
				n++
			}
		}
		if n != len(tp.Nodes) {
			t.Errorf("round %d: %d namespaces, want %d", round, n, len(tp.Nodes))
		}
		if round == 0 {
			ping(t, lab, from, to)
		}
		ps := pids(t, lab)
		start = time.Now()
		if err := lab.Down(); err != nil {
			t.Fatalf("round %d: down: %v", round, err)
		}
		downTotal += time.Since(start)
		assertGone(t, tp, deploy.DefaultStateDir, ps)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d namespaces, %d rounds: up %v/round, down %v/round", len(tp.Nodes), rounds,
		(upTotal / time.Duration(rounds)).Round(time.Millisecond), (downTotal / time.Duration(rounds)).Round(time.Millisecond))
}

// TestLifecycle exercises the lab machinery with fakeprismd.
func TestLifecycle(t *testing.T) {
	labtest.RequireRoot(t)
	fake := fakePrismd(t)
	ctx := context.Background()

	t.Run("up-down-twice-and-coexist", func(t *testing.T) {
		a := shipped(t, "spine-leaf", labtest.UniqueName())
		b := shipped(t, "single", labtest.UniqueName())
		opts := &deploy.Options{Prismd: fake}
		la, err := deploy.Up(ctx, a, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { la.Down() })
		lb, err := deploy.Up(ctx, b, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lb.Down() })
		ping(t, la, "h1", "h4")
		ping(t, lb, "h1", "h2")
		// A second Up of a running lab is refused and leaves it alone.
		if _, err := deploy.Up(ctx, a, opts); !errors.Is(err, deploy.ErrExists) {
			t.Errorf("second Up: %v, want ErrExists", err)
		}
		ping(t, la, "h2", "h3")
		// Down from a fresh value (as another process would) using only the
		// state directory, twice.
		psa := pids(t, la)
		if err := deploy.Down(a, opts); err != nil {
			t.Fatal(err)
		}
		if err := deploy.Down(a, opts); err != nil {
			t.Fatalf("second Down: %v", err)
		}
		assertGone(t, a, deploy.DefaultStateDir, psa)
		ping(t, lb, "h2", "h1") // the other lab is untouched
		psb := pids(t, lb)
		// A process the user started in the lab outlives it: Down names
		// it (it said only "down").
		sleeper := lb.Exec("h1", "sleep", "60")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
		time.Sleep(100 * time.Millisecond) // ip netns exec has become sleep
		var downLog strings.Builder
		if err := deploy.Down(b, &deploy.Options{Prismd: fake, Log: &downLog}); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("pid %d in %s: sleep 60", sleeper.Process.Pid, lb.NetNS("h1")); !strings.Contains(downLog.String(), "1 processes still run in its namespaces") ||
			!strings.Contains(downLog.String(), want) {
			t.Errorf("Down logged %q, want the sleeper named (%s)", downLog.String(), want)
		}
		assertGone(t, b, deploy.DefaultStateDir, psb)
	})

	t.Run("concurrent-up-same-lab", func(t *testing.T) {
		tp := shipped(t, "single", labtest.UniqueName())
		opts := &deploy.Options{Prismd: fake}
		t.Cleanup(func() { deploy.Down(tp, opts) })
		errs := make([]error, 2)
		labs := make([]*deploy.Lab, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); labs[i], errs[i] = deploy.Up(ctx, tp, opts) }()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				ping(t, labs[i], "h1", "h2")
			case !errors.Is(err, deploy.ErrExists):
				t.Errorf("Up %d: %v, want success or ErrExists", i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of 2 concurrent Ups succeeded (%v)", ok, errs)
		}
		ps := []int{}
		for _, l := range labs {
			if l != nil {
				ps = pids(t, l)
			}
		}
		if err := deploy.Down(tp, opts); err != nil {
			t.Fatal(err)
		}
		assertGone(t, tp, deploy.DefaultStateDir, ps)
	})

	t.Run("prismd-dies", func(t *testing.T) {
		t.Setenv("FAKEPRISMD_MODE", "die")
		tp := shipped(t, "spine-leaf", labtest.UniqueName())
		_, err := deploy.Up(ctx, tp, &deploy.Options{Prismd: fake})
		if !errors.Is(err, deploy.ErrPrismdDied) || !strings.Contains(err.Error(), "dying on purpose") {
			t.Fatalf("Up: %v, want ErrPrismdDied with the log tail", err)
		}
		assertGone(t, tp, deploy.DefaultStateDir, nil)
	})

	t.Run("prismd-never-ready", func(t *testing.T) {
		t.Setenv("FAKEPRISMD_MODE", "mute")
		tp := shipped(t, "single", labtest.UniqueName())
		start := time.Now()
		_, err := deploy.Up(ctx, tp, &deploy.Options{Prismd: fake, ReadyTimeout: 500 * time.Millisecond, StopTimeout: 200 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "not ready after 500ms") {
			t.Fatalf("Up: %v, want a readiness timeout", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("timeout took %v", d)
		}
		assertGone(t, tp, deploy.DefaultStateDir, nil)
	})

	t.Run("sigterm-ignored", func(t *testing.T) {
		t.Setenv("FAKEPRISMD_MODE", "ignoreterm")
		tp := shipped(t, "single", labtest.UniqueName())
		lab, err := deploy.Up(ctx, tp, &deploy.Options{Prismd: fake, StopTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ps := pids(t, lab)
		start := time.Now()
		if err := lab.Down(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("Down took %v: SIGKILL came before the stop timeout", d)
		}
		assertGone(t, tp, deploy.DefaultStateDir, ps)
	})

	t.Run("cancelled-up-rolls-back", func(t *testing.T) {
		t.Setenv("FAKEPRISMD_MODE", "mute")
		tp := shipped(t, "fat-tree", labtest.UniqueName())
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := deploy.Up(cctx, tp, &deploy.Options{Prismd: fake, StopTimeout: 200 * time.Millisecond})
		if err == nil {
			t.Fatal("Up succeeded with a mute prismd")
		}
		assertGone(t, tp, deploy.DefaultStateDir, nil)
	})

	t.Run("down-of-half-built-lab", func(t *testing.T) {
		tp := shipped(t, "single", labtest.UniqueName())
		// What a crash half-way through Up leaves: one namespace and one
		// temporary veth in the root namespace.
		if out, err := exec.Command("ip", "netns", "add", deploy.NetNSName(tp.Name, "h1")).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		tmp := deploy.TmpPrefix(tp.Name) + "0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tmp + "a"}, PeerName: tmp + "b"}); err != nil {
			t.Fatal(err)
		}
		if err := deploy.Down(tp, nil); err != nil {
			t.Fatal(err)
		}
		assertGone(t, tp, deploy.DefaultStateDir, nil)
	})

	t.Run("bridge-and-exec", func(t *testing.T) {
		lab := labtest.Up(t, "bridge-pair")
		ping(t, lab, "h1", "h2")
		out, err := lab.Exec("br1", "ip", "-o", "link", "show", "master", deploy.BridgeIface).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "p1") || !strings.Contains(string(out), "p2") {
			t.Errorf("bridge ports: %v %s", err, out)
		}
		out, err = lab.Exec("h1", "ethtool", "-k", "eth0").CombinedOutput()
		for _, f := range []string{"tcp-segmentation-offload: off", "generic-segmentation-offload: off", "generic-receive-offload: off", "tx-checksumming: off", "rx-checksumming: off"} {
			if err != nil || !strings.Contains(string(out), f) {
				t.Errorf("h1 eth0: want %q: %v", f, err)
			}
		}
		// An unreachable address is reported, not hung on.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := lab.Ping(ctx, "h1", netip.MustParseAddr("10.0.0.99"), 1, 300*time.Millisecond); !errors.Is(err, deploy.ErrNoReply) {
			t.Errorf("ping to nobody: %v, want ErrNoReply", err)
		}
	})

	t.Run("jumbo", func(t *testing.T) {
		lab := labtest.UpWith(t, "spine-leaf-jumbo", &deploy.Options{Prismd: fake})
		out, err := lab.Exec("h1", "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972", "10.0.0.4").CombinedOutput()
		if _, lerr := exec.LookPath("ping"); lerr != nil {
			t.Skip("ping not installed (iputils-ping)")
		}
		if err != nil {
			t.Errorf("jumbo ping: %v\n%s", err, out)
		}
	})
}

// wkName is a unique lab name for the tests below.
func wkName() string { return "wk" + strings.TrimPrefix(labtest.UniqueName(), "t") }

// TestDownWithoutState: a lab brought up with one state directory and taken
// down with another (the default) is refused with the directory its prismd
// run with, nothing removed and nothing stopped; with the right directory
// it goes. A lab that never was is "not up", successfully.
func TestDownWithoutState(t *testing.T) {
	labtest.RequireRoot(t)
	tp := shipped(t, "single", wkName())
	state := t.TempDir()
	opts := &deploy.Options{Prismd: fakePrismd(t), StateDir: state}
	lab, err := deploy.Up(context.Background(), tp, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Down() })
	ps := pids(t, lab)

	err = deploy.Down(tp, nil)
	var nse *deploy.NoStateError
	if !errors.As(err, &nse) {
		t.Fatalf("Down with the default state directory: %v, want a *NoStateError", err)
	}
	if nse.StateDir != state || nse.Dir != filepath.Join(deploy.DefaultStateDir, tp.Name) || len(nse.NetNS) != 3 ||
		len(nse.Procs) != 1 || nse.Procs[0].PID != ps[0] || nse.Procs[0].NetNS != deploy.NetNSName(tp.Name, "sw1") {
		t.Errorf("NoStateError %+v: want state dir %s, 3 namespaces and prismd pid %d in sw1", nse, state, ps[0])
	}
	if !deploy.Alive(ps[0]) {
		t.Errorf("Down without state stopped prismd %d", ps[0])
	}
	ping(t, lab, "h1", "h2") // namespaces and prismd untouched
	if err := deploy.CheckState(tp, nil); !errors.As(err, &nse) {
		t.Errorf("CheckState with the default state directory: %v, want a *NoStateError", err)
	}
	if err := deploy.CheckState(tp, opts); err != nil {
		t.Errorf("CheckState with the lab's state directory: %v", err)
	}
	if got := deploy.RunningStateDir(deploy.NetNSName(tp.Name, "sw1")); got != state {
		t.Errorf("RunningStateDir: %q, want %q", got, state)
	}

	var log strings.Builder
	if err := deploy.Down(tp, &deploy.Options{StateDir: state, Log: &log}); err != nil {
		t.Fatal(err)
	}
	assertGone(t, tp, state, ps)
	if !strings.Contains(log.String(), "lab "+tp.Name+": down\n") {
		t.Errorf("Down logged %q, want 'down'", log.String())
	}
	log.Reset()
	if err := deploy.Down(tp, &deploy.Options{StateDir: state, Log: &log}); err != nil {
		t.Fatalf("second Down: %v", err)
	}
	if !strings.Contains(log.String(), "lab "+tp.Name+": was not up\n") {
		t.Errorf("Down of a lab that is not up logged %q, want 'was not up'", log.String())
	}
}

// TestPrismdSilentExit: a prismd that exits during start-up without a word
// is reported by its exit status, not by an empty log tail.
func TestPrismdSilentExit(t *testing.T) {
	labtest.RequireRoot(t)
	tp := shipped(t, "single", wkName())
	_, err := deploy.Up(context.Background(), tp, &deploy.Options{Prismd: "/bin/false"})
	want := "prismd on sw1 (pid "
	if !errors.Is(err, deploy.ErrPrismdDied) || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), ") exited with status 1 and wrote nothing to its log "+filepath.Join(deploy.DefaultStateDir, tp.Name, "sw1.log")) {
		t.Fatalf("Up with /bin/false: %v\nwant ErrPrismdDied with the exit status and the empty log named", err)
	}
	assertGone(t, tp, deploy.DefaultStateDir, nil)
}

// environ returns the value of key in pid's environment, "" if unset.
func environ(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// waitGone waits until pid no longer runs.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for deploy.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRestart: Restart, as another process would call it, starts the
// lab's prismd that was killed as Up started it (the configuration file,
// the lab's GOMAXPROCS and binary, the log appended, the PID recorded),
// leaves the running ones alone, adopts one started by hand from the
// lab's configuration instead of starting a second, and refuses a lab
// brought up from another topology.
func TestRestart(t *testing.T) {
	labtest.RequireRoot(t)
	fake := fakePrismd(t)
	tp := shipped(t, "spine-leaf", wkName())
	state := t.TempDir()
	// GOMAXPROCS 3: what the machine's share would not give, so the
	// restarted switch shows it got the lab's.
	lab, err := deploy.Up(context.Background(), tp, &deploy.Options{Prismd: fake, StateDir: state, SwitchProcs: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deploy.Down(tp, &deploy.Options{StateDir: state}) })
	before := map[string]int{}
	for _, n := range tp.NodesOf(deploy.KindPrismd) {
		before[n] = lab.PID(n)
	}
	cfg, err := os.ReadFile(lab.ConfigFile("l2"))
	if err != nil {
		t.Fatal(err)
	}
	logBefore, err := os.ReadFile(lab.LogFile("l2"))
	if err != nil || len(logBefore) == 0 {
		t.Fatalf("l2's log: %v (%d bytes)", err, len(logBefore))
	}
	if err := syscall.Kill(before["l2"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, before["l2"])

	var log strings.Builder
	opts := &deploy.Options{StateDir: state, Log: &log} // no Prismd, no SwitchProcs: the lab's
	l2, started, err := deploy.Restart(context.Background(), tp, opts)
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if strings.Join(started, ",") != "l2" {
		t.Errorf("Restart started %q, want l2 only", started)
	}
	pid := l2.PID("l2")
	if pid == before["l2"] || !deploy.Alive(pid) {
		t.Fatalf("l2's recorded pid %d (was %d) does not run", pid, before["l2"])
	}
	if got := environ(t, pid, "GOMAXPROCS"); got != "3" {
		t.Errorf("restarted l2 has GOMAXPROCS=%q, want the lab's 3", got)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if want := fake + "\x00--config\x00" + lab.ConfigFile("l2"); !strings.HasPrefix(string(cmdline), want) {
		t.Errorf("restarted l2 runs %q, want %q", cmdline, want)
	}
	if b, _ := os.ReadFile(lab.ConfigFile("l2")); string(b) != string(cfg) {
		t.Errorf("l2's configuration changed:\n%s\nwas\n%s", b, cfg)
	}
	if b, _ := os.ReadFile(lab.LogFile("l2")); len(b) <= len(logBefore) || string(b[:len(logBefore)]) != string(logBefore) {
		t.Errorf("l2's log was not appended to:\n%s", b)
	}
	for _, n := range []string{"s1", "l1"} {
		if p := l2.PID(n); p != before[n] || !deploy.Alive(p) {
			t.Errorf("%s: pid %d, want %d left running", n, p, before[n])
		}
	}
	if !strings.Contains(log.String(), fmt.Sprintf("restarted prismd on l2 (pid %d, %s, GOMAXPROCS=3)", pid, fake)) {
		t.Errorf("Restart logged %q", log.String())
	}
	st, err := deploy.Status(tp, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Kind == deploy.KindPrismd && (!s.Alive || s.Stopped) {
			t.Errorf("status after Restart: %+v", s)
		}
	}
	// A SIGSTOPped prismd is alive but forwards nothing: Status says it
	// is stopped (it said running).
	syscall.Kill(pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err = deploy.Status(tp, opts)
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		for _, s := range st {
			stopped = stopped || s.Node == "l2" && s.Alive && s.Stopped
		}
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a SIGSTOPped l2: %+v, want it Stopped", st)
		}
	}
	syscall.Kill(pid, syscall.SIGCONT)
	ping(t, lab, "h1", "h4") // through l1, s1 and the restarted l2

	// Every prismd runs: nothing to start.
	if _, started, err := deploy.Restart(context.Background(), tp, opts); err != nil || len(started) != 0 {
		t.Errorf("Restart of a lab whose prismd all run: started %q, %v", started, err)
	}

	// l2 killed again and started by hand from the lab's files: Restart
	// records it rather than start a second prismd on the same ports.
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid)
	hand := exec.Command("ip", "netns", "exec", lab.NetNS("l2"), fake, "--config", lab.ConfigFile("l2"))
	if err := hand.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hand.Process.Kill(); hand.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", hand.Process.Pid))
		if strings.HasPrefix(string(b), fake+"\x00") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Reset()
	if _, started, err := deploy.Restart(context.Background(), tp, opts); err != nil || len(started) != 0 {
		t.Errorf("Restart with l2 started by hand: started %q, %v; want none", started, err)
	}
	if got := lab.PID("l2"); got != hand.Process.Pid {
		t.Errorf("l2's recorded pid %d, want the hand-started %d", got, hand.Process.Pid)
	}
	if !strings.Contains(log.String(), fmt.Sprintf("prismd on l2 runs as pid %d, which the lab had not recorded (it had %d)", hand.Process.Pid, pid)) {
		t.Errorf("Restart logged %q", log.String())
	}

	// The same name with another topology: refused, nothing touched.
	jumbo := shipped(t, "spine-leaf-jumbo", tp.Name)
	syscall.Kill(hand.Process.Pid, syscall.SIGKILL)
	hand.Wait()
	if _, _, err := deploy.Restart(context.Background(), jumbo, opts); !errors.Is(err, deploy.ErrExists) || !strings.Contains(err.Error(), "its topology differs") {
		t.Errorf("Restart with another topology: %v, want ErrExists naming the topology", err)
	}
	if p := lab.PID("l2"); deploy.Alive(p) {
		t.Errorf("Restart with another topology started l2 (pid %d)", p)
	}
	if err := deploy.Down(tp, opts); err != nil {
		t.Fatal(err)
	}
	assertGone(t, tp, state, []int{before["s1"], before["l1"]})
	if _, _, err := deploy.Restart(context.Background(), tp, opts); !errors.Is(err, deploy.ErrNotUp) {
		t.Errorf("Restart of a lab that is down: %v, want ErrNotUp", err)
	}
}
