package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
)

// prismdBlast returns the prismd-blast binary (see tool).
func prismdBlast(t *testing.T) string { return tool(t, "prismd-blast") }

// dataFrames is sw's prismd_frames_total{class="data"}: every DATA frame
// the switch received, retransmissions included.
func dataFrames(t *testing.T, lab *deploy.Lab, sw string) uint64 {
	t.Helper()
	return uint64(switchCounter(t, lab, sw, `prismd_frames_total{class="data"}`))
}

// f64Frames is the series of KULISCH_F64 frames a switch encoded.
const f64Frames = `prismd_engine_frames_encoded_by_format_total{format="KULISCH_F64"}`

// switchCounter is the value of one series (name{labels}) of switch sw's
// /metrics.
func switchCounter(t *testing.T, lab *deploy.Lab, sw, series string) float64 {
	t.Helper()
	m := scrape(t, lab, sw)
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", sw, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s serves no %s", sw, series)
	return 0
}

// sumSeries sums the samples of series in the /metrics text m whose labels
// contain each of labels (`direction="ingress"`); a series without labels
// counts too.
func sumSeries(t *testing.T, m, series string, labels ...string) float64 {
	t.Helper()
	var s float64
	for _, line := range strings.Split(m, "\n") {
		rest, ok := strings.CutPrefix(line, series)
		if !ok || rest == "" || rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		s += v
	}
	return s
}

// summaryLine parses the key=value line 'prismd-blast contribute' ends with.
func summaryLine(out string) (map[string]string, bool) {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "contribute "); ok {
			kv := map[string]string{}
			for _, f := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(f, "="); ok {
					kv[k] = v
				}
			}
			return kv, true
		}
	}
	return nil, false
}

// TestBlastContribute runs 'prismd-blast contribute' as the two ranks of
// the SINGLE lab (processes in h1 and h2, the AM on h1) for about a second
// of back-to-back operations per case: ALLREDUCE with FP32_ARRIVAL and
// KULISCH_FIXED, and a REDUCE, each read with recvmmsg and through the
// TPACKET_V3 ring (frames lent in place, PROGRESS on a lane but at a REDUCE
// root: make bench's setup). Both ranks must verify every RESULT against
// the exact sum and agree on the operations run, and the switch must have
// received exactly the DATA frames they say they sent.
func TestBlastContribute(t *testing.T) {
	bin := prismdBlast(t)
	e := up(t, "single", "h1", am.Config{})
	hosts := []string{"h1", "h2"}
	for i, c := range []struct {
		coll, acc, root string
		ring            bool
	}{
		{"allreduce", "fp32", "0", false},
		{"allreduce", "kulisch", "0", false},
		{"reduce", "fp32", "1", false},
		{"allreduce", "fp32", "0", true},
		{"reduce", "fp32", "1", true},
	} {
		name := c.coll + "-" + c.acc
		if c.ring {
			name += "-ring"
		}
		t.Run(name, func(t *testing.T) {
			job := 20 + i
			d0 := dataFrames(t, e.lab, "sw1")
			outs := make([]bytes.Buffer, len(hosts))
			cmds := make([]*exec.Cmd, len(hosts))
			for r, h := range hosts {
				cmds[r] = e.lab.Exec(h, bin, "contribute", "--coordinator", e.lurl, "--rank", fmt.Sprint(r), "--size", "2",
					"--job", fmt.Sprint(job), "--node", h, "--iface", "eth0", "--coll", c.coll, "--root", c.root, "--acc", c.acc,
					"--count", "2000000", "--duration", "1s", "--timeout", "2s", fmt.Sprintf("--rx-ring=%v", c.ring))
				cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
				if err := cmds[r].Start(); err != nil {
					t.Fatal(err)
				}
			}
			// The generator bounds every wait itself; this is the
			// backstop against a hang (the PIDs this test started).
			stop := time.AfterFunc(60*time.Second, func() {
				for _, cmd := range cmds {
					cmd.Process.Kill()
				}
			})
			defer stop.Stop()
			var sent, retrans uint64
			ops := ""
			for r, cmd := range cmds {
				err := cmd.Wait()
				kv, ok := summaryLine(outs[r].String())
				if err != nil || !ok || kv["verified"] != "yes" {
					t.Fatalf("rank %d (%s): %v\n%s", r, hosts[r], err, outs[r].String())
				}
				if ops != "" && kv["ops"] != ops {
					t.Errorf("rank %d ran %s operations, rank 0 %s: the ranks must agree", r, kv["ops"], ops)
				}
				ops = kv["ops"]
				if n, _ := strconv.Atoi(ops); n < 2 {
					t.Errorf("rank %d ran %s operations; want at least one timed and the closing one", r, ops)
				}
				df, err1 := strconv.ParseUint(kv["data_frames"], 10, 64)
				rt, err2 := strconv.ParseUint(kv["retransmits"], 10, 64)
				if err1 != nil || err2 != nil || df == 0 {
					t.Fatalf("rank %d: bad summary: %s", r, outs[r].String())
				}
				rf, _ := strconv.ParseUint(kv["result_frames"], 10, 64)
				if getsResult := c.coll == "allreduce" || fmt.Sprint(r) == c.root; getsResult != (rf > 0) {
					t.Errorf("rank %d received %d RESULT frames in a %s to rank %s", r, rf, c.coll, c.root)
				}
				sent += df
				retrans += rt
				t.Logf("rank %d: %s", r, strings.TrimSpace(outs[r].String()))
			}
			// The switch counts every DATA frame it read: each first
			// transmission, plus those retransmissions that were not
			// themselves lost.
			delta := dataFrames(t, e.lab, "sw1") - d0
			if delta < sent || delta > sent+retrans {
				t.Errorf("sw1 received %d DATA frames; the ranks sent %d (+ %d retransmissions)", delta, sent, retrans)
			}
		})
	}
}

