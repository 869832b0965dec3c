package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestMain lets the tests run prismctl as a user does: the test binary
// re-executed with PRISMCTL_TEST_MAIN=1 is prismctl (main with its
// arguments), so a test sees its stdout, stderr and exit code.
func TestMain(m *testing.M) {
	if os.Getenv("PRISMCTL_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// prismctl runs prismctl with args and returns what it printed and its
// exit code.
func prismctl(t *testing.T, args ...string) (stdout, stderr string, rc int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PRISMCTL_TEST_MAIN=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		rc = ee.ExitCode()
	case err != nil:
		t.Fatalf("prismctl %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), rc
}

// TestHelp: help that was asked for goes to stdout with exit code 0; usage
// because of a mistake goes to stderr with exit code 2.
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		rc   int
		out  string // on stdout when rc is 0, else on stderr
	}{
		{[]string{"--help"}, 0, "usage: prismctl <command>"},
		{[]string{"-h"}, 0, "usage: prismctl <command>"},
		{[]string{"help"}, 0, "usage: prismctl <command>"},
		{nil, 2, "usage: prismctl <command>"},
		{[]string{"frob"}, 2, `unknown command "frob"`},
		{[]string{"help", "moe"}, 0, "prismctl moe release"},
		{[]string{"moe", "--help"}, 0, "prismctl moe release"},
		{[]string{"moe"}, 2, "prismctl moe register"},
		{[]string{"moe", "frob"}, 2, `prismctl moe: unknown subcommand "frob"`},
		{[]string{"moe", "run", "-h"}, 0, "usage: " + moeRunUsage},
		{[]string{"mcast", "-h"}, 0, "usage: " + mcastSendUsage},
		{[]string{"mcast", "recv", "-h"}, 0, "usage: " + mcastRecvUsage},
		{[]string{"lab", "--help"}, 0, "prismctl lab status"},
		{[]string{"lab", "up", "-h"}, 0, "-state-dir"},
		{[]string{"lab", "up", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"show", "-h"}, 0, "usage: prismctl show"},
		{[]string{"show", "foo"}, 2, `prismctl show: unknown subcommand "foo"; use ops, ports, macs or am`},
		{[]string{"show"}, 2, "prismctl show: what to show?"},
		{[]string{"allreduce", "-h"}, 0, "usage: prismctl allreduce"},
		{[]string{"bench", "--help"}, 0, "usage: prismctl bench"},
		{[]string{"am", "-h"}, 0, "usage: prismctl am"},
		{[]string{"mcast", "blast", "-h"}, 0, "usage: prismctl mcast blast"},
		{[]string{"tcpcopy", "-h"}, 0, "usage: prismctl tcpcopy send"},
		{[]string{"tcpcopy", "send", "-h"}, 0, "-sequential"},
		{[]string{"tcpcopy", "frob"}, 2, `prismctl tcpcopy: unknown subcommand "frob"; use send or recv`},
		{[]string{"allreduce", "--bogus"}, 2, "flag provided but not defined: -bogus"},
	} {
		stdout, stderr, rc := prismctl(t, c.args...)
		where, other := stdout, stderr
		if c.rc != 0 {
			where, other = stderr, stdout
		}
		if rc != c.rc || !strings.Contains(where, c.out) || other != "" {
			t.Errorf("prismctl %s: exit %d, want %d with %q on std%s\nstdout:\n%s\nstderr:\n%s",
				strings.Join(c.args, " "), rc, c.rc, c.out, map[bool]string{true: "out", false: "err"}[c.rc == 0], stdout, stderr)
		}
	}
	stdout, _, _ := prismctl(t, "--help")
	if !strings.Contains(stdout, "(register|run|release)") {
		t.Errorf("prismctl --help does not list moe release:\n%s", stdout)
	}
}

// TestSynopsisFlags: every flag a subcommand's synopsis shows is one it
// defines, and 'mcast -h' shows the same synopsis as 'mcast send -h'.
func TestSynopsisFlags(t *testing.T) {
	flagRE := regexp.MustCompile(`--([a-z-]+)`)
	for _, c := range []struct {
		args     []string
		synopsis string
	}{
		{[]string{"mcast", "send", "-h"}, mcastSendUsage},
		{[]string{"mcast", "recv", "-h"}, mcastRecvUsage},
		{[]string{"moe", "register", "-h"}, moeRegisterUsage},
		{[]string{"moe", "run", "-h"}, moeRunUsage},
		{[]string{"moe", "release", "-h"}, moeReleaseUsage},
	} {
		stdout, _, rc := prismctl(t, c.args...)
		if first, _, _ := strings.Cut(stdout, "\n"); rc != 0 || first != "usage: "+c.synopsis {
			t.Errorf("%s: exit %d, first line %q, want %q", strings.Join(c.args, " "), rc, first, "usage: "+c.synopsis)
		}
		for _, m := range flagRE.FindAllStringSubmatch(c.synopsis, -1) {
			if !strings.Contains(stdout, "\n  -"+m[1]+" ") && !strings.Contains(stdout, "\n  -"+m[1]+"\n") {
				t.Errorf("%s: synopsis shows --%s, which is not a flag of it", strings.Join(c.args, " "), m[1])
			}
		}
	}
	for _, f := range []string{"--auth-key-file", "--no-aggregation"} {
		if !strings.Contains(mcastSendUsage, f) {
			t.Errorf("mcast send synopsis lacks %s", f)
		}
	}
	top, _, _ := prismctl(t, "mcast", "-h")
	if !strings.Contains(top, mcastSendUsage+"\n") {
		t.Errorf("mcast -h does not show mcast send's synopsis %q:\n%s", mcastSendUsage, top)
	}
}
