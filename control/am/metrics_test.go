package am

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/metrics/metricstest"
	"github.com/prismd/prismd/parser"
)

// scrape gathers the Manager's registry into "name{label="value"}" -> value
// (only the prismd_am_ families).
func scrape(t *testing.T, m *Manager) map[string]float64 {
	t.Helper()
	mfs, err := m.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "prismd_am_") {
			continue
		}
		for _, x := range mf.GetMetric() {
			key := mf.GetName()
			if ls := x.GetLabel(); len(ls) > 0 {
				key += fmt.Sprintf("{%s=%q}", ls[0].GetName(), ls[0].GetValue())
			}
			switch {
			case x.GetCounter() != nil:
				out[key] = x.GetCounter().GetValue()
			case x.GetGauge() != nil:
				out[key] = x.GetGauge().GetValue()
			}
		}
	}
	return out
}

// expectMetrics compares the named values; every other prismd_am_ counter
// and gauge must be 0.
func expectMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	var bad []string
	for k, v := range got {
		if w := want[k]; v != w {
			bad = append(bad, fmt.Sprintf("%s = %v, want %v", k, v, w))
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			bad = append(bad, k+" missing")
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("metrics:\n  %s", strings.Join(bad, "\n  "))
	}
}

// controlOracle is what the fake nodes saw, as the CONTROL metrics must
// report it: per command, distinct Transaction IDs (transactions) and
// frames beyond the first of each (retransmissions). The hub neither loses
// nor duplicates here, so every frame the AM sent arrived once.
func controlOracle(r *rig, want map[string]float64) {
	settle(r)
	for _, n := range r.nodes {
		n.mu.Lock()
		for cmd, k := range n.frames {
			l := fmt.Sprintf("{command=%q}", cmdLabel(cmd))
			want["prismd_am_control_transactions_total"+l] += float64(len(n.txns[cmd]))
			want["prismd_am_control_retransmissions_total"+l] += float64(k - len(n.txns[cmd]))
		}
		n.mu.Unlock()
	}
}

// settle waits until the fake nodes have read every frame sent to them: a
// retransmission the AM sent just before the answer arrived may still be
// queued.
func settle(r *rig) {
	total := func() (int, int) {
		frames, queued := 0, 0
		for _, n := range r.nodes {
			queued += len(n.conn.in)
			n.mu.Lock()
			for _, k := range n.frames {
				frames += k
			}
			n.mu.Unlock()
		}
		return frames, queued
	}
	last := -1
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f, q := total()
		if q == 0 && f == last {
			return
		}
		last = f
	}
}

func grantsOf(t *testing.T, res []result) []*Grant {
	t.Helper()
	var gs []*Grant
	for i, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
		gs = append(gs, x.g)
	}
	return gs
}

