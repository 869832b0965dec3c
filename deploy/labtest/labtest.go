// Package labtest brings deploy labs up from Go tests: a unique lab name per
// test, Down registered in t.Cleanup, a skip with the reason when not root,
// and a prismd binary built once per test process when none is installed.
//
// It owns nothing but test plumbing; it must not be imported by non-test code.
package labtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
)

// RequireRoot skips t unless it runs as root, saying why.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to create network namespaces and veth pairs (CI runs as root)")
	}
}

// UniqueName returns "t" plus 4 random hex characters: short enough for
// any lab and unlikely to collide with a concurrent test.
func UniqueName() string {
	var b [2]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Rename returns a copy of topo under a new lab name (MACs change with it).
func Rename(t testing.TB, topo *deploy.Topology, name string) *deploy.Topology {
	t.Helper()
	nodes := make([]deploy.Node, 0, len(topo.Nodes))
	for _, n := range topo.NodeNames() {
		nodes = append(nodes, *topo.Nodes[n])
	}
	r, err := deploy.Build(name, topo.MTU, nodes, topo.Links)
	if err != nil {
		t.Fatalf("labtest: rename %s to %s: %v", topo.Name, name, err)
	}
	return r
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// Prismd returns a prismd binary: deploy.FindPrismd's answer, else one built
// from this module into a temporary directory once per test process.
func Prismd(t testing.TB) string {
	t.Helper()
	if p, err := deploy.FindPrismd(); err == nil {
		return p
	}
	buildOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = err
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "labtest-prismd-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "prismd")
		cmd := exec.Command("go", "build", "-o", built, "./cmd/prismd")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = &buildError{err, string(b)}
		}
	})
	if buildErr != nil {
		t.Fatalf("labtest: no prismd binary and building one failed: %v", buildErr)
	}
	return built
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// Up brings up a lab from YAML text ([]byte or string), a shipped topology
// name ("single"), or a *deploy.Topology, under a unique name, and registers
// its Down in t.Cleanup. It skips when not root and fails t on error.
func Up(t testing.TB, topo any) *deploy.Lab {
	t.Helper()
	return UpWith(t, topo, nil)
}

// UpWith is Up with options (StateDir, timeouts, Log); Prismd is filled in
// when the topology has prismd nodes and opts leaves it empty.
func UpWith(t testing.TB, topo any, opts *deploy.Options) *deploy.Lab {
	t.Helper()
	RequireRoot(t)
	var tp *deploy.Topology
	var err error
	switch v := topo.(type) {
	case *deploy.Topology:
		tp = v
	case []byte:
		tp, err = deploy.Parse(v)
	case string:
		if b, eerr := deploy.Embedded(v); eerr == nil && !strings.Contains(v, "\n") {
			tp, err = deploy.Parse(b)
		} else {
			tp, err = deploy.Parse([]byte(v))
		}
	default:
		t.Fatalf("labtest: Up wants YAML, a shipped name or *deploy.Topology, not %T", topo)
	}
	if err != nil {
		t.Fatalf("labtest: %v", err)
	}
	tp = Rename(t, tp, UniqueName())
	var o deploy.Options
	if opts != nil {
		o = *opts
	}
	if len(tp.NodesOf(deploy.KindPrismd)) > 0 && o.Prismd == "" {
		o.Prismd = Prismd(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab, err := deploy.Up(ctx, tp, &o)
	if err != nil {
		t.Fatalf("labtest: lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(); err != nil {
			t.Errorf("labtest: lab down: %v", err)
		}
	})
	return lab
}
