// This file owns the check that README.md documents exactly the fields the
// dissector registers, so the field reference cannot go stale.

package wireshark

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// registeredFields installs prismd.lua as a personal plugin in a private HOME
// (tshark -G ignores -X lua_script) and lists the prismd fields tshark knows.
func registeredFields(t *testing.T) []string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not found (%v): run make deps (installs tshark)", err)
	}
	home := t.TempDir()
	plugins := filepath.Join(home, ".local", "lib", "wireshark", "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("prismd.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "prismd.lua"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-G", "fields")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark -G fields: %v\n%s", err, stderr.String())
	}
	checkStderr(t, stderr.String())
	var names []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		// F <tab> label <tab> abbrev <tab> type <tab> protocol ...
		cols := strings.Split(line, "\t")
		if len(cols) >= 5 && cols[0] == "F" && cols[4] == "prismd" {
			names = append(names, cols[2])
		}
	}
	return names
}

func TestReadmeListsEveryField(t *testing.T) {
	t.Parallel() // each test runs its own tshark; they share nothing
	fields := registeredFields(t)
	if len(fields) < 100 {
		t.Fatalf("tshark lists only %d prismd fields: was the plugin loaded?", len(fields))
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Field reference rows start with "| `prismd.".
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(prismd\\.[a-z0-9_.]+)`").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	for _, f := range fields {
		if !documented[f] {
			t.Errorf("README.md field reference lacks %s", f)
		}
	}
	for f := range documented {
		if !slices.Contains(fields, f) {
			t.Errorf("README.md documents %s, which prismd.lua does not register", f)
		}
	}
	// The names the project promised (issue #2 item 5) must exist.
	for _, f := range []string{"prismd.version_major", "prismd.class", "prismd.job", "prismd.group", "prismd.group_gen",
		"prismd.op", "prismd.op_gen", "prismd.ctl.txn", "prismd.ctl.cmd", "prismd.ctl.status", "prismd.ctl.body_len",
		"prismd.ctl.frag_index", "prismd.ctl.frag_count", "prismd.data.packet_id", "prismd.data.first", "prismd.data.count",
		"prismd.data.groups", "prismd.data.flags", "prismd.data.flags.last", "prismd.data.flags.inexact", "prismd.data.stream",
		"prismd.ng.count", "prismd.ng.format", "prismd.ng.value_fp32", "prismd.prog.committed", "prismd.prog.holes",
		"prismd.prog.hole.start", "prismd.prog.hole.end", "prismd.ext.encoding", "prismd.ext.tenant", "prismd.ext.token",
		"prismd.ext.member"} {
		if !slices.Contains(fields, f) {
			t.Errorf("promised field %s is not registered", f)
		}
	}
}
