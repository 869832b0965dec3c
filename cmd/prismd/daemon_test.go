package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/prismd/prismd/internal/netnstest"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type statusJSON struct {
	Ports []struct {
		Name string `json:"name"`
	} `json:"ports"`
}

// TestDaemonReloadAndShutdown runs the whole daemon (run) inside a network
// namespace, reloads it with SIGHUP (good and bad configurations) and stops it
// with SIGTERM.
func TestDaemonReloadAndShutdown(t *testing.T) {
	env := netnstest.New(t, "pd")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	var names []string
	for i := 0; i < 3; i++ {
		_, b := env.Veth(h, sw)
		names = append(names, b)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "ctl.sock")
	cfgFile := filepath.Join(dir, "prismd.yaml")
	writeCfg := func(body string) {
		if err := os.WriteFile(cfgFile, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ports := func(n ...string) string {
		s := "ports:\n"
		for _, x := range n {
			s += "  - name: " + x + "\n"
		}
		return s + "control_listen: " + sock + "\n"
	}
	writeCfg(ports(names[0], names[1]))

	var logs syncBuf
	rc := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		hd, err := netns.GetFromName(sw)
		if err == nil {
			err = netns.Set(hd)
		}
		if err != nil {
			logs.Write([]byte(err.Error()))
			rc <- 99
			return
		}
		rc <- run([]string{"--config", cfgFile, "--log-level", "debug"}, &logs, &logs)
	}()

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	status := func() (statusJSON, error) {
		var st statusJSON
		resp, err := client.Get("http://prismd/v1/status")
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		return st, json.NewDecoder(resp.Body).Decode(&st)
	}
	waitPorts := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		var got []string
		for time.Now().Before(deadline) {
			st, err := status()
			got = got[:0]
			if err == nil {
				for _, p := range st.Ports {
					got = append(got, p.Name)
				}
				if fmt.Sprint(got) == fmt.Sprint(want) {
					return
				}
			}
			select {
			case c := <-rc:
				t.Fatalf("daemon exited with %d:\n%s", c, logs.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		t.Fatalf("ports = %v, want %v\nlog:\n%s", got, want, logs.String())
	}
	waitPorts(names[0], names[1])
	waitLog := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(logs.String(), what) < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if c := strings.Count(logs.String(), what); c != n {
			t.Fatalf("%d log lines with %q, want %d\n%s", c, what, n, logs.String())
		}
	}

	// Add a port: the two running ones are not reopened.
	writeCfg(ports(names[0], names[1], names[2]) + "mac_aging: 60s\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitPorts(names[0], names[1], names[2])
	if n := strings.Count(logs.String(), "port opened"); n != 3 {
		t.Fatalf("%d ports opened, want 3 (untouched ports must not be reopened)\n%s", n, logs.String())
	}
	waitLog(1, "configuration reloaded")
	// The added port is in the summary too, and durations read alike.
	if want := `changed="ports added: ` + names[2] + `; mac_aging 300s -> 60s"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the reload does not say what changed (want %s):\n%s", want, logs.String())
	}

	// The same file again: nothing changed, and no port lines come before
	// the summary (it said "nothing besides the ports above").
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(2, "configuration reloaded")
	if !strings.Contains(logs.String(), `msg="configuration reloaded" ports=3 changed=nothing`+"\n") {
		t.Errorf("an unchanged reload does not say changed=nothing:\n%s", logs.String())
	}

	// A bad configuration is rejected and the running one stays.
	writeCfg(ports(names[0]) + "bogus: 1\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "reload rejected") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "field bogus not found") {
		t.Fatalf("bad reload not reported:\n%s", logs.String())
	}
	waitPorts(names[0], names[1], names[2])

	// kulisch_partials needs a restart: warned while the file differs from
	// what runs, every reload, and not once the file is back to it.
	for i, kp := range []string{"scaled", "scaled", "f64"} {
		writeCfg(ports(names[0], names[1], names[2]) + "kulisch_partials: " + kp + "\n")
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		waitLog(3+i, "configuration reloaded")
	}
	if c := strings.Count(logs.String(), ` awaiting_restart=kulisch_partials`+"\n"); c != 2 {
		t.Errorf("%d reload summaries name kulisch_partials as awaiting a restart, want 2 (it said changed=nothing after the warning):\n%s", c, logs.String())
	}
	if c, back := strings.Count(logs.String(), "running=\"f64 (the default)\" configured=scaled"), strings.Count(logs.String(), "configured=f64"); c != 2 || back != 0 {
		t.Errorf("kulisch_partials warnings for scaled, scaled, f64 while the default (f64) runs: %d for scaled, %d for f64; want 2 and 0\n%s",
			c, back, logs.String())
	}

	// Remove a port; names[2] moves to index 0, which breaks what the AM
	// set up by index: warned.
	writeCfg(ports(names[2], names[0]))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitPorts(names[2], names[0])
	waitLog(2, "port moved to another index") // names[0] moved from 0 to 1 too
	if !strings.Contains(logs.String(), "port="+names[2]+" index=0 was=2") {
		t.Errorf("the moved port's warning does not name it and both indices:\n%s", logs.String())
	}
	waitLog(6, "configuration reloaded")
	if want := fmt.Sprintf(`changed="ports removed: %s; port order %s, %s -> %s, %s"`, names[1], names[0], names[2], names[2], names[0]); !strings.Contains(logs.String(), want) {
		t.Errorf("the reload does not list the removed port and the new order (want %s):\n%s", want, logs.String())
	}

	// Replace the port at index 1 by another interface: no port moved,
	// and what the AM set up for index 1 breaks all the same: warned.
	writeCfg(ports(names[2], names[1]))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitPorts(names[2], names[1])
	waitLog(1, "port index now names another interface")
	if !strings.Contains(logs.String(), "index=1 port="+names[1]+" was="+names[0]) {
		t.Errorf("the replaced index's warning does not name the index and both interfaces:\n%s", logs.String())
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case c := <-rc:
		if c != 0 {
			t.Fatalf("exit code %d after SIGTERM\n%s", c, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("daemon did not stop after SIGTERM\n%s", logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("control socket left behind: %v", err)
	}
	// Its last word: every port's counters.
	for _, n := range []string{names[2], names[1]} {
		if !strings.Contains(logs.String(), `msg="port totals" port=`+n+" rx_frames=") {
			t.Errorf("no totals for %s at shutdown:\n%s", n, logs.String())
		}
	}
}
