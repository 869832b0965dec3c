package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
	"github.com/prismd/prismd/internal/netnstest"
)

// TestCheckConfigInterfaces: --check-config where the interfaces exist
// passes, and says of a port whose mtu is above its interface's MTU that
// its longer frames will not go out (they failed as tx_error, silently),
// with the fix, still exiting 0: the interface may be raised before start.
func TestCheckConfigInterfaces(t *testing.T) {
	env := netnstest.New(t, "w3c")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	_, b0 := env.Veth(h, sw)
	_, b1 := env.Veth(h, sw)
	f := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(f, []byte(fmt.Sprintf("ports:\n  - name: %s\n  - name: %s\n    mtu: 9000\n", b0, b1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	rc := -1
	env.Do(sw, func() { rc = run([]string{"--config", f, "--check-config"}, &out, &errb) })
	if rc != 0 || !strings.Contains(out.String(), "is valid (2 ports, 1 worker)") {
		t.Fatalf("rc=%d stdout %q stderr %q; want 0 and valid", rc, out.String(), errb.String())
	}
	want := fmt.Sprintf(`prismd: warning: %s: port %q: mtu 9000 is above interface %s's MTU 1500: frames longer than 1500 bytes cannot be sent on it`, f, b1, b1)
	if !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), fmt.Sprintf("ip link set %s mtu 9000", b1)) ||
		strings.Contains(errb.String(), b0) {
		t.Fatalf("stderr %q\nwant one warning, for %s only: %q and the fix", errb.String(), b1, want)
	}
}

// TestMTUAboveInterfaceWarned: the daemon warns of such a port at start
// ("port opened mtu=9000" was all it said) and again on each reload that
// keeps it so, and not once the interface is raised; an interface MTU
// lowered under a running port is said when the link watcher sees it.
func TestMTUAboveInterfaceWarned(t *testing.T) {
	fastLinkChecks(t)
	env := netnstest.New(t, "w3m")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	_, b := env.Veth(h, sw)
	body := fmt.Sprintf("ports: [{name: %s, mtu: 9000}]\n", b)
	var logs syncBuf
	d, err := startIn(t, env, sw, parseCfg(t, body), &logs)
	if err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	const warning = "port's mtu is above its interface's MTU"
	want := fmt.Sprintf(`port=%s mtu=9000 interface_mtu=1500 fix="ip link set %s mtu 9000, or leave mtu out to follow the interface"`, b, b)
	if c := strings.Count(logs.String(), warning); c != 1 || !strings.Contains(logs.String(), "level=WARN msg=\""+warning) || !strings.Contains(logs.String(), want) {
		t.Fatalf("%d warnings at start, want 1 WARN with %s:\n%s", c, want, logs.String())
	}
	d.file = filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(d.file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env.Do(sw, d.reload)
	if c := strings.Count(logs.String(), warning); c != 2 {
		t.Fatalf("%d warnings after a reload, want 2:\n%s", c, logs.String())
	}
	env.MustExec(sw, "ip", "link", "set", b, "mtu", "9000")
	env.Do(sw, d.reload)
	if c := strings.Count(logs.String(), warning); c != 2 {
		t.Fatalf("%d warnings after a reload with the interface at 9000, want still 2:\n%s", c, logs.String())
	}
	// At run time, without a reload: the interface's MTU lowered under
	// the running port is said once (not at every look), and so is its
	// return.
	const dropped, back = "port's interface MTU changed to below its mtu", "port's interface MTU is back at or above its mtu"
	env.MustExec(sw, "ip", "link", "set", b, "mtu", "4000")
	waitLog(t, &logs, dropped)
	if !strings.Contains(logs.String(), "port="+b+" mtu=9000 interface_mtu=4000") {
		t.Fatalf("the warning does not name the port and both MTUs:\n%s", logs.String())
	}
	time.Sleep(3 * linkCheckEvery)
	env.MustExec(sw, "ip", "link", "set", b, "mtu", "9000")
	waitLog(t, &logs, back+`" port=`+b+` mtu=9000 interface_mtu=9000`)
	if c, r := strings.Count(logs.String(), dropped), strings.Count(logs.String(), back); c != 1 || r != 1 {
		t.Fatalf("%d warnings and %d notes of its return, want 1 each:\n%s", c, r, logs.String())
	}
}

// waitLog waits up to 5 s for logs to hold want.
func waitLog(t *testing.T, logs *syncBuf, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in 5 s:\n%s", want, logs.String())
		}
	}
}

// TestStatusKernelDrops: /v1/status lists the frames the kernel dropped
// for a full socket buffer or ring among the port's drops, as "kernel";
// they were only in prismd_port_kernel_drops_total, so prismctl show
// ports said "-" for a port losing thousands.
func TestStatusKernelDrops(t *testing.T) {
	dp, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	p0, p1 := porttest.New("a0", porttest.MAC(1), 1500), porttest.New("a1", porttest.MAC(2), 1500)
	p0.KernelDrops.Store(53489)
	if err := dp.SetPorts([]dataplane.Port{p0, p1}); err != nil {
		t.Fatal(err)
	}
	d := &daemon{dp: dp}
	rec := httptest.NewRecorder()
	d.status(rec, httptest.NewRequest("GET", "/v1/status", nil))
	var got struct {
		Ports []struct {
			Name  string            `json:"name"`
			Drops map[string]uint64 `json:"drops"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body.String())
	}
	if len(got.Ports) != 2 || fmt.Sprint(got.Ports[0].Drops) != "map[kernel:53489]" || len(got.Ports[1].Drops) != 0 {
		t.Fatalf("GET /v1/status ports %+v; want a0 with drops {kernel: 53489}, a1 with none", got.Ports)
	}
}
