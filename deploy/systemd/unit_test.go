package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnitVerifies runs `systemd-analyze verify` on prismd.service. verify
// checks that ExecStart binaries exist, so a stub prismd is installed in a
// temporary root and the unit's paths are rewritten to point at it.
func TestUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: apt-get install systemd provides it")
	}
	unit, err := os.ReadFile("prismd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CAP_NET_RAW", "CAP_NET_ADMIN", "NoNewPrivileges=yes", "ProtectSystem=strict",
		"ProtectHome=yes", "PrivateTmp=yes", "RuntimeDirectory=prismd", "ExecReload=/bin/kill -HUP $MAINPID",
		"RestrictAddressFamilies=AF_PACKET AF_UNIX AF_INET AF_INET6 AF_NETLINK"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "prismd")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	u := strings.ReplaceAll(string(unit), "/usr/local/bin/prismd", stub)
	path := filepath.Join(dir, "prismd.service")
	if err := os.WriteFile(path, []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	// The afxdp drop-in, merged: it must parse and keep the unit valid.
	dropin, err := os.ReadFile("prismd-afxdp.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CAP_BPF", "AF_XDP", "SystemCallFilter=bpf"} {
		if !strings.Contains(string(dropin), want) {
			t.Errorf("afxdp drop-in lacks %q", want)
		}
	}
	if err := os.MkdirAll(path+".d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path+".d", "afxdp.conf"), dropin, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, "verify", path)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil {
		if strings.Contains(s, "System has not been booted with systemd") || strings.Contains(s, "Failed to connect to bus") ||
			strings.Contains(s, "Failed to initialize manager") {
			t.Skipf("systemd-analyze cannot run in this container: %s", strings.TrimSpace(s))
		}
		t.Fatalf("systemd-analyze verify: %v\n%s", err, s)
	}
	// verify exits 0 on some warnings; treat any line naming our unit as a failure.
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "prismd.service") {
			t.Errorf("systemd-analyze: %s", line)
		}
	}
}