// TestBlastContributeKilledPeer: when one contributor dies mid-run, the
// other fails within its --timeout (plus the AM's diagnosis), names the
// silent stream and range and the dead rank, and exits non-zero.
func TestBlastContributeKilledPeer(t *testing.T) {
	bin := prismdBlast(t)
	e := up(t, "single", "h1", am.Config{})
	const job = 30
	timeout := time.Second
	var outs [2]bytes.Buffer
	var cmds [2]*exec.Cmd
	for r, h := range []string{"h1", "h2"} {
		cmds[r] = e.lab.Exec(h, bin, "contribute", "--coordinator", e.lurl, "--rank", fmt.Sprint(r), "--size", "2",
			"--job", fmt.Sprint(job), "--node", h, "--count", "8000000", "--duration", "10s", "--timeout", timeout.String())
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
	}
	stop := time.AfterFunc(60*time.Second, func() { cmds[0].Process.Kill(); cmds[1].Process.Kill() })
	defer stop.Stop()
	// Kill rank 1 once its first operation is under way.
	killed := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !killed; time.Sleep(5 * time.Millisecond) {
		for _, op := range e.m.Ops().Ops {
			if op.Op.Job == job && op.State == "active" {
				time.Sleep(100 * time.Millisecond)
				cmds[1].Process.Kill() // the PID this test started
				killed = true
				break
			}
		}
	}
	cmds[1].Wait()
	if !killed {
		t.Fatalf("job %d never became active; rank 0 said:\n%s", job, outs[0].String())
	}
	killedAt := time.Now()
	err := cmds[0].Wait()
	took := time.Since(killedAt)
	out := outs[0].String()
	t.Logf("rank 0 after %v:\n%s", took.Round(time.Millisecond), out)
	if err == nil {
		t.Fatal("rank 0 exited 0 although its peer died")
	}
	if kv, ok := summaryLine(out); !ok || kv["verified"] != "no" {
		t.Errorf("rank 0's summary does not say verified=no")
	}
	// The range comes from rank 0's own timeout ("elements [a, b)") or,
	// when the switch's context failed first and said so (PROGRESS
	// FAILED), from the AM's diagnosis ("from element a").
	if !strings.Contains(out, "rank 1 (h2)") || !strings.Contains(out, "elements [") && !strings.Contains(out, "from element ") {
		t.Errorf("rank 0's error does not name both the dead rank and the range")
	}
	if took > timeout+killSlack {
		t.Errorf("rank 0 failed %v after the kill; the bound is the timeout (%v) plus %v for the diagnosis", took, timeout, killSlack)
	}
}
