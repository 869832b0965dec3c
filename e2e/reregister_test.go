package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
	"github.com/prismd/prismd/host/bitmap"
)

// bitmapGens lists, per switch, the "job/op/op_gen state" of every BITMAP
// context 'prismctl show ops --json' reports on it.
func bitmapGens(t *testing.T, lab *deploy.Lab) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, sw := range lab.Topo.NodesOf(deploy.KindPrismd) {
		b, err := exec.Command(prismctl(t), "show", "ops", "--json", "--socket", lab.ControlSocket(sw)).Output()
		if err != nil {
			t.Fatalf("show ops on %s: %v", sw, err)
		}
		var v struct {
			Bitmap []struct {
				Contexts []struct {
					Job   uint64 `json:"job"`
					Op    uint16 `json:"op"`
					OpGen uint32 `json:"op_gen"`
					State string `json:"state"`
				} `json:"contexts"`
			} `json:"bitmap"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("show ops --json on %s: %v\n%s", sw, err, b)
		}
		for _, w := range v.Bitmap {
			for _, c := range w.Contexts {
				out[sw] = append(out[sw], fmt.Sprintf("%d/%d/%d %s", c.Job, c.Op, c.OpGen, c.State))
			}
		}
	}
	return out
}

// TestBitmapReregister: registering a MoE job the switches still hold (an
// earlier registration nobody released) replaces it, says so, and leaves
// exactly the new generation installed; before, the failed STAGE's
// rollback freed the old registration and installed nothing. Releasing
// reports contexts already gone, and releasing with the replaced plan
// touches nothing.
func TestBitmapReregister(t *testing.T) {
	requireBitmapSwitch(t)
	lab := labtest.Up(t, "spine-leaf")
	hosts := lab.Topo.Hosts()
	spec := bitmapam.JobSpec{Kind: bitmapam.MoE, Op: opKey(303), Endpoints: bitmapam.HostEndpoints(hosts, 2), ActiveK: 2,
		VectorLen: bitmap.MoEVectorLen(64, 2)}
	plan := func() *bitmapam.Plan {
		p, err := bitmapam.Compute(lab.Topo, spec)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var conn *am.PacketConn
	if err := lab.Do(hosts[0], func() error {
		var err error
		conn, err = am.OpenConn("eth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs []string
	reg := bitmapam.NewRegistrar(conn, bitmapam.RegistrarConfig{Logf: func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, second := plan(), plan() // the same generation: a register run twice in one second
	if err := reg.Register(ctx, first); err != nil {
		t.Fatal(err)
	}
	contexts := 0
	for _, o := range first.Ops {
		contexts += len(o.Switches)
	}
	want := func(p *bitmapam.Plan) map[string][]string {
		m := map[string][]string{}
		for _, o := range p.Ops {
			for _, s := range o.Switches {
				m[s.Name] = append(m[s.Name], fmt.Sprintf("%d/%d/%d ACTIVE", o.Op.Job, o.Op.Op, o.Op.OpGen))
			}
		}
		return m
	}
	same := func(got, want map[string][]string) bool { return fmt.Sprint(got) == fmt.Sprint(want) }
	if got := bitmapGens(t, lab); !same(got, want(first)) {
		t.Fatalf("after the first registration: %v, want %v", got, want(first))
	}
	if err := reg.Register(ctx, second); err != nil {
		t.Fatalf("registering the job again: %v", err)
	}
	if second.Spec.Op.OpGen <= first.Spec.Op.OpGen {
		t.Fatalf("second registration under generation %d, not newer than the first's %d", second.Spec.Op.OpGen, first.Spec.Op.OpGen)
	}
	if got := bitmapGens(t, lab); !same(got, want(second)) {
		t.Fatalf("after registering again: %v, want exactly the second registration %v", got, want(second))
	}
	mu.Lock()
	log := strings.Join(logs, "\n")
	mu.Unlock()
	if !strings.Contains(log, "replaced an older registration still held by l1 (ACTIVE), l2 (ACTIVE), s1 (ACTIVE)") {
		t.Errorf("Logf heard %q, want the replaced registration named", log)
	}
	// The replaced plan's release changes nothing and says its contexts
	// were gone; the current one's frees everything, once.
	if gone, err := reg.ReleaseReport(ctx, first); err != nil || gone != contexts {
		t.Errorf("release of the replaced plan: %d gone, %v; want all %d gone, no error", gone, err, contexts)
	}
	if got := bitmapGens(t, lab); !same(got, want(second)) {
		t.Fatalf("the replaced plan's release touched the current registration: %v", got)
	}
	if gone, err := reg.ReleaseReport(ctx, second); err != nil || gone != 0 {
		t.Errorf("release: %d gone, %v; want 0, no error", gone, err)
	}
	if got := bitmapGens(t, lab); len(got) != 0 {
		t.Errorf("after release: %v, want no BITMAP context", got)
	}
	if gone, err := reg.ReleaseReport(ctx, second); err != nil || gone != contexts {
		t.Errorf("second release: %d gone, %v; want all %d gone", gone, err, contexts)
	}
}

// TestMoECLIRegisterRelease: what a user types. 'prismctl moe register'
// twice (the second replaces the first and says so), 'moe release' with
// the spec it wrote (every context freed, none left on any switch), then
// again (nothing left to free, and it says so rather than failing).
func TestMoECLIRegisterRelease(t *testing.T) {
	requireBitmapSwitch(t)
	bin := prismctl(t)
	lab := labtest.Up(t, "spine-leaf")
	spec := t.TempDir() + "/job.json"
	run := func(args ...string) string {
		t.Helper()
		out, err := lab.Exec("h1", append([]string{bin, "moe"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("prismctl moe %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	reg := []string{"register", "--spec", spec, "--topology", lab.TopologyFile(), "--node", "h1", "--hosts", "h1,h2,h3,h4", "--job", "61"}
	rel := []string{"release", "--spec", spec, "--topology", lab.TopologyFile(), "--node", "h1"}
	if out := run(reg...); !strings.Contains(out, "registered MoE job 61: 8 experts on 4 hosts, top-2, 4 operations, 12 switch contexts") {
		t.Fatalf("first register:\n%s", out)
	}
	if out := run(reg...); !strings.Contains(out, "replaced an older registration still held by l1 (ACTIVE), l2 (ACTIVE), s1 (ACTIVE)") ||
		!strings.Contains(out, "registered MoE job 61") {
		t.Fatalf("second register:\n%s", out)
	}
	if got := bitmapGens(t, lab); len(got) != 3 || len(got["l1"]) != 4 || len(got["s1"]) != 4 {
		t.Fatalf("after two registrations: %v, want the 4 operations once on each of 3 switches", got)
	}
	if out := run(rel...); !strings.Contains(out, "released MoE job 61: 12 switch contexts of 4 operations") {
		t.Fatalf("release:\n%s", out)
	}
	if got := bitmapGens(t, lab); len(got) != 0 {
		t.Fatalf("after release: %v, want no BITMAP context", got)
	}
	if out := run(rel...); !strings.Contains(out, "none of its 12 switch contexts was installed any more") {
		t.Fatalf("second release:\n%s", out)
	}
}