func TestMetricsOperationLifecycle(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	gs := grantsOf(t, r.beginAll(reqsFor(7, 0, "allreduce", "h1", "h2", "h3", "h4")))
	if v := scrape(t, r.m)["prismd_am_active_operations"]; v != 1 {
		t.Fatalf("active operations after the grant = %v, want 1", v)
	}
	for i, g := range gs {
		if _, err := r.m.Done(context.Background(), g.ID, DoneRequest{Rank: i, OK: true, Wait: i == len(gs)-1}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{"prismd_am_operations_begun_total": 1, "prismd_am_operations_granted_total": 1,
		"prismd_am_operations_completed_total": 1}
	controlOracle(r, want)
	// Three nodes: one STAGE, COMMIT and RELEASE transaction each.
	for _, c := range []string{"stage", "commit", "release"} {
		if k := want[`prismd_am_control_transactions_total{command="`+c+`"}`]; k != 3 {
			t.Fatalf("the fake nodes saw %v %s transactions, want 3", k, c)
		}
	}
	expectMetrics(t, scrape(t, r.m), want)
}

func TestMetricsSetupFailures(t *testing.T) {
	t.Run("stage refused", func(t *testing.T) {
		r := newRig(t, "spine-leaf", Config{})
		r.nodes["l2"].refuse[parser.CmdStage] = parser.StatusNoResources
		for _, x := range r.beginAll(reqsFor(4, 0, "allreduce", "h1", "h2", "h3", "h4")) {
			if x.err == nil {
				t.Fatal("setup succeeded")
			}
		}
		want := map[string]float64{"prismd_am_operations_begun_total": 1,
			`prismd_am_operations_failed_total{reason="setup_failed"}`: 1, `prismd_am_rollbacks_total{result="complete"}`: 1}
		controlOracle(r, want)
		expectMetrics(t, scrape(t, r.m), want)
	})
	t.Run("silent node", func(t *testing.T) {
		r := newRig(t, "spine-leaf", Config{CtlTimeout: 600 * time.Millisecond})
		r.nodes["s1"].silent[parser.CmdCommit] = true
		r.nodes["s1"].silent[parser.CmdAbort] = true
		for _, x := range r.beginAll(reqsFor(5, 0, "allreduce", "h1", "h2", "h3", "h4")) {
			if x.err == nil {
				t.Fatal("setup succeeded")
			}
		}
		want := map[string]float64{"prismd_am_operations_begun_total": 1,
			`prismd_am_operations_failed_total{reason="rollback_incomplete"}`: 1, `prismd_am_rollbacks_total{result="incomplete"}`: 1,
			`prismd_am_control_timeouts_total{command="commit"}`: 1, `prismd_am_control_timeouts_total{command="abort"}`: 1}
		controlOracle(r, want)
		// 600ms with a 5ms RTO doubling to 40ms: well over one retransmission each.
		if k := want[`prismd_am_control_retransmissions_total{command="commit"}`]; k < 2 {
			t.Fatalf("the silent node saw %v COMMIT retransmissions, want several", k)
		}
		expectMetrics(t, scrape(t, r.m), want)
	})
	t.Run("unplaceable", func(t *testing.T) {
		// Refused on arrival (9.1): the invocation fails at once for
		// every rank, and is never begun.
		r := newRig(t, "single", Config{})
		for i, x := range r.beginAll(reqsFor(3, 0, "allreduce", "h1", "nosuchhost")) {
			var ae *APIError
			if !errors.As(x.err, &ae) || ae.Code != CodeTopology || !strings.Contains(ae.Message, "nosuchhost") {
				t.Fatalf("rank %d: %v, want topology naming nosuchhost", i, x.err)
			}
		}
		expectMetrics(t, scrape(t, r.m), map[string]float64{"prismd_am_operations_begun_total": 0,
			`prismd_am_operations_failed_total{reason="topology"}`: 1, "prismd_am_barrier_timeouts_total": 0})
	})
}

func TestMetricsFailuresAfterGrant(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{BarrierTimeout: 100 * time.Millisecond})
	gs := grantsOf(t, r.beginAll(reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4")))
	if _, err := r.m.Done(context.Background(), gs[0].ID, DoneRequest{Rank: 0, OK: false, Error: "no RESULT", Wait: true}); err != nil {
		t.Fatal(err)
	}
	// A second invocation whose second rank never comes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.m.Begin(ctx, req(6, 1, 0, 2, "h1", "allreduce")); err == nil || !strings.Contains(err.Error(), "did not arrive") {
		t.Fatalf("lone rank: %v, want a barrier timeout", err)
	}
	want := map[string]float64{"prismd_am_operations_begun_total": 1, "prismd_am_operations_granted_total": 1,
		`prismd_am_operations_failed_total{reason="rank_failed"}`: 1, `prismd_am_rollbacks_total{result="complete"}`: 1,
		"prismd_am_barrier_timeouts_total": 1}
	controlOracle(r, want)
	expectMetrics(t, scrape(t, r.m), want)
}

// TestMetricsEndpoint: GET /metrics on the runtime channel serves the
// registry, and promtool finds nothing to complain about.
func TestMetricsEndpoint(t *testing.T) {
	r := newRig(t, "single", Config{})
	gs := grantsOf(t, r.beginAll(reqsFor(8, 0, "allreduce", "h1", "h2")))
	for i, g := range gs {
		if _, err := r.m.Done(context.Background(), g.ID, DoneRequest{Rank: i, OK: true, Wait: i == len(gs)-1}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	body := metricstest.Scrape(t, srv.URL+"/metrics")
	for _, want := range []string{"prismd_am_operations_completed_total 1\n", `prismd_am_control_transactions_total{command="stage"} 1` + "\n",
		`prismd_am_operations_failed_total{reason="watchdog"} 0` + "\n", `prismd_am_ranks_gone_total{effect="none"} 0` + "\n",
		`prismd_am_ranks_gone_total{effect="waited_for"} 0` + "\n", "go_goroutines "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	metricstest.Promtool(t, body)
	metricstest.Documented(t, body, "../../docs/metrics.md")
}
