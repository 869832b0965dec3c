package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
)

// TestOpsShowMACs pings between the two hosts of the single lab (lab name
// prefix "mx") and checks 'prismctl show macs' on the switch: each host's
// MAC learned on the port its link lands on, the switch's port MACs and
// node MAC as local entries, rows in port order, and the count line.
func TestOpsShowMACs(t *testing.T) {
	labtest.RequireRoot(t)
	src, err := deploy.Embedded("single")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := deploy.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	var r [2]byte
	_, _ = rand.Read(r[:])
	tp = labtest.Rename(t, tp, "mx"+hex.EncodeToString(r[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab, err := deploy.Up(ctx, tp, &deploy.Options{Prismd: labtest.Prismd(t)})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	h2, ok := tp.HostAddr("h2")
	if !ok {
		t.Fatal("single lab: h2 has no address")
	}
	if err := lab.Ping(ctx, "h1", h2, 3, 2*time.Second); err != nil {
		t.Fatalf("%v\nsw1 log:\n%s", err, lab.LogTail("sw1", 20))
	}

	out, err := exec.Command(prismctl(t), "show", "macs", "--socket", lab.ControlSocket("sw1")).CombinedOutput()
	if err != nil {
		t.Fatalf("prismctl show macs: %v\n%s", err, out)
	}
	text := string(out)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[0]), " ") != "MAC PORT AGE TYPE" {
		t.Fatalf("no table header:\n%s", text)
	}
	type row struct{ port, typ string }
	rows := map[string]row{}
	var order []string // port column, top to bottom
	for _, l := range lines[1 : len(lines)-1] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("row %q: want 4 columns\n%s", l, text)
		}
		rows[f[0]] = row{f[1], f[3]}
		order = append(order, f[1])
	}
	mac := func(node, iface string) string {
		return net.HardwareAddr(deploy.HardwareAddr(tp.MAC(node, iface))).String()
	}
	want := map[string]row{
		mac("h1", "eth0"): {"p1", "learned"},
		mac("h2", "eth0"): {"p2", "learned"},
		mac("sw1", "p1"):  {"p1", "local"},
		mac("sw1", "p2"):  {"p2", "local"},
		// The lab gives every switch a node MAC, which belongs to no port.
		mac("sw1", deploy.NodeMACIface): {"(node)", "local"},
	}
	for m, w := range want {
		if g, ok := rows[m]; !ok || g != w {
			t.Errorf("MAC %s: listed as %+v (present %v), want %+v\n%s", m, g, ok, w, text)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d (two hosts, two switch ports, the node MAC)\n%s", len(rows), len(want), text)
	}
	if got := strings.Join(order, " "); got != "p1 p1 p2 p2 (node)" {
		t.Errorf("rows in port order %s, want p1 p1 p2 p2 (node)\n%s", got, text)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "2 learned, 3 local MAC table entries") {
		t.Errorf("count line %q, want 2 learned, 3 local", last)
	}
}
