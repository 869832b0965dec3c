package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
)

// TestAMCommand: 'lab up' suggests an AM on the first addressed host, with
// the lab's own copy of the topology (a renamed lab's MACs differ from the
// embedded topology's); a lab without a prismd switch gets no suggestion.
func TestAMCommand(t *testing.T) {
	for _, c := range []struct{ lab, want string }{
		{"spine-leaf", "h1 -- /x/prismctl am --topology /s/t.yaml --listen 10.0.0.1:7000 --iface eth0"},
		{"bridge-pair", ""},
	} {
		src, err := deploy.Embedded(c.lab)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := deploy.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(amCommand(tp, "/s/t.yaml", "/x/prismctl"), " "); got != c.want {
			t.Errorf("%s: %q, want %q", c.lab, got, c.want)
		}
	}
}

// TestUpHints: every command 'lab up' prints names prismctl by the path it
// ran from (prismctl need not be on PATH, also inside the node for the AM)
// and carries --state-dir when the lab's state is not in the default
// place, since lab down finds the prismd to stop only there.
func TestUpHints(t *testing.T) {
	tp, err := deploy.Load("spine-leaf")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printUpHints(&b, "/x/prismctl", tp, "/tmp/s/spine-leaf", "/tmp/s/spine-leaf/topology.yaml", "/tmp/s", "my lab.yaml")
	for _, want := range []string{
		"  /x/prismctl lab exec --state-dir /tmp/s 'my lab.yaml' NODE -- CMD\n",
		"  /x/prismctl lab down --state-dir /tmp/s 'my lab.yaml'\n",
		"    /x/prismctl lab exec --state-dir /tmp/s 'my lab.yaml' h1 -- /x/prismctl am --topology /tmp/s/spine-leaf/topology.yaml --listen 10.0.0.1:7000 --iface eth0\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lab up output lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printUpHints(&b, "/x/prismctl", tp, "/run/prismd-lab/spine-leaf", "/run/prismd-lab/spine-leaf/topology.yaml", deploy.DefaultStateDir, "f.yaml")
	if strings.Contains(b.String(), "--state-dir") || !strings.Contains(b.String(), "  /x/prismctl lab down f.yaml\n") {
		t.Errorf("default state directory: want no --state-dir:\n%s", b.String())
	}
}

// TestLabStateDirCLI walks what a user does with a lab brought up with
// --state-dir: the printed down command removes it; a down without the
// flag refuses, with the command to use, while processes run in the lab's
// namespaces; status says the lab is not up with exit code 1.
func TestLabStateDirCLI(t *testing.T) {
	labtest.RequireRoot(t)
	var rb [2]byte
	rand.Read(rb[:])
	name := "wk" + hex.EncodeToString(rb[:])
	src, err := deploy.Embedded("bridge-pair")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(file, bytes.Replace(src, []byte("name: bridge-pair"), []byte("name: "+name), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	tp, err := deploy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deploy.Down(tp, &deploy.Options{StateDir: state}) })

	stdout, stderr, rc := prismctl(t, "lab", "up", "--state-dir", state, file)
	if rc != 0 {
		t.Fatalf("lab up: exit %d\n%s%s", rc, stdout, stderr)
	}
	var down string
	for _, line := range strings.Split(stdout, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, " lab ") {
			if !strings.Contains(line, " --state-dir "+state+" ") || !filepath.IsAbs(strings.Fields(line)[0]) {
				t.Errorf("lab up printed %q: want prismctl's absolute path and --state-dir %s", line, state)
			}
			if strings.Contains(line, " lab down ") {
				down = line
			}
		}
	}
	if down == "" {
		t.Fatalf("lab up printed no lab down command:\n%s", stdout)
	}

	// Something of the user's runs in a node: without the state directory
	// lab down cannot tell what it is, so it must not remove the namespace
	// from under it.
	sleep := exec.Command("ip", "netns", "exec", deploy.NetNSName(name, "h1"), "sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", sleep.Process.Pid))
		if bytes.HasPrefix(b, []byte("sleep\x00")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, stderr, rc = prismctl(t, "lab", "down", file)
	if rc != 1 || !strings.Contains(stderr, "no state under "+filepath.Join(deploy.DefaultStateDir, name)+", but its namespaces exist") ||
		!strings.Contains(stderr, fmt.Sprintf("pid %d in %s: sleep 60", sleep.Process.Pid, deploy.NetNSName(name, "h1"))) ||
		!strings.Contains(stderr, "Nothing was removed") || !strings.Contains(stderr, "lab down --state-dir DIR "+file) {
		t.Errorf("lab down without --state-dir: exit %d, want 1 and what to do:\n%s", rc, stderr)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", deploy.NetNSName(name, "h1"))); err != nil {
		t.Errorf("lab down without --state-dir removed a namespace: %v", err)
	}
	stdout, stderr, rc = prismctl(t, "lab", "status", file)
	if rc != 1 || !strings.Contains(stderr, "no state under") || !strings.Contains(stderr, "lab status --state-dir DIR "+file) {
		t.Errorf("lab status without --state-dir: exit %d, want 1 and what to do:\n%s%s", rc, stdout, stderr)
	}
	if stdout, stderr, rc = prismctl(t, "lab", "status", "--state-dir", state, file); rc != 0 {
		t.Errorf("lab status --state-dir: exit %d, want 0:\n%s%s", rc, stdout, stderr)
	}

	// The command lab up printed, as printed.
	argv := strings.Fields(down)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PRISMCTL_TEST_MAIN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", down, err, out)
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pl-"+name+"-") {
			t.Errorf("namespace %s left behind by %s", e.Name(), down)
		}
	}
	if _, stderr, rc = prismctl(t, "lab", "down", file); rc != 0 || !strings.Contains(stderr, "lab "+name+": was not up") {
		t.Errorf("lab down of a lab that is not up: exit %d, want 0 and 'was not up':\n%s", rc, stderr)
	}
	if stdout, _, rc = prismctl(t, "lab", "status", file); rc != 1 || !strings.Contains(stdout, "lab "+name+": not up") {
		t.Errorf("lab status of a lab that is not up: exit %d, want 1 and 'not up':\n%s", rc, stdout)
	}
}

