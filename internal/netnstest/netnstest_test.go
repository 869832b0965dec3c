package netnstest_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/prismd/prismd/internal/netnstest"
)

func TestEnvCreatesAndCleansUp(t *testing.T) {
	var id, a, b string
	t.Run("env", func(t *testing.T) {
		env := netnstest.New(t, "nt")
		id = env.ID()
		x, y := env.Namespace("x"), env.Namespace("y")
		a, b = env.Veth(x, y)
		if len(a) > 15 || len(b) > 15 {
			t.Fatalf("names too long: %q %q", a, b)
		}
		if out := env.MustExec(x, "ip", "-o", "link", "show", a); !strings.Contains(out, "UP") {
			t.Fatalf("%s not up in %s: %s", a, x, out)
		}
		env.MustExec(y, "ip", "link", "show", b)
		if _, err := env.Exec(x, "ip", "link", "show", b); err == nil {
			t.Fatalf("%s visible in the wrong namespace", b)
		}
		env.DisableOffloads(x, a)
		ran := false
		env.Do(y, func() { ran = true })
		if !ran {
			t.Fatal("Do did not run fn")
		}
	})
	if id == "" {
		return // skipped (not root)
	}
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	if strings.Contains(string(out), id) {
		t.Fatalf("namespaces left after cleanup:\n%s", out)
	}
	if out, _ := exec.Command("ip", "link", "show", a).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Fatalf("veth %s left after cleanup: %s", a, out)
	}
}
