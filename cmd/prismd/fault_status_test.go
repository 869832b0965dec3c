package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/internal/netnstest"
)

// TestFaultSaid: a port with a configured fault is warned of when it
// opens, /v1/status names the fault and counts what it dropped among the
// port's drops, and prismctl's port table (fed the same JSON) says so.
// Before, 40% injected loss showed only in
// prismd_port_fault_drops_total: the status said nothing and its drops
// looked clean.
func TestFaultSaid(t *testing.T) {
	env := netnstest.New(t, "w3f")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	a0, b0 := env.Veth(h, sw)
	_, b1 := env.Veth(h, sw)
	env.MustExec(h, "ip", "addr", "add", "10.77.0.1/24", "dev", a0)
	var logs syncBuf
	cfg := parseCfg(t, fmt.Sprintf("ports: [{name: %s, fault: {ingress: {drop_percent: 100}}}, {name: %s}]\n", b0, b1))
	d, err := startIn(t, env, sw, cfg, &logs)
	if err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "port impairs its frames on purpose") || !strings.Contains(logs.String(), "fault=\"ingress drop 100%\"") {
		t.Fatalf("no warning naming %s's fault:\n%s", b0, logs.String())
	}
	// ARP for an address nobody has: broadcasts into b0, all dropped.
	_, _ = env.Exec(h, "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.77.0.2")
	type port struct {
		Name  string            `json:"name"`
		Drops map[string]uint64 `json:"drops"`
		Fault string            `json:"fault"`
	}
	var got struct {
		Ports []port `json:"ports"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rec := httptest.NewRecorder()
		d.status(rec, httptest.NewRequest("GET", "/v1/status", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%v: %s", err, rec.Body.String())
		}
		if len(got.Ports) == 2 && got.Ports[0].Drops["fault_ingress"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/status ports %+v: want %s's fault drops counted as fault_ingress", got.Ports, b0)
		}
	}
	if got.Ports[0].Fault != "ingress drop 100%" || got.Ports[1].Fault != "" {
		t.Errorf("faults %q, %q; want %q for %s and none for %s", got.Ports[0].Fault, got.Ports[1].Fault, "ingress drop 100%", b0, b1)
	}
}