// TestLabRestartCLI walks a lab whose switch was killed: lab status names
// it and prints the command that restarts it; that command (lab up of the
// same file) starts it again as lab up did (configuration, GOMAXPROCS,
// binary) and leaves the running switches alone; lab up of a lab that is
// up with every switch running does nothing; lab up of the same lab name
// with another topology is refused as before.
func TestLabRestartCLI(t *testing.T) {
	labtest.RequireRoot(t)
	prismd := labtest.Prismd(t)
	var rb [2]byte
	rand.Read(rb[:])
	name := "wk" + hex.EncodeToString(rb[:])
	dir := t.TempDir()
	write := func(shipped, file string) string {
		src, err := deploy.Embedded(shipped)
		if err != nil {
			t.Fatal(err)
		}
		src = regexp.MustCompile(`(?m)^name: .*$`).ReplaceAll(src, []byte("name: "+name))
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := write("spine-leaf", "lab.yaml")
	state := filepath.Join(dir, "state")
	tp, err := deploy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deploy.Down(tp, &deploy.Options{StateDir: state}) })
	if stdout, stderr, rc := prismctl(t, "lab", "up", "--state-dir", state, "--prismd", prismd, file); rc != 0 {
		t.Fatalf("lab up: exit %d\n%s%s", rc, stdout, stderr)
	}
	lab, err := deploy.Attach(tp, &deploy.Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for _, n := range []string{"s1", "l1", "l2"} {
		before[n] = lab.PID(n)
	}
	if err := syscall.Kill(before["l2"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); pidRuns(before["l2"]); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("killed prismd %d still runs", before["l2"])
		}
	}

	stdout, stderr, rc := prismctl(t, "lab", "status", "--state-dir", state, file)
	if rc != 1 || !strings.Contains(stderr, "1 of its 3 prismd are not running:\n") ||
		!strings.Contains(stderr, fmt.Sprintf("  l2 (pid %d not running; log %s)\n", before["l2"], lab.LogFile("l2"))) {
		t.Fatalf("lab status with l2 killed: exit %d, want 1 naming l2:\n%s%s", rc, stdout, stderr)
	}
	_, restart, ok := strings.Cut(stderr, "restart them (the running ones are left alone) with:\n")
	restart = strings.TrimSpace(restart)
	if !ok || !strings.HasSuffix(restart, " lab up --state-dir "+state+" "+file) || !filepath.IsAbs(strings.Fields(restart)[0]) {
		t.Fatalf("lab status printed no restart command (prismctl's absolute path, lab up --state-dir %s %s):\n%s", state, file, stderr)
	}

	// The command lab status printed, as printed (no --prismd: the lab's).
	argv := strings.Fields(restart)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PRISMCTL_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "lab "+name+" was already up: restarted prismd on l2; left running: l1, s1\n") {
		t.Fatalf("%s: %v, want l2 restarted:\n%s", restart, err, out)
	}
	pid := lab.PID("l2")
	if pid == before["l2"] || !pidRuns(pid) {
		t.Fatalf("l2's recorded pid %d (killed: %d) does not run", pid, before["l2"])
	}
	procs := func(pid int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(kv, "GOMAXPROCS=") {
				return kv
			}
		}
		return ""
	}
	if got, want := procs(pid), procs(before["l1"]); got == "" || got != want {
		t.Errorf("restarted l2 has %q, l1 %q: want the same share", got, want)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if want := prismd + "\x00--config\x00" + lab.ConfigFile("l2") + "\x00"; string(cmdline) != want {
		t.Errorf("restarted l2 runs %q, want %q", cmdline, want)
	}
	for _, n := range []string{"s1", "l1"} {
		if lab.PID(n) != before[n] || !pidRuns(before[n]) {
			t.Errorf("%s: pid %d, want %d left running", n, lab.PID(n), before[n])
		}
	}
	if stdout, stderr, rc := prismctl(t, "lab", "status", "--state-dir", state, file); rc != 0 {
		t.Errorf("lab status after the restart: exit %d, want 0:\n%s%s", rc, stdout, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lab.Ping(ctx, "h1", netip.MustParseAddr("10.0.0.4"), 2, 2*time.Second); err != nil {
		t.Errorf("ping h1 -> h4 through the restarted l2: %v", err)
	}

	// Nothing stopped: lab up does nothing and says so.
	if stdout, stderr, rc := prismctl(t, "lab", "up", "--state-dir", state, file); rc != 0 ||
		!strings.Contains(stdout, "lab "+name+" was already up and its 3 prismd run: nothing to restart\n") || lab.PID("l2") != pid {
		t.Errorf("lab up with every prismd running: exit %d, want 0 and nothing restarted:\n%s%s", rc, stdout, stderr)
	}

	// The same lab name, another topology: refused, nothing started.
	syscall.Kill(pid, syscall.SIGKILL)
	jumbo := write("spine-leaf-jumbo", "jumbo.yaml")
	if stdout, stderr, rc := prismctl(t, "lab", "up", "--state-dir", state, jumbo); rc != 1 ||
		!strings.Contains(stderr, "lab already exists") || !strings.Contains(stderr, "its topology differs") || !strings.Contains(stderr, "run 'prismctl lab down' on the lab first") {
		t.Errorf("lab up of another topology under the same name: exit %d, want 1 and the refusal:\n%s%s", rc, stdout, stderr)
	}
	for deadline := time.Now().Add(5 * time.Second); pidRuns(pid) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if p := lab.PID("l2"); p != pid || pidRuns(p) {
		t.Errorf("lab up of another topology touched l2: pid %d (alive %v), want %d killed", p, pidRuns(p), pid)
	}
	if _, stderr, rc := prismctl(t, "lab", "down", "--state-dir", state, file); rc != 0 {
		t.Errorf("lab down: exit %d\n%s", rc, stderr)
	}
}

// pidRuns reports whether pid exists and is not a zombie.
func pidRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
